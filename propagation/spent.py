"""Capacity taken out of a cluster view: what the hub has bound (or is about to) but the
member has not reported yet, each request from the nodes it fits best, as the member's
scheduler would place it, within the topology domains its share keeps to.

Pure: a frozen view in, a new one out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from propagation.fit import Domain
from propagation.resources import Resources, scarcity_order
from propagation.views import HOSTNAME_LEVEL, ClusterView, NodeGroup


def with_assumed(cluster: ClusterView, assumed: Sequence[Resources],
                 domains: Sequence[Domain] = ()) -> ClusterView:
    """``cluster`` with capacity the hub has bound but the member has not reported yet
    taken out, so that two decisions never spend the same GPU. Each assumed request is
    removed from the nodes it fits best, as the member's scheduler would place it: within
    ``domains`` (the topology domains its share keeps to) when given."""
    if not assumed:
        return cluster
    groups = list(cluster.node_groups)
    within = [tuple(kv for kv in domain if kv[0] != HOSTNAME_LEVEL) for domain in domains]
    for request in assumed:
        groups = _subtract(groups, request, within)
    return replace(cluster, node_groups=tuple(groups))


def _in_domains(group: NodeGroup, domains: Sequence[Domain]) -> bool:
    labels = set(group.labels)
    return any(labels.issuperset(domain) for domain in domains)


def _subtract(groups: list[NodeGroup], request: Resources,
              domains: Sequence[Domain] = ()) -> list[NodeGroup]:
    wanted = _wanted(request)
    best: tuple[tuple[int, ...], int] | None = None
    for i, group in enumerate(groups):
        if domains and not _in_domains(group, domains):
            continue
        left = _left_after(group.free, wanted)
        if left is not None and (best is None or (left, i) < best):
            best = (left, i)
    if best is None:  # (the domain's nodes are already reported full: take it anywhere)
        return _subtract(groups, request) if domains else groups
    index = best[1]
    group = groups[index]
    rest = [] if group.count == 1 else [NodeGroup(group.count - 1, group.free, group.labels,
                                                  group.nodes[1:])]
    taken = NodeGroup(1, group.free - request, group.labels, group.nodes[:1])
    out = [*groups[:index], *rest, *groups[index + 1:]]
    return _joined(out, taken) or [*groups[:index], *rest, taken, *groups[index + 1:]]


def _left_after(free: Resources, wanted: Sequence[tuple[str, int]]) -> tuple[int, ...] | None:
    """What a node keeps of each wanted resource (scarcest first) once it takes the request;
    None when it cannot (known at the scarcest resource for most full nodes)."""
    have = dict(free.items_)
    left = []
    for name, amount in wanted:
        rest = have.get(name, 0) - amount
        if rest < 0:
            return None
        left.append(rest)
    return tuple(left)


def _joined(groups: list[NodeGroup], taken: NodeGroup) -> list[NodeGroup] | None:
    """``groups`` with a node left as others of its kind already are joined to their group
    (else every assumed replica would add a group, and each decision after it would cost
    more); None when no group is like it."""
    for i, other in enumerate(groups):
        if other.free == taken.free and other.labels == taken.labels and bool(
                other.nodes) == bool(taken.nodes):
            groups[i] = _merged(other, taken)
            return groups
    return None


def _all_joined(groups: list[NodeGroup], taken: Iterable[NodeGroup]) -> list[NodeGroup]:
    """:func:`_joined` for each of ``taken`` in turn (else appended), each group found by
    what makes nodes alike rather than by a walk of the groups per node."""
    alike: dict[tuple[object, ...], int] = {}
    for index, group in enumerate(groups):
        alike.setdefault((group.free, group.labels, bool(group.nodes)), index)
    for node in taken:
        key = (node.free, node.labels, bool(node.nodes))
        i = alike.get(key)
        if i is None:
            alike[key] = len(groups)
            groups.append(node)
            continue
        groups[i] = _merged(groups[i], node)
    return groups


def _merged(group: NodeGroup, node: NodeGroup) -> NodeGroup:
    """``group`` with one more node like its own."""
    return NodeGroup(group.count + 1, group.free, group.labels,
                     tuple(sorted((*group.nodes, *node.nodes))))


def with_held(cluster: ClusterView, held: Sequence[Resources],
              nodes: Sequence[str]) -> ClusterView:
    """``cluster`` with ``held`` taken out of the named ``nodes``: each request comes off one
    of them (where it fits best, else where most is free), whether or not it fits there as
    reported. For capacity held for a preemptor on the nodes its plan frees (held anywhere,
    nothing was taken while no node fit it yet, and a victim sent back to its queue was bound
    again onto the node it still stood on), and for a bound share on the nodes its decision
    packed it onto (a replica pinned to a node is counted there, not where it fits best)."""
    return with_held_each(cluster, [(held, nodes)])


def with_held_each(cluster: ClusterView,
                   parts: Sequence[tuple[Sequence[Resources], Sequence[str]]]) -> ClusterView:
    """:func:`with_held` for each part (its requests, its nodes) in turn, the cluster's
    groups split into named nodes and joined again once for all of them (a member with
    dozens of bound shares not yet reported was split and joined dozens of times a pass)."""
    named = {n for _, nodes in parts for n in nodes}
    groups: list[NodeGroup] = []
    own: dict[str, NodeGroup] = {}  # the named nodes, a group each
    for group in cluster.node_groups:
        mine = [n for n in group.nodes[: group.count] if n in named]
        if not mine:
            groups.append(group)
            continue
        own.update((n, NodeGroup(1, group.free, group.labels, (n,))) for n in mine)
        if group.count > len(mine):
            groups.append(NodeGroup(group.count - len(mine), group.free, group.labels,
                                    tuple(n for n in group.nodes if n not in named)))
    order = {name: i for i, name in enumerate(own)}
    # What each named node has free, as a dict changed in place while the requests come off
    # it (a vector made for each request was most of the cost), and made a vector once at
    # the end. A node a request came off has nothing below zero: the rest of the planner
    # reads free capacity as a count.
    free = {name: dict(node.free.items_) for name, node in own.items()}
    taken: set[str] = set()
    for held, nodes in parts:
        candidates = sorted((n for n in set(nodes) if n in own), key=order.__getitem__)
        last: tuple[Resources, list[tuple[str, int]], str] | None = None
        for request in held:
            if not candidates:  # (none of them reported: held where it fits best)
                groups = _subtract(groups, request)
                continue
            if last is not None and last[0] == request and _fits(free[last[2]], last[1]):
                # The node a request fitted best still does for the next alike while it
                # fits: its amounts left only went down, and the others' did not move.
                wanted, best = last[1], last[2]
            else:
                wanted = _wanted(request)
                best = candidates[0] if len(candidates) == 1 else min(
                    candidates, key=lambda n: _held_rank(free[n], wanted, order[n]))
                last = (request, wanted, best) if _fits(free[best], wanted) else None
            have = free[best]
            if best not in taken:
                taken.add(best)
                have = free[best] = {name: max(0, amount) for name, amount in have.items()}
            for name, amount in request.items_:
                have[name] = max(0, have.get(name, 0) - amount)
    for name in taken:
        node = own[name]
        own[name] = NodeGroup(1, Resources.of(free[name]), node.labels, node.nodes)
    return replace(cluster, node_groups=tuple(_all_joined(groups, own.values())))


def _wanted(request: Resources) -> list[tuple[str, int]]:
    """A request's amounts, scarcest resource first (the order fits are compared in)."""
    return [(name, request.get(name, 0)) for name in scarcity_order(request)]


def _fits(free: dict[str, int], wanted: Sequence[tuple[str, int]]) -> bool:
    return all(free.get(name, 0) >= amount for name, amount in wanted)


def _held_rank(free: dict[str, int], wanted: Sequence[tuple[str, int]],
               index: int) -> tuple[object, ...]:
    """Where a held request (its amounts, scarcest first) goes among its nodes (``free``:
    what one has free): the best fit, else where most is free."""
    left = tuple([free.get(name, 0) - amount for name, amount in wanted])
    fits = min(left, default=0) >= 0
    return (not fits, left if fits else tuple(-x for x in left), index)
