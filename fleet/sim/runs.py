"""The replays a report needs, each one independent: the trace on the shared fleet under a
scenario, or one tenant's gangs alone on a private cluster of its guarantee. They run in
parallel processes when there are cores for them (each replay is single-threaded Python)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial

from fleet.sim.engine import Outcome, Scenario, Simulation, progress_bar
from fleet.sim.trace import Trace


@dataclass(frozen=True)
class Run:
    scenario: Scenario
    tenant: str = ""  # set: this tenant alone on a private cluster of ``share`` GPUs
    share: int = 0

    @property
    def label(self) -> str:
        return f"private {self.tenant}: {self.scenario.name}" if self.tenant \
            else self.scenario.name


def private_trace(trace: Trace, tenant: str, share: int) -> Trace:
    """The tenant's gangs on the trace's first GPU nodes, dealt until ``share`` GPUs."""
    nodes, gpus = [], 0
    for node in trace.nodes:
        if gpus >= share:
            break
        if node.gpus:
            nodes.append(node)
            gpus += node.gpus
    return Trace(tuple(nodes), tuple(g for g in trace.gangs if g.tenant == tenant), trace.rules)


def replay(trace: Trace, run: Run, clusters: int, progress: bool = False) -> Outcome:
    bar = progress_bar(run.label) if progress else None
    if run.tenant:
        own = private_trace(trace, run.tenant, run.share)
        sim = Simulation(own, run.scenario, clusters=1, tenants=(run.tenant,), progress=bar)
    else:
        sim = Simulation(trace, run.scenario, clusters=clusters, progress=bar)
    outcome = sim.run()
    if progress:
        print(file=sys.stderr)
    return outcome


def run_all(trace: Trace, runs: Sequence[Run], clusters: int, jobs: int) -> dict[Run, Outcome]:
    """Every run once (duplicates share one), in ``jobs`` processes."""
    unique = list(dict.fromkeys(runs))
    if jobs <= 1 or len(unique) <= 1:
        return {run: replay(trace, run, clusters, progress=True) for run in unique}
    out: dict[Run, Outcome] = {}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for done, (run, outcome) in enumerate(zip(unique, pool.map(
                partial(replay, trace, clusters=clusters), unique), strict=True), start=1):
            out[run] = outcome
            print(f"[simulate] replayed {run.label} ({done}/{len(unique)})", file=sys.stderr,
                  flush=True)
    return out
