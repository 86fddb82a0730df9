"""Self-signed serving certificates for the hub's admission webhook.

The API server calls the webhook over TLS and checks it against the caBundle of the
ValidatingWebhookConfiguration; a self-signed certificate is its own CA. The hub keeps one in a
Secret that every replica serves (:mod:`fleet.hub.webhook_tls`); a real deployment can mount
one instead (FLEET_WEBHOOK_CERT, FLEET_WEBHOOK_KEY).
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def self_signed_pem(hosts: Sequence[str], *, lifetime: datetime.timedelta,
                    now: datetime.datetime | None = None) -> tuple[bytes, bytes]:
    """A certificate (PEM) for ``hosts`` (names or IPs) valid for ``lifetime``, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    now = now or datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + lifetime)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def not_after(cert_pem: bytes) -> datetime.datetime:
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


def valid_certificates(bundle_pem: bytes, now: datetime.datetime) -> list[bytes]:
    """The certificates of a PEM bundle that have not expired at ``now``, each as PEM."""
    return [c.public_bytes(serialization.Encoding.PEM)
            for c in x509.load_pem_x509_certificates(bundle_pem)
            if c.not_valid_after_utc > now] if bundle_pem.strip() else []


def self_signed(hosts: Sequence[str], directory: Path, *, days: int = 365) -> tuple[Path, Path]:
    """Write ``tls.crt`` and ``tls.key`` for ``hosts`` into ``directory``."""
    cert, key = self_signed_pem(hosts, lifetime=datetime.timedelta(days=days))
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    cert_path.write_bytes(cert)
    key_path.write_bytes(key)
    key_path.chmod(0o600)
    return cert_path, key_path
