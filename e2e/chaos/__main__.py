"""``python -m e2e.chaos [--short] [--only NAME] [--seed N]``: run the chaos scenarios on a
fresh local fleet and print, per scenario, the runs, the invariant violations the ledger found
and the recovery time (fault repaired -> a fresh job Running) p50/p99. Exits non-zero on any
violation."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from e2e.chaos.faults import Supervisor
from e2e.chaos.ledger import Violation
from e2e.chaos.scenarios import SCENARIOS, Context, RunResult, Scenario
from e2e.localfleet import LocalFleet, progress


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run_scenario(fleet: LocalFleet, supervisor: Supervisor | None, scenario: Scenario, *,
                 short: bool, seed: int, runs: int | None = None) -> list[RunResult]:
    ctx = Context(fleet, seed, short, say=progress, components=supervisor)
    results = []
    for i in range(runs or (scenario.short if short else scenario.full)):
        progress(f"{scenario.name}: run {i + 1}")
        started = time.monotonic()
        try:
            result = scenario.run(ctx, i)
        except Exception as exc:  # a scenario that cannot finish is a finding, not a crash
            result = RunResult(notes=[f"scenario error: {exc!r}"])
            result.violations.append(Violation("harness", scenario.name, repr(exc), time.time()))
        for violation in result.violations:
            progress(f"{scenario.name}: VIOLATION {violation}")
        for note in result.notes:
            progress(f"{scenario.name}: {note}")
        progress(f"{scenario.name}: run {i + 1} done in {time.monotonic() - started:.0f}s")
        results.append(result)
        if result.skipped:
            break
    return results


def table(rows: list[tuple[str, list[RunResult]]]) -> str:
    lines = [f"{'scenario':<22} {'runs':>4} {'violations':>10} {'recovery p50':>12} "
             f"{'p99':>7}  note"]
    for name, results in rows:
        recovery = [t for r in results for t in r.recovery]
        p50, p99 = percentile(recovery, 0.5), percentile(recovery, 0.99)
        skipped = next((r.skipped for r in results if r.skipped), "")
        violations = sum(len(r.violations) for r in results)
        runs = len([r for r in results if not r.skipped])
        kinds = sorted({v.kind for r in results for v in r.violations})
        lines.append(
            f"{name:<22} {runs:>4} {violations:>10} "
            f"{(f'{p50:.1f}s' if p50 is not None else '-'):>12} "
            f"{(f'{p99:.1f}s' if p99 is not None else '-'):>7}  "
            f"{('skipped: ' + skipped) if skipped else ', '.join(kinds)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.chaos", description=__doc__)
    parser.add_argument("--short", action="store_true", help="each scenario once (CI)")
    parser.add_argument("--only", action="append", default=[],
                        choices=[s.name for s in SCENARIOS], help="run only these")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, help="override the number of runs")
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="fleet-chaos-"))
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only]
    # Scenarios that signal the hub and agents directly run them as host processes; those of
    # the hub as shipped (Pods) get a fleet with real nodes after the others.
    fleets = [(LocalFleet(workdir, nodes="host"), [s for s in chosen if not s.pods]),
              (LocalFleet(workdir / "pods", nodes="real"), [s for s in chosen if s.pods])]
    rows = []
    for fleet, scenarios in fleets:
        if not scenarios:
            continue
        supervisor: Supervisor | None = None
        try:
            fleet.up()
            supervisor = Supervisor(fleet).start()
            for scenario in scenarios:
                rows.append((scenario.name, run_scenario(fleet, supervisor, scenario,
                                                         short=args.short,
                                                         seed=args.seed, runs=args.runs)))
                print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
        finally:
            if supervisor is not None:
                supervisor.stop()
                if supervisor.restarts:
                    progress(f"control-plane processes restarted: {supervisor.restarts}")
            fleet.down()
    print(table(rows))
    return 1 if any(r.violations for _, results in rows for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
