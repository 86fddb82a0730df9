"""Gang division: all replicas of a job on the fewest clusters that fit them, or none.

Order of preference (docs/concepts/placement.md): one cluster if any fits the whole gang, the
one it fits most tightly in the scarcest resource; otherwise, when the policy allows a split,
the fewest clusters taken largest-capacity first, the leader (master, launcher, chief) in the
cluster that takes the largest share. Ties break by cluster name, so equal inputs give equal
decisions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from propagation.clusters import affinity_mismatch, filter_clusters
from propagation.fit import Packing, Replica, admitted, expand, pack, pack_summed
from propagation.resources import Resources, scarcity_order
from propagation.spent import with_assumed
from propagation.topology import domain_text, place, place_roles
from propagation.views import (
    HOSTNAME_LEVEL,
    ClusterView,
    DivisionPreference,
    FitMode,
    JobDemand,
    NodeGroup,
    PlacementRules,
    Role,
    SchedulingType,
    TopologyRequest,
)


@dataclass(frozen=True, slots=True)
class ClusterShare:
    cluster: str
    replicas: tuple[tuple[str, int], ...]  # role -> count, in the job's role order
    offsets: tuple[tuple[str, int], ...]  # role -> index of this cluster's first replica
    nodes: tuple[str, ...] = ()  # nodes the share was packed onto (when known)
    copy: bool = False  # Duplicated: a whole, independent copy of the job
    # The topology domains the share keeps to (each its node labels, top level first): one
    # for a required topology; the agent pins the share's pods there.
    domains: tuple[tuple[tuple[str, str], ...], ...] = ()
    # Per role that asks for a topology of its own: the domains its pods are pinned to.
    role_domains: tuple[tuple[str, tuple[tuple[tuple[str, str], ...], ...]], ...] = ()
    # The nodes of this cluster its tenant's guarantee owns (``quota.cells``), which its pods
    # prefer; set by the planner when it binds, not by division.
    cells: tuple[str, ...] = ()

    def domains_of(self, role: str) -> tuple[tuple[tuple[str, str], ...], ...]:
        """The topology domains ``role``'s pods keep to: the role's own, else the share's."""
        return dict(self.role_domains).get(role, self.domains)


@dataclass(frozen=True)
class Decision:
    shares: tuple[ClusterShare, ...]  # empty when the job cannot be placed now
    reason: str

    @property
    def placed(self) -> bool:
        return bool(self.shares)


MEMO_SIZE = 256  # packings remembered per cluster view (a few per job shape)


def _pack(cluster: ClusterView, replicas: Sequence[Replica], mode: FitMode,
          topology: TopologyRequest | None = None) -> Packing:
    """``replicas`` packed into ``cluster``, remembered on the (frozen) view. A topology
    request (the job's, or its roles') packs node by node within its domains, whatever the
    mode."""
    key = (mode, topology, *replicas) if topology is not None else (mode, *replicas)
    memo = cluster.packings
    packing = memo.get(key)
    if isinstance(packing, Packing):
        return packing
    if topology is not None:
        packing = place(cluster, replicas, topology)
    elif any(replica.topology is not None for replica in replicas):
        packing = place_roles(cluster, replicas)
    elif mode is FitMode.SUMMED:
        packing = pack_summed(replicas, cluster.free, cluster.node_groups)
    else:
        packing = pack(replicas, cluster.node_groups, cluster.free)
    if len(memo) >= MEMO_SIZE:
        memo.clear()
    memo[key] = packing
    return packing


def _may_hold(cluster: ClusterView, replicas: Sequence[Replica]) -> bool:
    """A necessary condition for node-aware packing, far cheaper than packing: for each
    distinct request, the cluster's nodes have room for as many replicas of it on their own
    (exact when all replicas ask alike; replicas with node requirements are left to the
    packing)."""
    wanted: dict[Resources, int] = {}
    for replica in replicas:
        if replica.requirements:
            return True
        wanted[replica.request] = wanted.get(replica.request, 0) + 1
    memo = cluster.packings
    for request, count in wanted.items():
        key = ("slots", request)
        slots = memo.get(key)
        if not isinstance(slots, int):
            slots = memo[key] = _slots(cluster, request)
        if slots < count:
            return False
    return True


def _slots(cluster: ClusterView, request: Resources) -> int:
    """How many replicas asking for ``request`` the cluster's nodes hold, one node each."""
    asked = [(name, amount) for name, amount in request.items_ if amount > 0]
    if not asked:
        return 1 << 62
    total = 0
    for group in cluster.node_groups:
        free = dict(group.free.items_)
        total += group.count * min(free.get(name, 0) // amount for name, amount in asked)
    return total


def _explain(job: JobDemand, cluster: ClusterView, packing: Packing, mode: FitMode) -> str:
    missing = packing.unplaced[0]
    if job.topology is not None:
        return _explain_topology(job, job.topology, cluster, packing)
    if missing.topology is not None:
        return _explain_role_topology(job, missing, cluster, packing)
    if missing.requirements and not admitted(cluster.node_groups, missing.requirements):
        wanted = ", ".join(str(r) for r in missing.requirements)
        return f"{cluster.name}: no node with {wanted} ({missing.role} requires it)"
    if mode is FitMode.SUMMED:
        if missing.requirements:
            wanted = ", ".join(str(r) for r in missing.requirements)
            return (f"{cluster.name}: {len(packing.unplaced)} of {job.replicas} replicas "
                    f"exceed the summed free capacity of the nodes with {wanted}")
        short = job.total.shortfall(cluster.free)
        return f"{cluster.name}: short of {_fmt(short)} in total"
    scarce = scarcity_order(missing.request)[0] if missing.request else "cpu"
    return (f"{cluster.name}: {len(packing.unplaced)} of {job.replicas} replicas find no node "
            f"with room ({missing.role} needs {scarce} {missing.request.get(scarce, 0)} "
            f"on one node)")


def _explain_topology(job: JobDemand, topology: TopologyRequest, cluster: ClusterView,
                      packing: Packing) -> str:
    level = topology.level
    if level not in cluster.topology_levels:
        return f"{cluster.name}: reports no topology level {level} ({topology})"
    if topology.required:
        fullest = (f"; the fullest, {domain_text(packing.domains[0])}, holds "
                   f"{len(packing.placed)}") if packing.domains else ""
        return (f"{cluster.name}: no {level} domain holds all {job.replicas} replicas "
                f"({topology}{fullest})")
    return (f"{cluster.name}: {len(packing.unplaced)} of {job.replicas} replicas find no node "
            f"with room in any {level} domain ({topology})")


def _explain_role_topology(job: JobDemand, missing: Replica, cluster: ClusterView,
                           packing: Packing) -> str:
    topology = missing.topology
    assert topology is not None
    level, role = topology.level, missing.role
    if level not in cluster.topology_levels:
        return f"{cluster.name}: reports no topology level {level} ({topology} of {role})"
    wanted = next(r.replicas for r in job.roles if r.name == role)
    if topology.required:
        domains = dict(packing.role_domains).get(role, ())
        held = sum(1 for replica, _ in packing.placed if replica.role == role)
        fullest = f"; the fullest, {domain_text(domains[0])}, holds {held}" if domains else ""
        return (f"{cluster.name}: no {level} domain holds all {wanted} {role} replicas "
                f"({topology} of {role}{fullest})")
    short = sum(1 for replica in packing.unplaced if replica.role == role)
    return (f"{cluster.name}: {short} of {wanted} {role} replicas find no node with room in "
            f"any {level} domain ({topology} of {role})")


def _fmt(amounts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(amounts.items()))


def _share(job: JobDemand, cluster: str, placed: Sequence[tuple[Replica, str]],
           offsets: dict[str, int], packing: Packing | None = None) -> ClusterShare:
    counts = {role.name: 0 for role in job.roles}
    for replica, _ in placed:
        counts[replica.role] += 1
    here = tuple((name, count) for name, count in counts.items() if count)
    starts = tuple((name, offsets.get(name, 0)) for name, count in counts.items() if count)
    for name, count in here:
        offsets[name] = offsets.get(name, 0) + count
    nodes = tuple(sorted({node for _, node in placed if node}))
    if packing is None:
        return ClusterShare(cluster, here, starts, nodes)
    return ClusterShare(cluster, here, starts, nodes, domains=packing.domains,
                        role_domains=tuple((role, domains) for role, domains
                                           in packing.role_domains if role in dict(here)))


def _left_then_name(item: tuple[tuple[int, ...], str, ClusterView]) -> tuple[tuple[int, ...], str]:
    return item[0], item[1]


def divide(job: JobDemand, clusters: Sequence[ClusterView], rules: PlacementRules) -> Decision:
    """Decide where every replica of ``job`` runs, or say why it cannot run now."""
    if any(req.key == HOSTNAME_LEVEL for role in job.roles for req in role.node_requirements):
        clusters = [_named(c) for c in clusters]
    filtered = filter_clusters(clusters, rules.affinity, rules.tolerations)
    rejected = [f"{name}: {why}" for name, why in filtered.rejected]
    if not filtered.eligible:
        detail = f" ({said(rejected)})" if rejected else ""
        return Decision((), f"no eligible cluster{detail}")
    replicas = expand(job.roles)
    if rules.scheduling_type is SchedulingType.DUPLICATED:
        return _duplicate(job, replicas, filtered.eligible, rules, rejected)
    if not rules.gang:
        return _divide_by_weight(job, filtered.eligible, rules, rejected)

    # Tightest fit = least left of the scarcest resource, which is the cluster's summed free
    # minus the job's total whatever nodes the replicas take: rank first, then pack in rank
    # order until one cluster holds the whole gang (most decisions pack one or two).
    # Clusters that do not hold the gang are explained only when no cluster does: most
    # decisions place the job, and saying why each of a hundred clusters did not was most
    # of their cost.
    total, order = job.total, scarcity_order(job.total)
    wanted = [(name, total.get(name, 0)) for name in order]
    ranked, short = [], []
    for cluster in filtered.eligible:
        free = cluster.free_amounts  # a list, not a generator: this loop runs per cluster
        left = tuple([free.get(name, 0) - amount for name, amount in wanted])
        if min(left, default=0) < 0:
            short.append(cluster)
        else:
            ranked.append((left, cluster.name, cluster))
    ranked.sort(key=_left_then_name)
    unfit: list[tuple[ClusterView, Packing | None]] = []
    for _, name, cluster in ranked:
        if rules.fit_mode is FitMode.NODE_AWARE and not _may_hold(cluster, replicas):
            unfit.append((cluster, None))  # packed only if its reason is asked for
            continue
        packing = _pack(cluster, replicas, rules.fit_mode, job.topology)
        if not packing.unplaced:
            share = _share(job, name, packing.placed, {}, packing)
            within = f" within {', '.join(domain_text(d) for d in share.domains)}" \
                if share.domains else ""
            return Decision((share,), f"fits {name}{within}")
        unfit.append((cluster, packing))

    if rules.max_clusters > 1 and rules.gang:
        split = _split(job, replicas, filtered.eligible, rules)
        if split:
            return Decision(split, f"split across {len(split)} clusters")
    rejected += [f"{c.name}: short of {_fmt(total.shortfall(c.free_amounts))} in total"
                 for c in short]
    # (a cluster whose nodes cannot hold the replicas at all is explained without its
    # topology: packing every domain only to say so would cost the most)
    plain = replace(job, topology=None)
    rejected += [_explain(job, c, packing, rules.fit_mode) if packing is not None
                 else _explain(plain, c, _pack(c, replicas, rules.fit_mode), rules.fit_mode)
                 for c, packing in unfit]
    if rules.max_clusters > 1 and rules.gang:
        rejected.append(f"no split over at most {rules.max_clusters} clusters fits")
    return Decision((), said(rejected))


def _split(job: JobDemand, replicas: list[Replica], clusters: Sequence[ClusterView],
           rules: PlacementRules) -> tuple[ClusterShare, ...]:
    """Fewest clusters, largest capacity first; all replicas placed or nothing."""
    capacity = sorted(
        clusters,
        key=lambda c: (-len(_pack(c, replicas, rules.fit_mode, job.topology).placed), c.name),
    )
    remaining = replicas
    shares: list[ClusterShare] = []
    offsets: dict[str, int] = {}
    for cluster in capacity[: rules.max_clusters]:
        packing = _pack(cluster, remaining, rules.fit_mode, job.topology)
        if not packing.placed:
            continue
        shares.append(_share(job, cluster.name, packing.placed, offsets, packing))
        remaining = list(packing.unplaced)
        if not remaining:
            return tuple(shares)
    return ()


def _duplicate(job: JobDemand, replicas: list[Replica], clusters: Sequence[ClusterView],
               rules: PlacementRules, rejected: list[str]) -> Decision:
    """Duplicated: every eligible cluster that fits the whole job runs its own copy."""
    shares = []
    for cluster in clusters:
        packing = _pack(cluster, replicas, rules.fit_mode, job.topology)
        if packing.unplaced:
            rejected.append(_explain(job, cluster, packing, rules.fit_mode))
            continue
        share = _share(job, cluster.name, packing.placed, {}, packing)
        shares.append(replace(share, copy=True))
    if not shares:
        return Decision((), said(rejected))
    return Decision(tuple(shares), f"duplicated to {len(shares)} clusters")


def _divide_by_weight(job: JobDemand, clusters: Sequence[ClusterView], rules: PlacementRules,
                      rejected: list[str]) -> Decision:
    """Divided without Gang, as Karmada divides replicas: each role's replicas split by
    static weights, or by how many replicas each cluster can take (dynamic weights); with
    the Aggregated preference, as few clusters as possible. Every share must still fit."""
    capacity = {c.name: {role.name: _available(c, role, rules.fit_mode) for role in job.roles}
                for c in clusters}
    counts: dict[str, dict[str, int]] = {c.name: {} for c in clusters}
    for role in job.roles:
        if rules.preference is DivisionPreference.AGGREGATED:
            split = _aggregate(role.replicas, {n: cap[role.name] for n, cap in capacity.items()})
        else:
            weights = ({c.name: _static_weight(c, rules) for c in clusters}
                       if rules.static_weights
                       else {n: cap[role.name] for n, cap in capacity.items()})
            split = _by_weight(role.replicas, weights)
        if split is None:
            rejected.append(f"{role.name}: {role.replicas} replicas do not fit the eligible "
                            "clusters")
            return Decision((), said(rejected))
        for name, count in split.items():
            if count:
                counts[name][role.name] = count
    shares, offsets = [], {role.name: 0 for role in job.roles}
    for cluster in clusters:
        here = counts[cluster.name]
        if not here:
            continue
        sub = JobDemand(job.key, tuple(Role(r.name, here.get(r.name, 0), r.request, r.leader,
                                            r.node_requirements)
                                       for r in job.roles if here.get(r.name)), job.topology)
        packing = _pack(cluster, expand(sub.roles), rules.fit_mode, job.topology)
        if packing.unplaced:
            rejected.append(_explain(sub, cluster, packing, rules.fit_mode))
            return Decision((), said(rejected))
        shares.append(_share(job, cluster.name, packing.placed, offsets, packing))
    return Decision(tuple(shares), f"divided over {len(shares)} clusters")


def _named(cluster: ClusterView) -> ClusterView:
    """The cluster with each named node a group of its own, labelled with its name as
    its hostname: a pod that requires a node by ``kubernetes.io/hostname`` (a nodeSelector
    on it) fits that node. Groups never carry the hostname (every node would be a group of
    its own), so without this such a job was never placed."""
    groups: list[NodeGroup] = []
    for group in cluster.node_groups:
        named = group.nodes[: group.count]
        groups += [NodeGroup(1, group.free, (*group.labels, (HOSTNAME_LEVEL, name)), (name,))
                   for name in named]
        if group.count > len(named):
            groups.append(NodeGroup(group.count - len(named), group.free, group.labels))
    return replace(cluster, node_groups=tuple(groups))


def _available(cluster: ClusterView, role: Role, mode: FitMode) -> int:
    """How many replicas of ``role`` the cluster could take on its own (Karmada's
    "available replicas"), node by node unless in summed mode."""
    def fits(free: Resources) -> int:
        counts = [free.get(name, 0) // amount for name, amount in role.request.items() if amount]
        return min(counts) if counts else 1_000_000

    groups = admitted(cluster.node_groups, role.node_requirements)
    if mode is FitMode.SUMMED:
        if not role.node_requirements:
            return fits(cluster.free)
        return fits(sum((g.free.scaled(g.count) for g in groups), Resources()))
    return sum(fits(group.free) * group.count for group in groups)


def _static_weight(cluster: ClusterView, rules: PlacementRules) -> int:
    return max((weight for affinity, weight in rules.static_weights
                if not affinity_mismatch(cluster, affinity)), default=0)


def _aggregate(replicas: int, available: dict[str, int]) -> dict[str, int] | None:
    out: dict[str, int] = {}
    left = replicas
    for name in sorted(available, key=lambda n: (-available[n], n)):
        take = min(left, available[name])
        if take:
            out[name] = take
            left -= take
        if not left:
            return out
    return None if left else out


def _by_weight(replicas: int, weights: dict[str, int]) -> dict[str, int] | None:
    """Largest-remainder division of ``replicas`` by ``weights`` (ties: weight, then name)."""
    total = sum(weights.values())
    if total <= 0:
        return None
    base = {n: replicas * w // total for n, w in weights.items()}
    left = replicas - sum(base.values())
    order = sorted(weights, key=lambda n: (-(replicas * weights[n] % total), -weights[n], n))
    for name in order[:left]:
        base[name] += 1
    return base


def taken(cluster: ClusterView, share: ClusterShare,
          requests: Mapping[str, Resources]) -> ClusterView:
    """``cluster`` less ``share``'s replicas (``requests``: per role, one replica's), each
    role's within the domains its pods are pinned to: its own, or the share's."""
    for role, count in share.replicas:
        cluster = with_assumed(cluster, [requests[role]] * count, share.domains_of(role))
    return cluster


_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
MAX_NAMED = 8  # clusters' reasons said one by one; past it, alike reasons are counted


def said(reasons: Sequence[str]) -> str:
    """Clusters' reasons ("member1: short of 4 GPUs in total") joined. Past ``MAX_NAMED``,
    reasons alike but for their numbers are said once, with how many more clusters gave
    them (as kube-scheduler says "0/100 nodes are available: 60 Insufficient
    nvidia.com/gpu"): a job waiting at a hundred members is told why in a line, not a page."""
    if len(reasons) <= MAX_NAMED:
        return "; ".join(reasons)
    alike: dict[str, list[str]] = {}
    for reason in reasons:
        _, colon, why = reason.partition(": ")
        alike.setdefault(_NUMBER.sub("#", why if colon else reason), []).append(reason)
    return "; ".join(
        group[0] if len(group) == 1 else f"{group[0]} (and {len(group) - 1} more alike)"
        for group in sorted(alike.values(), key=lambda g: (-len(g), g[0])))
