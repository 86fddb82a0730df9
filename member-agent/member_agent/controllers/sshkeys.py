"""A fresh SSH key pair for an MPI job (ECDSA P-521, as the MPI operator makes them), as the
data of a ``kubernetes.io/ssh-auth`` Secret. The private key never leaves the Secret."""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec


def key_pair() -> tuple[bytes, bytes]:
    """(private key in PEM, public key in authorized_keys form)."""
    key = ec.generate_private_key(ec.SECP521R1())
    private = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH)
    return private, public + b"\n"


def secret_data() -> dict[str, str]:
    private, public = key_pair()
    return {"ssh-privatekey": base64.b64encode(private).decode(),
            "ssh-publickey": base64.b64encode(public).decode()}
