"""Priority preemption inside a pass: for a waiting job that does not fit (capacity or
quota), keep the capacity already freed for it, or ask the pure preemption planner
(:func:`preemption.planner.plan`) for victims across members.

The state that outlives a pass (holds, when to plan again for a job with no plan) comes in
with the view and goes out with the plan; times are the view's.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial

from planner.elastic import shrunk_shares
from planner.intents import Intent, Preempt, Shrink, Wait, share_requests
from planner.view import Hold, JobView, PassView, PreemptionView, Stage
from preemption.freed import with_freed
from preemption.model import Outcome, Plan, Preemptor, Running
from preemption.planner import plan as plan_preemption
from preemption.planner import plan_reclaim
from preemption.quota_limits import quota_limits
from propagation.division import divide
from propagation.jobkey import shown
from propagation.spent import with_assumed, with_held
from propagation.views import ClusterView
from quota.cells import node_key
from quota.engine import AdmissionPass, Holding
from quota.priority import is_opportunistic
from quota.tree import leaves_by_namespace

NO_PLAN = Plan(Outcome.NO_PLAN, "")  # no priority plan asked for


def may_plan(jobs: Iterable[JobView], floor: int, retry_at: Mapping[str, float],
             now: float) -> bool:
    """Whether some waiting job may plan a preemption this pass (above the lowest priority,
    or a queued guaranteed job that may claim its guarantee's nodes back; not told a moment
    ago that there is no plan): only then does the view need the running jobs, which cost a
    walk over every job to build."""
    return any(j.stage is Stage.WAITING and retry_at.get(j.uid, 0.0) <= now and (
        j.priority > floor or (j.quota is not None and not is_opportunistic(j.priority)))
               for j in jobs)


@dataclass
class PreemptionPass:
    """One pass's preemption: the state it started from and the state it leaves."""

    view: PreemptionView
    now: float
    now_text: str
    holds: dict[str, Hold] = field(default_factory=dict)
    retry_at: dict[str, float] = field(default_factory=dict)
    plans: int = 0
    decided: bool = False  # at most one preemption a pass: no cascades
    gone: set[str] = field(default_factory=set)  # requeued earlier in this pass (reclaim)

    @classmethod
    def start(cls, view: PassView, waiting: Collection[str]) -> PreemptionPass | None:
        """The pass's preemption, keeping the state the last pass left for the jobs that
        still wait (``waiting``: their uids)."""
        if view.preemption is None:
            return None
        uids = waiting
        p = view.preemption
        return cls(p, view.now, view.now_text,
                   {uid: h for uid, h in p.holds.items() if uid in uids},
                   {uid: t for uid, t in p.retry_at.items() if uid in uids})

    @cached_property
    def opportunistic_running(self) -> bool:
        """Whether an opportunistic job runs: all that a job itself preempted may take."""
        return any(is_opportunistic(r.priority) for r in self.view.running)

    def may_plan(self, job: JobView, admission: AdmissionPass | None) -> bool:
        """Whether ``job`` may preempt at all: above the lowest priority, or a queued
        guaranteed job within its tenant's guarantee (it may take its nodes back)."""
        return job.priority > self.view.floor or (
            admission is not None and job.quota is not None
            and not is_opportunistic(job.priority) and admission.within_guarantee(job.quota))

    def bound(self, job: JobView) -> None:
        self.holds.pop(job.uid, None)

    def requeued(self, keys: Iterable[str]) -> None:
        """Jobs this pass already sends back to their queue (a quota reclaim): no plan may
        name them again (they would be evicted twice, and the second plan count on capacity
        the first one's claimant is owed)."""
        self.gone.update(keys)

    def reclaim_leaves_unfit(self, job: JobView, victims: Sequence[Holding],
                             fleet: Sequence[ClusterView]) -> str:
        """Why ``job`` would still not fit the nodes once the quota reclaim's ``victims``
        are gone ("" when it would, or when their pods are not all known: then quota alone
        decides, as without preemption). A reclaim that frees no node the claimant can use
        would only be undone: the victim is admitted again the next pass, and reclaimed
        again, over and over."""
        assert job.demand is not None
        assert job.policy is not None
        running = {r.key: r for r in self.view.running}
        if any(v.job.key not in running for v in victims):
            return ""
        views = with_freed(fleet, (pod for v in victims for pod in running[v.job.key].pods))
        decision = divide(job.demand, views, job.policy.rules)
        return "" if decision.placed else decision.reason

    def for_job(self, job: JobView, fleet: Callable[[], Sequence[ClusterView]],
                capacity: dict[str, ClusterView], admission: AdmissionPass | None,
                view: PassView) -> tuple[list[Intent], Wait | None]:
        """Keep what was freed for ``job``, or plan one preemption for it; its intents and
        its Wait (None when it simply waits as it would without preemption). ``fleet``
        builds the members it may use, only when a plan needs them."""
        p = self.view
        # within its tenant's guarantee, it may take its nodes back from borrowers
        claims = admission is not None and job.quota is not None and \
            not is_opportunistic(job.priority) and admission.within_guarantee(job.quota)
        if job.priority <= p.floor and job.uid not in self.holds and not claims:
            return [], None  # the common case: nobody below it to preempt
        hold = self.holds.get(job.uid)
        if hold is not None and hold.expires > self.now and not _taken(hold, p.running,
                                                                        job.key):
            on = dict(hold.nodes)
            for cluster, requests in hold.requests:  # nobody else takes it
                if cluster in capacity:
                    capacity[cluster] = with_held(capacity[cluster], requests, on[cluster]) \
                        if on.get(cluster) else with_assumed(capacity[cluster], list(requests))
            if admission is not None and job.quota is not None:
                verdict = admission.check(job.quota)
                if verdict.fits and not verdict.victims:
                    admission.admit(job.quota, self.now_text)  # its quota stays its own
            return [], Wait(job.key, "Preempting", hold.message)
        self.holds.pop(job.uid, None)
        if self.decided or self.plans >= p.plans_per_pass or \
                (job.priority <= p.floor and not claims) or \
                self.retry_at.get(job.uid, 0.0) > self.now:
            return [], None  # nobody below it, one preemption a pass, or no plan a moment ago
        if admission is not None and job.quota is not None:
            verdict = admission.check(job.quota)
            if not verdict.fits and not verdict.blockers:
                return [], None  # it waits for its turn, not for quota
        assert job.demand is not None
        assert job.policy is not None
        self.plans += 1
        root = view.quota.root if view.quota is not None else None
        leaves = leaves_by_namespace(root) if root is not None else {}
        leaf = leaves.get(job.namespace) if job.quota is not None else None
        limits = quota_limits(root, admission.usage) \
            if root is not None and admission is not None else None
        preemptor = Preemptor(job.key, job.namespace, job.priority, job.demand,
                              job.policy.rules,
                              job.quota.charge if job.quota is not None and leaf else {},
                              leaf.key if leaf else None, preempted=bool(job.preempted_by))
        running = tuple(r for r in p.running if r.key not in self.gone) if self.gone \
            else p.running
        planned = NO_PLAN
        if job.priority > p.floor and not (job.preempted_by and not self.opportunistic_running):
            # (preempted itself, it takes only opportunistic jobs: none runs, no plan)
            planned = plan_preemption(preemptor, running, fleet(), limits, view.cells.owners)
        def why(victim: Running) -> str:
            return f"preempted by {shown(job.key)} (priority {job.priority} > {victim.priority})"

        kind = "priority"
        if planned.outcome is not Outcome.PREEMPT and claims and limits is not None and \
                leaf is not None:
            planned = plan_reclaim(preemptor, running, fleet(), limits, view.cells.owners)
            why, kind = partial(_claimed, job.key, leaf.key, view.cells.owners), "guarantee"
        if planned.outcome is not Outcome.PREEMPT or planned.decision is None:
            self.retry_at[job.uid] = self.now + p.retry_seconds
            return [], None
        self.decided = True
        if admission is not None:  # a reclaim later in the pass takes someone else
            admission.leaving(v.key for v in planned.victims if v.keep is None)
        victims = tuple((v.key, why(v)) for v in planned.victims if v.keep is None)
        shrinks: list[Intent] = [_shrink(v, why(v), job.key)
                                 for v in planned.victims if v.keep is not None]
        shares = planned.decision.shares
        self.holds[job.uid] = Hold(share_requests(job.demand, planned.decision),
                                   self.now + p.hold_seconds, planned.reason,
                                   tuple((s.cluster, s.nodes) for s in shares),
                                   _on(p.running, {(s.cluster, n) for s in shares
                                                   for n in s.nodes}))
        return ([*shrinks, Preempt(job.key, victims, planned.reason, kind)],
                Wait(job.key, "Preempting", planned.reason))


def _on(running: Sequence[Running], nodes: set[tuple[str, str]]) -> tuple[str, ...]:
    """The jobs with a pod on one of ``nodes`` (cluster, node)."""
    return tuple(sorted(r.key for r in running
                        if any((pod.cluster, pod.node) in nodes for pod in r.pods)))


def _taken(hold: Hold, running: Sequence[Running], holder: str) -> bool:
    """Whether a job that was not on the held nodes when the plan was made stands there now:
    the hold is lost, and waiting it out (``hold_seconds``) would keep the holder, and a
    queue that waits for it, waiting for nothing. On the trace a claimant held a node for
    75 s that another tenant's pods had been put on; its queue waited behind it."""
    held = {(cluster, node) for cluster, nodes in hold.nodes for node in nodes}
    stayed = set(hold.stayed)
    return any(r.key != holder and r.key not in stayed and _on((r,), held) for r in running)


def _claimed(claimant: str, leaf: str, owners: Mapping[str, str], victim: Running) -> str:
    """Why a victim of a claim within a guarantee goes: it stood on the claimant's cells
    (``owners``: node key -> leaf), or ran on borrowed capacity (or is opportunistic)."""
    on = sorted({pod.node for pod in victim.pods
                 if owners.get(node_key(pod.cluster, pod.node)) == leaf})
    where = f"it ran on {leaf}'s cells ({', '.join(on)})" if on else \
        "it ran on capacity its tenant borrowed"
    return (f"preempted by {shown(claimant)}, which claims the guarantee of {leaf}: {where} "
            f"(priority {victim.priority})")


def _shrink(victim: Running, why: str, preemptor: str) -> Shrink:
    """An elastic victim keeps ``victim.keep`` replicas of its role: its highest go."""
    e = victim.elastic
    assert e is not None
    assert victim.keep is not None
    shares, changed = shrunk_shares(e.placement, e.role, victim.keep)
    where = ", ".join(changed)
    return Shrink(victim.key, e.role, e.size, victim.keep, shares,
                  f"shrunk {e.size}→{victim.keep} {e.role.lower()} replicas on {where}: {why}",
                  changed, preemptor=preemptor)

