"""Which member clusters a policy lets a job use: affinity, taints and readiness."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

from propagation.views import Affinity, ClusterView, Toleration

SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class Filtered:
    eligible: tuple[ClusterView, ...]
    rejected: tuple[tuple[str, str], ...]  # cluster name, reason


def affinity_mismatch(cluster: ClusterView, affinity: Affinity) -> str:
    """Why ``cluster`` fails ``affinity``; empty when it satisfies it."""
    if not (affinity.cluster_names or affinity.exclude or affinity.match_labels
            or affinity.match_expressions):
        return ""  # the common case: a policy without cluster affinity
    if affinity.cluster_names and cluster.name not in affinity.cluster_names:
        return "not in clusterAffinity.clusterNames"
    if cluster.name in affinity.exclude:
        return "excluded by clusterAffinity.exclude"
    labels = dict(cluster.labels)
    for key, value in affinity.match_labels:
        if labels.get(key) != value:
            return f"label {key}={value} required by clusterAffinity.labelSelector"
    for key, operator, values in affinity.match_expressions:
        present = key in labels
        ok = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }.get(operator, False)
        if not ok:
            return (f"label {key} {operator} {list(values)} required by "
                    "clusterAffinity.labelSelector")
    return ""


def untolerated_taint(cluster: ClusterView, tolerations: Sequence[Toleration]) -> str:
    for taint in cluster.taints:
        if taint.effect not in SCHEDULING_EFFECTS:
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            return f"taint {taint.key}={taint.value}:{taint.effect} not tolerated"
    return ""


def filter_clusters(
    clusters: Sequence[ClusterView], affinity: Affinity, tolerations: Sequence[Toleration]
) -> Filtered:
    eligible: list[ClusterView] = []
    rejected: list[tuple[str, str]] = []
    for cluster in sorted(clusters, key=attrgetter("name")):
        reason = (
            ("" if cluster.ready else (cluster.not_ready_reason or "not ready"))
            or cluster.stale_reason
            or affinity_mismatch(cluster, affinity)
            or (untolerated_taint(cluster, tolerations) if cluster.taints else "")
        )
        if reason:
            rejected.append((cluster.name, reason))
        else:
            eligible.append(cluster)
    return Filtered(tuple(eligible), tuple(rejected))
