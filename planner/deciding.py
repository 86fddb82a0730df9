"""Unbound jobs: admitted by their quota queue (when their policy queues them), then divided
across members, in admission order; each one placed takes its capacity and quota before the
next is decided, so no two decisions spend the same GPU."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from planner.intents import Bind, Intent, QueueReport, Requeue, Wait, share_requests
from planner.preempting import PreemptionPass
from planner.view import Hold, JobView, PassView
from propagation.binding import binding_message
from propagation.division import divide, with_assumed
from propagation.views import ClusterView
from quota.engine import AdmissionPass
from quota.queues import queue_names
from quota.tree import walk

NO_POLICY = "no PropagationPolicy or ClusterPropagationPolicy selects this job"
QUOTA_TREE_NAMESPACE = "kube-system"


@dataclass(frozen=True)
class Decided:
    intents: list[Intent]
    holds: Mapping[str, Hold] = field(default_factory=dict)  # for the next pass's view
    retry_at: Mapping[str, float] = field(default_factory=dict)


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
    misses = 0
    preempting = PreemptionPass.start(view, candidates)
    for job in sorted(candidates, key=lambda c: (
            not (preempting is not None and preempting.first(c)), *c.order)):
        if view.scan_window and misses >= view.scan_window:
            break
        intents, why = _decide_one(job, admission, capacity, view, preempting)
        out += intents
        if why is None:
            misses = 0
        else:
            waits[job.key] = why
            misses += why.reason != "Reclaiming"
    if admission is not None:
        out.append(_queues(admission, waits))
    out += waits.values()
    if preempting is None:
        return Decided(out)
    return Decided(out, preempting.holds, preempting.retry_at)


def _decide_one(job: JobView, admission: AdmissionPass | None,
                capacity: dict[str, ClusterView], view: PassView,
                preempting: PreemptionPass | None = None
                ) -> tuple[list[Intent], Wait | None]:
    """Admit (when queued), divide and bind one job; the intents and why it waits."""
    assert job.demand is not None
    assert job.policy is not None
    out: list[Intent] = []

    def fleet() -> list[ClusterView]:  # built only when a job is divided or preempts
        return [v for v in capacity.values() if v.name not in job.avoid]

    def preempt_or(why: Wait) -> tuple[list[Intent], Wait | None]:
        if preempting is None:
            return out, why
        intents, held = preempting.for_job(job, fleet, capacity, admission, view)
        return out + intents, held or why

    if job.quota is not None:
        if admission is None:
            return out, Wait(job.key, "NoQuotaTree", "the policy queues this job "
                             "(suspension.scheduling) but no ElasticQuotaTree exists in "
                             f"{QUOTA_TREE_NAMESPACE}")
        verdict = admission.check(job.quota)
        if not verdict.fits:
            admission.wait(job.quota)
            if admission.leaf(job.quota) is None:
                return out, Wait(job.key, "NoQuotaLeaf", verdict.reason)
            return preempt_or(Wait(job.key, "QuotaExceeded", verdict.reason))
        if verdict.victims:
            out += [Requeue(v.job.key, f"preempted to return quota to {job.key}", job.key)
                    for v in verdict.victims]
            admission.release(verdict.victims)
            admission.wait(job.quota)
            victims = ", ".join(v.job.key for v in verdict.victims)
            return out, Wait(job.key, "Reclaiming", f"{verdict.reason}: preempting {victims}")
    decision = divide(job.demand, fleet(), job.policy.rules)
    if not decision.placed:
        if admission is not None and job.quota is not None:
            admission.wait(job.quota)
        return preempt_or(Wait(job.key, "Unschedulable", decision.reason))
    spent = share_requests(job.demand, decision)
    for cluster, requests in spent:  # taken now: the next decision sees it spent
        capacity[cluster] = with_assumed(capacity[cluster], requests)
    if preempting is not None:
        preempting.bound(job)
    admitted_at = admitted_by = ""
    if admission is not None and job.quota is not None:
        admission.admit(job.quota, view.now_text)
        leaf = admission.leaf(job.quota)
        admitted_at, admitted_by = view.now_text, leaf.key if leaf else "?"
    failover = job.policy.failover
    out.append(Bind(job.key, decision.shares, binding_message(decision.shares), admitted_at,
                    admitted_by, failover.purge_mode if failover else "", spent,
                    job.policy.propagate_deps))
    return out, None


def _queues(admission: AdmissionPass, waits: dict[str, Wait]) -> QueueReport:
    """Each leaf's waiting jobs in order (their queue and position go on their Wait), and
    every node's usage after the pass."""
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
    return QueueReport(usage, pending, oldest)
