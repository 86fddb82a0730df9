"""Admission under an ElasticQuotaTree: order, fit, borrowing, reclaim and the reasons.

Usage is derived, never stored: it is the sum of the requests of the jobs that hold quota
(bound and not finished), added up at their leaf and every ancestor. A job fits when, for
every resource named in ``max`` at its leaf and at each ancestor, used + request <= max
(``kube-queue/max-jobs`` counts jobs). A leaf may so use more than its ``min`` while its
ancestors have room (borrowing); a leaf below its ``min`` whose job does not fit may take its
guarantee back by preempting whole jobs of leaves above their own ``min`` (lowest priority,
then most recently admitted).

Opportunistic jobs (negative priority) charge nothing: they pass admission whenever their
queue lets them and wait only for capacity. Order: priority (higher first), then creation
time, then key (:func:`quota.queues.admission_order`). A queue with the Block policy
admits strictly in that order; with the Priority policy a job that does not fit lets the ones
behind it pass, until ``starvation_bound`` later jobs of its queue have been admitted past it:
then it blocks its queue until it fits, so a large job cannot starve.

Across leaves, a job that waits for an ancestor's quota (its leaf has room, a cohort above it
does not) keeps that ancestor's quota from lower-priority jobs that would borrow under it, for
the rest of the pass: each CPU freed in the cohort would otherwise go to the next small job
of another leaf that fits, and a large job of higher priority wait for ever (Kueue's cycle
keeps a cohort's quota for a workload that may preempt the same way). Jobs within their own
leaf's min are never held back.

An :class:`AdmissionPass` is driven by the hub for one scheduling pass. It holds no clock and
does no I/O; equal inputs give equal decisions.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from quota.amounts import MAX_JOBS, Amounts, add, shown
from quota.ledger import (
    Holding,
    Job,
    OrderEntry,
    QuotaLedger,
    VictimEntry,
    holdings_of,
    victim_order,
)
from quota.tree import PlacedNode, QuotaNode

DEFAULT_STARVATION_BOUND = 5
__all__ = ["DEFAULT_STARVATION_BOUND", "AdmissionPass", "Blocker", "Holding", "Job",
           "Pending", "QueuePolicy", "QuotaLedger", "Verdict", "order_key"]


class QueuePolicy(StrEnum):
    PRIORITY = "Priority"
    BLOCK = "Block"


@dataclass(frozen=True)
class Blocker:
    node: str  # quota node path, e.g. "root/child-2"
    resource: str
    used: int
    request: int
    limit: int

    def __str__(self) -> str:
        show = functools.partial(shown, self.resource)
        return (f"quota {self.node}: {self.resource} used {show(self.used)} + requested "
                f"{show(self.request)} > max {show(self.limit)}")


@dataclass(frozen=True)
class Verdict:
    fits: bool
    blockers: tuple[Blocker, ...] = ()
    victims: tuple[Holding, ...] = ()  # to preempt (reclaim) before the job fits
    reason: str = ""


def order_key(job: Job) -> tuple[int, str, str]:
    return job.order


@dataclass(frozen=True)
class Pending:
    """The jobs waiting for admission, in groups: each group holds jobs of one quota leaf
    asking for one request, in admission order. The planner hands its classes of waiting
    jobs over as they are (no sort of every pending job each pass); :meth:`of` groups a
    plain list."""

    groups: tuple[Sequence[Job], ...] = ()

    @classmethod
    def of(cls, jobs: Iterable[Job]) -> Pending:
        by_shape: dict[tuple[str, tuple[tuple[str, int], ...]], list[Job]] = {}
        for job in jobs:
            by_shape.setdefault((job.namespace, tuple(sorted(job.request.items()))),
                                []).append(job)
        return cls(tuple(sorted(group, key=order_key) for group in by_shape.values()))

    def __iter__(self) -> Iterator[Job]:
        for group in self.groups:
            yield from group


class AdmissionPass:
    """One pass of admission over a :class:`~quota.ledger.QuotaLedger` (or plain holdings)
    and the pending jobs; what the pass admits or releases is its own (the ledger stays as
    it was given)."""

    def __init__(self, root: QuotaNode, holdings: Sequence[Holding] | QuotaLedger,
                 pending: Iterable[Job] | Pending = (),
                 policies: Mapping[str, QueuePolicy] | None = None,
                 starvation_bound: int = DEFAULT_STARVATION_BOUND) -> None:
        self.root = root
        self.ledger = holdings_of(holdings, root)
        self.pending = pending if isinstance(pending, Pending) else Pending.of(pending)
        self.policies = policies or {}
        self.starvation_bound = starvation_bound
        tree = self.ledger.tree
        self._nodes, self._rank, self._paths = tree.nodes, tree.rank, tree.paths
        self._limits, self._leaf_of = tree.limits, tree.leaf_of
        self._usage: dict[str, Mapping[str, int]] = {
            key: self.ledger.usage.get(key, {}) for key in self._nodes}
        # Per leaf, the ledger's orders, copied the first time this pass changes them.
        self._victims: dict[str, list[VictimEntry]] = {}
        self._ordered: dict[str, list[OrderEntry]] = {}
        self._blocked: dict[str, str] = {}  # leaf path -> the job that blocks it
        self._done: set[str] = set()  # jobs admitted in this pass
        # Their victim-order entries, kept out of the search until the next pass (a job
        # bound in a pass is never its victim: the bind and a requeue would race).
        self._admitted: list[tuple[str, VictimEntry]] = []
        self._leaving: set[str] = set()  # jobs a priority preemption of this pass evicts
        self._claim_cache: dict[str, Job] | None = None
        self._shapes: _ShapeIndex | None = None
        # ancestor path -> the highest-priority job waiting for its quota (this pass)
        self._held_for: dict[str, Job] = {}

    @property
    def holdings(self) -> Sequence[Holding]:
        return tuple(self.ledger.holdings.values())

    def next_pass(self, pending: Iterable[Job] | Pending) -> None:
        """Start another pass over ``pending`` with the usage this one left (a long-lived
        engine, as a test keeps it, instead of one built from holdings each time)."""
        self.pending = pending if isinstance(pending, Pending) else Pending.of(pending)
        self._blocked.clear()
        self._held_for.clear()
        self._done.clear()
        for leaf_key, entry in self._admitted:
            bisect.insort(self._victims_to_change(leaf_key), entry, key=_victim_key)
        self._admitted.clear()
        self._claim_cache = None
        self._shapes = None

    # -- views ------------------------------------------------------------------------
    def leaf(self, job: Job) -> PlacedNode | None:
        return self._leaf_of.get(job.namespace)

    def usage(self, node: str) -> Mapping[str, int]:
        return self._usage[node]

    def queues(self) -> dict[str, list[Job]]:
        """Pending jobs of each leaf, in admission order (the hub shows positions)."""
        out: dict[str, list[Job]] = {key: [] for key, p in self._nodes.items() if p.node.is_leaf}
        for job in sorted(self.pending, key=order_key):
            leaf = self.leaf(job)
            if leaf is not None:
                out[leaf.key].append(job)
        return out

    def candidates(self) -> list[Job]:
        """Every pending job with a leaf, in the global admission order."""
        return [j for j in sorted(self.pending, key=order_key) if self.leaf(j) is not None]

    # -- decisions ------------------------------------------------------------------------
    def check(self, job: Job, past_block: bool = False) -> Verdict:
        """May ``job`` be admitted now? (Nothing changes until :meth:`admit`.) With
        ``past_block`` (it ends before the job its queue waits for could start: backfill), a
        Priority queue's starvation block does not hold it; a Block queue stays strict."""
        leaf = self.leaf(job)
        if leaf is None:
            return Verdict(False, reason=f"no quota leaf owns namespace {job.namespace!r}")
        blocked_by = self._blocked.get(leaf.key)
        strict = self.policies.get(leaf.key, QueuePolicy.PRIORITY) is QueuePolicy.BLOCK
        if blocked_by and blocked_by != job.key and (strict or not past_block):
            return Verdict(False, reason=f"queue {leaf.key} waits for {blocked_by} first")
        blockers = self._blockers(leaf, job.charge)
        if not blockers:
            claim = self._borrowing_paused_by(leaf, job) if job.charge else None
            if claim is not None:
                return Verdict(False, reason=f"borrowing beyond quota {leaf.key}'s min is paused "
                                             f"while {claim.key} waits within its guarantee")
            held = self._held_by(leaf, job)
            if held is not None:
                node, holder = held
                return Verdict(False, reason=f"quota {node} is kept for {holder.key} (priority "
                                             f"{holder.priority}), which waits for it")
            return Verdict(True)
        victims = self._reclaim(leaf, job, blockers)
        if victims:
            return Verdict(True, blockers, victims,
                           reason=f"reclaims the guarantee of {leaf.key}")
        self._hold_for(leaf, job, blockers)
        return Verdict(False, blockers, reason=str(blockers[0]))

    def admit(self, job: Job, admitted: str) -> None:
        """Record ``job`` as holding quota."""
        self._charge(Holding(job, admitted))
        self._done.add(job.key)

    def release(self, victims: Iterable[Holding]) -> None:
        """Record ``victims`` (preempted to reclaim a guarantee) as no longer holding."""
        for victim in victims:
            self._release(victim)

    def leaving(self, keys: Iterable[str]) -> None:
        """Jobs never reclaimed in this pass: those it already evicts (priority preemption),
        and those whose binds are still being written."""
        self._leaving.update(keys)

    def blocked(self, job: Job) -> bool:
        """Whether ``job``'s queue already waits for another of its jobs this pass."""
        leaf = self.leaf(job)
        return leaf is not None and self._blocked.get(leaf.key, job.key) != job.key

    def wait(self, job: Job) -> None:
        """``job`` was not admitted this pass (quota or capacity): apply its queue's policy."""
        leaf = self.leaf(job)
        if leaf is None or leaf.key in self._blocked:
            return
        policy = self.policies.get(leaf.key, QueuePolicy.PRIORITY)
        if policy is QueuePolicy.BLOCK or self.bypassed(
                job, up_to=self.starvation_bound) >= self.starvation_bound:
            self._blocked[leaf.key] = job.key

    def bypassed(self, job: Job, up_to: int | None = None) -> int:
        """How many jobs of the same queue, not ahead of ``job``, were admitted after it
        was created (or, requeued, after it began to wait again): the starvation count,
        derived from what holds quota. With ``up_to``, counting stops there (all a policy
        asks is whether the bound is reached)."""
        leaf = self.leaf(job)
        if leaf is None:
            return 0
        ordered = self._ordered_of(leaf.key)  # holdings in admission order of their jobs
        since = max(job.created, job.waiting_since)
        count = 0
        for _, holding in ordered[bisect.bisect_right(ordered, job.order, key=_order_key):]:
            if holding.admitted > since:
                count += 1
                if count == up_to:
                    break
        return count

    def within_guarantee(self, job: Job) -> bool:
        """Whether admitting ``job`` keeps its leaf within its guarantee (its min)."""
        leaf = self.leaf(job)
        return leaf is not None and bool(job.charge) and self._within_guarantee(leaf, job)

    # -- internals ------------------------------------------------------------------------
    def _victims_of(self, leaf_key: str) -> Sequence[VictimEntry]:
        found = self._victims.get(leaf_key)
        return found if found is not None else self.ledger.victims.get(leaf_key, ())

    def _victims_to_change(self, leaf_key: str) -> list[VictimEntry]:
        if leaf_key not in self._victims:
            self._victims[leaf_key] = list(self.ledger.victims.get(leaf_key, ()))
        return self._victims[leaf_key]

    def _ordered_of(self, leaf_key: str) -> Sequence[OrderEntry]:
        found = self._ordered.get(leaf_key)
        return found if found is not None else self.ledger.in_order.get(leaf_key, ())

    def _ordered_to_change(self, leaf_key: str) -> list[OrderEntry]:
        if leaf_key not in self._ordered:
            self._ordered[leaf_key] = list(self.ledger.in_order.get(leaf_key, ()))
        return self._ordered[leaf_key]

    def _within_guarantee(self, leaf: PlacedNode, job: Job) -> bool:
        """Every resource ``job`` asks for that its leaf guarantees stays within ``min``, and
        it asks for at least one guaranteed resource."""
        used, minimum = self._usage[leaf.key], leaf.node.min
        guaranteed = False
        for resource, amount in job.request.items():
            if amount and resource in minimum:
                if used.get(resource, 0) + amount > minimum[resource]:
                    return False
                guaranteed = True
        return guaranteed

    def _hold_for(self, leaf: PlacedNode, job: Job, blockers: Sequence[Blocker]) -> None:
        """``job`` waits for an ancestor's quota: keep it from lower-priority borrowers, when
        it could ever fit there (no larger than the ancestor's max)."""
        if not job.charge or any(b.node == leaf.key for b in blockers) or \
                any(b.request > b.limit for b in blockers):
            return
        for blocker in blockers:
            held = self._held_for.get(blocker.node)
            if held is None or held.priority < job.priority:
                self._held_for[blocker.node] = job

    def _held_by(self, leaf: PlacedNode, job: Job) -> tuple[str, Job] | None:
        """The ancestor, and the job it is kept for, that ``job`` may not borrow under: one
        of higher priority waits for its quota, and ``job`` would take its leaf beyond its
        min of a resource that ancestor limits."""
        if not self._held_for or not job.charge:
            return None
        after, minimum = add(self._usage[leaf.key], job.request), leaf.node.min
        beyond = {r for r, amount in job.request.items()
                  if amount and after.get(r, 0) > minimum.get(r, 0)}
        if not beyond:
            return None
        for node in self._paths[leaf.key][1:]:
            holder = self._held_for.get(node)
            if holder is not None and holder.priority > job.priority and \
                    any(r in beyond for r, _ in self._limits[node]):
                return node, holder
        return None

    def _borrowing_paused_by(self, leaf: PlacedNode, job: Job) -> Job | None:
        """A job of another leaf that waits for quota within its guarantee: while one does,
        no leaf may go beyond its own min (else reclaimed quota would be borrowed again)."""
        after = add(self._usage[leaf.key], job.request)
        if all(after.get(r, 0) <= leaf.node.min.get(r, 0) for r in job.request if job.request[r]):
            return None
        return next((claim for key, claim in self._claims().items() if key != leaf.key), None)

    def _claims(self) -> dict[str, Job]:
        """Per leaf, its first pending job that is blocked within its guarantee, the leaves in
        the admission order of those jobs. Whether a job is such a claim depends only on its
        leaf and its request, so each leaf's pending jobs are grouped by request (a handful of
        shapes): a claim is the earliest not yet admitted job of a shape that is blocked within
        its guarantee. Computed once and kept until usage changes: O(leaves x shapes) per
        admission, not O(pending)."""
        if self._claim_cache is None:
            shapes = self._shape_index()
            found: list[tuple[tuple[int, str, str], str, Job]] = []
            for leaf_key, groups in shapes.groups.items():
                place = self._nodes[leaf_key]
                best: Job | None = None
                for group in groups:
                    head = group.head(self._done)
                    if head is None or (best is not None and head.order > best.order):
                        continue
                    if (self._within_guarantee(place, head)
                            and self._blockers(place, head.charge)):
                        best = head
                if best is not None:
                    found.append((best.order, leaf_key, best))
            self._claim_cache = {leaf_key: job for _, leaf_key, job in sorted(found)}
        return self._claim_cache

    def _shape_index(self) -> _ShapeIndex:
        if self._shapes is None or self._shapes.pending is not self.pending:
            self._shapes = _ShapeIndex.build(self.pending, self._leaf_of)
        return self._shapes

    def _charge(self, holding: Holding) -> None:
        """A job admitted in this pass."""
        leaf = self.leaf(holding.job)
        self._claim_cache = None
        if leaf is None:
            return
        for key in self._paths[leaf.key]:
            self._usage[key] = add(self._usage[key], holding.job.charge)
        if holding.job.charge:
            self._admitted.append(
                (leaf.key, (victim_order(holding, self._rank[leaf.key]), holding)))
        bisect.insort(self._ordered_to_change(leaf.key), (holding.job.order, holding),
                      key=_order_key)

    def _release(self, holding: Holding) -> None:
        leaf = self.leaf(holding.job)
        self._claim_cache = None
        if leaf is None:
            return
        negative = {k: -v for k, v in holding.job.charge.items()}
        for key in self._paths[leaf.key]:
            self._usage[key] = add(self._usage[key], negative)
        going = holding.job.key
        victims = self._victims_to_change(leaf.key)
        victims[:] = [e for e in victims if e[1].job.key != going]
        self._admitted = [e for e in self._admitted if e[1][1].job.key != going]
        ordered = self._ordered_to_change(leaf.key)
        ordered[:] = [e for e in ordered if e[1].job.key != going]

    def _blockers(self, leaf: PlacedNode, charge: Amounts,
                  usage: Mapping[str, Mapping[str, int]] | None = None) -> tuple[Blocker, ...]:
        usage = usage if usage is not None else self._usage
        out = []
        for key in self._paths[leaf.key]:
            for resource, limit in self._limits[key]:
                used, want = usage[key].get(resource, 0), charge.get(resource, 0)
                if want and used + want > limit:
                    out.append(Blocker(key, resource, used, want, limit))
        return tuple(out)

    def _reclaim(self, leaf: PlacedNode, job: Job,
                 blockers: tuple[Blocker, ...]) -> tuple[Holding, ...]:
        """Victims whose preemption lets ``job`` fit, when every resource in the way stays
        within its leaf's guarantee (``min``); only whole jobs of leaves that use more than
        their own ``min`` are taken, one at a time, until ``job`` fits (``blockers``: what is
        in its way now)."""
        if any(b.node == leaf.key for b in blockers):
            return ()  # the leaf's own max is in the way: no reclaim can help
        within = add(self._usage[leaf.key], job.charge)
        for blocker in blockers:
            guarantee = leaf.node.min.get(blocker.resource)
            if guarantee is None or within.get(blocker.resource, 0) > guarantee:
                return ()
        # Victims in preemption order among the leaves above their min. A leaf only drops
        # below its min as victims go, never rises above it, so each leaf's holdings are
        # walked once: the next victim is the first of the heads of the leaves still above.
        usage = dict(self._usage)  # usage maps are replaced, never changed in place
        lists = {key: self._victims_of(key) for key in self.ledger.tree.leaves
                 if key != leaf.key}
        heads = {key: 0 for key, entries in lists.items() if entries}
        # Only a leaf under the deepest node in the way (of a resource short) gives back
        # what is short: a borrower of another cohort frees the root, never the job's own
        # cohort at its max (taken, it would be preempted in vain).
        victims: list[tuple[Holding, str]] = []  # and its leaf
        while blockers := self._blockers(leaf, job.charge, usage):
            deepest: dict[str, str] = {}  # resource -> its blocker nearest the leaf
            for b in blockers:  # in path order, the leaf first
                deepest.setdefault(b.resource, b.node)
            short = [(node, resource) for resource, node in deepest.items()]
            above = [(lists[key][i][0], key) for key, i in heads.items()
                     if i < len(lists[key]) and self._above_min(key, usage)
                     and any(node in self._paths[key] for node, _ in short)]
            if not above:
                return ()
            _, other = min(above)
            victim = lists[other][heads[other]][1]
            heads[other] += 1
            if victim.job.key in self._leaving:
                continue  # evicted in this very pass: a requeue would race
            if not any(victim.job.charge.get(resource) for node, resource in short
                       if node in self._paths[other]):
                continue  # holds none of what is short: blockers only shrink, so never
            self._move_charge(usage, other, victim.job.charge, -1)
            victims.append((victim, other))
        # As Kueue's fill-back: a victim taken before a later, larger one may not be needed
        # once that one goes. Each (the last aside, newest first) is kept when the job still
        # fits without its quota.
        kept: set[str] = set()
        for victim, other in reversed(victims[:-1]):
            self._move_charge(usage, other, victim.job.charge, 1)
            if self._blockers(leaf, job.charge, usage):
                self._move_charge(usage, other, victim.job.charge, -1)
            else:
                kept.add(victim.job.key)
        return tuple(v for v, _ in victims if v.job.key not in kept)

    def _move_charge(self, usage: dict[str, Mapping[str, int]], leaf_key: str,
                     charge: Amounts, sign: int) -> None:
        """Add (or with ``sign`` -1 take away) ``charge`` at a leaf and its ancestors."""
        for key in self._paths[leaf_key]:
            usage[key] = add(usage[key], {k: sign * v for k, v in charge.items()})

    def _above_min(self, key: str, usage: Mapping[str, Mapping[str, int]]) -> bool:
        """Whether the leaf uses more than its min of any resource (jobs aside)."""
        minimum, used = self._nodes[key].node.min, usage[key]
        return any(used.get(r, 0) > minimum.get(r, 0) for r in used if r != MAX_JOBS)


def _order_key(entry: OrderEntry) -> tuple[int, str, str]:
    return entry[0]


def _victim_key(entry: VictimEntry) -> tuple[object, ...]:
    return entry[0]


@dataclass
class _ShapeGroup:
    """Pending jobs of one leaf with one request: one or more groups of the pending jobs,
    each in admission order, read from the front."""

    groups: list[Sequence[Job]]
    next: list[int] = field(default_factory=list)  # per group: jobs before it are admitted

    def head(self, done: set[str]) -> Job | None:
        """The earliest job not admitted in this pass (admissions only add to ``done``)."""
        if not self.next:
            self.next = [0] * len(self.groups)
        best: Job | None = None
        for i, group in enumerate(self.groups):
            while self.next[i] < len(group) and group[self.next[i]].key in done:
                self.next[i] += 1
            if self.next[i] < len(group) and (best is None
                                               or group[self.next[i]].order < best.order):
                best = group[self.next[i]]
        return best


@dataclass
class _ShapeIndex:
    pending: Pending
    groups: dict[str, list[_ShapeGroup]]  # by leaf path

    @classmethod
    def build(cls, pending: Pending, leaf_of: Mapping[str, PlacedNode]) -> _ShapeIndex:
        by_leaf: dict[str, dict[tuple[tuple[str, int], ...], _ShapeGroup]] = {}
        for group in pending.groups:
            if not group:
                continue
            place = leaf_of.get(group[0].namespace)
            if place is None:
                continue
            shape = tuple(sorted(group[0].request.items()))
            by_leaf.setdefault(place.key, {}).setdefault(shape, _ShapeGroup([])).groups.append(
                group)
        return cls(pending, {k: list(v.values()) for k, v in by_leaf.items()})
