"""Which control planes the e2e suite runs on.

``FLEET_E2E_BACKEND`` chooses: ``binaries`` (kube-apiserver and friends built from Go modules,
run by kwokctl; what ``auto``, the default, picks), or ``kind`` (kind clusters on podman, kind
and the node image built here; ``make e2e-kind``), which is slower and so never chosen
unless asked for. ``FLEET_E2E_REQUIRED=1`` (CI sets it) turns "no backend available" from a
skip into a failure, so CI can never pass by skipping.
"""

from __future__ import annotations

import os
import shutil

from e2e.localfleet import kindfleet


def kind_unavailable() -> str | None:
    """Why kind clusters cannot run here (podman, runc, debootstrap, Go, root), or None."""
    return kindfleet.unavailable_reason()


def binaries_available() -> bool:
    return shutil.which("go") is not None


def choose() -> tuple[str, str]:
    """(backend, reason); backend is "" when none can run here."""
    wanted = os.environ.get("FLEET_E2E_BACKEND", "auto")
    if wanted == "kind":
        reason = kind_unavailable()
        if reason:
            return "", f"FLEET_E2E_BACKEND=kind but {reason}"
        return "kind", "kind clusters on podman (kind and its node image built here)"
    if binaries_available():
        return "binaries", "control planes from binaries built with the Go toolchain"
    return "", "the Go toolchain is not available to build the control planes"
