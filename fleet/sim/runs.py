"""The replays a report needs, each one independent: the trace on the shared fleet under a
scenario, or one tenant's gangs alone on a private cluster of its guarantee. They run in
parallel processes when there are cores for them (each replay is single-threaded Python)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from functools import partial

from fleet.sim.engine import Outcome, Scenario, Simulation, progress_bar
from fleet.sim.trace import Node, Trace


@dataclass(frozen=True)
class Run:
    scenario: Scenario
    tenant: str = ""  # set: this tenant alone on a private cluster of ``share`` GPUs
    share: int = 0

    @property
    def key(self) -> tuple[Scenario, str, int]:
        """What decides the outcome: runs that differ only in their scenario's name are one."""
        return replace(self.scenario, name=""), self.tenant, self.share

    @property
    def label(self) -> str:
        return f"private {self.tenant}: {self.scenario.name}" if self.tenant \
            else self.scenario.name


def private_trace(trace: Trace, tenant: str, share: int) -> Trace:
    """The tenant's gangs on a private cluster of ``share`` GPUs: the fleet's slice of that
    size, the same share of every node shape (model, GPUs, CPU, memory), so that it holds
    the fleet's mix of GPU models and its CPU and memory per GPU. The GPU nodes are taken in
    the order that keeps every shape's count proportional (each node at its rank within its
    shape, scaled by the shape's size), until ``share`` GPUs."""
    return Trace(proportional_slice(trace.nodes, share),
                 tuple(g for g in trace.gangs if g.tenant == tenant), trace.rules)


def proportional_slice(nodes: Sequence[Node], gpus: int) -> tuple[Node, ...]:
    """GPU nodes holding at least ``gpus`` GPUs (or all of them), each node shape in
    proportion to its share of the fleet's GPU nodes; in file order."""
    shapes: dict[tuple[str, int, int, int], list[int]] = {}
    for index, node in enumerate(nodes):
        if node.gpus:
            shapes.setdefault((node.model, node.gpus, node.cpu, node.memory), []).append(index)
    order = sorted(((rank + 0.5) / len(group), index) for group in shapes.values()
                   for rank, index in enumerate(group))
    taken, total = [], 0
    for _, index in order:
        if total >= gpus:
            break
        taken.append(index)
        total += nodes[index].gpus
    return tuple(nodes[i] for i in sorted(taken))


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
    """Every run's outcome; runs that decide alike are replayed once, in ``jobs`` processes
    (the shared fleet's first: they take longest)."""
    unique = list({run.key: run for run in sorted(runs, key=lambda r: bool(r.tenant))}.values())
    done: dict[tuple[Scenario, str, int], Outcome] = {}
    if jobs <= 1 or len(unique) <= 1:
        done = {run.key: replay(trace, run, clusters, progress=True) for run in unique}
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for count, (run, outcome) in enumerate(zip(unique, pool.map(
                    partial(replay, trace, clusters=clusters), unique), strict=True), start=1):
                done[run.key] = outcome
                print(f"[simulate] replayed {run.label} ({count}/{len(unique)})",
                      file=sys.stderr, flush=True)
    return {run: done[run.key] for run in runs}
