"""The identities a real node's components use, as a kubeadm cluster gives them: never the
admin's certificate.

* the kubelet: ``system:node:<node>`` in group ``system:nodes``, which the API server's Node
  authorizer (kwokctl runs ``--authorization-mode=Node,RBAC``) and the NodeRestriction
  admission plugin confine to its own Node, Lease and the Pods bound to it, and to the
  Secrets, ConfigMaps and ServiceAccount tokens those Pods use;
* kube-proxy: ``system:kube-proxy``, to which Kubernetes binds the ``system:node-proxier``
  ClusterRole (read Services, EndpointSlices, Nodes; write Events).

Each is a client certificate signed by the cluster's CA (kwokctl's ``pki/ca.key``).
"""

from __future__ import annotations

import base64
import datetime
import warnings
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KUBE_PROXY = "system:kube-proxy"
LIFETIME = datetime.timedelta(days=365)  # a local fleet may stay up for days


def kubelet_user(node: str) -> tuple[str, str]:
    return f"system:node:{node}", "system:nodes"


def client_certificate(ca_cert: Path, ca_key: Path, user: str,
                       group: str | None = None) -> tuple[bytes, bytes]:
    """A client certificate (PEM) for ``user`` in ``group`` signed by the CA, and its key."""
    with warnings.catch_warnings():  # kwokctl's CA has serial number 0
        warnings.simplefilter("ignore", CryptographyDeprecationWarning)
        authority = x509.load_pem_x509_certificate(ca_cert.read_bytes())
    authority_key = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = [x509.NameAttribute(NameOID.COMMON_NAME, user)]
    if group:
        subject.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, group))
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject)).issuer_name(authority.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + LIFETIME)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False,
                                     content_commitment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=False, crl_sign=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(authority_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def kubeconfig_as(admin_kubeconfig: str, user: str, cert: bytes, key: bytes) -> str:
    """``admin_kubeconfig`` (its server and CA) with ``user``'s certificate instead."""
    config = yaml.safe_load(admin_kubeconfig)
    context = config["contexts"][0]
    context["context"]["user"] = user
    config["current-context"] = context["name"]
    config["contexts"] = [context]
    config["users"] = [{"name": user, "user": {
        "client-certificate-data": base64.b64encode(cert).decode(),
        "client-key-data": base64.b64encode(key).decode()}}]
    return str(yaml.safe_dump(config, sort_keys=False))
