"""The pure planner: each kind of intent from a hand-built view, and determinism."""

from __future__ import annotations

from dataclasses import replace

from planner import PassView, plan_pass
from planner.intents import (
    Bind,
    Completed,
    Dispatch,
    Expire,
    FailOver,
    Preempt,
    Release,
    RemoveWorks,
    Requeue,
    Unbind,
    Wait,
    WorkRemoval,
)
from planner.plan import Plan
from planner.view import (
    FAILOVER_AVOID_SECONDS,
    FailoverSettings,
    JobView,
    PolicyView,
    PreemptionView,
    QuotaView,
    Stage,
    WorkView,
)
from preemption.model import Pod, Running
from propagation.division import ClusterShare
from propagation.resources import Resources
from propagation.views import ClusterView, JobDemand, NodeGroup, PlacementRules, Role
from quota.engine import Holding, Job
from quota.priority import OPPORTUNISTIC_TENANT
from quota.tree import QuotaNode

NOW = 1_000_000.0
GPU = "nvidia.com/gpu"
POLICY = PolicyView("p", PlacementRules())
GRACEFUL = replace(POLICY, failover=FailoverSettings(30.0, "Graciously", 600.0))


def member(name: str, gpus: int = 8, ready: bool = True) -> ClusterView:
    return ClusterView(name, ready, node_groups=(NodeGroup(2, Resources.of({GPU: gpus})),),
                       not_ready_reason="" if ready else "agent heartbeat 99s old")


def view(*jobs: JobView, clusters: tuple[ClusterView, ...] = (member("a"), member("b")),
         lost_since: dict[str, float] | None = None) -> PassView:
    by_name = {c.name: c for c in clusters}
    return PassView(NOW, "now", jobs, by_name, by_name, lost_since or {})


def waiting(name: str, gpus: int = 4, replicas: int = 2, **changes: object) -> JobView:
    key = f"PyTorchJob/ns/{name}"
    demand = JobDemand(key, (Role("Worker", replicas, Resources.of({GPU: gpus})),))
    return replace(JobView(key, name, f"t-{name}", Stage.WAITING, demand, policy=POLICY),
                   **changes)


def bound(name: str, works: tuple[WorkView, ...], **changes: object) -> JobView:
    placement = tuple(ClusterShare(w.cluster, (("Worker", 1),), (("Worker", 0),))
                      for w in works)
    return replace(JobView(f"PyTorchJob/ns/{name}", name, "t", Stage.BOUND, policy=POLICY,
                           placement=placement, works=works, dispatch_finalizer=True),
                   **changes)


def test_a_waiting_job_is_bound_and_spends_its_capacity_before_the_next() -> None:
    plan = plan_pass(view(waiting("j3", gpus=8), waiting("j1", gpus=8), waiting("j2", gpus=8)))
    assert [(b.job, b.clusters) for b in plan.binds] == [
        ("PyTorchJob/ns/j1", ("a",)), ("PyTorchJob/ns/j2", ("b",))]
    [why] = plan.waits
    assert (why.job, why.reason) == ("PyTorchJob/ns/j3", "Unschedulable")


def test_a_job_avoids_the_members_it_failed_over_from() -> None:
    [bind] = plan_pass(view(waiting("one", avoid=("a",)))).binds
    assert bind.clusters == ("b",)


def test_a_job_takes_a_member_it_failed_over_from_again_once_its_avoidance_ends() -> None:
    """The only member that can hold it is the one it failed on: it waits there until
    FAILOVER_AVOID_SECONDS after its failover, then is bound there again, not never."""
    only_a = (member("a"),)
    job = waiting("one", avoid=("a",), failed_over_at=NOW - FAILOVER_AVOID_SECONDS + 1)
    plan = plan_pass(view(job, clusters=only_a))
    assert not plan.binds
    assert [w.reason for w in plan.waits] == ["Unschedulable"]
    [parked] = plan.waiting.parked.values()
    assert parked.at == NOW + 1  # looked at again when it ends, nothing else needed
    later = replace(job, failed_over_at=NOW - FAILOVER_AVOID_SECONDS)
    [bind] = plan_pass(view(later, clusters=only_a)).binds
    assert bind.clusters == ("a",)


def test_a_member_a_job_is_still_evicted_from_stays_avoided_past_the_window() -> None:
    job = waiting("one", avoid=("a",), failed_over_at=NOW - 10 * FAILOVER_AVOID_SECONDS,
                  evicting=(WorkView("m-a/w", "a"),))
    assert not plan_pass(view(job, clusters=(member("a"),))).binds


def test_invalid_and_unmatched_jobs_wait_with_their_reason() -> None:
    plan = plan_pass(view(waiting("bad", demand=None, invalid="spec: 2^62 replicas"),
                          waiting("stray", policy=None)))
    assert [(w.reason, w.message) for w in plan.waits] == [
        ("Invalid", "spec: 2^62 replicas"),
        ("NoMatchingPolicy",
         "no PropagationPolicy or ClusterPropagationPolicy selects this job")]


def test_a_share_on_a_lost_member_fails_over_after_the_toleration() -> None:
    job = bound("j", (WorkView("m-a/w", "a"), WorkView("m-b/w", "b")), policy=GRACEFUL)
    lost = (member("a", ready=False), member("b"))
    assert not plan_pass(view(job, clusters=lost, lost_since={"a": NOW - 10})).intents
    [move] = plan_pass(view(job, clusters=lost, lost_since={"a": NOW - 60})).intents
    assert isinstance(move, FailOver)
    assert (move.avoid, move.lost_clusters, move.since) == (("a",), ("a",), NOW - 60)
    assert move.evict_after == NOW + 600
    assert move.works == ("m-a/w", "m-b/w")


def test_an_unhealthy_share_fails_over_immediately_mode_marks_requeue() -> None:
    sick = WorkView("m-a/w", "a", unhealthy=True, unhealthy_since=NOW - 100,
                    unhealthy_reason="a: ImagePullFailed")
    policy = replace(POLICY, failover=FailoverSettings(30.0, "Immediately", 0.0))
    [move] = plan_pass(view(bound("j", (sick,), policy=policy))).intents
    assert isinstance(move, FailOver)
    assert move.evict_after is None
    assert move.reason == "a: ImagePullFailed for 100s (toleration 30s)"


def test_a_deleted_job_lets_go_once_every_work_is_going() -> None:
    """The job goes at once, as under the training operator; each Work's agent finalizer
    holds the Work until its member is purged (the hub drops it for a lost member)."""
    works = (WorkView("m-a/w", "a", keeps_copy=True), WorkView("m-b/w", "b", deleting=True))
    job = bound("j", works, stage=Stage.DELETING)
    [remove] = plan_pass(view(job, clusters=(member("a"),))).intents
    assert remove == RemoveWorks(job.key, (
        WorkRemoval("m-a/w", delete=True, purge_now=True),
        WorkRemoval("m-b/w", delete=False, drop_agent_finalizer=True)), "job deleted",
        release=True)
    going = (replace(works[0], deleting=True), works[1])
    assert plan_pass(view(replace(job, works=going), clusters=(member("a"), member("b")))
                     ).intents == (Release(job.key),)
    [lost] = plan_pass(view(replace(job, works=going), clusters=(member("a"),))).intents
    assert isinstance(lost, RemoveWorks)  # b's agent cannot purge it: the hub lets it go
    assert lost.works[1].drop_agent_finalizer
    assert plan_pass(view(replace(job, works=()))).intents == (Release(job.key),)
    assert not plan_pass(view(replace(job, works=(), dispatch_finalizer=False))).intents


def test_a_requeued_job_waits_for_its_works_then_unbinds() -> None:
    job = bound("j", (WorkView("m-a/w", "a"),), stage=Stage.REQUEUED,
                requeue_reason="preempted")
    [remove] = plan_pass(view(job)).intents
    assert isinstance(remove, RemoveWorks)
    assert plan_pass(view(replace(job, works=()))).intents == (Unbind(job.key, "preempted"),)


def test_a_requeued_job_its_members_reported_succeeded_is_completed_never_run_again() -> None:
    """The requeue (a reclaim, say) was decided before the job's last reports came: it had
    ended. Its Works are not taken away to run it again; going already, they still say so."""
    works = (WorkView("m-a/w", "a", state="Succeeded"), WorkView("m-b/w", "b", state="Running"))
    job = bound("j", works, stage=Stage.REQUEUED, requeue_reason="reclaimed")
    [remove] = plan_pass(view(job)).intents
    assert isinstance(remove, RemoveWorks)  # one share still runs: the requeue goes on
    ended = tuple(replace(w, state="Succeeded", deleting=i == 0) for i, w in enumerate(works))
    [completed] = plan_pass(view(replace(job, works=ended))).intents
    assert isinstance(completed, Completed)
    assert "(reclaimed)" in completed.reason
    # its Works gone after saying so (the cache keeps their last word): completed too; one
    # share's word alone is not the gang's
    gone = plan_pass(view(replace(job, works=(), ended=ended))).intents
    assert isinstance(gone[0], Completed)
    assert plan_pass(view(replace(job, works=(), ended=ended[:1]))).intents == (
        Unbind(job.key, "reclaimed"),)
    # its status said so, its mark not yet off, its Works gone: never unbound to wait again
    assert isinstance(plan_pass(view(replace(job, works=(), finished=True))).intents[0],
                      Completed)


def test_missing_works_are_dispatched_and_a_finished_job_expires() -> None:
    job = bound("j", (WorkView("m-a/w", "a"),))
    job = replace(job, placement=(*job.placement, ClusterShare("b", (("Worker", 1),),
                                                               (("Worker", 1),))))
    assert plan_pass(view(job)).intents == (Dispatch(job.key, ("b",)),)
    done = replace(job, finished=True, finished_at=NOW - 120, ttl_seconds=60)
    [expire] = plan_pass(view(done)).intents
    assert isinstance(expire, Expire)
    assert not plan_pass(view(replace(done, ttl_seconds=600))).intents


def test_only_a_finished_job_with_nothing_evicted_is_settled() -> None:
    """Settled jobs are no longer swept and keep no view in the hub: a running, requeued or
    evicting one must never be among them, or its next decision would wait for a change."""
    def job(name: str, **changes: object) -> JobView:
        works = (WorkView(f"m-a/{name}", "a", state="Succeeded"),)
        return replace(bound(name, works, finished=True, finished_at=NOW - 5, ttl_seconds=600),
                       **changes)
    done, unbound = job("done"), job("unbound", stage=Stage.DONE, works=())
    plan = plan_pass(view(
        done, unbound, job("running", finished=False), job("requeued", stage=Stage.REQUEUED),
        job("evicting", evicting=(WorkView("m-b/w", "b", evict_after=NOW + 5),))))
    assert plan.settled == {"done", "unbound"}
    assert done.uid in plan.look_at  # its TTL still comes by timer


def test_evicted_works_go_once_the_job_runs_elsewhere_or_at_their_deadline() -> None:
    job = bound("j", (WorkView("m-b/w", "b", state="Pending"),),
                evicting=(WorkView("m-a/w", "a", evict_after=NOW + 5),))
    assert not plan_pass(view(job)).intents
    running = replace(job, works=(WorkView("m-b/w", "b", state="Running"),))
    assert plan_pass(view(running)).intents == (
        RemoveWorks(job.key, (WorkRemoval("m-a/w"),), "evicted"),)
    late = replace(job, evicting=(WorkView("m-a/w", "a", evict_after=NOW - 1),))
    assert plan_pass(view(late)).intents == (
        RemoveWorks(job.key, (WorkRemoval("m-a/w"),), "evicted"),)


def test_equal_views_give_equal_plans() -> None:
    jobs = [waiting(f"j{i}", gpus=1 + i % 8, replicas=1 + i % 3) for i in range(40)]
    first = plan_pass(view(*jobs))
    assert first == plan_pass(view(*jobs))
    assert all(isinstance(i, Bind | Wait) for i in first.intents)


# -- priority preemption: a Preempt intent, its state in the view and in the plan -----------
def _full_member_and_victim() -> tuple[tuple[ClusterView, ...], Running]:
    full = (ClusterView("a", True, node_groups=tuple(
        NodeGroup(1, Resources.of({GPU: 0}), nodes=(f"n{i}",)) for i in range(2))),)
    victim = Running("PyTorchJob/ns/low", "ns", 0, "t-low",
                     tuple(Pod("a", f"n{i}", Resources.of({GPU: 8})) for i in range(2)))
    return full, victim


def _preempting(*jobs: JobView, clusters: tuple[ClusterView, ...],
                preemption: PreemptionView) -> PassView:
    by_name = {c.name: c for c in clusters}
    return PassView(NOW, "now", jobs, by_name, by_name, preemption=preemption)


def test_a_higher_priority_job_preempts_and_its_capacity_is_held_by_the_next_view() -> None:
    full, victim = _full_member_and_victim()
    high = waiting("high", gpus=8, priority=100)
    plan = plan_pass(_preempting(high, clusters=full,
                                 preemption=PreemptionView((victim,))))
    [preempt] = [i for i in plan.intents if isinstance(i, Preempt)]
    assert preempt.job == "PyTorchJob/ns/high"
    assert preempt.victims == (
        ("PyTorchJob/ns/low", "preempted by PyTorchJob ns/high (priority 100 > 0)"),)
    assert [w.reason for w in plan.waits] == ["Preempting"]
    hold = plan.holds["high"]
    assert hold.expires == NOW + 300
    # The next pass is given the hold: it waits on it and plans nothing new.
    again = plan_pass(_preempting(high, clusters=full, preemption=PreemptionView(
        (victim,), holds=plan.holds)))
    assert not [i for i in again.intents if isinstance(i, Preempt)]
    assert [w.reason for w in again.waits] == ["Preempting"]
    assert again.holds == plan.holds
    # An expired hold is dropped and planned for again.
    expired = {"high": replace(hold, expires=NOW - 1)}
    late = plan_pass(_preempting(high, clusters=full, preemption=PreemptionView(
        (victim,), holds=expired)))
    assert [i for i in late.intents if isinstance(i, Preempt)]


def test_the_held_nodes_stay_held_while_the_victims_pods_are_still_there() -> None:
    """An 8-GPU node holds a 4-GPU victim (4 free), another node has 3 free; the high job
    (8 GPUs) preempts the victim. Next pass the victim's pod is still reported there and the
    victim waits again: the only node it fits is the one held for the high job, so it waits
    (it used to be bound back onto it: held anywhere, nothing was taken while no node fit
    the high job yet)."""
    node = (ClusterView("a", True, node_groups=(
        NodeGroup(1, Resources.of({GPU: 4}), nodes=("n0",)),
        NodeGroup(1, Resources.of({GPU: 3}), nodes=("n1",)))),)
    low = Running("PyTorchJob/ns/low", "ns", 0, "t-low", (Pod("a", "n0", Resources.of({GPU: 4})),))
    high = waiting("high", gpus=8, replicas=1, priority=100)
    plan = plan_pass(_preempting(high, clusters=node, preemption=PreemptionView((low,))))
    assert plan.holds["high"].nodes == (("a", ("n0",)),)
    again = plan_pass(_preempting(high, waiting("low", gpus=4, replicas=1), clusters=node,
                                  preemption=PreemptionView((), holds=plan.holds)))
    assert not again.binds
    assert sorted(w.reason for w in again.waits) == ["Preempting", "Unschedulable"]


def test_a_hold_another_job_was_put_on_is_given_up_and_planned_for_again() -> None:
    """The high job preempted ``low`` on n0 and holds it. Next pass low is gone, but the
    member put another job, ``thief``, on n0: the high job plans again at once instead of
    waiting out its hold. While only jobs that were there at
    the plan stand on n0 (low, still leaving), the hold stands."""
    full, low = _full_member_and_victim()
    low = replace(low, pods=low.pods[:1])  # on n0; n1 held by spare
    spare = Running("PyTorchJob/ns/spare", "ns", 0, "t-0",  # older: low goes first
                    (Pod("a", "n1", Resources.of({GPU: 8})),))
    high = waiting("high", gpus=8, replicas=1, priority=100)
    plan = plan_pass(_preempting(high, clusters=full,
                                 preemption=PreemptionView((low, spare))))
    assert plan.holds["high"].nodes == (("a", ("n0",)),)
    assert plan.holds["high"].stayed == (low.key,)
    still = plan_pass(_preempting(high, clusters=full, preemption=PreemptionView(
        (low, spare), holds=plan.holds)))
    assert [w.reason for w in still.waits] == ["Preempting"]
    assert not [i for i in still.intents if isinstance(i, Preempt)]
    thief = replace(low, key="PyTorchJob/ns/thief", started="t-thief")
    taken = plan_pass(_preempting(high, clusters=full, preemption=PreemptionView(
        (thief, spare), holds=plan.holds)))
    [preempt] = [i for i in taken.intents if isinstance(i, Preempt)]
    assert [key for key, _ in preempt.victims] == [thief.key]  # the youngest now
    assert taken.holds["high"].stayed == (thief.key,)


def test_no_plan_is_retried_only_after_the_retry_time_and_the_lowest_never_preempts() -> None:
    full, victim = _full_member_and_victim()
    high = waiting("high", gpus=8, priority=100)
    plan = plan_pass(_preempting(high, clusters=full, preemption=PreemptionView(())))
    assert plan.retry_at == {"high": NOW + 5}
    assert [w.reason for w in plan.waits] == ["Unschedulable"]
    waiting_on = plan_pass(_preempting(high, clusters=full, preemption=PreemptionView(
        (victim,), retry_at=plan.retry_at)))
    assert not [i for i in waiting_on.intents if isinstance(i, Preempt)]
    lowest = plan_pass(_preempting(waiting("zero", gpus=8), clusters=full,
                                   preemption=PreemptionView((victim,))))
    assert not [i for i in lowest.intents if isinstance(i, Preempt)]
    preempted = plan_pass(_preempting(replace(high, preempted_by="PyTorchJob/ns/x"),
                                      clusters=full, preemption=PreemptionView((victim,))))
    assert not [i for i in preempted.intents if isinstance(i, Preempt)]  # no cascades
    assert preempted.retry_at == {"high": NOW + 5}  # no walk over the running jobs meanwhile


def test_a_class_that_does_not_fit_is_decided_once_and_hides_no_other_tenant() -> None:
    """Jobs alike (one quota leaf, request, priority, policy) are one class: a pass decides
    its first job and stops there when it does not fit, so a tenant whose many jobs are
    beyond its max costs one decision, every one of them says why it waits, and another
    tenant's job behind them in order is placed in the same pass."""
    root = QuotaNode("root", {GPU: 16}, {GPU: 16}, children=(
        QuotaNode("a", {GPU: 8}, {GPU: 8}, ("team-a",)),
        QuotaNode("b", {GPU: 8}, {GPU: 8}, ("team-b",))))

    def queued(namespace: str, name: str, gpus: int, priority: int) -> JobView:
        key = f"PyTorchJob/{namespace}/{name}"
        demand = JobDemand(key, (Role("Worker", 1, Resources.of({GPU: gpus})),))
        return JobView(key, name, f"t-{name}", Stage.WAITING, demand,
                       policy=replace(POLICY, queues=True),
                       quota=Job(key, namespace, {GPU: gpus}, priority, f"t-{name}"),
                       priority=priority)

    over = [queued("team-a", f"a{i}", 16, 5) for i in range(40)]  # beyond team-a's max
    low = queued("team-b", "b1", 4, 0)  # within team-b's guarantee, behind them in order
    plan = plan_pass(replace(view(*over, low), quota=QuotaView(root, ())))
    assert [b.job for b in plan.binds] == ["PyTorchJob/team-b/b1"]
    assert len({w.job for w in plan.waits}) == 40
    assert {w.reason for w in plan.waits} == {"QuotaExceeded"}
    assert [w.position for w in sorted(plan.waits, key=lambda w: w.position)][:3] == [1, 2, 3]
    [cls] = plan.waiting.classes.values()
    assert len(cls) == 40


EIGHT_GPUS = Resources.of({GPU: 8})


def _team_b_borrowing(fleet_gpus: int) -> PassView:
    """A fleet of three 8-GPU nodes, each held by one of team b's jobs (b is guaranteed 8
    GPUs, a 16), with no job of team a yet."""
    root = QuotaNode("root", {GPU: fleet_gpus}, {GPU: fleet_gpus}, children=(
        QuotaNode("a", {GPU: 16}, {GPU: fleet_gpus}, ("team-a",)),
        QuotaNode("b", {GPU: 8}, {GPU: fleet_gpus}, ("team-b",))))
    full = (ClusterView("c", True, node_groups=tuple(
        NodeGroup(1, Resources.of({GPU: 0}), nodes=(f"n{i}",)) for i in range(3))),)
    holdings, victims = [], []
    for i in range(3):
        key = f"PyTorchJob/team-b/v{i}"
        job = Job(key, "team-b", {GPU: 8}, 0, f"t-v{i}")
        holdings.append(Holding(job, f"t-admitted-{i}"))
        victims.append(Running(key, "team-b", 0, f"t-admitted-{i}",
                               (Pod("c", f"n{i}", EIGHT_GPUS),), dict(job.charge), "root/b"))
    return replace(_preempting(clusters=full, preemption=PreemptionView(tuple(victims))),
                   quota=QuotaView(root, tuple(holdings)))


def _team_a_job(name: str, priority: int, nodes: int = 1) -> JobView:
    key = f"PyTorchJob/team-a/{name}"
    demand = JobDemand(key, (Role("Worker", nodes, EIGHT_GPUS),))
    return JobView(key, name, f"t-{name}", Stage.WAITING, demand,
                   policy=replace(POLICY, queues=True),
                   quota=Job(key, "team-a", {GPU: 8 * nodes}, priority, f"t-{name}"),
                   priority=priority)


def _evicted(plan: Plan) -> tuple[list[str], list[str]]:
    """The jobs a plan reclaims quota from, and those it preempts by priority."""
    reclaimed = [i.job for i in plan.intents if isinstance(i, Requeue)]
    preempted = [v for i in plan.intents if isinstance(i, Preempt) for v, _ in i.victims]
    return reclaimed, preempted


def test_a_job_reclaimed_in_a_pass_is_never_also_a_priority_victim_of_that_pass() -> None:
    """Team b borrows three 8-GPU nodes of a 24-GPU fleet. Team a's first job (priority 5)
    takes its guarantee back by reclaiming b's youngest job; its second (priority 3), within
    the guarantee too and fitting quota once that one is released, finds no node and plans
    a priority preemption: the reclaimed job, already leaving, must not be named again."""
    view = _team_b_borrowing(24)
    reclaimed, preempted = _evicted(plan_pass(replace(
        view, jobs=(_team_a_job("j5", 5), _team_a_job("j3", 3)))))
    assert reclaimed == ["PyTorchJob/team-b/v2"]
    assert preempted  # the second job still plans, with another victim
    assert not set(reclaimed) & set(preempted)


def test_a_reclaim_that_would_not_make_its_claimant_fit_the_nodes_is_not_done() -> None:
    """Team a's first job (priority 5, fitting quota but no node) preempts b's youngest job;
    its second (two nodes' worth, within its guarantee, blocked at the root) could reclaim
    quota from one more of b's jobs, but that frees one node, and it needs two (the first's
    node is held for it): reclaiming would only be undone (b's job admitted again the next
    pass, reclaimed again, over and over), so it is not done, and the job says why."""
    view = _team_b_borrowing(32)
    plan = plan_pass(replace(view, jobs=(_team_a_job("j5", 5), _team_a_job("j3", 3, nodes=2))))
    reclaimed, preempted = _evicted(plan)
    assert preempted == ["PyTorchJob/team-b/v2"]
    assert not reclaimed
    [why] = [w for w in plan.waits if w.job.endswith("/j3")]
    assert why.reason == "QuotaExceeded"
    assert why.message == ("reclaims the guarantee of root/a, but not yet: freeing the "
                           "borrowers' nodes would not make it fit (c: short of "
                           "nvidia.com/gpu 8 in total)")


def test_a_reclaim_that_makes_its_claimant_fit_is_done() -> None:
    """Team b borrows all three nodes; team a's job within its guarantee needs one: the
    reclaim frees a node it fits, so b's youngest job is sent back."""
    view = _team_b_borrowing(24)
    reclaimed, preempted = _evicted(plan_pass(replace(view, jobs=(_team_a_job("j0", 0),))))
    assert reclaimed == ["PyTorchJob/team-b/v2"]
    assert not preempted


def test_a_bind_names_the_tenant_whose_nodes_its_pods_keep_to() -> None:
    """A queued job's tenant is the quota leaf that admits it; every opportunistic job's is
    one and the same, whatever its leaf; a job no tree covers has none, unless
    opportunistic."""
    root = QuotaNode("root", {GPU: 32}, {GPU: 32}, children=(
        QuotaNode("a", {GPU: 16}, {GPU: 32}, ("team-a",)),
        QuotaNode("b", {GPU: 16}, {GPU: 32}, ("team-b",))))

    def queued(namespace: str, name: str, priority: int) -> JobView:
        key = f"PyTorchJob/{namespace}/{name}"
        demand = JobDemand(key, (Role("Worker", 1, Resources.of({GPU: 1})),))
        return JobView(key, name, f"t-{name}", Stage.WAITING, demand,
                       policy=replace(POLICY, queues=True),
                       quota=Job(key, namespace, {GPU: 1}, priority, f"t-{name}"),
                       priority=priority)

    jobs = (queued("team-a", "a", 0), queued("team-b", "b", 5), queued("team-a", "o", -1),
            queued("team-b", "p", -1))
    plan = plan_pass(replace(view(*jobs), quota=QuotaView(root, ())))
    assert {b.job.rsplit("/", 1)[1]: b.tenant for b in plan.binds} == {
        "a": "root/a", "b": "root/b", "o": OPPORTUNISTIC_TENANT, "p": OPPORTUNISTIC_TENANT}
    unqueued = plan_pass(view(waiting("w"), waiting("x", priority=-1))).binds
    assert {b.job.rsplit("/", 1)[1]: b.tenant for b in unqueued} == {
        "w": "", "x": OPPORTUNISTIC_TENANT}
