"""What can let a parked job fit: capacity freed on a member it may use, or its time.

A pass compares each member's capacity with what the previous pass saw. Capacity only
shrinks between two passes unless a member reports more free (a job ended, a node was
added), becomes ready or fresh again, or appears; only then can a job that did not fit
fit now. The comparison is node by node where the member names its nodes, and by rank
among the nodes of one label set where it does not (a node's free amounts, largest
first): a member whose every node has as much free as before, or less, frees nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from propagation.clusters import affinity_mismatch, untolerated_taint
from propagation.views import ClusterView, NodeGroup, PlacementRules

Labels = tuple[tuple[str, str], ...]


def freed(before: ClusterView | None, after: ClusterView) -> bool:
    """Whether ``after`` may hold something ``before`` could not."""
    if before is None or before is after:
        return before is None
    if after.ready and not before.ready:
        return True
    if before.stale_reason and not after.stale_reason:
        return True
    if (before.labels, before.taints) != (after.labels, after.taints):
        return True  # who may use it changed
    if before.node_groups == after.node_groups:
        return False
    old_named, old_anonymous = _nodes(before.node_groups)
    new_named, new_anonymous = _nodes(after.node_groups)
    for name, (labels, free) in new_named.items():
        old = old_named.get(name)
        if old is None or old[0] != labels or _more(free, old[1]):
            return True
    return any(_ranks_more(free, old_anonymous.get(labels, {}))
               for labels, free in new_anonymous.items())


def _nodes(groups: Iterable[NodeGroup]
           ) -> tuple[dict[str, tuple[Labels, Mapping[str, int]]],
                      dict[Labels, dict[str, list[int]]]]:
    """Named nodes by name; the unnamed ones per label set, each resource's amounts over
    its nodes largest first."""
    named: dict[str, tuple[Labels, Mapping[str, int]]] = {}
    anonymous: dict[Labels, dict[str, list[int]]] = {}
    for group in groups:
        names = group.nodes[: group.count]
        for name in names:
            named[name] = (group.labels, group.free)
        unnamed = group.count - len(names)
        if unnamed > 0:
            amounts = anonymous.setdefault(group.labels, {})
            for resource, amount in group.free.items_:
                amounts.setdefault(resource, []).extend([amount] * unnamed)
            amounts.setdefault("", []).extend([0] * unnamed)  # how many nodes
    for amounts in anonymous.values():
        for values in amounts.values():
            values.sort(reverse=True)
    return named, anonymous


def _more(free: Mapping[str, int], old: Mapping[str, int]) -> bool:
    return any(amount > old.get(resource, 0) for resource, amount in free.items())


def _ranks_more(new: Mapping[str, list[int]], old: Mapping[str, list[int]]) -> bool:
    """Whether some resource's k-th largest amount (or the count of nodes) grew."""
    for resource, amounts in new.items():
        before = old.get(resource, [])
        if len(amounts) > len(before):
            return True
        if any(a > b for a, b in zip(amounts, before, strict=False)):
            return True
    return False


def members_freed(before: Mapping[str, ClusterView], after: Mapping[str, ClusterView]
                  ) -> frozenset[str]:
    """The members on which capacity was freed between two passes' views."""
    return frozenset(name for name, view in after.items() if freed(before.get(name), view))


def may_use(rules: PlacementRules, members: Iterable[ClusterView],
            avoid: Iterable[str] = ()) -> frozenset[str]:
    """The members a job of ``rules`` could be placed on once they have room, ready or not
    (one that becomes ready frees capacity)."""
    avoided = set(avoid)
    return frozenset(m.name for m in members if m.name not in avoided
                     and not affinity_mismatch(m, rules.affinity)
                     and not (m.taints and untolerated_taint(m, rules.tolerations)))
