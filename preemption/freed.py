"""Cluster views as they would be once some jobs are gone: each victim pod's request is
given back to the node it runs on. A pod whose node is unknown (not bound yet, or a node the
member's report leaves out or does not name) frees nothing here, so a plan never counts on
capacity it cannot point at."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

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
    return ClusterView(cluster.name, cluster.ready, cluster.labels, cluster.taints,
                       tuple(groups), cluster.not_ready_reason, cluster.stale_reason,
                       cluster.reservation)

