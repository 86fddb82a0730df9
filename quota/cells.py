"""Each tenant's cells: the whole nodes its guarantee owns (HiveD's virtual clusters, node by
node).

A tenant within its guarantee should wait no longer in the shared fleet than on a private
cluster of its guarantee. Taking back what other tenants borrow is not enough for that: a
tenant's 8-GPU gang also waits when every node holds a GPU or two of other tenants' jobs
that are all within their own guarantees, and nobody borrows. HiveD answers with cells: each
virtual cluster owns physical cells, and another cluster's jobs run on them only as guests
that the owner takes back. Here a tenant owns nodes: a slice of every node shape (GPU model,
GPUs, CPU, memory) of the fleet, in proportion to its guaranteed GPUs, as its private
cluster would be; nodes left over belong to nobody. Jobs keep to their own tenant's nodes
where they can, and a claim within a guarantee may take back the guests on its nodes.

Pure: the nodes and the guarantees in, the owner of each node out; deterministic (the same
nodes and guarantees always deal the same cells).
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from quota.tree import QuotaNode, walk

GPU = "nvidia.com/gpu"
# The cells a bind names per share (the nodes its pods prefer), as the Work's schema bounds
# them: a tenant owning more nodes of one member names a subset, still its own.
CELLS_PER_SHARE = 64


@dataclass(frozen=True)
class CellNode:
    """One node as cells are dealt: where it is, its GPUs and its shape."""

    cluster: str
    name: str
    gpus: int
    shape: tuple[object, ...]  # nodes of one shape are interchangeable (model, GPUs, …)

    @property
    def key(self) -> str:
        return node_key(self.cluster, self.name)


def node_key(cluster: str, node: str) -> str:
    return f"{cluster}/{node}"


def deal(nodes: Sequence[CellNode], guarantees: Mapping[str, int]) -> dict[str, str]:
    """The owner (a quota leaf's key) of each node that has one, by :func:`node_key`.

    GPU nodes are dealt in an order that keeps every shape in proportion at any point (each
    node at its rank within its shape, scaled by the shape's size, as a private cluster of
    the fleet's mix is taken), until every tenant holds its guarantee: a tenant ends at its
    guarantee or at most one node above it. Each node goes to one of the tenants still short,
    the one whose count of that shape is lowest for its guarantee (Sainte-Laguë), so that
    each holds its slice of every shape. Guarantees larger than the fleet are scaled down."""
    wanted = {leaf: gpus for leaf, gpus in sorted(guarantees.items()) if gpus > 0}
    total = sum(n.gpus for n in nodes)
    if not wanted or total <= 0:
        return {}
    scale = min(1.0, total / sum(wanted.values()))
    goal = {leaf: gpus * scale for leaf, gpus in wanted.items()}
    held = dict.fromkeys(goal, 0)
    of_shape: dict[tuple[tuple[object, ...], str], int] = {}

    def rank(shape: tuple[object, ...], leaf: str) -> tuple[float, float, str]:
        return ((2 * of_shape.get((shape, leaf), 0) + 1) / goal[leaf], held[leaf] / goal[leaf],
                leaf)

    # Per shape, the tenants by rank. A rank only grows, so a stale entry is ranked again
    # when it comes to the top (a quota tree may have a thousand leaves).
    queues: dict[tuple[object, ...], list[tuple[float, float, str]]] = {}
    short = len(goal)
    owners: dict[str, str] = {}
    for node in _proportional_order(nodes):
        if not short:
            break
        queue = queues.get(node.shape)
        if queue is None:
            queue = queues[node.shape] = [rank(node.shape, leaf) for leaf in goal]
            heapq.heapify(queue)
        while True:
            top = queue[0]
            if held[top[2]] >= goal[top[2]]:
                heapq.heappop(queue)  # holds its guarantee: out of every deal
            elif (fresh := rank(node.shape, top[2])) != top:
                heapq.heapreplace(queue, fresh)
            else:
                break
        leaf = top[2]
        owners[node.key] = leaf
        held[leaf] += node.gpus
        of_shape[node.shape, leaf] = of_shape.get((node.shape, leaf), 0) + 1
        short -= held[leaf] >= goal[leaf]
    return owners


def _proportional_order(nodes: Sequence[CellNode]) -> list[CellNode]:
    shapes: dict[tuple[object, ...], list[CellNode]] = {}
    for node in sorted(nodes, key=lambda n: (n.cluster, n.name)):
        if node.gpus > 0:
            shapes.setdefault(node.shape, []).append(node)
    ranked = [((rank + 0.5) / len(group), node.cluster, node.name, node)
              for group in shapes.values() for rank, node in enumerate(group)]
    return [entry[3] for entry in sorted(ranked, key=lambda e: e[:3])]


@dataclass(frozen=True)
class Cells:
    """A deal: node key -> the leaf that owns it. Kept from pass to pass while the nodes and
    guarantees stay the same, so what is derived from it is derived once."""

    owners: Mapping[str, str] = field(default_factory=dict)

    @functools.cached_property
    def by_tenant(self) -> dict[str, dict[str, tuple[str, ...]]]:
        """Each tenant's cells, per cluster: the names of the nodes it owns there, sorted."""
        out: dict[str, dict[str, list[str]]] = {}
        for key, leaf in self.owners.items():
            cluster, _, node = key.partition("/")
            out.setdefault(leaf, {}).setdefault(cluster, []).append(node)
        return {leaf: {c: tuple(sorted(names)) for c, names in clusters.items()}
                for leaf, clusters in out.items()}


def guarantees(root: QuotaNode) -> dict[str, int]:
    """Each leaf's guaranteed GPUs (its min), by its key ("root/team-a")."""
    return {p.key: p.node.min.get(GPU, 0) for p in walk(root) if p.node.is_leaf}


def for_share(owned: Sequence[str], packed: Sequence[str]) -> tuple[str, ...]:
    """The cells a share names: those it was packed onto first, then the rest by name, at
    most ``CELLS_PER_SHARE``."""
    mine = set(owned)
    first = [n for n in dict.fromkeys(packed) if n in mine]
    taken = set(first)
    rest = [n for n in owned if n not in taken]
    return tuple([*first, *rest][:CELLS_PER_SHARE])
