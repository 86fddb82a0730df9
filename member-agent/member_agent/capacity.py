"""Free capacity of a member, per node, grouped by shape: a pure function of nodes and pods.

A node's free amount is its allocatable minus the requests of every pod bound to it that has
not terminated, fleet's or not. Unschedulable nodes and nodes with a NoSchedule/NoExecute
taint are left out. Nodes with the same free and allocatable amounts, the same GPU labels and
the same topology domain (the values of the member's topology levels above the node: block,
rack) form one group with a count, so a report stays small however many nodes a member has,
and the hub can pack a gang within one rack. Free
cpu and memory are rounded down (to a core, to a GiB) before grouping: otherwise every busy
node's odd remainder makes a group of its own, and rounding down never promises the hub more
than there is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleet.api.protocol import (
    DEFAULT_TOPOLOGY_LEVELS,
    HOSTNAME_LEVEL,
    MAX_TOPOLOGY_GROUPS,
    REPORTED_NODE_LABELS,
)
from fleet.api.quantity import canonical
from fleet.kinds.base import pod_request

TERMINATED = ("Succeeded", "Failed")
REPORTED = ("cpu", "memory", "nvidia.com/gpu", "pods")
QUANTUM = {"cpu": 1000, "memory": 2**30, "ephemeral-storage": 2**30}  # canonical units


@dataclass(frozen=True)
class Group:
    count: int
    allocatable: dict[str, int]
    free: dict[str, int]
    labels: dict[str, str]
    nodes: list[str]


def _schedulable(node: Mapping[str, Any]) -> bool:
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    if any(t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or []):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def node_free(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]],
              reserved: Mapping[str, Mapping[str, int]] | None = None
              ) -> dict[str, tuple[dict[str, int], dict[str, int]]]:
    """node name -> (allocatable, free) for every schedulable node, in canonical units;
    ``reserved`` amounts (held for Works whose pods are not bound yet) count as used."""
    used: dict[str, dict[str, int]] = {
        node: dict(amounts) for node, amounts in (reserved or {}).items()}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in TERMINATED:
            continue
        bucket = used.setdefault(node, {})
        bucket["pods"] = bucket.get("pods", 0) + 1
        for name, amount in pod_request(pod).items():
            bucket[name] = bucket.get(name, 0) + amount
    out: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
    for node in nodes:
        if not _schedulable(node):
            continue
        name = node["metadata"]["name"]
        allocatable = {k: canonical(k, v)
                       for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()
                       if k in REPORTED or "/" in k}
        taken = used.get(name, {})
        out[name] = (allocatable, {k: v - taken.get(k, 0) for k, v in allocatable.items()})
    return out


def _round_down(amount: int, quantum: int) -> int:
    return max(0, amount) // quantum * quantum


# A topology splits every shape by domain (a rack of 40 nodes is its own few groups): the bound
# on groups grows with the domains (to MAX_TOPOLOGY_GROUPS at most), and the node names a
# report carries are shared out so that it holds NAME_BUDGET names at most.
GROUPS_PER_DOMAIN = 10
NAME_BUDGET = 256 * 64  # as many as a report without topology carries at most


def group_nodes(nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]],
                *, name_limit: int = 64, max_groups: int = 256,
                reserved: Mapping[str, Mapping[str, int]] | None = None,
                topology_levels: Sequence[str] = DEFAULT_TOPOLOGY_LEVELS) -> list[Group]:
    """Nodes grouped by shape and topology domain (see ``grouped``)."""
    return grouped(nodes, pods, name_limit=name_limit, max_groups=max_groups,
                   reserved=reserved, topology_levels=topology_levels)[0]


def grouped(nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]],
            *, name_limit: int = 64, max_groups: int = 256,
            reserved: Mapping[str, Mapping[str, int]] | None = None,
            topology_levels: Sequence[str] = DEFAULT_TOPOLOGY_LEVELS
            ) -> tuple[list[Group], tuple[str, ...]]:
    """Nodes grouped by shape and topology domain, and the topology levels the groups keep.

    Past the bound on groups (``max_groups``, or ``GROUPS_PER_DOMAIN`` per domain of the
    lowest level when that is more, up to ``MAX_TOPOLOGY_GROUPS``) the cpu and memory quanta
    double until the groups fit: a busy 5,000-node member still reports a few hundred groups,
    each a little less free than it may be, never more. Device counts (GPUs) are always
    exact. When even that leaves too many groups, the lowest topology level is dropped (the
    member no longer reports it, so the hub places no gang that requires it there). The
    hostname level is never a group label (every node would be a group of its own): the hub
    takes a named node of a group as a domain of that level."""
    levels = [level for level in topology_levels if level != HOSTNAME_LEVEL]
    hostname = (HOSTNAME_LEVEL,) if HOSTNAME_LEVEL in topology_levels else ()
    free_by_node = sorted(node_free(nodes, pods, reserved).items())
    while True:
        kept = {*REPORTED_NODE_LABELS, *levels}
        labels_of = {
            n["metadata"]["name"]: {k: v for k, v in (n["metadata"].get("labels") or {}).items()
                                    if k in kept}
            for n in nodes
        }
        domains = len({tuple(labels.get(level) for level in levels)
                       for labels in labels_of.values()}) if levels else 0
        limit = max(max_groups, min(MAX_TOPOLOGY_GROUPS, GROUPS_PER_DOMAIN * domains))
        groups = _coarsened(free_by_node, labels_of, limit, name_limit)
        if len(groups) <= limit or not levels:
            names = max(1, min(name_limit, NAME_BUDGET // max(1, len(groups))))
            return ([Group(g.count, g.allocatable, g.free, g.labels, g.nodes[:names])
                     for g in groups], (*levels, *hostname))
        levels = levels[:-1]


def _coarsened(free_by_node: Sequence[tuple[str, tuple[dict[str, int], dict[str, int]]]],
               labels_of: Mapping[str, dict[str, str]], limit: int, name_limit: int
               ) -> list[Group]:
    """Groups within ``limit`` by doubling the cpu and memory quanta (until it no longer
    helps)."""
    scale, last = 1, -1
    while True:
        groups = _group(free_by_node, labels_of, scale, name_limit)
        if len(groups) <= limit or scale >= 1024 or len(groups) == last:
            return sorted(groups.values(), key=lambda g: (-g.count, sorted(g.free.items()),
                                                          sorted(g.labels.items())))
        last = len(groups)
        scale *= 2


def _group(free_by_node: Sequence[tuple[str, tuple[dict[str, int], dict[str, int]]]],
           labels_of: Mapping[str, dict[str, str]], scale: int, name_limit: int
           ) -> dict[tuple[object, ...], Group]:
    groups: dict[tuple[object, ...], Group] = {}
    for name, (allocatable, exact) in free_by_node:
        free = {k: _round_down(v, QUANTUM.get(k, 1) * (scale if k in QUANTUM else 1))
                for k, v in exact.items()}
        labels = labels_of.get(name, {})
        key = (tuple(sorted(allocatable.items())), tuple(sorted(free.items())),
               tuple(sorted(labels.items())))
        group = groups.get(key)
        if group is None:
            groups[key] = Group(1, allocatable, free, labels, [name])
        else:
            names = [*group.nodes, name] if len(group.nodes) < name_limit else group.nodes
            groups[key] = Group(group.count + 1, allocatable, free, labels, names)
    return groups


def wire(groups: Sequence[Group]) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """The groups as a report carries them: each distinct set of labels once (a rack's
    labels are shared by all its groups), and each group with the index of its set."""
    sets: dict[tuple[tuple[str, str], ...], int] = {}
    out = []
    for group in groups:
        entry: dict[str, Any] = {"count": group.count, "allocatable": group.allocatable,
                                 "free": group.free, "nodes": group.nodes}
        if group.labels:
            entry["labelSet"] = sets.setdefault(tuple(sorted(group.labels.items())), len(sets))
        out.append(entry)
    return [dict(labels) for labels in sets], out


def totals(groups: Sequence[Group]) -> tuple[dict[str, int], dict[str, int]]:
    allocatable: dict[str, int] = {}
    free: dict[str, int] = {}
    for group in groups:
        for k, v in group.allocatable.items():
            allocatable[k] = allocatable.get(k, 0) + v * group.count
        for k, v in group.free.items():
            free[k] = free.get(k, 0) + v * group.count
    return allocatable, free
