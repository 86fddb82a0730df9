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
import os
import sys
from collections.abc import Callable
from pathlib import Path

from fleet.sim import priorities, racks
from fleet.sim.engine import Outcome, Scenario, progress_bar, summary
from fleet.sim.fragmentation import MODES, StudyConfig, VariantResult, study
from fleet.sim.runs import Run, run_all
from fleet.sim.study_report import study_json, study_plot, study_text
from fleet.sim.trace import (
    DEFAULT_PODS,
    DEFAULT_TRACE,
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
    Scenario("node-aware, Priority, borrow, backfill", backfill=True),
)


def backfill_rows(trace: Trace, outcomes: list[Outcome]) -> tuple[int, list[list[str]]]:
    """Big gangs' delays (larger than the median gang) and the others', node-aware Priority
    with borrowing without and with backfill: the GPU threshold of "big" and the table."""
    sizes = sorted(g.gpus * g.replicas for g in trace.gangs)
    median = sizes[len(sizes) // 2] if sizes else 0
    threshold = min((s for s in sizes if s > median), default=median + 1)
    big = {g.name for g in trace.gangs if g.gpus * g.replicas >= threshold}
    rows = [["scenario", "big gangs", "big p50", "big p99", "others p50", "others p99",
             "all p99", "mean GPU alloc*"]]
    for o in outcomes:
        if o.scenario.fit != "NodeAware" or o.scenario.queue_policy is not QueuePolicy.PRIORITY \
                or not o.scenario.borrowing:
            continue
        mine = [d for name, d in o.by_gang.items() if name in big]
        others = [d for name, d in o.by_gang.items() if name not in big]
        b50, _, b99 = summary(mine)
        o50, _, o99 = summary(others)
        rows.append([o.scenario.name, str(len(mine)), fmt(b50), fmt(b99), fmt(o50), fmt(o99),
                     fmt(summary(o.all_delays())[2]), f"{o.allocation:.3f}"])
    return threshold, rows


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
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
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
    parser.add_argument("--tenant-seed", type=int, default=0, choices=range(0, 10**6),
                        metavar="0..999999", help="replay: another draw of the gangs' tenants "
                        "(0: sha256 of the gang's name; s: of 's:name'), to see how stable "
                        "per-tenant figures are")
    parser.add_argument("--replay-pods", type=Path, default=None,
                        help=f"replay: the pod list to replay (default {DEFAULT_PODS})")
    parser.add_argument("--no-replay", action="store_true", help="the fragmentation study only")
    parser.add_argument("--no-study", action="store_true", help="the replay only")
    parser.add_argument("--priorities-only", action="store_true",
                        help="replay: the priority table's runs only (no fit, queue, borrowing "
                        "or backfill comparison)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, choices=range(1, 65),
                        metavar="1..64", help="replay: runs in this many processes at once "
                        "(default: one per core)")
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
                 load_factor=args.load, inventory=args.inventory,
                 tenant_seed=args.tenant_seed)
    print(f"[simulate] {trace.rules}", file=sys.stderr)
    if args.priorities_only:
        results = run_all(trace, priorities.runs(trace) + priorities.elastic_runs(trace)
                          + racks.runs(), args.clusters, args.jobs)
        priority_rows, priority_entries = priorities.table(trace, results, fmt)
        elastic_rows, elastic_entries = priorities.elastic_table(trace, results, fmt)
        rack_rows, rack_entries = racks.table(trace, results, fmt)
        return (f"Delay replay: {trace.rules}\n\n{priorities.RULES}\n{table(priority_rows)}\n"
                f"\n{priorities.ELASTIC_RULES}\n{table(elastic_rows)}\n"
                f"\n{racks.RULES}\n{table(rack_rows)}\n",
                [{"priorities": priority_entries}, {"elastic": elastic_entries},
                 {"racks": rack_entries}])
    results = run_all(trace, [Run(s) for s in SCENARIOS] + priorities.runs(trace)
                      + priorities.elastic_runs(trace) + racks.runs(), args.clusters, args.jobs)
    outcomes = [results[Run(s)] for s in SCENARIOS]
    rows = [["scenario", "stranded", "preempted", "not started", "delay p50", "p90", "p99",
             "mean GPU alloc*"]]
    for o in outcomes:
        p50, p90, p99 = summary(o.all_delays())
        rows.append([o.scenario.name, str(o.stranded), str(o.preempted), str(o.unstarted),
                     fmt(p50), fmt(p90), fmt(p99), f"{o.allocation:.3f}"])
    priority_rows, priority_entries = priorities.table(trace, results, fmt)
    elastic_rows, elastic_entries = priorities.elastic_table(trace, results, fmt)
    rack_rows, rack_entries = racks.table(trace, results, fmt)
    threshold, big_rows = backfill_rows(trace, outcomes)
    text = (f"Delay replay: {trace.rules}\n\n{table(rows)}\n"
            "* GPUs held, averaged over the sped-up arrival window (which starts nearly idle):\n"
            "  a time-sharing figure, not the fragmentation measure above.\n\n"
            f"backfill (runtimes known: the trace's durations), big gangs = larger than the "
            f"median gang (>= {threshold} GPUs):\n{table(big_rows)}\n\n"
            f"{priorities.RULES}\n{table(priority_rows)}\n\n{priorities.ELASTIC_RULES}\n"
            f"{table(elastic_rows)}\n\n{racks.RULES}\n{table(rack_rows)}\n\n"
            f"{plot(outcomes, args.out)}\n")
    return text, [{
        "scenario": o.scenario.name, "allocation": o.allocation,
        "useful_allocation": o.useful_allocation, "stranded": o.stranded,
        "preempted": o.preempted, "not_started": o.unstarted,
        "delay": dict(zip(("p50", "p90", "p99"), summary(o.all_delays()), strict=True)),
        "tenants": {t: dict(zip(("p50", "p90", "p99"), summary(d), strict=True))
                    for t, d in o.delays.items()},
    } for o in outcomes] + [{"priorities": priority_entries}, {"elastic": elastic_entries},
                            {"racks": rack_entries}]


def main() -> int:
    args = arguments()
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        if args.no_study:
            study_section, entries = "Fragmentation study: skipped (--no-study)\n\n", {}
        else:
            results = run_study(args)
            study_section = (f"trace: {args.trace.name}\n\n"
                             f"{study_text(results, args.study, MODES)}"
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
