"""``python -m fleet.sim [--trace DIR] [--out DIR] [--limit N]``: compare fleet's modes on a
GPU cluster trace: summed-free vs node-aware vs reservation fit, Priority vs Block queues,
borrowing on vs off; each tenant's queueing delay against a private cluster of its guarantee.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from fleet.sim.engine import Outcome, Scenario, Simulation, progress_bar, summary
from fleet.sim.trace import Trace, load
from quota.engine import QueuePolicy

SCENARIOS = (
    Scenario("node-aware, Priority, borrow"),
    Scenario("summed, Priority, borrow", fit="Summed"),
    Scenario("reservation, Priority, borrow", fit="Reservation"),
    Scenario("node-aware, Block, borrow", queue_policy=QueuePolicy.BLOCK),
    Scenario("node-aware, Priority, no borrow", borrowing=False),
)


def private_delays(trace: Trace, tenant: str, share: int) -> list[float]:
    """The tenant alone on a private cluster of its guarantee (nodes dealt until its GPUs)."""
    nodes, gpus = [], 0
    for node in trace.nodes:
        if gpus >= share:
            break
        if node.gpus:
            nodes.append(node)
            gpus += node.gpus
    own = Trace(tuple(nodes), tuple(g for g in trace.gangs if g.tenant == tenant), trace.rules)
    sim = Simulation(own, Scenario(f"private {tenant}"), clusters=1, tenants=(tenant,),
                     nodes=tuple(nodes), progress=progress_bar(f"private {tenant}"))
    return sim.run().delays[tenant]


def fmt(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds:,.0f}s"


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def plot(outcomes: list[Outcome], out: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plots"
    fig, ax = plt.subplots(figsize=(10, 4))
    for outcome in outcomes:
        xs = [(t - outcome.timeline[0][0]) / 3600 for t, _ in outcome.timeline]
        ax.plot(xs, [v for _, v in outcome.timeline], label=outcome.scenario.name, lw=0.8)
    ax.set_xlabel("hours into the (sped-up) arrivals")
    ax.set_ylabel("GPUs allocated / total")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "allocation.png", dpi=110)
    fig, ax = plt.subplots(figsize=(10, 4))
    for outcome in outcomes:
        delays = sorted(outcome.all_delays())
        if delays:
            ax.plot([max(d, 1) for d in delays], [i / len(delays) for i in range(len(delays))],
                    label=outcome.scenario.name, lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("queueing delay (s)")
    ax.set_ylabel("fraction of gangs")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "delay-cdf.png", dpi=110)
    return f"plots: {out / 'allocation.png'}, {out / 'delay-cdf.png'}"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m fleet.sim", description=__doc__)
    parser.add_argument("--trace", type=Path,
                        default=Path(__file__).resolve().parents[3] / "shared" / "traces"
                        / "alibaba-gpu-2023")
    parser.add_argument("--out", type=Path, default=Path(".sim"))
    parser.add_argument("--clusters", type=int, default=4)
    parser.add_argument("--limit", type=int, default=3000,
                        help="first N pods of the trace (0: all 8,152; about 20 minutes)")
    parser.add_argument("--inventory", type=float, default=0.25,
                        help="fraction of the trace's nodes to keep (every k-th): the full "
                             "inventory is never contended by this trace")
    parser.add_argument("--load", type=float, default=0.9,
                        help="speed arrivals up to this offered load (0: keep trace times)")
    args = parser.parse_args()
    trace = load(args.trace, limit=args.limit or None, load_factor=args.load,
                 inventory=args.inventory)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"[simulate] {trace.rules}", file=sys.stderr)
    outcomes = []
    for scenario in SCENARIOS:
        sim = Simulation(trace, scenario, clusters=args.clusters,
                         progress=progress_bar(scenario.name))
        outcomes.append(sim.run())
        print(file=sys.stderr)
    rows = [["scenario", "GPU alloc", "GPU alloc (started)", "stranded", "preempted",
             "not started", "delay p50", "p90", "p99"]]
    for o in outcomes:
        p50, p90, p99 = summary(o.all_delays())
        rows.append([o.scenario.name, f"{o.allocation:.3f}", f"{o.useful_allocation:.3f}",
                     str(o.stranded), str(o.preempted), str(o.unstarted), fmt(p50), fmt(p90),
                     fmt(p99)])
    base = outcomes[0]
    share = base.total_gpus // max(1, len(base.delays))
    tenant_rows = [["tenant", "gangs", "shared p50", "shared p99", f"private ({share} GPUs) p50",
                    "private p99"]]
    for tenant, delays in sorted(base.delays.items()):
        own = private_delays(trace, tenant, share)
        print(file=sys.stderr)
        s50, _, s99 = summary(delays)
        p50, _, p99 = summary(own)
        tenant_rows.append([tenant, str(len(delays)), fmt(s50), fmt(s99), fmt(p50), fmt(p99)])
    text = (f"trace: {args.trace.name}; {trace.rules}\n\n{table(rows)}\n\n"
            f"per tenant, node-aware Priority with borrowing vs a private cluster of its "
            f"guarantee (HiveD's VC-safety check):\n{table(tenant_rows)}\n\n"
            f"{plot(outcomes, args.out)}\n")
    print(text)
    (args.out / "report.txt").write_text(text)
    (args.out / "results.json").write_text(json.dumps([{
        "scenario": o.scenario.name, "allocation": o.allocation,
        "useful_allocation": o.useful_allocation, "stranded": o.stranded,
        "preempted": o.preempted, "not_started": o.unstarted,
        "delay": dict(zip(("p50", "p90", "p99"), summary(o.all_delays()), strict=True)),
        "tenants": {t: dict(zip(("p50", "p90", "p99"), summary(d), strict=True))
                    for t, d in o.delays.items()},
    } for o in outcomes], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
