"""``python -m fleet.sim [--trace DIR] [--pods FILE ...] [--out DIR]``: fleet's modes on a
GPU cluster trace. First the trace paper's fragmentation study on every pod-list variant (GPUs
left unallocated as the fleet fills, node-aware vs summed fit); then a replay of the variant
with timestamps on a virtual clock: summed vs node-aware vs reservation fit, Priority vs Block
queues, borrowing on vs off, each tenant's queueing delay against a private cluster of its
guarantee: today's planner against priority preemption, with guaranteed and opportunistic
tenants.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

from fleet.sim.engine import Outcome, Scenario, Simulation, progress_bar, summary
from fleet.sim.fragmentation import MODES, StudyConfig, VariantResult, study
from fleet.sim.study_report import study_json, study_plot, study_text
from fleet.sim.trace import (
    DEFAULT_PODS,
    NODE_FILE,
    Trace,
    TraceError,
    load,
    read_nodes,
    read_pods,
    variants,
)
from quota.engine import QueuePolicy

SCENARIOS = (
    Scenario("node-aware, Priority, borrow"),
    Scenario("summed, Priority, borrow", fit="Summed"),
    Scenario("reservation, Priority, borrow", fit="Reservation"),
    Scenario("node-aware, Block, borrow", queue_policy=QueuePolicy.BLOCK),
    Scenario("node-aware, Priority, no borrow", borrowing=False),
)


def private_delays(trace: Trace, tenant: str, share: int, preemption: bool = False
                   ) -> list[float]:
    """The tenant alone on a private cluster of its guarantee (nodes dealt until its GPUs),
    with the same planner (priority preemption on or off)."""
    nodes, gpus = [], 0
    for node in trace.nodes:
        if gpus >= share:
            break
        if node.gpus:
            nodes.append(node)
            gpus += node.gpus
    own = Trace(tuple(nodes), tuple(g for g in trace.gangs if g.tenant == tenant), trace.rules)
    label = f"private {tenant}{' preempting' if preemption else ''}"
    sim = Simulation(own, Scenario(label, preemption=preemption), clusters=1,
                     tenants=(tenant,), nodes=tuple(nodes), progress=progress_bar(label))
    delays = sim.run().delays[tenant]
    print(file=sys.stderr)
    return delays


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


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m fleet.sim", description=__doc__)
    parser.add_argument("--trace", type=Path,
                        default=Path(__file__).resolve().parents[3] / "shared" / "traces"
                        / "alibaba-gpu-2023")
    parser.add_argument("--pods", type=Path, action="append", default=[],
                        help="a further pod-list file for the fragmentation study (repeatable)")
    parser.add_argument("--out", type=Path, default=Path(".sim"))
    parser.add_argument("--clusters", type=int, default=4, choices=range(1, 65),
                        metavar="1..64")
    parser.add_argument("--limit", type=int, default=3000,
                        help="replay: first N pods of the trace (0: all 8,152; about 20 minutes)")
    parser.add_argument("--inventory", type=float, default=0.25,
                        help="replay: fraction of the trace's nodes to keep (every k-th): the "
                             "full inventory is never contended by this trace")
    parser.add_argument("--load", type=float, default=0.9,
                        help="replay: speed arrivals up to this offered load (0: keep trace "
                             "times)")
    parser.add_argument("--replay-pods", type=Path, default=None,
                        help=f"replay: the pod list to replay (default {DEFAULT_PODS})")
    parser.add_argument("--no-replay", action="store_true", help="the fragmentation study only")
    defaults = StudyConfig()
    parser.add_argument("--study-repeats", type=int, default=defaults.repeats,
                        help="study: sampled workloads per variant (averaged)")
    parser.add_argument("--study-max-fill", type=float, default=defaults.max_fill,
                        help="study: stop sampling at this arrived demand / fleet GPUs")
    parser.add_argument("--study-give-up", type=int, default=defaults.give_up,
                        help="study: the fleet is full after this many failed arrivals in a row")
    parser.add_argument("--study-seed", type=int, default=defaults.seed)
    args = parser.parse_args()
    try:
        args.study = StudyConfig(clusters=args.clusters, repeats=args.study_repeats,
                                 seed=args.study_seed, give_up=args.study_give_up,
                                 max_fill=args.study_max_fill)
    except ValueError as error:
        parser.error(str(error))
    if not 0 < args.inventory <= 1 or not 0 <= args.load <= 100 or not 0 <= args.limit <= 10**6:
        parser.error("--inventory must be in (0, 1], --load in [0, 100], --limit in [0, 1e6]")
    return args


def run_study(args: argparse.Namespace) -> list[VariantResult]:
    nodes = read_nodes(args.trace / NODE_FILE)
    files = variants(args.trace, tuple(args.pods))
    if not files:
        raise TraceError(f"{args.trace}: no openb_pod_list_*.csv files and no --pods given")
    lists = [read_pods(path) for path in files]  # every file checked before the long runs
    results = []
    for pod_list in lists:
        bars: dict[str, Callable[[float], None]] = {}

        def show(label: str, fraction: float, bars: dict[str, Callable[[float], None]] = bars,
                 ) -> None:
            if label not in bars:
                if bars:
                    print(file=sys.stderr)
                bars[label] = progress_bar(f"study {label}")
            bars[label](fraction)

        results.append(study(nodes, pod_list.pods, pod_list.name, pod_list.describe(),
                             args.study, show))
        print(file=sys.stderr)
    return results


def run_replay(args: argparse.Namespace) -> tuple[str, list[dict[str, object]]]:
    trace = load(args.trace, pods=args.replay_pods, limit=args.limit or None,
                 load_factor=args.load, inventory=args.inventory)
    print(f"[simulate] {trace.rules}", file=sys.stderr)
    outcomes = []
    for scenario in SCENARIOS:
        sim = Simulation(trace, scenario, clusters=args.clusters,
                         progress=progress_bar(scenario.name))
        outcomes.append(sim.run())
        print(file=sys.stderr)
    rows = [["scenario", "stranded", "preempted", "not started", "delay p50", "p90", "p99",
             "mean GPU alloc*"]]
    for o in outcomes:
        p50, p90, p99 = summary(o.all_delays())
        rows.append([o.scenario.name, str(o.stranded), str(o.preempted), str(o.unstarted),
                     fmt(p50), fmt(p90), fmt(p99), f"{o.allocation:.3f}"])
    priority_text, priority = priority_table(trace, args, outcomes[0])
    text = (f"Delay replay: {trace.rules}\n\n{table(rows)}\n"
            "* GPUs held, averaged over the sped-up arrival window (which starts nearly idle):\n"
            "  a time-sharing figure, not the fragmentation measure above.\n\n"
            f"{priority_text}\n\n{plot(outcomes, args.out)}\n")
    return text, [{
        "scenario": o.scenario.name, "allocation": o.allocation,
        "useful_allocation": o.useful_allocation, "stranded": o.stranded,
        "preempted": o.preempted, "not_started": o.unstarted,
        "delay": dict(zip(("p50", "p90", "p99"), summary(o.all_delays()), strict=True)),
        "tenants": {t: dict(zip(("p50", "p90", "p99"), summary(d), strict=True))
                    for t, d in o.delays.items()},
    } for o in outcomes] + priority


# Tenant setups of the priority table: all four guaranteed (a quarter of the GPUs each), or
# three guaranteed (a third each) and one opportunistic (HiveD's priority -1: no quota).
SETUPS = (("4 guaranteed", ()), ("3 guaranteed + 1 opportunistic", ("tenant-3",)))


def priority_table(trace: Trace, args: argparse.Namespace, base: Outcome
                   ) -> tuple[str, list[dict[str, object]]]:
    """Per tenant, node-aware Priority queues with borrowing: (a) today's planner without
    priority preemption, (b) with it, (c) the tenant alone on a private cluster of its
    guarantee with the same planner as (b) (HiveD's bar: (b) p99 no worse than (c) p99)."""
    rows = [["setup", "tenant", "guarantee", "gangs", "(a) p50", "(a) p99", "(a) GPU alloc",
             "(a) preempted", "(b) p50", "(b) p99", "(b) GPU alloc", "(b) preempted",
             "(c) p50", "(c) p99", "(c) p99 w/o preemption", "bar: (b) p99 <= (c) p99"]]
    entries: list[dict[str, object]] = []
    for setup, opportunistic in SETUPS:
        runs = []
        for preemption in (False, True):
            scenario = Scenario(f"{setup}, {'preemption' if preemption else 'no preemption'}",
                                preemption=preemption, opportunistic=opportunistic)
            if scenario.opportunistic == base.scenario.opportunistic and not preemption:
                runs.append(base)  # today's run is (a) of the all-guaranteed setup
                continue
            runs.append(Simulation(trace, scenario, clusters=args.clusters,
                                   progress=progress_bar(scenario.name)).run())
            print(file=sys.stderr)
        today, preempting = runs
        for tenant in sorted(today.delays):
            guarantee = today.guarantees[tenant]
            private = private_delays(trace, tenant, guarantee, True) if guarantee else []
            private_today = private_delays(trace, tenant, guarantee) if guarantee else []
            a50, _, a99 = summary(today.delays[tenant])
            b50, _, b99 = summary(preempting.delays[tenant])
            c50, _, c99 = summary(private)
            bar = "-" if not guarantee else "met" if b99 <= c99 else f"missed (+{fmt(b99 - c99)})"
            rows.append([setup, tenant, f"{guarantee} GPUs" if guarantee else "opportunistic",
                         str(len(preempting.delays[tenant])), fmt(a50), fmt(a99),
                         f"{today.tenant_allocation(tenant):.3f}",
                         str(today.tenant_preempted[tenant]), fmt(b50), fmt(b99),
                         f"{preempting.tenant_allocation(tenant):.3f}",
                         str(preempting.tenant_preempted[tenant]), fmt(c50), fmt(c99),
                         fmt(summary(private_today)[2]), bar])
            entries.append({"setup": setup, "tenant": tenant, "guarantee": guarantee, **{
                f"{column}_{name}": value for column, outcome, delays in (
                    ("a", today, today.delays[tenant]),
                    ("b", preempting, preempting.delays[tenant]),
                    ("c", None, private), ("c_without_preemption", None, private_today))
                for name, value in (
                    ("p50", summary(delays)[0]), ("p99", summary(delays)[2]),
                    ("allocation", outcome.tenant_allocation(tenant) if outcome else None),
                    ("preempted", outcome.tenant_preempted[tenant] if outcome else None))}})
        rows.append([setup, "all", "", str(len(preempting.all_delays())),
                     fmt(summary(today.all_delays())[0]), fmt(summary(today.all_delays())[2]),
                     f"{today.allocation:.3f}", str(today.preempted),
                     fmt(summary(preempting.all_delays())[0]),
                     fmt(summary(preempting.all_delays())[2]), f"{preempting.allocation:.3f}",
                     f"{preempting.preempted} ({preempting.priority_preemptions} plans)",
                     "", "", "", ""])
    text = ("Priorities and opportunistic tenants, per tenant (node-aware, Priority queues, "
            "borrowing): (a) today's planner, no priority preemption; (b) the hub's priority "
            "preemption; (c) the tenant alone on a private cluster of its guarantee, same "
            "planner as (b) (HiveD's bar: no tenant's p99 in the shared fleet worse than "
            "private). Delay = time queued (a preempted gang's waits added up); GPU alloc = "
            "its GPUs held / the fleet's, over the arrival window; preempted = times its gangs "
            "were victims (quota reclaim or priority).\n" + table(rows))
    return text, entries


def main() -> int:
    args = arguments()
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        results = run_study(args)
        study_section = (f"trace: {args.trace.name}\n\n{study_text(results, args.study, MODES)}"
                         f"\n{study_plot(results, args.out)}\n\n")
        entries = study_json(results, args.study, MODES)
        # the study's half of the report is written at once: the replay takes longer
        write(args.out, study_section + "Delay replay: running\n", entries, [])
        print(study_section, flush=True)
        replay_text, replay = ("Delay replay: skipped (--no-replay)\n", []) if args.no_replay \
            else run_replay(args)
    except TraceError as error:
        print(f"[simulate] error: {error}", file=sys.stderr)
        return 2
    print(replay_text)
    write(args.out, study_section + replay_text, entries, replay)
    return 0


def write(out: Path, text: str, study_entries: dict[str, object],
          replay: list[dict[str, object]]) -> None:
    (out / "report.txt").write_text(text)
    (out / "results.json").write_text(json.dumps({"study": study_entries, "replay": replay},
                                                 indent=2))


if __name__ == "__main__":
    sys.exit(main())
