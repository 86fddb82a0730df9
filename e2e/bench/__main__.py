"""``python -m e2e.bench [--quick] [--short] [--only inprocess|onfleet|scale|kueue] [--out FILE]``:
run the benchmarks and report them. ``--short`` runs every part at small sizes: CI's lane,
which fails when a benchmark breaks, never on a figure."""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from e2e.bench import inprocess, kueue, onfleet, passes, scale
from e2e.bench.results import Result, report

PARTS = ("inprocess", "onfleet", "scale", "kueue")


def main() -> None:
    # Told to stop (a CI timeout, `timeout`), a part unwinds as after Ctrl-C: its fleet and
    # Kueue's API servers are torn down, not left running.
    signal.signal(signal.SIGTERM, _interrupted)
    parser = argparse.ArgumentParser(prog="python -m e2e.bench", description=__doc__)
    parser.add_argument("--out", default=".bench/results.jsonl")
    parser.add_argument("--quick", action="store_true", help="in-process benchmarks only")
    parser.add_argument("--short", action="store_true",
                        help="every part at small sizes (CI's lane; figures mean nothing)")
    parser.add_argument("--only", choices=PARTS, action="append",
                        help="run only this part (repeatable)")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--onfleet-phases", default=",".join(onfleet.PHASES),
                        help="the on-fleet phases to run, comma-separated: "
                        + ", ".join(onfleet.PHASES))
    parser.add_argument("--latency-jobs", type=int, default=100)
    parser.add_argument("--scale-members", type=int, default=100)
    parser.add_argument("--scale-nodes", type=int, default=200)
    parser.add_argument("--scale-jobs", type=int, default=10_000)
    parser.add_argument("--scale-seconds", type=float, default=900.0,
                        help="the longest the scale bench waits for every job to be bound")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep each part's fleet (logs, kubeconfigs) under this folder "
                        "instead of a temporary one removed at the end")
    parser.add_argument("--kueue-config", default="baseline",
                        help="which of Kueue's scheduler test configurations (its folder name)")
    parser.add_argument("--kueue-scale", type=float, default=1.0,
                        help="every workload set's count times this")
    parser.add_argument("--kueue-variants", default="minimalkueue-unlimited",
                        help="Kueue's schedulers to run, comma-separated, the first the "
                        "baseline: minimalkueue-unlimited (no client rate limit, as fleet's "
                        "hub), minimalkueue (50 QPS / burst 100, as shipped)")
    args = parser.parse_args()
    if args.short:
        args.jobs, args.pending, args.latency_jobs = 30, 300, 10
        args.scale_members, args.scale_nodes, args.scale_jobs = 5, 20, 100
        args.scale_seconds = min(args.scale_seconds, 300.0)
        args.kueue_scale = min(args.kueue_scale, 0.02)
    parts = set(args.only or (("inprocess",) if args.quick else PARTS))
    results: list[Result] = []
    if "inprocess" in parts:
        results += inprocess.run(short=args.short)
        print(f"[bench] scheduling pass in process, {args.scale_members} members x "
              f"{args.scale_nodes} nodes, {args.scale_jobs:,} jobs", flush=True)
        results += passes.pass_latency(args.scale_members, args.scale_nodes, args.scale_jobs,
                                       passes=4 if args.short else 20,
                                       first_look=8 if args.short else 64)
    if "onfleet" in parts:
        with workdir_for(args.workdir, "onfleet") as workdir:
            phases = tuple(p for p in args.onfleet_phases.split(",") if p)
            if unknown := set(phases) - set(onfleet.PHASES):
                parser.error(f"--onfleet-phases: no phase {', '.join(sorted(unknown))}")
            results += onfleet.run(Path(workdir), jobs=args.jobs, pending=args.pending,
                                   phases=phases, latency_jobs=args.latency_jobs)
    if "scale" in parts:
        with workdir_for(args.workdir, "scale") as workdir:
            results += scale.run(Path(workdir), members=args.scale_members,
                                 nodes=args.scale_nodes, jobs=args.scale_jobs,
                                 limit=args.scale_seconds)
    if "kueue" in parts:
        with workdir_for(args.workdir, "kueue") as workdir:
            variants = tuple(v for v in args.kueue_variants.split(",") if v)
            results += kueue.run(Path(workdir), config_name=args.kueue_config,
                                 scale=args.kueue_scale, variants=variants)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    report(results, args.out)


def _interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def workdir_for(kept: Path | None, part: str) -> Iterator[str]:
    """A part's working folder: under ``kept`` (left for reading its logs) or temporary."""
    if kept is None:
        with tempfile.TemporaryDirectory(prefix=f"fleet-{part}-") as workdir:
            yield workdir
        return
    folder = kept / part
    folder.mkdir(parents=True, exist_ok=True)
    with held(folder / ".lock"):
        yield str(folder)


@contextmanager
def held(path: Path) -> Iterator[None]:
    """``path`` locked for this process: a second bench in the same folder stops at once.
    (Two once ran in one: the first's teardown deleted the second's clusters, and left an
    API server of its own running.) The kernel drops the lock when the holder dies, even
    when killed, so no stale lock is ever left to clear by hand."""
    with open(path, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise SystemExit(f"{path.parent} is in use by a bench still running "
                             f"(pid {holder}); wait for it, or give --workdir another folder"
                             ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        yield


if __name__ == "__main__":
    main()
