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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

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

    @property
    def charge(self) -> dict[str, int]:
        """What the job counts against quota: its request and one job; nothing for an
        opportunistic job, which runs on idle capacity only (HiveD's priority −1)."""
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
        self._leaf_of = leaves_by_namespace(self.root)
        self._usage: dict[str, dict[str, int]] = {key: {} for key in self._nodes}
        self._members: dict[str, list[Holding]] = {key: [] for key in self._nodes}
        for holding in self.holdings:
            self._charge(holding)
        self._blocked: dict[str, str] = {}  # leaf path -> the job that blocks it
        self._done: set[str] = set()  # jobs admitted in this pass
        self._claim_cache: dict[str, Job] | None = None

    def next_pass(self, pending: Sequence[Job]) -> None:
        """Start another pass over ``pending`` with the usage this one left (a long-lived
        engine, as the simulator keeps it, instead of one built from holdings each time)."""
        self.pending = pending
        self._blocked.clear()
        self._done.clear()
        self._claim_cache = None

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
    def check(self, job: Job) -> Verdict:
        """May ``job`` be admitted now? (Nothing changes until :meth:`admit`.)"""
        leaf = self.leaf(job)
        if leaf is None:
            return Verdict(False, reason=f"no quota leaf owns namespace {job.namespace!r}")
        blocked_by = self._blocked.get(leaf.key)
        if blocked_by and blocked_by != job.key:
            return Verdict(False, reason=f"queue {leaf.key} waits for {blocked_by} first")
        blockers = self._blockers(leaf, job.charge)
        if not blockers:
            claim = self._borrowing_paused_by(leaf, job) if job.charge else None
            if claim is not None:
                return Verdict(False, reason=f"borrowing beyond quota {leaf.key}'s min is paused "
                                             f"while {claim.key} waits within its guarantee")
            return Verdict(True)
        victims = self._reclaim(leaf, job)
        if victims:
            return Verdict(True, blockers, victims,
                           reason=f"reclaims the guarantee of {leaf.key}")
        return Verdict(False, blockers, reason=str(blockers[0]))

    def admit(self, job: Job, admitted: str) -> None:
        """Record ``job`` as holding quota."""
        self._charge(Holding(job, admitted))
        self._done.add(job.key)

    def release(self, victims: Iterable[Holding]) -> None:
        """Record ``victims`` (preempted to reclaim a guarantee) as no longer holding."""
        for victim in victims:
            self._release(victim)

    def wait(self, job: Job) -> None:
        """``job`` was not admitted this pass (quota or capacity): apply its queue's policy."""
        leaf = self.leaf(job)
        if leaf is None or leaf.key in self._blocked:
            return
        policy = self.policies.get(leaf.key, QueuePolicy.PRIORITY)
        if policy is QueuePolicy.BLOCK or self.bypassed(job) >= self.starvation_bound:
            self._blocked[leaf.key] = job.key

    def bypassed(self, job: Job) -> int:
        """How many jobs of the same queue, not ahead of ``job``, were admitted after it
        was created: the starvation count, derived from what holds quota."""
        leaf = self.leaf(job)
        if leaf is None:
            return 0
        return sum(1 for h in self._members[leaf.key]
                   if h.admitted > job.created and order_key(h.job) > order_key(job))

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
        """Per leaf, its first pending job that is blocked within its guarantee. Computed once
        and kept until usage changes, so a pass costs O(pending) per admission, not per check."""
        if self._claim_cache is None:
            claims: dict[str, Job] = {}
            for other in sorted(self.pending, key=order_key):
                place = self.leaf(other)
                if (place is None or place.key in claims or other.key in self._done
                        or not self._within_guarantee(place, other)):
                    continue
                if self._blockers(place, other.charge):
                    claims[place.key] = other
            self._claim_cache = claims
        return self._claim_cache

    def _path_keys(self, leaf: PlacedNode) -> list[str]:
        return ["/".join(p) for p in (leaf.path, *leaf.ancestors)]

    def _charge(self, holding: Holding) -> None:
        leaf = self.leaf(holding.job)
        self._claim_cache = None
        if leaf is None:
            return
        for key in self._path_keys(leaf):
            self._usage[key] = add(self._usage[key], holding.job.charge)
        self._members[leaf.key].append(holding)

    def _release(self, holding: Holding) -> None:
        leaf = self.leaf(holding.job)
        self._claim_cache = None
        if leaf is None:
            return
        negative = {k: -v for k, v in holding.job.charge.items()}
        for key in self._path_keys(leaf):
            self._usage[key] = add(self._usage[key], negative)
        self._members[leaf.key] = [h for h in self._members[leaf.key]
                                   if h.job.key != holding.job.key]

    def _blockers(self, leaf: PlacedNode, charge: Amounts,
                  usage: Mapping[str, Mapping[str, int]] | None = None) -> tuple[Blocker, ...]:
        usage = usage if usage is not None else self._usage
        out = []
        for key in self._path_keys(leaf):
            node = self._nodes[key].node
            for resource, limit in sorted(node.max.items()):
                used, want = usage[key].get(resource, 0), charge.get(resource, 0)
                if want and used + want > limit:
                    out.append(Blocker(key, resource, used, want, limit))
        return tuple(out)

    def _reclaim(self, leaf: PlacedNode, job: Job) -> tuple[Holding, ...]:
        """Victims whose preemption lets ``job`` fit, when every resource in the way stays
        within its leaf's guarantee (``min``); only whole jobs of leaves that use more than
        their own ``min`` are taken, one at a time, until ``job`` fits."""
        blockers = self._blockers(leaf, job.charge)
        if any(b.node == leaf.key for b in blockers):
            return ()  # the leaf's own max is in the way: no reclaim can help
        within = add(self._usage[leaf.key], job.charge)
        for blocker in blockers:
            guarantee = leaf.node.min.get(blocker.resource)
            if guarantee is None or within.get(blocker.resource, 0) > guarantee:
                return ()
        usage = {k: dict(v) for k, v in self._usage.items()}
        members = {k: list(v) for k, v in self._members.items()}
        victims: list[Holding] = []
        while self._blockers(leaf, job.charge, usage):
            candidates = self._borrowers(usage, members, exclude=leaf.key)
            if not candidates:
                return ()
            victim = candidates[0]
            other = self.leaf(victim.job)
            assert other is not None
            for key in self._path_keys(other):
                usage[key] = add(usage[key], {k: -v for k, v in victim.job.charge.items()})
            members[other.key] = [h for h in members[other.key] if h is not victim]
            victims.append(victim)
        return tuple(victims)

    def _borrowers(self, usage: Mapping[str, Mapping[str, int]],
                   members: Mapping[str, list[Holding]], exclude: str) -> list[Holding]:
        """Holdings of leaves that use more than their min, in preemption order: lowest
        priority first, then the most recently admitted."""
        out: list[Holding] = []
        for key, holdings in members.items():
            node = self._nodes[key].node
            if key == exclude or not node.is_leaf:
                continue
            used = usage[key]
            if any(used.get(r, 0) > node.min.get(r, 0) for r in used if r != MAX_JOBS):
                out.extend(h for h in holdings if h.job.charge)  # others return no quota
        return sorted(out, key=lambda h: (h.job.priority, _desc(h.admitted), h.job.key))


def _desc(text: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in text)
