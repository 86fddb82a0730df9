"""An ``up`` stops what an earlier ``up`` of the same workdir left running (from its state
file), and never a process that merely reuses a recorded pid."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from e2e.localfleet import LocalFleet


def sleeper(*marker: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", *marker],
                            start_new_session=True)


def test_stop_processes_ends_the_recorded_hub_and_agents_only(tmp_path: Path) -> None:
    hub, agent, stranger = sleeper("fleet.hub"), sleeper("member_agent"), sleeper()
    try:
        (tmp_path / "state.json").write_text(json.dumps({"processes": {
            "hub": hub.pid, "agent-member1": agent.pid, "reused": stranger.pid}}))
        fleet = LocalFleet(tmp_path, say=lambda _: None)
        started = time.monotonic()
        fleet.stop_processes()
        assert hub.wait(timeout=5) is not None
        assert agent.wait(timeout=5) is not None
        assert time.monotonic() - started < 5
        assert stranger.poll() is None, "a process that reused a recorded pid was stopped"
        assert fleet.processes() == {}
    finally:
        for process in (hub, agent, stranger):
            process.kill()
            process.wait()
