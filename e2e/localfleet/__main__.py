"""``python -m e2e.localfleet up|down|demo|status``: the local fleet from the command line.

up      start a hub and members (default member1, member2: 4 nodes x 8 GPUs each), the hub
        controller and one agent per member; kubeconfigs in .fleet/<cluster>.kubeconfig
down    stop every process and control plane that ``up`` started
demo    up, then apply the seed's gang policy and PyTorchJob and follow the job to Succeeded
status  show clusters, member capacity and jobs
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from e2e.localfleet import HUB, REPO, LocalFleet, progress
from e2e.localfleet.demo import run_demo
from e2e.localfleet.nodes import NodeShape


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.localfleet", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["up", "down", "demo", "status"])
    parser.add_argument("--workdir", type=Path, default=REPO / ".fleet")
    parser.add_argument("--members", type=int, default=2, help="number of members")
    parser.add_argument("--shape", action="append", default=[],
                        help="node shape for every member, e.g. 4x8 (repeatable); "
                             "or NAME=SHAPE for one member")
    args = parser.parse_args(argv)
    members: dict[str, list[NodeShape]] = {f"member{i + 1}": [] for i in range(args.members)}
    for text in args.shape:
        if "=" in text:
            name, shape = text.split("=", 1)
            members.setdefault(name, []).append(NodeShape.parse(shape))
        else:
            for shapes in members.values():
                shapes.append(NodeShape.parse(text))
    members = {name: shapes or [NodeShape(4, 8)] for name, shapes in members.items()}
    fleet = LocalFleet(args.workdir, members)
    started = time.monotonic()
    if args.command == "down":
        fleet.down()
        return 0
    if args.command == "status":
        from e2e.localfleet.demo import show_status

        show_status(fleet)
        return 0
    try:
        fleet.up()
    except RuntimeError as error:  # what failed and the log lines that say why; no traceback
        print(f"fleet {args.command}: {error}", file=sys.stderr)
        return 1
    if args.command == "demo":
        ok = run_demo(fleet)
        progress(f"demo {'succeeded' if ok else 'FAILED'} in {time.monotonic() - started:.1f}s "
                 f"(the fleet keeps running: `make down` stops it; KUBECONFIG="
                 f"{fleet.kubeconfig(HUB)} kubectl get pytorchjob)")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
