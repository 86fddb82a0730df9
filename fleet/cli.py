"""``kubectl fleet``: the multi-cluster view of the hub, and member onboarding.

    kubectl fleet get pytorchjob -M [-n NS] [NAME]   NAME, CLUSTER, STATE, AGE, ADOPTION
    kubectl fleet get pod -M [-n NS]                  NAME, CLUSTER, READY, STATUS, RESTARTS, AGE
    kubectl fleet join NAME --member-kubeconfig F     registers the member, installs its agent
    kubectl fleet unjoin NAME [--member-kubeconfig F] removes both

Rows come from what the agents report in their Works, so they show each member's truth even
when the member itself is out of reach. Installed as ``kubectl-fleet``, kubectl finds it as a
plugin; ``python -m fleet.cli`` works too.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleet import deploy, onboarding
from fleet.clients import resources as r
from fleet.clients.kube import Kube

KINDS = {
    "pytorchjob": r.PYTORCHJOBS, "pytorchjobs": r.PYTORCHJOBS,
    "tfjob": r.TFJOBS, "tfjobs": r.TFJOBS,
    "mpijob": r.KUBEFLOW_MPIJOBS, "mpijobs": r.KUBEFLOW_MPIJOBS,
    "mpijob.batch.tensorstack.dev": r.T9K_MPIJOBS, "mj": r.T9K_MPIJOBS,
    "tensorflowtrainingjob": r.TENSORFLOWTRAININGJOBS, "tfj": r.TENSORFLOWTRAININGJOBS,
}


def age(stamp: str | None, now: datetime) -> str:
    """kubectl's coarse age: seconds, then minutes, hours, days."""
    if not stamp:
        return "<unknown>"
    seconds = int((now - datetime.fromisoformat(stamp.replace("Z", "+00:00"))).total_seconds())
    for unit, size, below in (("s", 1, 120), ("m", 60, 7200), ("h", 3600, 172800)):
        if seconds < below:
            return f"{seconds // size}{unit}"
    return f"{seconds // 86400}d"


def table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


def works_by_job(hub: Kube) -> dict[str, list[dict[str, Any]]]:
    works, _ = hub.list(r.WORKS)
    out: dict[str, list[dict[str, Any]]] = {}
    for work in works:
        out.setdefault(work["spec"]["job"]["uid"], []).append(work)
    return out


def get_jobs(hub: Kube, resource: r.Resource, namespace: str | None, name: str | None,
             now: datetime) -> list[list[str]]:
    jobs, _ = hub.list(resource, namespace)
    works = works_by_job(hub)
    rows = [["NAME", "CLUSTER", "STATE", "AGE", "ADOPTION"]]
    for job in sorted(jobs, key=lambda j: j["metadata"]["name"]):
        meta = job["metadata"]
        if name and meta["name"] != name:
            continue
        for work in sorted(works.get(meta["uid"], []),
                           key=lambda w: w["spec"]["placement"]["cluster"]):
            status = work.get("status") or {}
            rows.append([meta["name"], work["spec"]["placement"]["cluster"],
                         status.get("state") or "Pending", age(meta.get("creationTimestamp"), now),
                         "Y" if status.get("applied") else "N"])
    return rows


def get_pods(hub: Kube, namespace: str | None, now: datetime) -> list[list[str]]:
    rows = [["NAME", "CLUSTER", "READY", "STATUS", "RESTARTS", "AGE"]]
    works, _ = hub.list(r.WORKS)
    for work in sorted(works, key=lambda w: w["spec"]["placement"]["cluster"]):
        if namespace and work["spec"]["job"]["namespace"] != namespace:
            continue
        for pod in (work.get("status") or {}).get("pods") or []:
            rows.append([pod["name"], work["spec"]["placement"]["cluster"],
                         "1/1" if pod.get("ready") else "0/1",
                         _status(pod), str(pod.get("restarts", 0)),
                         age(pod.get("startTime"), now)])
    return rows


def _status(pod: dict[str, Any]) -> str:
    phase = str(pod.get("phase") or "Pending")
    return {"Succeeded": "Completed", "Failed": "Error"}.get(phase, phase)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kubectl fleet", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    sub = parser.add_subparsers(dest="command", required=True)
    get = sub.add_parser("get", help="list jobs or pods across member clusters")
    get.add_argument("kind")
    get.add_argument("name", nargs="?")
    get.add_argument("-M", "--multi-cluster", action="store_true",
                     help="one row per member cluster (the only view; kept for ACK One users)")
    get.add_argument("-n", "--namespace")
    get.add_argument("-A", "--all-namespaces", action="store_true")
    join = sub.add_parser("join", help="register a member cluster")
    join.add_argument("name")
    join.add_argument("--member-kubeconfig", required=True)
    join.add_argument("--agent-kubeconfig-out", default=None,
                      help="also write the agent's hub kubeconfig to this file")
    join.add_argument("--agent-image", default=deploy.IMAGE)
    join.add_argument("--agent-node-selector", default="",
                      help="key=value[,key=value]: nodes the agent DaemonSet runs on")
    join.add_argument("--no-agent", action="store_true",
                      help="register only; run the agent yourself")
    unjoin = sub.add_parser("unjoin", help="remove a member cluster")
    unjoin.add_argument("name")
    unjoin.add_argument("--member-kubeconfig", default=None,
                        help="also remove the agent from the member")
    args = parser.parse_args(argv)
    if not args.kubeconfig:
        parser.error("set --kubeconfig or KUBECONFIG to the hub's kubeconfig")
    hub = Kube(args.kubeconfig)
    now = datetime.now(UTC)
    if args.command == "get":
        namespace = None if args.all_namespaces else (args.namespace or "default")
        kind = args.kind.lower()
        if kind in ("pod", "pods", "po"):
            rows = get_pods(hub, namespace, now)
        elif kind in KINDS:
            rows = get_jobs(hub, KINDS[kind], namespace, args.name, now)
        else:
            parser.error(f"unknown kind {args.kind!r}; one of pod, {', '.join(sorted(KINDS))}")
        print(table(rows))
        return 0
    if args.command == "join":
        member = Kube(args.member_kubeconfig)
        text = onboarding.join(hub, member, args.name, hub_kubeconfig=Path(args.kubeconfig))
        if args.agent_kubeconfig_out:
            out = Path(args.agent_kubeconfig_out)
            out.write_text(text)
            out.chmod(0o600)
        if not args.no_agent:
            selector = dict(kv.split("=", 1) for kv in args.agent_node_selector.split(",") if kv)
            onboarding.install_agent(member, args.name, text, image=args.agent_image,
                                     node_selector=selector or None)
        print(f"member {args.name} joined" + ("" if args.no_agent else
                                              f"; agent DaemonSet {deploy.NAMESPACE}/fleet-agent "
                                              "installed on it"))
        return 0
    if args.member_kubeconfig:
        onboarding.uninstall_agent(Kube(args.member_kubeconfig))
    onboarding.unjoin(hub, args.name)
    print(f"member {args.name} removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
