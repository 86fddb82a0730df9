"""Cluster views as they would be once some jobs are gone: each victim pod's request is
given back to the node it runs on. A pod whose node is unknown (not bound yet, or a node the
member's report leaves out or does not name) frees nothing here, so a plan never counts on
capacity it cannot point at."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from preemption.model import Pod
from propagation.resources import Resources
from propagation.views import ClusterView, NodeGroup


def with_freed(clusters: Sequence[ClusterView], pods: Iterable[Pod]) -> list[ClusterView]:
    by_cluster: dict[str, dict[str, Resources]] = {}
    for pod in pods:
        if pod.node:
            nodes = by_cluster.setdefault(pod.cluster, {})
            nodes[pod.node] = nodes.get(pod.node, Resources()) + pod.request
    return [_freed(c, by_cluster[c.name]) if c.name in by_cluster else c for c in clusters]


def _freed(cluster: ClusterView, freed: dict[str, Resources]) -> ClusterView:
    groups: list[NodeGroup] = []
    for group in cluster.node_groups:
        named = [n for n in group.nodes[: group.count] if n in freed]
        if not named:
            groups.append(group)
            continue
        rest = tuple(n for n in group.nodes if n not in freed)
        if group.count > len(named):
            groups.append(NodeGroup(group.count - len(named), group.free, group.labels, rest))
        groups.extend(NodeGroup(1, group.free + freed[n], group.labels, (n,)) for n in named)
    return replace(cluster, node_groups=tuple(groups))


def taken_between(before: ClusterView, after: ClusterView) -> list[Pod]:
    """What ``after`` took out of ``before``, node by node: the pods whose ``with_freed``
    gives it back. Nodes no group names are left out (their capacity is never freed)."""
    was, now = _named_free(before), _named_free(after)
    out: list[Pod] = []
    for node, free in now.items():
        gone = {name: amount for name, amount in (was.get(node, free) - free).items_
                if amount > 0}
        if gone:
            out.append(Pod(after.name, node, Resources.of(gone)))
    return out


def _named_free(cluster: ClusterView) -> dict[str, Resources]:
    return {n: g.free for g in cluster.node_groups for n in g.nodes[: g.count]}
