"""Which control planes the e2e suite runs on.

``FLEET_E2E_BACKEND`` chooses: ``binaries`` (kube-apiserver and friends built from Go modules,
run by kwokctl), ``kind`` (needs Docker, kind and a kind node image), or ``auto`` (default):
kind when all three are present, else the binaries. ``FLEET_E2E_REQUIRED=1`` (CI sets it) turns
"no backend available" from a skip into a failure, so CI can never pass by skipping.
"""

from __future__ import annotations

import os
import shutil
import subprocess

KIND_NODE_IMAGE = "kindest/node"


def kind_available() -> bool:
    if not shutil.which("kind") or not shutil.which("docker"):
        return False
    try:
        subprocess.run(["docker", "info"], check=True, capture_output=True, timeout=10)
        images = subprocess.run(["docker", "image", "ls", "--format", "{{.Repository}}"],
                                check=True, capture_output=True, text=True, timeout=10)
    except (subprocess.SubprocessError, OSError):
        return False
    return KIND_NODE_IMAGE in images.stdout.split()


def binaries_available() -> bool:
    return shutil.which("go") is not None


def choose() -> tuple[str, str]:
    """(backend, reason); backend is "" when none can run here."""
    wanted = os.environ.get("FLEET_E2E_BACKEND", "auto")
    if wanted == "kind" or (wanted == "auto" and kind_available()):
        if kind_available():
            return "kind", "Docker, kind and a kind node image are present"
        return "", "FLEET_E2E_BACKEND=kind but Docker, kind or a kind node image is missing"
    if binaries_available():
        return "binaries", "control planes from binaries built with the Go toolchain"
    return "", "neither kind (Docker + kind + node image) nor the Go toolchain is available"
