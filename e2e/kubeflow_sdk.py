"""The Kubeflow training SDK (``kubeflow-training`` from PyPI) in a virtualenv of its own.

The SDK pins ``kubernetes<36`` and fleet runs a newer client, so it is kept out of fleet's
environment: a virtualenv per SDK version, cached next to the control-plane binaries, made
once and reused.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SDK = "kubeflow-training==1.9.4"
TRAINER_SDK = "kubeflow==0.5.0"  # Kubeflow Trainer v2's TrainerClient (Trainer v2.3.0's API)
SUITE_TOOLS = ("pytest",)  # what the training operator's own SDK suite needs besides the SDK


def sdk_python(*extra: str, sdk: str = SDK) -> Path:
    """The virtualenv's python, with ``sdk`` and ``extra`` packages installed."""
    cache = Path(os.environ.get("FLEET_SDK_CACHE", Path.home() / ".cache" / "fleet" / "sdk"))
    venv = cache / sdk.replace("==", "-")
    python = venv / "bin" / "python"
    if not (venv / ".installed").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", sdk], check=True,
                       timeout=600)
        (venv / ".installed").touch()
    for package in extra:
        marker = venv / f".installed-{package}"
        if not marker.exists():
            subprocess.run([str(python), "-m", "pip", "install", "--quiet", package],
                           check=True, timeout=600)
            marker.touch()
    return python
