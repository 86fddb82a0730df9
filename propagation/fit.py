"""Packing replicas into a cluster's nodes.

Node-aware mode places each replica on one node, largest replicas first, each on the node that
it leaves with the least of the scarcest resource (best-fit decreasing). Nodes of one shape are
kept as counted buckets, so a cluster of thousands of identical nodes costs a few buckets.
A replica with node requirements (a pod's required node affinity, say a GPU model) only goes
to nodes whose labels satisfy them; nodes are told apart by their labels only then, so jobs
without requirements keep the label-blind buckets.
Summed mode only compares totals with the cluster's summed free capacity, as the seed's
scheduler does; it is kept as the baseline that strands gangs under fragmentation.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from propagation.resources import Resources, scarcity_order
from propagation.views import NodeGroup, NodeLabelIn, Role, TopologyRequest, admits_all

Labels = tuple[tuple[str, str], ...]
Domain = tuple[tuple[str, str], ...]  # one topology domain: its labels, top level first


@dataclass(frozen=True)
class Replica:
    role: str
    request: Resources
    leader: bool
    requirements: tuple[NodeLabelIn, ...] = ()
    topology: TopologyRequest | None = None  # its role's own (see Role.topology)


def expand(roles: Sequence[Role]) -> list[Replica]:
    """Every replica of ``roles``, largest first (leaders first among equals), deterministic."""
    replicas = [Replica(r.name, r.request, r.leader, r.node_requirements, r.topology)
                for r in roles for _ in range(r.replicas)]
    order = scarcity_order(sum((r.request for r in roles), Resources()))

    def size(replica: Replica) -> tuple[object, ...]:
        amounts = (-replica.request.get(name, 0) for name in order)
        return (*amounts, not replica.leader, replica.role)

    return sorted(replicas, key=size)


def admitted(groups: Sequence[NodeGroup],
             requirements: tuple[NodeLabelIn, ...]) -> list[NodeGroup]:
    """The node groups whose labels satisfy ``requirements``."""
    if not requirements:
        return list(groups)
    return [g for g in groups if admits_all(requirements, g.labels)]


class Bins:
    """The free capacity of one cluster's nodes, as buckets of identical nodes.

    Amounts are kept as int tuples over just the resources the job asks for, in scarcity
    order, so the best fit is a plain tuple comparison: this is the hot path of division.
    With ``by_labels`` a bucket's key also holds its nodes' labels (compared after the
    amounts, so ties between label sets break the same way every time).
    """

    def __init__(self, groups: Sequence[NodeGroup], names: Sequence[str],
                 by_labels: bool = False) -> None:
        self.names = tuple(names)
        self._buckets: dict[tuple[tuple[int, ...], Labels], _Bucket] = {}
        self._order: list[tuple[tuple[int, ...], Labels]] = []  # bucket keys, ascending
        self._admits: dict[tuple[tuple[NodeLabelIn, ...], Labels], bool] = {}
        for group in groups:
            vector = tuple(group.free.get(name, 0) for name in self.names)
            named = list(group.nodes[: group.count])
            labels = group.labels if by_labels else ()
            self._add((vector, labels), named, group.count - len(named))

    def take(self, request: tuple[int, ...],
             requirements: tuple[NodeLabelIn, ...] = ()) -> str | None:
        """Place one replica; return its node's name ("" when unnamed), None when none fits.
        The best fit is the smallest bucket key that holds the request: keys are kept in
        order, so the scan starts at the first one with enough of the scarcest resource and
        stops at the first that fits."""
        best: tuple[tuple[int, ...], Labels] | None = None
        start = bisect.bisect_left(self._order, (request[:1], ())) if request else 0
        for key in itertools.islice(self._order, start, None):
            free = key[0]
            if all(f >= q for f, q in zip(free, request, strict=True)) and (
                    not requirements or self._admitted(requirements, key[1])):
                best = key
                break
        if best is None:
            return None
        bucket = self._buckets[best]
        node = bucket.names.pop(0) if bucket.names else ""
        if not node:
            bucket.anonymous -= 1
        if not (bucket.anonymous or bucket.names):
            del self._buckets[best]
            del self._order[bisect.bisect_left(self._order, best)]
        left = tuple(f - q for f, q in zip(best[0], request, strict=True))
        self._add((left, best[1]), [node] if node else [], 0 if node else 1)
        return node

    def _admitted(self, requirements: tuple[NodeLabelIn, ...], labels: Labels) -> bool:
        known = self._admits.get((requirements, labels))
        if known is None:
            known = self._admits[(requirements, labels)] = admits_all(requirements, labels)
        return known

    def _add(self, key: tuple[tuple[int, ...], Labels], names: list[str],
             anonymous: int) -> None:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket()
            bisect.insort(self._order, key)
        bucket.anonymous += anonymous
        if names:
            bucket.names = sorted(bucket.names + names)


@dataclass
class _Bucket:
    """Identical nodes: how many are unnamed, and the names of the others."""

    anonymous: int = 0
    names: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Packing:
    placed: tuple[tuple[Replica, str], ...]  # replica and node name ("" when unnamed)
    unplaced: tuple[Replica, ...]
    leftover: Resources  # free capacity left in the cluster
    domains: tuple[Domain, ...] = ()  # the topology domains the placed replicas keep to
    # Roles that ask for a topology of their own: the domains each role's replicas keep to.
    role_domains: tuple[tuple[str, tuple[Domain, ...]], ...] = ()


def pack(replicas: Sequence[Replica], groups: Sequence[NodeGroup],
         total_free: Resources | None = None) -> Packing:
    """Node-aware: place as many of ``replicas`` (already ordered) as fit, one node each."""
    names = scarcity_order({name for r in replicas for name, amount in r.request.items_
                            if amount})
    bins = Bins(groups, names, by_labels=any(r.requirements for r in replicas))
    placed: list[tuple[Replica, str]] = []
    unplaced: list[Replica] = []
    vectors: dict[Resources, tuple[int, ...]] = {}
    used: dict[str, int] = {}
    for replica in replicas:
        vector = vectors.get(replica.request)
        if vector is None:
            vector = vectors[replica.request] = tuple(replica.request.get(n, 0) for n in names)
        node = bins.take(vector, replica.requirements)
        if node is None:
            unplaced.append(replica)
        else:
            placed.append((replica, node))
            for name, amount in replica.request.items_:
                used[name] = used.get(name, 0) + amount
    free = total_free if total_free is not None else sum(
        (g.free.scaled(g.count) for g in groups), Resources())
    return Packing(tuple(placed), tuple(unplaced), free - used)


def pack_summed(replicas: Sequence[Replica], free: Resources,
                groups: Sequence[NodeGroup] = ()) -> Packing:
    """Summed mode: replicas fit while their running total fits the summed free capacity;
    a replica with node requirements must also fit the summed free capacity of the nodes
    (of ``groups``) that satisfy them, less what replicas with the same requirements took."""
    placed: list[tuple[Replica, str]] = []
    unplaced: list[Replica] = []
    remaining = free
    selected: dict[tuple[NodeLabelIn, ...], Resources] = {}
    for replica in replicas:
        own = None
        if replica.requirements:
            own = selected.get(replica.requirements)
            if own is None:
                own = sum((g.free.scaled(g.count)
                           for g in admitted(groups, replica.requirements)), Resources())
        if replica.request.fits_in(remaining) and (own is None or replica.request.fits_in(own)):
            remaining = remaining - replica.request
            if own is not None:
                selected[replica.requirements] = own - replica.request
            placed.append((replica, ""))
        else:
            unplaced.append(replica)
    return Packing(tuple(placed), tuple(unplaced), remaining)
