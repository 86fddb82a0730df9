"""CI's short chaos lane: every scenario of ``make chaos`` once (the failover scenario once per
purge mode, the fuzzer with 500 objects) on a fleet of its own, each run checked by the
ledger. ``make chaos`` runs the full counts.

This fleet runs the hub and agents as host processes: its scenarios SIGKILL and SIGSTOP them.
The scenarios of the hub as shipped (``pods=True``: the leading hub Pod killed) run in
``e2e/test_real_nodes.py`` on the suite's fleet, whose hub and agents are Pods."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.chaos.__main__ import run_scenario, table
from e2e.chaos.faults import Supervisor
from e2e.chaos.scenarios import SCENARIOS, RunResult, Scenario
from e2e.conftest import require_local_backend
from e2e.localfleet import LocalFleet

pytestmark = pytest.mark.e2e

# Scenarios the ledger finds violations in on today's code, for a reason owned elsewhere and
# being fixed there. strict: once the fix lands the test passes, and the mark must go.
KNOWN: dict[str, str] = {}

RESULTS: list[tuple[str, list[RunResult]]] = []
SUPERVISOR: list[Supervisor] = []


@pytest.fixture(scope="module")
def chaos_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    """A fleet of its own: the faults would disturb the suite's shared one."""
    require_local_backend()
    local = LocalFleet(Path(tmp_path_factory.mktemp("chaos")),
                       say=lambda m: print(f"[chaos] {m}", flush=True), nodes="host")
    supervisor: Supervisor | None = None
    try:
        local.up()
        supervisor = Supervisor(local).start()
        SUPERVISOR.append(supervisor)
        yield local
    finally:
        if supervisor is not None:
            supervisor.stop()
        local.down()
        if RESULTS:
            print("\n" + table(RESULTS))


def marks(scenario: Scenario) -> list[pytest.MarkDecorator]:
    reason = KNOWN.get(scenario.name)
    return [pytest.mark.xfail(strict=True, reason=reason)] if reason else []


@pytest.mark.parametrize("scenario", [pytest.param(s, id=s.name, marks=marks(s))
                                      for s in SCENARIOS if not s.pods])
def test_scenario_keeps_every_invariant(chaos_fleet: LocalFleet, scenario: Scenario) -> None:
    results = run_scenario(chaos_fleet, SUPERVISOR[-1], scenario, short=True, seed=1)
    RESULTS.append((scenario.name, results))
    skipped = next((r.skipped for r in results if r.skipped), "")
    if skipped:
        pytest.skip(skipped)
    violations = [str(v) for r in results for v in r.violations]
    assert not violations, "\n".join(violations)
