"""A fresh CURVE certificate for a Flux job's brokers, as the data of a Secret
(``curve.cert``, ZeroMQ's certificate format with both keys in Z85). ZeroMQ's CURVE is
X25519; the key is random, so no pure function makes it."""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives.asymmetric import x25519

Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85(data: bytes) -> str:
    """ZeroMQ's Base85 (RFC 32/Z85): each 4 bytes, big-endian, as 5 characters."""
    if len(data) % 4:
        raise ValueError("Z85 encodes whole 4-byte words")
    out: list[str] = []
    for start in range(0, len(data), 4):
        word = int.from_bytes(data[start:start + 4], "big")
        out.extend(Z85[word // 85 ** power % 85] for power in (4, 3, 2, 1, 0))
    return "".join(out)


def certificate(name: str) -> str:
    key = x25519.X25519PrivateKey.generate()
    public = key.public_key().public_bytes_raw()
    return ("#   ZeroMQ CURVE **Secret** Certificate\n"
            "#   made by fleet's agent for the Flux brokers of one job\n\n"
            "metadata\n"
            f'    name = "{name}"\n'
            "curve\n"
            f'    public-key = "{z85(public)}"\n'
            f'    secret-key = "{z85(key.private_bytes_raw())}"\n')


def secret_data(name: str) -> dict[str, str]:
    return {"curve.cert": base64.b64encode(certificate(name).encode()).decode()}
