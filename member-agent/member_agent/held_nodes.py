"""Held nodes: the nodes a Work names are held for its job until the job's pods are bound.

The hub's node-aware division names the nodes each share was packed onto
(``spec.placement.nodes``). Between the Work's arrival and its pods being bound, those nodes
look free to anyone reading raw capacity; the agent therefore reports the share's unbound
replicas as taken (and names the Works it holds for), so no other decision spends them. The
hub trusts such a report for the whole share, so each unbound replica is held where the
member's scheduler can still put it: on the named node with the most room left after the pods
already bound (which need not be where the hub packed them), else on any node with room. A
replica held on a node its siblings already filled would leave another node looking free.

A reservation ends when every pod of the share has been bound once (``bound`` names those
Works; their pods then count as used, or are gone), when the Work goes, or after ``timeout``
seconds (a share that cannot start must not hold nodes forever). In reservation
mode (a Work with a phase) placeholder pods carry the job's uid, so they count as bound here:
what they hold is reported as used pods, not again as reserved.

Pure: Works, pods, the time the agent first saw each Work, and the clock come in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

from fleet.api.protocol import JOB_UID, work_phase
from fleet.kinds import adapter_for
from fleet.kinds.base import pod_request


@dataclass(frozen=True)
class HeldNodes:
    work: str
    nodes: tuple[str, ...]
    by_node: Mapping[str, Mapping[str, int]]  # node -> amounts held there


def share_replicas(work: Mapping[str, Any]) -> list[dict[str, int]]:
    """One request per replica of the Work's share."""
    manifest = work["spec"]["manifests"][0]
    adapter = adapter_for(manifest["apiVersion"], manifest["kind"])
    out: list[dict[str, int]] = []
    for role in adapter.roles(manifest):
        request = dict(pod_request(role.template).items())
        out += [request] * role.replicas
    return out


def held_nodes(works: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]],
                 room: Mapping[str, Mapping[str, int]], first_seen: Mapping[str, float],
                 now: float, timeout: float = 120.0,
                 bound: Set[str] = frozenset()) -> list[HeldNodes]:
    """What each Work holds for its unbound replicas; ``room`` is each schedulable node's
    free amounts after every bound pod (``capacity.node_free``)."""
    left = {node: dict(amounts) for node, amounts in room.items()}
    bound_by_job: dict[str, int] = {}
    for pod in pods:
        uid = (pod["metadata"].get("labels") or {}).get(JOB_UID)
        if uid and (pod.get("spec") or {}).get("nodeName") and \
                (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            bound_by_job[uid] = bound_by_job.get(uid, 0) + 1
    out = []
    for work in works:
        name = work["metadata"]["name"]
        nodes = tuple(work["spec"]["placement"].get("nodes") or ())
        if not nodes or work["metadata"].get("deletionTimestamp") or name in bound:
            continue
        if now - first_seen.get(name, now) > timeout:
            continue
        replicas = share_replicas(work)
        unbound = replicas[bound_by_job.get(work["spec"]["job"]["uid"], 0):]
        if not unbound:
            if work_phase(work):  # its placeholders hold every replica: they count as pods
                # in the report, and the Work is named so that the hub does not count it again
                out.append(HeldNodes(name, nodes, {}))
            continue
        held: dict[str, dict[str, int]] = {}
        for request in unbound:
            where = _place(request, nodes, left)
            node, free = held.setdefault(where, {}), left.setdefault(where, {})
            for resource, amount in request.items():
                node[resource] = node.get(resource, 0) + amount
                free[resource] = free.get(resource, 0) - amount
        out.append(HeldNodes(name, nodes, held))
    return out


def _place(request: Mapping[str, int], named: Sequence[str],
           left: Mapping[str, Mapping[str, int]]) -> str:
    """Where the member's scheduler can still put a replica asking ``request``: the named
    node with the most room for it, else any node with room, else (nothing fits: it waits
    for room) the named node with the most."""
    def headroom(node: str) -> float:
        free = left.get(node, {})
        return min(((free.get(k, 0) - v) / v for k, v in request.items() if v > 0),
                   default=0.0)
    candidates = [n for n in named if n in left]
    fitting = [n for n in candidates if headroom(n) >= 0] or \
        [n for n in sorted(left) if headroom(n) >= 0] or candidates or list(named)
    return max(fitting, key=headroom)  # the first of equals: named order, then by name


def held_on_nodes(held: Sequence[HeldNodes]) -> dict[str, dict[str, int]]:
    """node -> total amounts reserved there."""
    total: dict[str, dict[str, int]] = {}
    for reservation in held:
        for node, amounts in reservation.by_node.items():
            bucket = total.setdefault(node, {})
            for resource, amount in amounts.items():
                bucket[resource] = bucket.get(resource, 0) + amount
    return total
