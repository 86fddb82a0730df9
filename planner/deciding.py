"""Unbound jobs: admitted by their quota queue (when their policy queues them), then divided
across members, in admission order; each one placed takes its capacity and quota before the
next is decided, so no two decisions spend the same GPU.

The jobs come in classes of equals (:mod:`planner.waiting`): a pass takes the classes' first
jobs in admission order, decides each, and goes on to the next job of a class only when the
one before it was placed (or reclaims quota, which frees quota for the next). A class whose
first job does not fit waits behind it, and one that waits for capacity is parked until
something that could let it fit happens (:mod:`planner.waking`). So a pass costs one
decision per class and per job placed, not one per waiting job.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from planner import elastic
from planner.backfill import KEPT_BACK, RESERVE_TRIES, Backfill, ends_before
from planner.intents import Bind, Intent, QueueReport, Requeue, Wait, share_requests
from planner.preempting import PreemptionPass
from planner.reserving import waiting_after_rollback
from planner.view import BackfillReservation, Hold, JobView, PassView, Stage, TimedJob
from planner.waiting import ClassKey, Parked, QuotaOf, Waiting, after, at, heads
from planner.waking import may_use, members_freed
from preemption.freed import taken_between
from propagation.binding import binding_message
from propagation.clusters import filter_clusters
from propagation.division import ClusterShare, divide, taken
from propagation.jobkey import shown
from propagation.resources import Resources
from propagation.views import ClusterView
from quota.cells import for_share
from quota.engine import AdmissionPass, Holding, Pending, Verdict
from quota.ledger import Job
from quota.priority import OPPORTUNISTIC_TENANT, is_opportunistic
from quota.queues import queue_names
from quota.tree import leaves_by_namespace, walk

NO_POLICY = "no PropagationPolicy or ClusterPropagationPolicy selects this job"
SHOWN_PENDING = 50  # a queue report names a leaf's first waiting jobs, and counts the rest
QUOTA_TREE_NAMESPACE = "kube-system"
# Why a class waits that makes the job behind its first one worth deciding in the same pass:
# a reclaim frees quota for the next.
GOES_ON = ("Reclaiming",)
# Waits that only the job's own change (or a policy's, or the quota tree's) can lift: its
# class is parked with nothing else to wake it.
STUCK = ("Invalid", "NoMatchingPolicy", "NoQuotaTree", "NoQuotaLeaf")


@dataclass(frozen=True)
class Decided:
    intents: list[Intent]
    waiting: Waiting  # for the next pass's view
    holds: Mapping[str, Hold] = field(default_factory=dict)
    retry_at: Mapping[str, float] = field(default_factory=dict)
    reservations: Mapping[str, BackfillReservation] = field(default_factory=dict)  # by head uid


@dataclass
class _Pass:
    """What one pass carries while it decides, job after job."""

    view: PassView
    waiting: Waiting
    admission: AdmissionPass | None
    capacity: dict[str, ClusterView]
    preempting: PreemptionPass | None
    out: list[Intent] = field(default_factory=list)
    waits: dict[str, Wait] = field(default_factory=dict)  # job key -> why it waits
    said: dict[ClassKey, Wait] = field(default_factory=dict)  # class -> its first's wait
    parked: dict[ClassKey, Parked] = field(default_factory=dict)
    bound: set[str] = field(default_factory=set)  # uids placed this pass
    decided: dict[str, JobView] = field(default_factory=dict)  # by key: the jobs decided
    active: set[ClassKey] = field(default_factory=set)  # classes with a job up in the pass
    capped: bool = False  # the pass stopped at its most binds
    backfill: Backfill | None = None
    tries: int = 0
    timed: list[TimedJob] = field(default_factory=list)

    def decide(self, job: JobView) -> tuple[Wait | None, Wait | None]:
        """Decide one job: why it waits (None when it was placed), and why the jobs behind
        it in its class wait."""
        self.decided[job.key] = job
        if job.invalid or job.demand is None:  # before any quota or capacity is counted
            invalid = Wait(job.key, "Invalid", job.invalid)
            return invalid, invalid
        if job.policy is None:
            unmatched = Wait(job.key, "NoMatchingPolicy", NO_POLICY)
            return unmatched, unmatched
        view, capacity = self.view, self.capacity
        # (copied only while a later head's reservation may count this job's end)
        before = dict(capacity) if self.tries and self.backfill is None and \
            job.runtime is not None else None
        intents, why, behind = _decide_one(job, self.admission, capacity, view,
                                           self.preempting, self.backfill)
        self.out += intents
        if why is None:
            self.bound.add(job.uid)
            if before is not None:
                self.timed.append(_bound_timed(job, before, capacity, view.now))
            return None, None
        if why.reason == "Unschedulable" and self.backfill is None and self.tries:
            self.tries -= 1  # the first jobs that do not fit: the first whose start is known
            self.backfill = Backfill.start(job, _usable(job, capacity, view.now), self.timed,
                                           view.now, view.reservations)
            if self.backfill is not None:
                why = self.backfill.head_wait(why)
        return why, behind

    def park(self, key: ClassKey, job: JobView, why: Wait) -> None:
        """Park ``job``'s class if it waits for what a later change must bring."""
        view = self.view
        if why.reason in STUCK:
            self.parked[key] = Parked(job.uid, why, frozenset(), view.now)
        elif why.reason == "ReservationRolledBack":
            self.parked[key] = Parked(job.uid, why, frozenset(), view.now,
                                      at=job.reserve_retry_at)
        elif why.reason == "Unschedulable" and not (view.timed or view.reservations):
            # (with backfill in play, the first that does not fit is its reservation's head:
            # decided on every pass)
            at = None
            if self.preempting is not None and self.preempting.may_plan(job, self.admission):
                at = self.preempting.retry_at.get(job.uid)
                if at is None:
                    return  # it may preempt on the next pass: not parked
            assert job.policy is not None
            until = job.avoid_until
            if until is not None and view.now < until:  # it may use more members then
                at = until if at is None else min(at, until)
            self.parked[key] = Parked(job.uid, why, may_use(
                job.policy.rules, view.clusters.values(), job.avoiding(view.now)), view.now,
                at=at)


    def reopen(self, queue: list[tuple[tuple[int, str, str], ClassKey]], job: JobView
               ) -> None:
        """A reclaim released quota: the classes stopped for quota earlier in the pass go on
        with their first job after ``job`` (one before it had its turn already)."""
        for key, why in self.said.items():
            if why.reason == "QuotaExceeded" and key not in self.active:
                _push(queue, key, self.waiting.classes[key], job, self.active)

    def quota_unchanged(self, job: JobView, parked: Parked) -> bool:
        """Whether a job parked for capacity still passes its quota as it did (checked on
        every pass: microseconds, where its division over every member is not): quota
        others took or gave back since may hold it back, or let it reclaim."""
        if parked.wait.reason != "Unschedulable" or job.quota is None or \
                self.admission is None:
            return True
        verdict = self.admission.check(job.quota)
        return verdict.fits and not verdict.victims

    def run(self, freed: frozenset[str], singletons: bool) -> None:
        """Every class in admission order: its first waiting job decided (or, parked and
        not woken, left to wait), and the next one after a job placed."""
        queue = heads(self.waiting)
        heapq.heapify(queue)
        self.active = {key for _, key in queue}
        while queue:
            if self.view.max_binds and len(self.bound) >= self.view.max_binds:
                self.capped = True  # the rest is decided by the next pass, as it stands
                for _, key in queue:  # those still asleep stay parked, the woken are not
                    asleep = self.waiting.parked.get(key)
                    if asleep is not None and not asleep.wakes(self.view.now, freed):
                        self.parked[key] = asleep
                return
            order, key = heapq.heappop(queue)
            self.active.discard(key)
            members = self.waiting.classes[key]
            job = at(members, order)
            if job.uid in self.bound or job.key in self.waits:  # a holder, decided first
                _push(queue, key, members, job, self.active)
                continue
            parked = self.waiting.parked.get(key)
            if parked is not None and not singletons and parked.head == job.uid and \
                    not parked.wakes(self.view.now, freed) and self.quota_unchanged(job, parked):
                _keep_waiting(job, self.admission)  # still its queue's, at its place
                self.parked[key] = parked
                self.said[key] = parked.wait
                continue
            why, behind = self.decide(job)
            if why is not None:
                self.waits[job.key] = why
            if why is None or behind is None or why.reason in GOES_ON:
                _push(queue, key, members, job, self.active)
                if why is not None and why.reason in GOES_ON:
                    self.reopen(queue, job)
                continue
            self.said[key] = behind
            if not singletons:
                self.park(key, job, why)


def decide(jobs: Sequence[JobView], view: PassView, carried: Waiting | None = None,
           gone: Sequence[str] = (), *, singletons: bool = False) -> Decided:
    """Intents for the waiting jobs: ``carried`` (the last pass's, None to start afresh)
    with ``jobs`` as they are now and ``gone`` (uids) left out: preemptions and bindings in
    decision order, then the queues' state, then why each job decided, or new, waits. With
    ``singletons`` every job is a class of its own and nothing is parked (each job decided
    on its own: the reference the classes are tested against)."""
    waiting = (carried or Waiting()).changed(jobs, gone, singletons=singletons)
    freed = members_freed(waiting.capacity, view.capacity) \
        if waiting.capacity is not None else frozenset(view.capacity)
    admission = None
    if view.quota is not None:
        quota = view.quota
        admission = AdmissionPass(quota.root, quota.ledger or quota.holdings, Pending(tuple(
            QuotaOf(members) for members in waiting.classes.values()
            if members[0].quota is not None)), quota.policies, quota.starvation_bound)
        admission.leaving(quota.settling)
    state = _Pass(view, waiting, admission, dict(view.capacity),
                  PreemptionPass.start(view, waiting.of))
    state.tries = RESERVE_TRIES if view.timed or view.reservations else 0
    state.timed = list(view.timed)  # and the jobs of known runtime this pass binds, as they end
    preempting = state.preempting
    if preempting is not None:  # a preemptor holding freed capacity decides first
        holders = (waiting.job(uid) for uid in list(preempting.holds))
        for job in sorted((j for j in holders if j is not None), key=lambda j: j.order):
            why, _ = state.decide(job)
            if why is not None:
                state.waits[job.key] = why
    state.run(freed, singletons)
    if not state.capped:  # (what waits for capacity may not all have been decided)
        state.out += _grow(view, state.capacity, admission, state.said, waiting)
    # (what the next pass compares its members with: as this pass left them, its binds
    # taken; they come back as assumed capacity)
    left = replace(waiting.changed((), state.bound), parked=state.parked,
                   capacity=dict(state.capacity))
    if admission is not None and view.report_queues:
        state.out.append(_queues(admission, left, view))
    state.out += _waits(state, left, jobs, carried, admission)
    left = replace(left, said=state.said)
    backfill = state.backfill
    reserved = {backfill.head.uid: backfill.reservation} if backfill is not None else {}
    if preempting is None:
        return Decided(state.out, left, reservations=reserved)
    return Decided(state.out, left, preempting.holds, preempting.retry_at, reserved)


def _push(queue: list[tuple[tuple[int, str, str], ClassKey]], key: ClassKey,
          members: Sequence[JobView], job: JobView, active: set[ClassKey]) -> None:
    """The class's next job, after ``job``, takes its turn in the pass's order."""
    nxt = after(members, job)
    if nxt is not None:
        heapq.heappush(queue, (nxt.order, key))
        active.add(key)


def _waits(state: _Pass, left: Waiting, jobs: Sequence[JobView], carried: Waiting | None,
           admission: AdmissionPass | None) -> list[Wait]:
    """Why each job waits, for the jobs whose word may have changed: those decided this
    pass, those new or changed (behind their class's first, they wait as it does), and every
    job of a class whose reason changed in kind; each with its place in its queue."""
    before = carried.said if carried is not None else {}
    out: dict[str, tuple[JobView | None, Wait]] = {name: (None, why)
                                                   for name, why in state.waits.items()}

    def say(job: JobView, why: Wait) -> None:
        out[job.key] = (job, out.get(job.key, (None, replace(why, job=job.key)))[1])

    for cls, why in state.said.items():
        said = before.get(cls)
        if said is None or said.reason != why.reason:
            for job in left.classes.get(cls, ()):
                say(job, why)
    for job in jobs:
        joined = left.of.get(job.uid)
        if joined is not None and joined in state.said:
            say(job, state.said[joined])
    leaves = _leaf_keys(admission)
    names = _queue_names(admission)
    queued: dict[str, tuple[JobView, str]] = {}  # job key -> (its view, its leaf)
    for name, (known, _) in out.items():
        found = known or state.decided.get(name)
        leaf = leaves.get(found.namespace) if found is not None and found.quota else None
        if found is not None and leaf is not None and left.of.get(found.uid) is not None:
            queued[name] = (found, leaf)
    places = left.positions((found for found, _ in queued.values()), leaves)
    placed = []
    for name, (_, why) in sorted(out.items()):
        if name in queued:
            found, leaf = queued[name]
            placed.append(Wait(why.job, why.reason, why.message, names[leaf],
                               places[found.uid]))
        else:
            placed.append(why)
    return placed


def _leaf_keys(admission: AdmissionPass | None) -> dict[str, str]:
    if admission is None:
        return {}
    return {ns: leaf.key for ns, leaf in leaves_by_namespace(admission.root).items()}


def _queue_names(admission: AdmissionPass | None) -> dict[str, str]:
    if admission is None:
        return {}
    names = queue_names(p.path for p in walk(admission.root))
    return {"/".join(path): name for path, name in names.items()}


def _bound_timed(job: JobView, before: Mapping[str, ClusterView],
                 after: Mapping[str, ClusterView], now: float) -> TimedJob:
    """A job this pass bound, as a running job that gives its nodes back at its end: a
    head reserved later in the pass may start then (counted as running for good, its start
    came out later than it can be, and a job that backfilled before that later start could
    still be running on its nodes at the earlier one)."""
    assert job.runtime is not None
    pods = [p for name, view in after.items() if view is not before.get(name)
            for p in taken_between(before[name], view)]
    return TimedJob(job.key, now, job.runtime, tuple(pods))


def _usable(job: JobView, capacity: dict[str, ClusterView], now: float) -> list[ClusterView]:
    avoid = job.avoiding(now)
    return [v for v in capacity.values() if v.name not in avoid]


def _grow(view: PassView, capacity: dict[str, ClusterView], admission: AdmissionPass | None,
          said: Mapping[ClassKey, Wait], waiting: Waiting) -> list[Intent]:
    """Bound elastic jobs below their max grow into what the waiting jobs left, unless a job
    of at least their priority waits for the nodes or the quota growing them would take
    (a class's first job stands for the class: they wait alike)."""
    bound = [j for j in view.jobs if j.elastic is not None and j.stage is Stage.BOUND]
    if not bound:
        return []
    held_back = []
    for key, why in said.items():
        members = waiting.classes.get(key)
        head = members[0] if members else None
        if head is None or head.policy is None:
            continue
        if why.reason in elastic.WAITING_FOR_NODES:
            eligible = filter_clusters(list(capacity.values()), head.policy.rules.affinity,
                                       head.policy.rules.tolerations).eligible
            held_back.append(elastic.Waiting(-head.order[0],
                                             frozenset(v.name for v in eligible)))
        elif why.reason in elastic.WAITING_FOR_QUOTA:
            held_back.append(elastic.Waiting(-head.order[0], quota=True))
    return list(elastic.grow(bound, capacity, elastic.QuotaRoom(admission), held_back))


def _short(job: JobView, admission: AdmissionPass | None,
           fleet: Sequence[ClusterView]) -> str:
    """Why ``job`` does not fit quota (without reclaiming anyone) or the nodes now; ""
    when it fits."""
    assert job.demand is not None
    assert job.policy is not None
    if job.quota is not None and admission is not None:
        verdict = admission.check(job.quota)
        if not verdict.fits or verdict.victims:
            return verdict.reason or "quota"
    decision = divide(job.demand, fleet, job.policy.rules)
    return "" if decision.placed else decision.reason


def _decide_one(job: JobView, admission: AdmissionPass | None,
                capacity: dict[str, ClusterView], view: PassView,
                preempting: PreemptionPass | None = None, backfill: Backfill | None = None
                ) -> tuple[list[Intent], Wait | None, Wait | None]:
    """Admit (when queued), divide and bind one job; the intents, why it waits, and why the
    jobs behind it in its class wait (as it does, but for the capacity held for it)."""
    assert job.demand is not None
    assert job.policy is not None
    out: list[Intent] = []

    def fleet() -> list[ClusterView]:  # built only when a job is divided or preempts
        return _usable(job, capacity, view.now)

    sized = ""
    if job.elastic is not None:  # at the most that fits now, at least its min
        job, sized = elastic.choose_size(job, lambda j: _short(j, admission, fleet()))
    demand, policy = job.demand, job.policy
    assert demand is not None
    assert policy is not None

    def preempt_or(why: Wait) -> tuple[list[Intent], Wait | None, Wait | None]:
        if preempting is None:
            return out, why, why
        intents, held = preempting.for_job(job, fleet, capacity, admission, view)
        return out + intents, held or why, why

    def waits(why: Wait) -> tuple[list[Intent], Wait | None, Wait | None]:
        return out, why, why

    backoff = waiting_after_rollback(job, view)
    if backoff:
        _keep_waiting(job, admission)
        return waits(Wait(job.key, "ReservationRolledBack", backoff))
    if job.quota is not None:
        held, reclaims = _admits(job, admission, view, preempting, backfill, fleet)
        if reclaims is not None:
            assert admission is not None
            return out + _reclaim(job, reclaims.victims, admission, preempting), held, held
        if held is not None:
            return preempt_or(held) if held.reason == "QuotaExceeded" else waits(held)
    decision = divide(demand, fleet(), policy.rules)
    if not decision.placed:
        _keep_waiting(job, admission)
        return preempt_or(Wait(job.key, "Unschedulable", decision.reason))
    spent = share_requests(demand, decision)
    note = ""
    if backfill is not None:
        admitted, note = backfill.admits(job, spent, view.now)
        if not admitted:
            _keep_waiting(job, admission)
            return waits(Wait(job.key, KEPT_BACK, note))
    per_role = {role.name: role.request for role in demand.roles}
    for share in decision.shares:  # taken now: the next decision sees it spent
        capacity[share.cluster] = taken(capacity[share.cluster], share, per_role)
    if preempting is not None:
        preempting.bound(job)
    admitted_at = admitted_by = ""
    holds = None
    if admission is not None and job.quota is not None:
        admission.admit(job.quota, view.now_text)
        leaf = admission.leaf(job.quota)
        admitted_at, admitted_by = view.now_text, leaf.key if leaf else "?"
        holds = _bound_size(job.quota, spent)
    tenant = OPPORTUNISTIC_TENANT if is_opportunistic(job.priority) else admitted_by
    failover = policy.failover
    reserve = any(capacity[s.cluster].reservation for s in decision.shares)
    shares = _with_cells(decision.shares, view, tenant)
    out.append(Bind(job.key, shares, binding_message(decision.shares), admitted_at,
                    admitted_by, failover.purge_mode if failover else "", spent,
                    policy.propagate_deps, member_trainer=policy.member_trainer, sized=sized,
                    backfill=note, reserve=reserve, tenant=tenant, holds=holds))
    return out, None, None


def _bound_size(quota: Job, spent: tuple[tuple[str, tuple[Resources, ...]], ...]) -> Job:
    """The quota a bind holds: its job's, at the size it was bound (an elastic job may be
    bound below the size it asked the quota for)."""
    request: dict[str, int] = {}
    for _, requests in spent:
        for one in requests:
            for name, amount in one.items():
                request[name] = request.get(name, 0) + amount
    return replace(quota, request=request)


def _admits(job: JobView, admission: AdmissionPass | None, view: PassView,
            preempting: PreemptionPass | None, backfill: Backfill | None,
            fleet: Callable[[], list[ClusterView]]) -> tuple[Wait | None, Verdict | None]:
    """A queued job's quota: None when it fits; else why it waits, and the verdict when
    it reclaims its guarantee from borrowers (it waits ``Reclaiming`` for them to go)."""
    assert job.quota is not None
    if admission is None:
        return Wait(job.key, "NoQuotaTree", "the policy queues this job "
                    "(suspension.scheduling) but no ElasticQuotaTree exists in "
                    f"{QUOTA_TREE_NAMESPACE}"), None
    # A queue that waits for a reserved head (Priority policy, past its starvation bound)
    # still lets a job through that ends before the head could start.
    verdict = admission.check(job.quota, past_block=backfill is not None and ends_before(
        job, backfill.reservation, view.now))
    if not verdict.fits:
        admission.wait(job.quota)
        if admission.leaf(job.quota) is None:
            return Wait(job.key, "NoQuotaLeaf", verdict.reason), None
        return Wait(job.key, "QuotaExceeded", verdict.reason), None
    if not verdict.victims:
        return None, None
    admission.wait(job.quota)
    unfit = preempting.reclaim_leaves_unfit(job, verdict.victims, fleet()) \
        if preempting is not None else ""
    if unfit:
        return Wait(job.key, "QuotaExceeded", f"{verdict.reason}, but not yet: freeing "
                    f"the borrowers' nodes would not make it fit ({unfit})"), None
    return Wait(job.key, "Reclaiming", f"{verdict.reason}: preempting "
                f"{', '.join(v.job.key for v in verdict.victims)}"), verdict


def _with_cells(shares: tuple[ClusterShare, ...], view: PassView,
                tenant: str) -> tuple[ClusterShare, ...]:
    """Each share names its tenant's cells on its cluster, which its pods prefer."""
    owned = view.cells.by_tenant.get(tenant) if tenant else None
    if not owned:
        return shares
    return tuple(replace(s, cells=for_share(owned.get(s.cluster, ()), s.nodes))
                 for s in shares)


def _reclaim(job: JobView, victims: Sequence[Holding], admission: AdmissionPass,
             preempting: PreemptionPass | None) -> list[Intent]:
    """Requeue the jobs whose quota ``job`` takes back; a priority plan later in the pass
    never names them again."""
    admission.release(victims)
    if preempting is not None:
        preempting.requeued(v.job.key for v in victims)
    return [Requeue(v.job.key, f"preempted to return quota to {shown(job.key)}", job.key)
            for v in victims]


def _keep_waiting(job: JobView, admission: AdmissionPass | None) -> None:
    """A queued job that is not bound this pass keeps its place in its queue."""
    if admission is not None and job.quota is not None:
        admission.wait(job.quota)


def _queues(admission: AdmissionPass, left: Waiting, view: PassView) -> QueueReport:
    """Each leaf's waiting jobs in order, every node's usage after the pass, and how many
    nodes each leaf's cells hold."""
    pending: dict[str, tuple[str, ...]] = {}
    counts: dict[str, int] = {}
    oldest: dict[str, str] = {}
    for leaf, (count, first) in left.by_leaf(_leaf_keys(admission), SHOWN_PENDING).items():
        pending[leaf], counts[leaf] = tuple(j.key for j in first), count
        if first:
            oldest[leaf] = first[0].created
    usage = {p.key: dict(admission.usage(p.key)) for p in walk(admission.root)}
    cells = {leaf: {cluster: len(nodes) for cluster, nodes in clusters.items()}
             for leaf, clusters in view.cells.by_tenant.items()}
    return QueueReport(usage, pending, oldest, cells, counts)
