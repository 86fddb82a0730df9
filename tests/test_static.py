"""The repository's own checks run as tests: lint, strict types, import layering, fresh CRDs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)


@pytest.mark.parametrize(("tool", "args"), [
    ("ruff", ["check", "."]),
    ("mypy", []),
    ("lint-imports", []),
])
def test_tool_passes(tool: str, args: list[str]) -> None:
    done = run(str(BIN / tool), *args)
    assert done.returncode == 0, f"{tool} failed:\n{done.stdout}\n{done.stderr}"


def test_crds_are_generated_from_the_models() -> None:
    done = run(sys.executable, "-m", "fleet.api.crds", "--check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_deploy_manifests_are_generated() -> None:
    done = run(sys.executable, "-m", "fleet.deploy", "--check")
    assert done.returncode == 0, done.stdout + done.stderr
