"""``python -m e2e.bench [--quick] [--out FILE]``: run the benchmarks and report them."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from e2e.bench import inprocess, onfleet
from e2e.bench.results import report


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m e2e.bench", description=__doc__)
    parser.add_argument("--out", default=".bench/results.jsonl")
    parser.add_argument("--quick", action="store_true", help="in-process benchmarks only")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--pending", type=int, default=10_000)
    args = parser.parse_args()
    results = inprocess.run()
    if not args.quick:
        with tempfile.TemporaryDirectory(prefix="fleet-bench-") as workdir:
            results += onfleet.run(Path(workdir), jobs=args.jobs, pending=args.pending)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    report(results, args.out)


if __name__ == "__main__":
    main()
