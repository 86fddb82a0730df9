"""Unbound jobs: admitted by their quota queue (when their policy queues them), then divided
across members, in admission order; each one placed takes its capacity and quota before the
next is decided, so no two decisions spend the same GPU."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from planner import elastic
from planner.backfill import KEPT_BACK, RESERVE_TRIES, Backfill, ends_before
from planner.intents import Bind, Intent, QueueReport, Requeue, Wait, share_requests
from planner.preempting import PreemptionPass
from planner.reserving import waiting_after_rollback
from planner.view import Hold, JobView, PassView, Reservation, Stage, TimedJob
from preemption.freed import taken_between
from propagation.binding import binding_message
from propagation.clusters import filter_clusters
from propagation.division import ClusterShare, divide, taken
from propagation.views import ClusterView
from quota.cells import for_share
from quota.engine import AdmissionPass, Holding
from quota.priority import OPPORTUNISTIC_TENANT, is_opportunistic
from quota.queues import queue_names
from quota.tree import walk

NO_POLICY = "no PropagationPolicy or ClusterPropagationPolicy selects this job"
QUOTA_TREE_NAMESPACE = "kube-system"


@dataclass(frozen=True)
class Decided:
    intents: list[Intent]
    holds: Mapping[str, Hold] = field(default_factory=dict)  # for the next pass's view
    retry_at: Mapping[str, float] = field(default_factory=dict)
    reservations: Mapping[str, Reservation] = field(default_factory=dict)  # by head uid


def decide(jobs: Sequence[JobView], view: PassView) -> Decided:
    """Intents for ``jobs`` (unbound, not finished): preemptions and bindings in decision
    order, then the queues' state, then why each of the others waits."""
    waits: dict[str, Wait] = {}
    candidates: list[JobView] = []
    for job in jobs:
        if job.invalid or job.demand is None:  # before any quota or capacity is counted
            waits[job.key] = Wait(job.key, "Invalid", job.invalid)
        elif job.policy is None:
            waits[job.key] = Wait(job.key, "NoMatchingPolicy", NO_POLICY)
        else:
            candidates.append(job)
    admission = None
    if view.quota is not None:
        quota = view.quota
        admission = AdmissionPass(quota.root, quota.holdings,
                                  [c.quota for c in candidates if c.quota is not None],
                                  quota.policies, quota.starvation_bound)
    capacity = dict(view.capacity)
    out: list[Intent] = []
    misses: dict[str, int] = {}  # per queue: its unplaced jobs in a row (the scan window)
    preempting = PreemptionPass.start(view, candidates)
    backfill: Backfill | None = None
    tries = RESERVE_TRIES if view.timed or view.reservations else 0
    timed = list(view.timed)  # and the jobs of known runtime this pass binds, as they end
    for job in sorted(candidates, key=lambda c: (
            not (preempting is not None and preempting.first(c)), *c.order)):
        queue = _queue_of(job, admission)
        if view.scan_window and misses.get(queue, 0) >= view.scan_window:
            continue
        # (copied only while a later head's reservation may count this job's end)
        before = dict(capacity) if tries and backfill is None and job.runtime is not None \
            else None
        intents, why = _decide_one(job, admission, capacity, view, preempting, backfill)
        out += intents
        if why is None:
            misses[queue] = 0
            if before is not None:
                timed.append(_bound_timed(job, before, capacity, view.now))
            continue
        if why.reason == "Unschedulable" and backfill is None and tries:
            tries -= 1  # the first jobs that do not fit: the first whose start is known
            backfill = Backfill.start(job, _usable(job, capacity), timed, view.now,
                                      view.reservations)
            if backfill is not None:
                why = backfill.head_wait(why)
        waits[job.key] = why
        misses[queue] = misses.get(queue, 0) + (why.reason != "Reclaiming")
    out += _grow(view, capacity, admission, waits, candidates)
    if admission is not None:
        out.append(_queues(admission, waits, view))
    out += waits.values()
    reserved = {backfill.head.uid: backfill.reservation} if backfill is not None else {}
    if preempting is None:
        return Decided(out, reservations=reserved)
    return Decided(out, preempting.holds, preempting.retry_at, reserved)


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


def _queue_of(job: JobView, admission: AdmissionPass | None) -> str:
    """The quota queue (leaf) a job waits in; "" for a job no queue admits. The scan window
    counts per queue, so that one tenant's waiting jobs never hide another's."""
    if admission is None or job.quota is None:
        return ""
    leaf = admission.leaf(job.quota)
    return leaf.key if leaf is not None else ""


def _usable(job: JobView, capacity: dict[str, ClusterView]) -> list[ClusterView]:
    return [v for v in capacity.values() if v.name not in job.avoid]


def _grow(view: PassView, capacity: dict[str, ClusterView], admission: AdmissionPass | None,
          waits: Mapping[str, Wait], candidates: Sequence[JobView]) -> list[Intent]:
    """Bound elastic jobs below their max grow into what the waiting jobs left, unless a job
    of at least their priority waits for the nodes or the quota growing them would take."""
    bound = [j for j in view.jobs if j.elastic is not None and j.stage is Stage.BOUND]
    if not bound:
        return []
    waiting = []
    for c in candidates:
        why = waits.get(c.key)
        if why is None or c.policy is None:
            continue
        if why.reason in elastic.WAITING_FOR_NODES:
            eligible = filter_clusters(list(capacity.values()), c.policy.rules.affinity,
                                       c.policy.rules.tolerations).eligible
            waiting.append(elastic.Waiting(-c.order[0], frozenset(v.name for v in eligible)))
        elif why.reason in elastic.WAITING_FOR_QUOTA:
            waiting.append(elastic.Waiting(-c.order[0], quota=True))
    return list(elastic.grow(bound, capacity, elastic.QuotaRoom(admission), waiting))


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
                ) -> tuple[list[Intent], Wait | None]:
    """Admit (when queued), divide and bind one job; the intents and why it waits."""
    assert job.demand is not None
    assert job.policy is not None
    out: list[Intent] = []

    def fleet() -> list[ClusterView]:  # built only when a job is divided or preempts
        return _usable(job, capacity)

    sized = ""
    if job.elastic is not None:  # at the most that fits now, at least its min
        job, sized = elastic.choose_size(job, lambda j: _short(j, admission, fleet()))
    demand, policy = job.demand, job.policy
    assert demand is not None
    assert policy is not None

    def preempt_or(why: Wait) -> tuple[list[Intent], Wait | None]:
        if preempting is None:
            return out, why
        intents, held = preempting.for_job(job, fleet, capacity, admission, view)
        return out + intents, held or why

    backoff = waiting_after_rollback(job, view)
    if backoff:
        _keep_waiting(job, admission)
        return out, Wait(job.key, "ReservationRolledBack", backoff)
    if job.quota is not None:
        if admission is None:
            return out, Wait(job.key, "NoQuotaTree", "the policy queues this job "
                             "(suspension.scheduling) but no ElasticQuotaTree exists in "
                             f"{QUOTA_TREE_NAMESPACE}")
        # A queue that waits for a reserved head (Priority policy, past its starvation bound)
        # still lets a job through that ends before the head could start.
        verdict = admission.check(job.quota, past_block=backfill is not None and ends_before(
            job, backfill.reservation, view.now))
        if not verdict.fits:
            admission.wait(job.quota)
            if admission.leaf(job.quota) is None:
                return out, Wait(job.key, "NoQuotaLeaf", verdict.reason)
            return preempt_or(Wait(job.key, "QuotaExceeded", verdict.reason))
        if verdict.victims:
            admission.wait(job.quota)
            unfit = preempting.reclaim_leaves_unfit(job, verdict.victims, fleet()) \
                if preempting is not None else ""
            if unfit:
                return preempt_or(Wait(job.key, "QuotaExceeded", f"{verdict.reason}, but not "
                                       "yet: freeing the borrowers' nodes would not make it "
                                       f"fit ({unfit})"))
            return out + _reclaim(job, verdict.victims, admission, preempting), Wait(
                job.key, "Reclaiming", f"{verdict.reason}: preempting "
                f"{', '.join(v.job.key for v in verdict.victims)}")
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
            return out, Wait(job.key, KEPT_BACK, note)
    per_role = {role.name: role.request for role in demand.roles}
    for share in decision.shares:  # taken now: the next decision sees it spent
        capacity[share.cluster] = taken(capacity[share.cluster], share, per_role)
    if preempting is not None:
        preempting.bound(job)
    admitted_at = admitted_by = ""
    if admission is not None and job.quota is not None:
        admission.admit(job.quota, view.now_text)
        leaf = admission.leaf(job.quota)
        admitted_at, admitted_by = view.now_text, leaf.key if leaf else "?"
    tenant = OPPORTUNISTIC_TENANT if is_opportunistic(job.priority) else admitted_by
    failover = policy.failover
    reserve = any(capacity[s.cluster].reservation for s in decision.shares)
    shares = _with_cells(decision.shares, view, tenant)
    out.append(Bind(job.key, shares, binding_message(decision.shares), admitted_at,
                    admitted_by, failover.purge_mode if failover else "", spent,
                    policy.propagate_deps, sized=sized, backfill=note, reserve=reserve,
                    tenant=tenant))
    return out, None


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
    return [Requeue(v.job.key, f"preempted to return quota to {job.key}", job.key)
            for v in victims]


def _keep_waiting(job: JobView, admission: AdmissionPass | None) -> None:
    """A queued job that is not bound this pass keeps its place in its queue."""
    if admission is not None and job.quota is not None:
        admission.wait(job.quota)


def _queues(admission: AdmissionPass, waits: dict[str, Wait], view: PassView) -> QueueReport:
    """Each leaf's waiting jobs in order (their queue and position go on their Wait), every
    node's usage after the pass, and how many nodes each leaf's cells hold."""
    names = queue_names(p.path for p in walk(admission.root))
    pending: dict[str, tuple[str, ...]] = {}
    oldest: dict[str, str] = {}
    for leaf, queued in admission.queues().items():
        ordered = [j for j in queued if j.key in waits]
        pending[leaf] = tuple(j.key for j in ordered)
        queue = names[tuple(leaf.split("/"))]
        for position, job in enumerate(ordered, start=1):
            why = waits[job.key]
            waits[job.key] = Wait(why.job, why.reason, why.message, queue, position)
        if ordered:
            oldest[leaf] = ordered[0].created
    usage = {p.key: dict(admission.usage(p.key)) for p in walk(admission.root)}
    cells = {leaf: {cluster: len(nodes) for cluster, nodes in clusters.items()}
             for leaf, clusters in view.cells.by_tenant.items()}
    return QueueReport(usage, pending, oldest, cells)
