"""A flux TrainJob on a member: the agent's ConfigMap of scripts and CURVE certificate."""

from __future__ import annotations

import base64
import re

from cryptography.hazmat.primitives.asymmetric import x25519

from fleet.api import runtimes
from fleet.kinds.trainer_runtime import resolve
from member_agent.controllers import curvekeys
from member_agent.controllers.jobset import JOBSET
from tests.unit.test_trainjob import FLUX_JOB, SDK_BODY, runtime


def test_z85_is_zeromqs_base85() -> None:
    # RFC 32's test vector
    assert curvekeys.z85(bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])) == \
        "HelloWorld"


def z85_decode(text: str) -> bytes:
    out = b""
    for start in range(0, len(text), 5):
        word = 0
        for char in text[start:start + 5]:
            word = word * 85 + curvekeys.Z85.index(char)
        out += word.to_bytes(4, "big")
    return out


def test_each_certificate_is_a_fresh_x25519_pair_in_zeromqs_format() -> None:
    text = curvekeys.certificate("lammps")
    public, secret = (re.search(f'{part}-key = "(.{{40}})"', text) for part in ("public",
                                                                            "secret"))
    assert public is not None
    assert secret is not None
    key = x25519.X25519PrivateKey.from_private_bytes(z85_decode(secret.group(1)))
    assert key.public_key().public_bytes_raw() == z85_decode(public.group(1))
    assert 'name = "lammps"' in text
    assert curvekeys.certificate("lammps") != text  # random, not derived from the job
    data = curvekeys.secret_data("lammps")
    assert base64.b64decode(data["curve.cert"]).decode().startswith("#   ZeroMQ CURVE")


def test_the_agent_writes_a_flux_jobsets_scripts_and_asks_for_its_certificate() -> None:
    jobset = resolve(FLUX_JOB, runtime(runtimes.flux_distributed()))
    objects = {body["kind"]: body for _, body in JOBSET.objects(jobset, [], [])}
    assert objects["ConfigMap"]["metadata"]["name"] == "lammps-flux-entrypoint"
    assert set(objects["ConfigMap"]["data"]) == {"init.sh", "entrypoint.sh"}
    assert objects["ConfigMap"]["metadata"]["ownerReferences"][0]["name"] == "lammps"
    assert JOBSET.curve_secret(jobset) == "lammps-flux-curve"
    plain = resolve(SDK_BODY, runtime(runtimes.torch_distributed()))
    assert JOBSET.curve_secret(plain) is None
