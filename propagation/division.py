"""Gang division: all replicas of a job on the fewest clusters that fit them, or none.

Order of preference (DESIGN.md §4): one cluster if any fits the whole gang, the one it fits
most tightly in the scarcest resource; otherwise, when the policy allows a split, the fewest
clusters taken largest-capacity first, the leader (master, launcher, chief) in the cluster that
takes the largest share. Ties break by cluster name, so equal inputs give equal decisions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from propagation.clusters import filter_clusters
from propagation.fit import Packing, Replica, expand, pack, pack_summed
from propagation.resources import Resources, scarcity_order
from propagation.views import ClusterView, FitMode, JobDemand, NodeGroup, PlacementRules


@dataclass(frozen=True)
class ClusterShare:
    cluster: str
    replicas: tuple[tuple[str, int], ...]  # role -> count, in the job's role order
    offsets: tuple[tuple[str, int], ...]  # role -> index of this cluster's first replica
    nodes: tuple[str, ...] = ()  # nodes the share was packed onto (when known)


@dataclass(frozen=True)
class Decision:
    shares: tuple[ClusterShare, ...]  # empty when the job cannot be placed now
    reason: str

    @property
    def placed(self) -> bool:
        return bool(self.shares)


def _pack(cluster: ClusterView, replicas: Sequence[Replica], mode: FitMode) -> Packing:
    if mode is FitMode.SUMMED:
        return pack_summed(replicas, cluster.free)
    return pack(replicas, cluster.node_groups)


def _explain(job: JobDemand, cluster: ClusterView, packing: Packing, mode: FitMode) -> str:
    missing = packing.unplaced[0]
    if mode is FitMode.SUMMED:
        short = job.total.shortfall(cluster.free)
        return f"{cluster.name}: short of {_fmt(short)} in total"
    scarce = scarcity_order(missing.request)[0] if missing.request else "cpu"
    return (f"{cluster.name}: {len(packing.unplaced)} of {job.replicas} replicas find no node "
            f"with room ({missing.role} needs {scarce} {missing.request.get(scarce, 0)} "
            f"on one node)")


def _fmt(amounts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(amounts.items()))


def _share(job: JobDemand, cluster: str, placed: Sequence[tuple[Replica, str]],
           offsets: dict[str, int]) -> ClusterShare:
    counts = {role.name: 0 for role in job.roles}
    for replica, _ in placed:
        counts[replica.role] += 1
    here = tuple((name, count) for name, count in counts.items() if count)
    starts = tuple((name, offsets.get(name, 0)) for name, count in counts.items() if count)
    for name, count in here:
        offsets[name] = offsets.get(name, 0) + count
    nodes = tuple(sorted({node for _, node in placed if node}))
    return ClusterShare(cluster, here, starts, nodes)


def _scarcest_left(job: JobDemand, packing: Packing) -> tuple[int, ...]:
    return tuple(packing.leftover.get(name, 0) for name in scarcity_order(job.total))


def divide(job: JobDemand, clusters: Sequence[ClusterView], rules: PlacementRules) -> Decision:
    """Decide where every replica of ``job`` runs, or say why it cannot run now."""
    filtered = filter_clusters(clusters, rules.affinity, rules.tolerations)
    rejected = [f"{name}: {why}" for name, why in filtered.rejected]
    if not filtered.eligible:
        detail = f" ({'; '.join(rejected)})" if rejected else ""
        return Decision((), f"no eligible cluster{detail}")
    replicas = expand(job.roles)

    fitting: list[tuple[tuple[int, ...], str, Packing]] = []
    for cluster in filtered.eligible:
        packing = _pack(cluster, replicas, rules.fit_mode)
        if packing.unplaced:
            rejected.append(_explain(job, cluster, packing, rules.fit_mode))
        else:
            fitting.append((_scarcest_left(job, packing), cluster.name, packing))
    if fitting:
        _, name, packing = min(fitting, key=lambda f: (f[0], f[1]))
        share = _share(job, name, packing.placed, {})
        return Decision((share,), f"fits {name}")

    if rules.max_clusters > 1 and rules.gang:
        split = _split(job, replicas, filtered.eligible, rules)
        if split:
            return Decision(split, f"split across {len(split)} clusters")
        rejected.append(f"no split over at most {rules.max_clusters} clusters fits")
    return Decision((), "; ".join(rejected))


def _split(job: JobDemand, replicas: list[Replica], clusters: Sequence[ClusterView],
           rules: PlacementRules) -> tuple[ClusterShare, ...]:
    """Fewest clusters, largest capacity first; all replicas placed or nothing."""
    capacity = sorted(
        clusters,
        key=lambda c: (-len(_pack(c, replicas, rules.fit_mode).placed), c.name),
    )
    remaining = replicas
    shares: list[ClusterShare] = []
    offsets: dict[str, int] = {}
    for cluster in capacity[: rules.max_clusters]:
        packing = _pack(cluster, remaining, rules.fit_mode)
        if not packing.placed:
            continue
        shares.append(_share(job, cluster.name, packing.placed, offsets))
        remaining = list(packing.unplaced)
        if not remaining:
            return tuple(shares)
    return ()


def with_assumed(cluster: ClusterView, assumed: Sequence[Resources]) -> ClusterView:
    """``cluster`` with capacity the hub has bound but the member has not reported yet
    taken out, so that two decisions never spend the same GPU. Each assumed request is
    removed from the nodes it fits best, as the member's scheduler would place it."""
    if not assumed:
        return cluster
    groups = list(cluster.node_groups)
    for request in assumed:
        groups = _subtract(groups, request)
    return ClusterView(cluster.name, cluster.ready, cluster.labels, cluster.taints,
                       tuple(groups), cluster.not_ready_reason)


def _subtract(groups: list[NodeGroup], request: Resources) -> list[NodeGroup]:
    scarce = scarcity_order(request)
    candidates = [(tuple(g.free.get(n, 0) - request.get(n, 0) for n in scarce), i)
                  for i, g in enumerate(groups) if request.fits_in(g.free)]
    if not candidates:
        return groups
    _, index = min(candidates)
    group = groups[index]
    rest = [] if group.count == 1 else [NodeGroup(group.count - 1, group.free, group.labels,
                                                  group.nodes[1:])]
    taken = NodeGroup(1, group.free - request, group.labels, group.nodes[:1])
    return [*groups[:index], *rest, taken, *groups[index + 1:]]
