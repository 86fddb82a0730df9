"""Fixtures for the multi-cluster suite: one local fleet (hub + 2 members) per test session."""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from e2e import backends
from e2e.localfleet import HUB, LocalFleet
from fleet.clients.kube import Kube

T = TypeVar("T")
# A status code standing alone: object names such as "fuzz-403" are not refusals.
FORBIDDEN = re.compile(r"(?<![-\w.])403(?![-\w.])|\bforbidden\b", re.IGNORECASE)


def require_local_backend() -> None:
    """Skip (or, under FLEET_E2E_REQUIRED=1, fail) unless the local binaries backend runs."""
    backend, reason = backends.choose()
    if not backend:
        if os.environ.get("FLEET_E2E_REQUIRED") == "1":
            pytest.fail(f"e2e backend required but unavailable: {reason}")
        pytest.skip(reason)
    if backend == "kind":
        pytest.skip("the kind backend is detected but not wired up yet; use "
                    "FLEET_E2E_BACKEND=binaries")


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    require_local_backend()
    # Agents look for a gang scheduler's CRDs this often (test_member_gang adds one).
    os.environ.setdefault("FLEET_GANG_PROBE_SECONDS", "2")
    workdir = Path(tmp_path_factory.mktemp("fleet"))
    with running(LocalFleet(workdir, say=lambda m: print(f"[fleet] {m}", flush=True))) as local:
        yield local
    # Every component runs with the identity deploy/ ships: a 403 in a log is a missing rule.
    forbidden = forbidden_lines(workdir / "logs")
    assert not forbidden, "components were refused by the API server:\n" + "\n".join(forbidden)


@contextlib.contextmanager
def running(local: LocalFleet, tail: int = 15) -> Iterator[LocalFleet]:
    """``local`` up for the block; down after it, once the last ``tail`` lines of its hub's
    and agents' logs are printed (what a failed test needs first)."""
    try:
        local.up()
        yield local
    finally:
        for log in sorted((local.workdir / "logs").glob("*.log")):
            if log.name.startswith(("hub", "agent")):
                lines = log.read_text(errors="replace").splitlines()[-tail:]
                print(f"--- {log.name} (last lines)\n" + "\n".join(lines))
        local.down()


def forbidden_lines(logs: Path) -> list[str]:
    """Lines of the hub's and agents' logs that hold a 403 (Forbidden) answer."""
    hits = []
    for log in sorted(logs.glob("*.log")):
        if log.name.startswith(("hub", "agent")):
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
