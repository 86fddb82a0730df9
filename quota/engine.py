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

An :class:`AdmissionPass` is driven by the hub for one scheduling pass. It holds no clock and
does no I/O; equal inputs give equal decisions.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property, lru_cache

from quota.amounts import MAX_JOBS, Amounts, add
from quota.priority import is_opportunistic
from quota.queues import admission_order
from quota.tree import PlacedNode, QuotaNode, leaves_by_namespace, walk

DEFAULT_STARVATION_BOUND = 5


class QueuePolicy(StrEnum):
    PRIORITY = "Priority"
    BLOCK = "Block"


@dataclass(frozen=True)
class Job:
    key: str  # unique: "<kind>/<namespace>/<name>"
    namespace: str
    request: Amounts  # the whole gang: every replica of every role
    priority: int = 0
    created: str = ""  # RFC 3339; only compared, never parsed
    # RFC 3339: when it began to wait again after it ran (preempted, reclaimed, failed over);
    # jobs admitted while it ran did not pass it over (the starvation count starts here)
    waiting_since: str = ""

    @cached_property
    def charge(self) -> dict[str, int]:
        """What the job counts against quota: its request and one job; nothing for an
        opportunistic job, which runs on idle capacity only (HiveD's priority −1). Computed
        once: do not change it."""
        if is_opportunistic(self.priority):
            return {}
        return add(self.request, {MAX_JOBS: 1})


@dataclass(frozen=True)
class Holding:
    """A job that holds quota now (bound, not finished)."""

    job: Job
    admitted: str  # RFC 3339 time of admission


@dataclass(frozen=True)
class Blocker:
    node: str  # quota node path, e.g. "root/child-2"
    resource: str
    used: int
    request: int
    limit: int

    def __str__(self) -> str:
        return (f"quota {self.node}: {self.resource} used {self.used} + requested "
                f"{self.request} > max {self.limit}")


@dataclass(frozen=True)
class Verdict:
    fits: bool
    blockers: tuple[Blocker, ...] = ()
    victims: tuple[Holding, ...] = ()  # to preempt (reclaim) before the job fits
    reason: str = ""


def order_key(job: Job) -> tuple[int, str, str]:
    return admission_order(job.priority, job.created, job.key)


@dataclass
class AdmissionPass:
    root: QuotaNode
    holdings: Sequence[Holding]
    pending: Sequence[Job]
    policies: Mapping[str, QueuePolicy] = field(default_factory=dict)  # by leaf path
    starvation_bound: int = DEFAULT_STARVATION_BOUND

    def __post_init__(self) -> None:
        self._nodes = {p.key: p for p in walk(self.root)}
        self._rank = {key: i for i, key in enumerate(self._nodes)}  # tree walk order
        self._paths = {key: self._path_keys(p) for key, p in self._nodes.items()}
        self._limits = {key: sorted(p.node.max.items()) for key, p in self._nodes.items()}
        self._leaf_of = leaves_by_namespace(self.root)
        self._usage: dict[str, dict[str, int]] = {key: {} for key in self._nodes}
        self._members: dict[str, list[Holding]] = {key: [] for key in self._nodes}
        # Per leaf, its holdings in preemption order (see _victim_order), kept sorted as
        # they come and go so that a reclaim never sorts every holding again.
        self._preemption: dict[str, list[tuple[tuple[object, ...], Holding]]] = {
            key: [] for key in self._nodes}
        self._charged = 0  # how many holdings were ever charged: ties keep charge order
        # Per leaf, its holdings in the admission order of their jobs (starvation counts).
        self._in_order: dict[str, list[tuple[tuple[tuple[int, str, str], int], Holding]]] = {
            key: [] for key in self._nodes}
        self._charge_all(self.holdings)
        self._blocked: dict[str, str] = {}  # leaf path -> the job that blocks it
        self._done: set[str] = set()  # jobs admitted in this pass
        # Their victim-order entries, kept out of the search until the next pass (a job
        # bound in a pass is never its victim: the bind and a requeue would race).
        self._admitted: list[tuple[str, tuple[tuple[object, ...], Holding]]] = []
        self._leaving: set[str] = set()  # jobs a priority preemption of this pass evicts
        self._claim_cache: dict[str, Job] | None = None
        self._shapes: _ShapeIndex | None = None

    def next_pass(self, pending: Sequence[Job]) -> None:
        """Start another pass over ``pending`` with the usage this one left (a long-lived
        engine, as the simulator keeps it, instead of one built from holdings each time)."""
        self.pending = pending
        self._blocked.clear()
        self._done.clear()
        for leaf_key, entry in self._admitted:
            bisect.insort(self._preemption[leaf_key], entry, key=lambda e: e[0])
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
            return Verdict(True)
        victims = self._reclaim(leaf, job, blockers)
        if victims:
            return Verdict(True, blockers, victims,
                           reason=f"reclaims the guarantee of {leaf.key}")
        return Verdict(False, blockers, reason=str(blockers[0]))

    def admit(self, job: Job, admitted: str) -> None:
        """Record ``job`` as holding quota."""
        self._charge(Holding(job, admitted), victim=False)
        self._done.add(job.key)

    def release(self, victims: Iterable[Holding]) -> None:
        """Record ``victims`` (preempted to reclaim a guarantee) as no longer holding."""
        for victim in victims:
            self._release(victim)

    def leaving(self, keys: Iterable[str]) -> None:
        """Jobs this pass already evicts (priority preemption): never reclaimed as well."""
        self._leaving.update(keys)

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
        ordered = self._in_order[leaf.key]  # holdings in admission order of their jobs
        since = max(job.created, job.waiting_since)
        count = 0
        for _, holding in ordered[bisect.bisect_right(ordered, (order_key(job), 1 << 62),
                                                      key=_order_only):]:
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
    def _within_guarantee(self, leaf: PlacedNode, job: Job) -> bool:
        """Every resource ``job`` asks for that its leaf guarantees stays within ``min``, and
        it asks for at least one guaranteed resource."""
        within = add(self._usage[leaf.key], job.request)
        guaranteed = [r for r in job.request if r in leaf.node.min and job.request[r]]
        return bool(guaranteed) and all(within[r] <= leaf.node.min[r] for r in guaranteed)

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
            found: list[tuple[int, str, Job]] = []
            for leaf_key, groups in shapes.groups.items():
                place = self._nodes[leaf_key]
                best: tuple[int, Job] | None = None
                for group in groups:
                    head = group.head(self._done)
                    if head is None or (best is not None and head[0] > best[0]):
                        continue
                    if (self._within_guarantee(place, head[1])
                            and self._blockers(place, head[1].charge)):
                        best = head
                if best is not None:
                    found.append((best[0], leaf_key, best[1]))
            self._claim_cache = {leaf_key: job for _, leaf_key, job in sorted(found)}
        return self._claim_cache

    def _shape_index(self) -> _ShapeIndex:
        if self._shapes is None or self._shapes.pending is not self.pending:
            self._shapes = _ShapeIndex.build(self.pending, self._leaf_of)
        return self._shapes

    def _path_keys(self, leaf: PlacedNode) -> list[str]:
        return ["/".join(p) for p in (leaf.path, *leaf.ancestors)]

    def _charge(self, holding: Holding, *, victim: bool = True) -> None:
        leaf = self.leaf(holding.job)
        self._claim_cache = None
        if leaf is None:
            return
        for key in self._paths[leaf.key]:
            self._usage[key] = add(self._usage[key], holding.job.charge)
        self._members[leaf.key].append(holding)
        self._charged += 1
        if holding.job.charge:  # reclaiming a job that holds no quota returns none
            entry = (_victim_order(holding, self._rank[leaf.key], self._charged), holding)
            if victim:
                bisect.insort(self._preemption[leaf.key], entry, key=lambda e: e[0])
            else:
                self._admitted.append((leaf.key, entry))
        bisect.insort(self._in_order[leaf.key], ((order_key(holding.job), self._charged),
                                                 holding), key=_order_only)

    def _charge_all(self, holdings: Iterable[Holding]) -> None:
        """:meth:`_charge` for every holding, the per-leaf orders sorted once at the end
        (equal to inserting one at a time: the charge count makes every key unique)."""
        totals: dict[str, dict[str, int]] = {}
        for holding in holdings:
            leaf = self.leaf(holding.job)
            if leaf is None:
                continue
            total = totals.setdefault(leaf.key, {})
            for resource, amount in holding.job.charge.items():
                total[resource] = total.get(resource, 0) + amount
            self._members[leaf.key].append(holding)
            self._charged += 1
            if holding.job.charge:
                self._preemption[leaf.key].append(
                    (_victim_order(holding, self._rank[leaf.key], self._charged), holding))
            self._in_order[leaf.key].append(((order_key(holding.job), self._charged), holding))
        for leaf_key, total in totals.items():
            for key in self._paths[leaf_key]:
                self._usage[key] = add(self._usage[key], total)
        for entries in self._preemption.values():
            entries.sort(key=lambda e: e[0])
        for ordered in self._in_order.values():
            ordered.sort(key=_order_only)
        self._claim_cache = None

    def _release(self, holding: Holding) -> None:
        leaf = self.leaf(holding.job)
        self._claim_cache = None
        if leaf is None:
            return
        negative = {k: -v for k, v in holding.job.charge.items()}
        for key in self._paths[leaf.key]:
            self._usage[key] = add(self._usage[key], negative)
        self._members[leaf.key] = [h for h in self._members[leaf.key]
                                   if h.job.key != holding.job.key]
        self._preemption[leaf.key] = [e for e in self._preemption[leaf.key]
                                      if e[1].job.key != holding.job.key]
        self._admitted = [e for e in self._admitted if e[1][1].job.key != holding.job.key]
        self._in_order[leaf.key] = [e for e in self._in_order[leaf.key]
                                    if e[1].job.key != holding.job.key]

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
        heads = {key: 0 for key, entries in self._preemption.items()
                 if entries and key != leaf.key and self._nodes[key].node.is_leaf}
        victims: list[Holding] = []
        while self._blockers(leaf, job.charge, usage):
            above = [(self._preemption[key][i][0], key) for key, i in heads.items()
                     if i < len(self._preemption[key]) and self._above_min(key, usage)]
            if not above:
                return ()
            _, other = min(above)
            victim = self._preemption[other][heads[other]][1]
            heads[other] += 1
            if victim.job.key in self._leaving:
                continue  # evicted in this very pass: a requeue would race
            for key in self._paths[other]:
                usage[key] = add(usage[key], {k: -v for k, v in victim.job.charge.items()})
            victims.append(victim)
        return tuple(victims)

    def _above_min(self, key: str, usage: Mapping[str, Mapping[str, int]]) -> bool:
        """Whether the leaf uses more than its min of any resource (jobs aside)."""
        minimum, used = self._nodes[key].node.min, usage[key]
        return any(used.get(r, 0) > minimum.get(r, 0) for r in used if r != MAX_JOBS)


def _order_only(entry: tuple[tuple[tuple[int, str, str], int], Holding]
                ) -> tuple[tuple[int, str, str], int]:
    return entry[0]


def _victim_order(holding: Holding, leaf_rank: int, charged: int) -> tuple[object, ...]:
    """Preemption order: lowest priority first, then the most recently admitted, then key;
    equal ones in tree order of their leaves, then in the order they were charged."""
    return (holding.job.priority, _desc(holding.admitted), holding.job.key, leaf_rank, charged)


@lru_cache(maxsize=4096)  # admissions of a pass share one time stamp
def _desc(text: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in text)


@dataclass
class _ShapeGroup:
    """Pending jobs of one leaf with one request, in admission order."""

    jobs: list[tuple[int, Job]]  # (position in the admission order, job)
    next: int = 0  # jobs before it are admitted

    def head(self, done: set[str]) -> tuple[int, Job] | None:
        """The earliest job not admitted in this pass (admissions only add to ``done``)."""
        while self.next < len(self.jobs) and self.jobs[self.next][1].key in done:
            self.next += 1
        return self.jobs[self.next] if self.next < len(self.jobs) else None


@dataclass
class _ShapeIndex:
    pending: Sequence[Job]
    groups: dict[str, list[_ShapeGroup]]  # by leaf path

    @classmethod
    def build(cls, pending: Sequence[Job], leaf_of: Mapping[str, PlacedNode]) -> _ShapeIndex:
        by_leaf: dict[str, dict[tuple[tuple[str, int], ...], _ShapeGroup]] = {}
        for position, job in enumerate(sorted(pending, key=order_key)):
            place = leaf_of.get(job.namespace)
            if place is None:
                continue
            shape = tuple(sorted(job.request.items()))
            group = by_leaf.setdefault(place.key, {}).setdefault(shape, _ShapeGroup([]))
            group.jobs.append((position, job))
        return cls(pending, {k: list(v.values()) for k, v in by_leaf.items()})
