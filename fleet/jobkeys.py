"""Fresh keys for the pods of one job to trust each other, as the data of the Secrets that
hold them: an SSH key pair for MPI (ECDSA P-521, as the MPI operator makes them) and a CURVE
certificate for Flux's brokers (ZeroMQ's certificate format, X25519 keys in Z85).

A key is random, so no pure function makes one: the agent makes a job's keys when the job runs
on its member alone, and the hub when it splits the job, so that every member gets the same
(the Works carry them, as they carry the Secrets a job references)."""

from __future__ import annotations

import base64
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, x25519

SSH, CURVE = "ssh", "curve"  # the kinds of key a job may need
SECRET_TYPES = {SSH: "kubernetes.io/ssh-auth", CURVE: "Opaque"}
Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def ssh_key_pair() -> tuple[bytes, bytes]:
    """(private key in PEM, public key in authorized_keys form)."""
    key = ec.generate_private_key(ec.SECP521R1())
    private = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH)
    return private, public + b"\n"


def ssh_secret_data() -> dict[str, str]:
    private, public = ssh_key_pair()
    return {"ssh-privatekey": _b64(private), "ssh-publickey": _b64(public)}


def z85(data: bytes) -> str:
    """ZeroMQ's Base85 (RFC 32/Z85): each 4 bytes, big-endian, as 5 characters."""
    if len(data) % 4:
        raise ValueError("Z85 encodes whole 4-byte words")
    out: list[str] = []
    for start in range(0, len(data), 4):
        word = int.from_bytes(data[start:start + 4], "big")
        out.extend(Z85[word // 85 ** power % 85] for power in (4, 3, 2, 1, 0))
    return "".join(out)


def curve_certificate(name: str) -> str:
    key = x25519.X25519PrivateKey.generate()
    public = key.public_key().public_bytes_raw()
    return ("#   ZeroMQ CURVE **Secret** Certificate\n"
            "#   made by fleet for the Flux brokers of one job\n\n"
            "metadata\n"
            f'    name = "{name}"\n'
            "curve\n"
            f'    public-key = "{z85(public)}"\n'
            f'    secret-key = "{z85(key.private_bytes_raw())}"\n')


def curve_secret_data(name: str) -> dict[str, str]:
    return {"curve.cert": _b64(curve_certificate(name).encode())}


def secret(kind: str, name: str, namespace: str, job: str) -> dict[str, Any]:
    """A new Secret of ``kind``'s key for ``job``, named ``name``."""
    data = ssh_secret_data() if kind == SSH else curve_secret_data(job)
    return {"apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPES[kind],
            "metadata": {"name": name, "namespace": namespace}, "data": data}
