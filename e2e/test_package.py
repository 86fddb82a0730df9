"""Install from a package: the built wheel, installed into a fresh virtualenv outside the
repository, joins a member with ``kubectl-fleet join`` run from a directory with no source
tree, and its agent (run from the same install) reports the member Ready.

The virtualenv gets the wheel without dependencies; those come from the repository's own
virtualenv through a ``.pth`` line (such a line adds a directory, and the editable install's
hooks there are not loaded, so ``fleet`` can only come from the wheel — the test checks it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from e2e.conftest import eventually
from e2e.localfleet import HUB, LocalFleet, identities
from e2e.localfleet.nodes import NodeShape
from fleet.clients import resources as r

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parent.parent
NAME = "member-pkg"


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 600) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv outside the repository with the wheel built from it; its bin/."""
    root = Path(tmp_path_factory.mktemp("package"))
    run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps",
         "--wheel-dir", str(root / "dist")], cwd=root)
    wheel = next((root / "dist").glob("fleet-*.whl"))
    run([sys.executable, "-m", "venv", str(root / "venv")], cwd=root)
    python = root / "venv" / "bin" / "python"
    run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)], cwd=root)
    site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
               cwd=root).strip()
    Path(site, "fleet-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return root / "venv" / "bin"


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, **extra}


def test_the_wheel_joins_a_member_with_no_source_tree(fleet: LocalFleet, installed: Path,
                                                      tmp_path: Path) -> None:
    where = run([str(installed / "python"), "-c",
                 "import fleet, member_agent; print(fleet.__file__, member_agent.__file__)"],
                cwd=tmp_path, env=clean_env())
    assert str(REPO) not in where, where
    assert str(installed.parent) in where, where

    fleet.add_cluster(NAME, [NodeShape(1, 8)])
    credentials = tmp_path / "agent-hub.kubeconfig"
    out = run([str(installed / "kubectl-fleet"), "--kubeconfig", str(fleet.kubeconfig(HUB)),
               "join", NAME, "--member-kubeconfig", str(fleet.kubeconfig(NAME)),
               "--agent-kubeconfig-out", str(credentials)], cwd=tmp_path, env=clean_env())
    assert f"member {NAME} joined" in out
    hub, member = fleet.client(HUB), fleet.client(NAME)
    assert member.get(r.DAEMONSETS, "fleet-agent", "fleet-system")
    assert member.get(r.CRDS, "pytorchjobs.kubeflow.org")

    # The agent, from the same install, as the ServiceAccount join installed on the member:
    # a host process (the added cluster has kwok nodes only; the image's install is the
    # same wheel, and the suite's own agents run it as DaemonSet Pods).
    identity = tmp_path / "member.kubeconfig"
    identities.install_agent(member, NAME, fleet.kubeconfig(NAME), identity)
    log = (fleet.workdir / "logs" / f"agent-{NAME}.log").open("ab")
    agent = subprocess.Popen(
        [str(installed / "python"), "-m", "member_agent", "--cluster", NAME], cwd=tmp_path,
        env=clean_env(KUBECONFIG=str(identity), FLEET_HUB_KUBECONFIG=str(credentials)),
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def ready() -> bool:
            status = hub.get(r.MEMBERCLUSTERS, NAME).get("status") or {}
            return any(c["type"] == "Ready" and c["status"] == "True"
                       for c in status.get("conditions") or [])

        eventually(ready, timeout=90, what=f"{NAME} Ready from the packaged agent")
    finally:
        os.killpg(agent.pid, signal.SIGTERM)
        agent.wait(timeout=30)
    run([str(installed / "kubectl-fleet"), "--kubeconfig", str(fleet.kubeconfig(HUB)),
         "unjoin", NAME, "--member-kubeconfig", str(fleet.kubeconfig(NAME))],
        cwd=tmp_path, env=clean_env())
    assert hub.get_or_none(r.MEMBERCLUSTERS, NAME) is None
