"""Packing replicas into a cluster's nodes.

Node-aware mode places each replica on one node, largest replicas first, each on the node that
it leaves with the least of the scarcest resource (best-fit decreasing). Nodes of one shape are
kept as counted buckets, so a cluster of thousands of identical nodes costs a few buckets.
Summed mode only compares totals with the cluster's summed free capacity, as the seed's
scheduler does; it is kept as the baseline that strands gangs under fragmentation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from propagation.resources import Resources, scarcity_order
from propagation.views import NodeGroup, Role


@dataclass(frozen=True)
class Replica:
    role: str
    request: Resources
    leader: bool


def expand(roles: Sequence[Role]) -> list[Replica]:
    """Every replica of ``roles``, largest first (leaders first among equals), deterministic."""
    replicas = [Replica(r.name, r.request, r.leader) for r in roles for _ in range(r.replicas)]
    order = scarcity_order(sum((r.request for r in roles), Resources()))

    def size(replica: Replica) -> tuple[object, ...]:
        amounts = (-replica.request.get(name, 0) for name in order)
        return (*amounts, not replica.leader, replica.role)

    return sorted(replicas, key=size)


class Bins:
    """The free capacity of one cluster's nodes, as buckets of identical nodes.

    Amounts are kept as int tuples over just the resources the job asks for, in scarcity
    order, so the best fit is a plain tuple comparison: this is the hot path of division.
    """

    def __init__(self, groups: Sequence[NodeGroup], names: Sequence[str]) -> None:
        self.names = tuple(names)
        self._buckets: dict[tuple[int, ...], _Bucket] = {}
        for group in groups:
            vector = tuple(group.free.get(name, 0) for name in self.names)
            named = list(group.nodes[: group.count])
            self._add(vector, named, group.count - len(named))

    def take(self, request: tuple[int, ...]) -> str | None:
        """Place one replica; return its node's name ("" when unnamed), None when none fits."""
        best: tuple[int, ...] | None = None
        for free in self._buckets:
            if all(f >= q for f, q in zip(free, request, strict=True)) and (
                    best is None or free < best):
                best = free
        if best is None:
            return None
        bucket = self._buckets[best]
        node = bucket.names.pop(0) if bucket.names else ""
        if not node:
            bucket.anonymous -= 1
        if not (bucket.anonymous or bucket.names):
            del self._buckets[best]
        left = tuple(f - q for f, q in zip(best, request, strict=True))
        self._add(left, [node] if node else [], 0 if node else 1)
        return node

    def _add(self, free: tuple[int, ...], names: list[str], anonymous: int) -> None:
        bucket = self._buckets.setdefault(free, _Bucket())
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


def pack(replicas: Sequence[Replica], groups: Sequence[NodeGroup],
         total_free: Resources | None = None) -> Packing:
    """Node-aware: place as many of ``replicas`` (already ordered) as fit, one node each."""
    asked = sum((r.request for r in replicas), Resources())
    names = scarcity_order(asked)
    bins = Bins(groups, names)
    placed: list[tuple[Replica, str]] = []
    unplaced: list[Replica] = []
    vectors: dict[Resources, tuple[int, ...]] = {}
    for replica in replicas:
        vector = vectors.get(replica.request)
        if vector is None:
            vector = vectors[replica.request] = tuple(replica.request.get(n, 0) for n in names)
        node = bins.take(vector)
        if node is None:
            unplaced.append(replica)
        else:
            placed.append((replica, node))
    free = total_free if total_free is not None else sum(
        (g.free.scaled(g.count) for g in groups), Resources())
    used = sum((r.request for r, _ in placed), Resources())
    return Packing(tuple(placed), tuple(unplaced), free - used)


def pack_summed(replicas: Sequence[Replica], free: Resources) -> Packing:
    """Summed mode: replicas fit while their running total fits the summed free capacity."""
    placed: list[tuple[Replica, str]] = []
    unplaced: list[Replica] = []
    remaining = free
    for replica in replicas:
        if replica.request.fits_in(remaining):
            remaining = remaining - replica.request
            placed.append((replica, ""))
        else:
            unplaced.append(replica)
    return Packing(tuple(placed), tuple(unplaced), remaining)
