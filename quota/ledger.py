"""Who holds quota under a tree, kept in the orders admission reads, from one pass to the next.

Usage is derived from the holdings (the jobs bound through a queue and not finished), so a
restarted hub rebuilds it exactly. Summing thousands of holdings and sorting them on every
pass was most of a pass at 10,000 jobs; a :class:`QuotaLedger` is built once
(:meth:`QuotaLedger.of`) and then carried forward with what changed since
(:meth:`QuotaLedger.changed`): equal holdings give an equal ledger either way. It is frozen: an
:class:`~quota.engine.AdmissionPass` reads it and copies only what a pass changes.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import TypeVar

from quota.amounts import MAX_JOBS, Amounts, add
from quota.priority import is_opportunistic
from quota.queues import admission_order
from quota.tree import PlacedNode, QuotaNode, leaves_by_namespace, walk


@dataclass(frozen=True, slots=True)
class Job:
    key: str  # unique: a JobKey's text, "<Kind>.<group>/<namespace>/<name>"
    namespace: str
    request: Amounts  # the whole gang: every replica of every role
    priority: int = 0
    created: str = ""  # RFC 3339; only compared, never parsed
    # RFC 3339: when it began to wait again after it ran (preempted, reclaimed, failed over);
    # jobs admitted while it ran did not pass it over (the starvation count starts here)
    waiting_since: str = ""

    # What the job counts against quota: its request and one job; nothing for an
    # opportunistic job, which runs on idle capacity only (HiveD's priority −1). Computed
    # once (do not change it); fields, not cached properties: a Job has slots.
    charge: dict[str, int] = field(init=False, repr=False, compare=False)
    order: tuple[int, str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "charge", {} if is_opportunistic(self.priority)
                           else add(self.request, {MAX_JOBS: 1}))
        object.__setattr__(self, "order", admission_order(self.priority, self.created,
                                                          self.key))


@dataclass(frozen=True, slots=True)
class Holding:
    """A job that holds quota now (bound, not finished)."""

    job: Job
    admitted: str  # RFC 3339 time of admission


E = TypeVar("E")
K = TypeVar("K")
VictimEntry = tuple[tuple[object, ...], Holding]  # (preemption order, holding)
OrderEntry = tuple[tuple[int, str, str], Holding]  # (the job's admission order, holding)


@dataclass(frozen=True)
class TreeIndex:
    """What admission looks up in a tree, computed once per tree."""

    root: QuotaNode

    @cached_property
    def nodes(self) -> dict[str, PlacedNode]:
        return {p.key: p for p in walk(self.root)}

    @cached_property
    def rank(self) -> dict[str, int]:
        """Tree walk order: ties between leaves break by it."""
        return {key: i for i, key in enumerate(self.nodes)}

    @cached_property
    def paths(self) -> dict[str, tuple[str, ...]]:
        """A node's key and its ancestors', itself first."""
        return {key: tuple("/".join(p) for p in (placed.path, *placed.ancestors))
                for key, placed in self.nodes.items()}

    @cached_property
    def limits(self) -> dict[str, list[tuple[str, int]]]:
        return {key: sorted(p.node.max.items()) for key, p in self.nodes.items()}

    @cached_property
    def leaf_of(self) -> Mapping[str, PlacedNode]:
        return leaves_by_namespace(self.root)

    @cached_property
    def leaves(self) -> tuple[str, ...]:
        return tuple(key for key, p in self.nodes.items() if p.node.is_leaf)


_INDEXES: dict[int, TreeIndex] = {}  # by the tree's identity (its nodes hold dicts)


def tree_index(root: QuotaNode) -> TreeIndex:
    """The index of ``root``, kept while it is one of the last few trees asked about."""
    found = _INDEXES.get(id(root))
    if found is None or found.root is not root:
        if len(_INDEXES) >= 8:
            _INDEXES.pop(next(iter(_INDEXES)))
        found = _INDEXES[id(root)] = TreeIndex(root)
    return found


def victim_order(holding: Holding, leaf_rank: int) -> tuple[object, ...]:
    """Preemption order: lowest priority first, then the most recently admitted, then key;
    equal ones in tree order of their leaves."""
    return (holding.job.priority, _desc(holding.admitted), holding.job.key, leaf_rank)


@lru_cache(maxsize=4096)  # admissions of a pass share one time stamp
def _desc(text: str) -> str:
    """``text`` turned so that later stamps sort first (compared in C, as text)."""
    return "".join(chr(0x10FFFF - ord(c)) for c in text)


def _victim_key(entry: VictimEntry) -> tuple[object, ...]:
    return entry[0]


def _order_key(entry: OrderEntry) -> tuple[int, str, str]:
    return entry[0]


@dataclass(frozen=True)
class QuotaLedger:
    root: QuotaNode
    holdings: Mapping[str, Holding] = field(default_factory=dict)  # by job key
    usage: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # node key -> used
    # Per leaf, its holdings that charge quota in preemption order (reclaim takes the first).
    victims: Mapping[str, tuple[VictimEntry, ...]] = field(default_factory=dict)
    # Per leaf, its holdings in the admission order of their jobs (starvation counts).
    in_order: Mapping[str, tuple[OrderEntry, ...]] = field(default_factory=dict)

    @property
    def tree(self) -> TreeIndex:
        return tree_index(self.root)

    @classmethod
    def of(cls, root: QuotaNode, holdings: Iterable[Holding]) -> QuotaLedger:
        """The ledger of ``holdings`` (those in no leaf of the tree are left out)."""
        tree = tree_index(root)
        kept: dict[str, Holding] = {}
        totals: dict[str, dict[str, int]] = {}
        victims: dict[str, list[VictimEntry]] = {}
        in_order: dict[str, list[OrderEntry]] = {}
        for holding in holdings:
            leaf = tree.leaf_of.get(holding.job.namespace)
            if leaf is None:
                continue
            kept[holding.job.key] = holding
            total = totals.setdefault(leaf.key, {})
            for resource, amount in holding.job.charge.items():
                total[resource] = total.get(resource, 0) + amount
            if holding.job.charge:  # reclaiming a job that holds no quota returns none
                victims.setdefault(leaf.key, []).append(
                    (victim_order(holding, tree.rank[leaf.key]), holding))
            in_order.setdefault(leaf.key, []).append((holding.job.order, holding))
        usage: dict[str, dict[str, int]] = {key: {} for key in tree.nodes}
        for leaf_key, total in totals.items():
            for key in tree.paths[leaf_key]:
                usage[key] = {k: v for k, v in add(usage[key], total).items() if v}
        return cls(root, kept, usage,
                   {k: tuple(sorted(v, key=_victim_key)) for k, v in victims.items()},
                   {k: tuple(sorted(v, key=_order_key)) for k, v in in_order.items()})

    def changed(self, added: Iterable[Holding], removed: Iterable[str]) -> QuotaLedger:
        """This ledger with the holdings of ``removed`` (job keys) gone and ``added`` in
        (one already held is replaced): the same as :meth:`of` over the holdings then."""
        holdings = dict(self.holdings)
        usage = dict(self.usage)
        victims: dict[str, list[VictimEntry]] = {}
        in_order: dict[str, list[OrderEntry]] = {}
        tree = self.tree

        def lists(leaf_key: str) -> tuple[list[VictimEntry], list[OrderEntry]]:
            if leaf_key not in victims:
                victims[leaf_key] = list(self.victims.get(leaf_key, ()))
                in_order[leaf_key] = list(self.in_order.get(leaf_key, ()))
            return victims[leaf_key], in_order[leaf_key]

        def take(holding: Holding, sign: int) -> None:
            leaf = tree.leaf_of.get(holding.job.namespace)
            if leaf is None:
                return
            delta = {k: sign * v for k, v in holding.job.charge.items()}
            for key in tree.paths[leaf.key]:
                usage[key] = {k: v for k, v in add(usage.get(key, {}), delta).items() if v}
            by_victim, by_order = lists(leaf.key)
            if sign > 0:
                if holding.job.charge:
                    bisect.insort(by_victim, (victim_order(holding, tree.rank[leaf.key]),
                                              holding), key=_victim_key)
                bisect.insort(by_order, (holding.job.order, holding), key=_order_key)
            else:
                _remove(by_victim, victim_order(holding, tree.rank[leaf.key]), _victim_key)
                _remove(by_order, holding.job.order, _order_key)

        for key in removed:
            gone = holdings.pop(key, None)
            if gone is not None:
                take(gone, -1)
        for holding in added:
            before = holdings.get(holding.job.key)
            if before is not None:
                take(before, -1)
            if tree.leaf_of.get(holding.job.namespace) is not None:
                holdings[holding.job.key] = holding
                take(holding, +1)
        return QuotaLedger(self.root, holdings, usage, _merged(self.victims, victims),
                           _merged(self.in_order, in_order))


def _merged(before: Mapping[str, tuple[E, ...]], changed: Mapping[str, list[E]]
            ) -> dict[str, tuple[E, ...]]:
    """Per leaf, its entries after the change; a leaf with none is left out."""
    out = {**before, **{k: tuple(v) for k, v in changed.items()}}
    return {k: v for k, v in out.items() if v}


def _remove(entries: list[E], key: K, by: Callable[[E], K]) -> None:
    """Remove the entry whose sort key is ``key`` from ``entries`` (sorted by ``by``)."""
    at = bisect.bisect_left(entries, key, key=by)  # type: ignore[call-overload]
    if at < len(entries) and by(entries[at]) == key:
        del entries[at]


def holdings_of(ledger: QuotaLedger | Sequence[Holding], root: QuotaNode) -> QuotaLedger:
    """A ledger as given, or built from plain holdings."""
    return ledger if isinstance(ledger, QuotaLedger) else QuotaLedger.of(root, ledger)
