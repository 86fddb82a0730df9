"""Packing replicas into a cluster's nodes.

Node-aware mode places each replica on one node, largest replicas first, each on the node that
it leaves with the least of the scarcest resource (best-fit decreasing). Nodes of one shape are
kept as counted buckets, so a cluster of thousands of identical nodes costs a few buckets.
Summed mode only compares totals with the cluster's summed free capacity, as the seed's
scheduler does; it is kept as the baseline that strands gangs under fragmentation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
    """The free capacity of one cluster's nodes, as buckets of identical nodes."""

    def __init__(self, groups: Sequence[NodeGroup]) -> None:
        self._buckets: list[tuple[Resources, list[str], int]] = []  # free, names, anonymous count
        for group in groups:
            named = list(group.nodes[: group.count])
            self._buckets.append((group.free, named, group.count - len(named)))
        self._buckets.sort(key=lambda b: (b[0].items_, b[1]))

    def take(self, request: Resources, scarce: Sequence[str]) -> str | None:
        """Place one replica; return its node's name ("" when unnamed), None when none fits."""
        best: int | None = None
        best_key: tuple[int, ...] | None = None
        for index, (free, _, _) in enumerate(self._buckets):
            if not request.fits_in(free):
                continue
            key = tuple(free.get(name, 0) - request.get(name, 0) for name in scarce)
            if best_key is None or key < best_key:
                best, best_key = index, key
        if best is None:
            return None
        free, names, anonymous = self._buckets[best]
        node = names[0] if names else ""
        if names:
            names = names[1:]
        else:
            anonymous -= 1
        if names or anonymous:
            self._buckets[best] = (free, names, anonymous)
        else:
            del self._buckets[best]
        self._add(free - request, [node] if node else [], 0 if node else 1)
        return node

    def _add(self, free: Resources, names: list[str], anonymous: int) -> None:
        for index, (other, other_names, other_anonymous) in enumerate(self._buckets):
            if other == free:
                self._buckets[index] = (free, sorted(other_names + names),
                                        other_anonymous + anonymous)
                return
        self._buckets.append((free, names, anonymous))
        self._buckets.sort(key=lambda b: (b[0].items_, b[1]))

    def largest_free(self, resource: str) -> int:
        return max((free.get(resource, 0) for free, _, _ in self._buckets), default=0)

    def total_free(self) -> Resources:
        out = Resources()
        for free, names, anonymous in self._buckets:
            out = out + free.scaled(len(names) + anonymous)
        return out


@dataclass(frozen=True)
class Packing:
    placed: tuple[tuple[Replica, str], ...]  # replica and node name ("" when unnamed)
    unplaced: tuple[Replica, ...]
    leftover: Resources  # free capacity left in the cluster


def pack(replicas: Sequence[Replica], groups: Sequence[NodeGroup]) -> Packing:
    """Node-aware: place as many of ``replicas`` (already ordered) as fit, one node each."""
    bins = Bins(groups)
    scarce = scarcity_order(sum((r.request for r in replicas), Resources()))
    placed: list[tuple[Replica, str]] = []
    unplaced: list[Replica] = []
    for replica in replicas:
        node = bins.take(replica.request, scarce)
        if node is None:
            unplaced.append(replica)
        else:
            placed.append((replica, node))
    return Packing(tuple(placed), tuple(unplaced), bins.total_free())


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
