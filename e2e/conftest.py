"""Fixtures for the multi-cluster suite: one local fleet (hub + 2 members) per test session."""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from e2e import backends
from e2e.localfleet import HUB, LocalFleet, component_log
from e2e.localfleet.images import PAUSE
from fleet.clients import errors
from fleet.clients.kube import Kube

T = TypeVar("T")
# A status code standing alone: object names such as "fuzz-403" and query values such as
# "resourceVersion=403" (a watch retried while a member is down) are not refusals.
FORBIDDEN = re.compile(r"(?<![-\w.=])403(?![-\w.])|\bforbidden\b", re.IGNORECASE)


KIND_SKIP = ("runs a fleet of its own whose hub and agents are host processes on the local "
             "backend's control planes (on kind, the scenarios of the hub as Pods run in "
             "test_real_nodes)")


def require_backend() -> str:
    """The e2e backend; skip (or, under FLEET_E2E_REQUIRED=1, fail) when none runs here."""
    backend, reason = backends.choose()
    if not backend:
        if os.environ.get("FLEET_E2E_REQUIRED") == "1":
            pytest.fail(f"e2e backend required but unavailable: {reason}")
        pytest.skip(reason)
    return backend


def require_local_backend() -> None:
    """Skip unless the local binaries backend runs (a test that signals the control planes'
    or the fleet's host processes)."""
    if require_backend() == "kind":
        pytest.skip(f"this test {KIND_SKIP}")


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    """The suite's fleet, run as shipped: a real node per cluster with the hub Deployment and
    the agent DaemonSet from deploy/ as Pods (``FLEET_E2E_NODES=host`` runs them as host
    processes; a machine that cannot run real nodes falls back to them, and CI fails in
    test_real_nodes). Tests that must signal a hub or agent process start host processes of
    their own beside the Pods, and say so."""
    backend = require_backend()
    # Agents look for a gang scheduler's CRDs this often (test_member_gang adds one): an
    # argument of the agent Pods, an environment variable of host agents.
    os.environ.setdefault("FLEET_GANG_PROBE_SECONDS", "2")
    # A reservation's placeholders run the pause image this fleet builds for its real nodes
    # (kwok's GPU nodes run any image).
    os.environ.setdefault("FLEET_PLACEHOLDER_IMAGE", PAUSE)
    workdir = Path(tmp_path_factory.mktemp("fleet"))
    local = LocalFleet(workdir, say=lambda m: print(f"[fleet] {m}", flush=True),
                       nodes=os.environ.get("FLEET_E2E_NODES", "real"),
                       backend="kind" if backend == "kind" else "local")
    with running(local):
        yield local
    # Every component runs with the identity deploy/ ships: a 403 in a log is a missing rule.
    forbidden = forbidden_lines(workdir / "logs")
    assert not forbidden, "components were refused by the API server:\n" + "\n".join(forbidden)


@contextlib.contextmanager
def running(local: LocalFleet, tail: int = 15) -> Iterator[LocalFleet]:
    """``local`` up for the block, its Pods' logs linked into its logs directory; down after
    it, once the last ``tail`` lines of its hub's and agents' logs are printed (what a failed
    test needs first)."""
    linking = PodLogs(local)
    try:
        local.up()
        linking.start()
        yield local
    finally:
        linking.stop()
        if local.backend == "kind":
            local.save_pod_logs()
        for log in sorted((local.workdir / "logs").glob("*.log")):
            if component_log(log.name):
                lines = log.read_text(errors="replace").splitlines()[-tail:]
                print(f"--- {log.name} (last lines)\n" + "\n".join(lines))
        local.down()


class PodLogs(threading.Thread):
    """Links the logs of fleet's Pods into the fleet's logs directory every few seconds, so
    a Pod deleted by the Deployment or a test leaves its log behind."""

    def __init__(self, fleet: LocalFleet, interval: float = 3.0) -> None:
        super().__init__(name="pod-logs", daemon=True)
        self.fleet, self.interval, self._stop_event = fleet, interval, threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            try:
                self.fleet.collect_pod_logs()
            except (OSError, ValueError, errors.ApiError) as exc:
                print(f"[fleet] linking pod logs: {exc}", flush=True)

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=10)


def forbidden_lines(logs: Path) -> list[str]:
    """Lines of the hub's and agents' logs that hold a 403 (Forbidden) answer."""
    hits = []
    for log in sorted(logs.glob("*.log")):
        if component_log(log.name):
            hits += [f"{log.name}: {line[:300]}"
                     for line in log.read_text(errors="replace").splitlines()
                     if FORBIDDEN.search(line)]
    return hits


@pytest.fixture(scope="session")
def hub(fleet: LocalFleet) -> Kube:
    return fleet.client(HUB)


def eventually(check: Callable[[], T | None], *, timeout: float = 60, interval: float = 0.3,
               what: str = "condition") -> T:
    """Poll ``check`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            result = check()
        except AssertionError as exc:
            last = exc
        else:
            if result:
                return result
            last = result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
