"""Elastic jobs in the pure planner: sized at admission, grown as capacity frees, shrunk
instead of evicted by preemption, and the placements a resize leaves."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from planner import PassView, plan_pass
from planner.elastic import count, shrunk_shares
from planner.intents import Grow, Preempt, Shrink
from planner.view import Elastic, JobView, PolicyView, PreemptionView, Stage, WorkView
from preemption.model import Elasticity, Outcome, Pod, Preemptor, QuotaLimits, Running
from preemption.planner import may_preempt, plan, shrunk
from propagation.division import ClusterShare
from propagation.resources import Resources
from propagation.views import (
    Affinity,
    ClusterView,
    JobDemand,
    NodeGroup,
    PlacementRules,
    Role,
)
from quota.amounts import MAX_JOBS
from quota.engine import Job
from quota.tree import QuotaNode
from tests.unit.test_preemption import fits, fleet, limits_for, running

GPU = "nvidia.com/gpu"
NOW = 1_000_000.0
POLICY = PolicyView("p", PlacementRules(), queues=False)


def gpus(n: int) -> Resources:
    return Resources.of({GPU: n})


def nodes(cluster: str, *free: int) -> ClusterView:
    return ClusterView(cluster, True, node_groups=tuple(
        NodeGroup(1, gpus(f), nodes=(f"{cluster}-n{i}",)) for i, f in enumerate(free)))


def view(*jobs: JobView, clusters: tuple[ClusterView, ...] = (), **changes: object
         ) -> PassView:
    by_name = {c.name: c for c in clusters}
    return replace(PassView(NOW, "now", jobs, by_name, by_name), **changes)


def elastic_waiting(name: str, low: int, high: int, per_worker: int = 1,
                    priority: int = 0, **changes: object) -> JobView:
    key = f"PyTorchJob/ns/{name}"
    demand = JobDemand(key, (Role("Worker", high, gpus(per_worker)),))
    return replace(JobView(key, name, f"t-{name}", Stage.WAITING, demand, policy=POLICY,
                           priority=priority, elastic=Elastic("Worker", low, high)), **changes)


def elastic_bound(name: str, size: int, low: int, high: int, cluster: str = "a",
                  state: str = "Running", priority: int = 0) -> JobView:
    key = f"PyTorchJob/ns/{name}"
    demand = JobDemand(key, (Role("Worker", size, gpus(1)),))
    share = ClusterShare(cluster, (("Worker", size),), (("Worker", 0),), (f"{cluster}-n0",))
    return JobView(key, name, f"t-{name}", Stage.BOUND, demand, policy=POLICY,
                   placement=(share,), works=(WorkView(f"m-{cluster}/w-{name}", cluster, state),),
                   dispatch_finalizer=True, priority=priority,
                   elastic=Elastic("Worker", low, high))


# -- admission -------------------------------------------------------------------------------
def test_an_elastic_job_that_fits_at_its_max_is_admitted_at_its_max() -> None:
    [bind] = plan_pass(view(elastic_waiting("e", 2, 4), clusters=(nodes("a", 8),))).binds
    assert bind.shares[0].replicas == (("Worker", 4),)
    assert bind.sized == ""


def test_an_elastic_job_is_admitted_at_what_fits_not_held_for_its_max() -> None:
    plan = plan_pass(view(elastic_waiting("e", 2, 6), clusters=(nodes("a", 2, 1),)))
    [bind] = plan.binds
    assert bind.shares[0].replicas == (("Worker", 3),)
    assert "admitted with 3 of 2..6 worker replicas (4 do not fit now: a: short of " \
        "nvidia.com/gpu 1 in total)" in bind.sized
    assert bind.reason.startswith("Binding has been scheduled successfully")  # unchanged
    assert [r for _, spent in bind.spent for r in spent] == [gpus(1)] * 3


def test_an_elastic_job_whose_min_does_not_fit_waits_for_its_min() -> None:
    plan = plan_pass(view(elastic_waiting("e", 3, 6), clusters=(nodes("a", 2),)))
    assert not plan.binds
    [why] = plan.waits
    assert why.reason == "Unschedulable"


def test_an_elastic_job_is_admitted_at_what_its_quota_leaves() -> None:
    from planner.view import QuotaView
    root = QuotaNode("root", max={GPU: 8}, children=(
        QuotaNode("team", max={GPU: 3}, namespaces=("ns",)),))
    job = elastic_waiting("e", 1, 4, policy=replace(POLICY, queues=True))
    job = replace(job, quota=Job(job.key, "ns", dict(job.demand.total), 0, job.created))
    plan = plan_pass(view(job, clusters=(nodes("a", 8),), quota=QuotaView(root, ())))
    [bind] = plan.binds
    assert bind.shares[0].replicas == (("Worker", 3),)
    assert bind.admitted_by == "root/team"
    assert "(4 do not fit now: quota root/team: nvidia.com/gpu used 0 + requested 4 > max 3)" \
        in bind.sized
    assert plan.queues is not None
    assert plan.queues.usage["root/team"][GPU] == 3


# -- growth ----------------------------------------------------------------------------------
def test_a_running_elastic_job_grows_into_freed_capacity_up_to_its_max() -> None:
    job = elastic_bound("e", 2, 2, 6)
    [grow] = [i for i in plan_pass(view(job, clusters=(nodes("a", 1, 2),))).intents
              if isinstance(i, Grow)]
    assert (grow.before, grow.after, grow.changed) == (2, 5, ("a",))
    assert grow.shares[0].replicas == (("Worker", 5),)
    assert grow.reason.startswith("grown 2→5 worker replicas on a")
    [grow] = [i for i in plan_pass(view(job, clusters=(nodes("a", 8),))).intents
              if isinstance(i, Grow)]
    assert grow.after == 6  # never beyond its max


def test_growth_waits_for_running_replicas_and_for_waiting_jobs_of_its_priority() -> None:
    room = (nodes("a", 8),)
    starting = elastic_bound("e", 2, 2, 6, state="Pending")
    assert not [i for i in plan_pass(view(starting, clusters=room)).intents
                if isinstance(i, Grow)]
    running_job = elastic_bound("e", 2, 2, 6)
    big = replace(elastic_waiting("big", 9, 9), elastic=None)  # does not fit: waits
    intents = plan_pass(view(running_job, big, clusters=room)).intents
    assert not [i for i in intents if isinstance(i, Grow)]
    low = replace(big, priority=-5)  # a lower-priority waiter does not hold it back
    assert [i for i in plan_pass(view(running_job, low, clusters=room)).intents
            if isinstance(i, Grow)]
    elsewhere = replace(big, policy=PolicyView("p", PlacementRules(
        affinity=Affinity(cluster_names=("b",)))))  # waits for member b only
    assert [i for i in plan_pass(view(running_job, elsewhere,
                                      clusters=(*room, nodes("b", 1)))).intents
            if isinstance(i, Grow)]


def test_two_elastic_jobs_never_grow_into_the_same_gpus() -> None:
    one, two = elastic_bound("one", 1, 1, 4), elastic_bound("two", 1, 1, 4)
    grows = [i for i in plan_pass(view(one, two, clusters=(nodes("a", 3),))).intents
             if isinstance(i, Grow)]
    assert sum(g.after - g.before for g in grows) == 3


# -- shrinking -------------------------------------------------------------------------------
def elastic_running(name: str, priority: int, size: int, low: int, cluster: str = "m1",
                    node: str = "n1", leaf: str | None = None) -> Running:
    base = running(name, priority, *[(cluster, node, 1)] * size, leaf=leaf)
    share = ClusterShare(cluster, (("Worker", size),), (("Worker", 0),))
    return replace(base, pods=tuple(Pod(cluster, node, gpus(1), "worker", i)
                                    for i in range(size)),
                   elastic=Elasticity("Worker", low, size, (share,), {GPU: 1}))


def preemptor_of(priority: int, replicas: int, per_replica: int) -> Preemptor:
    demand = JobDemand("PyTorchJob/a/p", (Role("Worker", replicas, gpus(per_replica)),))
    return Preemptor(demand.key, "a", priority, demand, PlacementRules())


def test_an_elastic_victim_is_shrunk_by_what_the_preemptor_needs_not_evicted() -> None:
    victim = elastic_running("e", 0, 6, 2)
    clusters = fleet(m1={"n1": 1})  # 6 of 7 GPUs taken by the elastic job
    decided = plan(preemptor_of(100, 1, 3), [victim], clusters)
    assert decided.outcome is Outcome.PREEMPT
    [shrink] = decided.victims
    assert shrink.keep == 4  # gives back 2 replicas (the preemptor needs 3 GPUs, 1 is free)
    assert sorted(p.index for p in shrink.pods) == [4, 5]
    assert "shrinking 1 elastic job (PyTorchJob a/e to 4)" in decided.reason


def test_shrinking_is_preferred_to_evicting_a_whole_job() -> None:
    plain = running("plain", 0, ("m1", "n1", 2), started="2026-01-02T00:00:00Z", leaf=None)
    elastic = elastic_running("e", 0, 4, 2)
    decided = plan(preemptor_of(100, 1, 2), [plain, elastic], fleet(m1={"n1": 0}))
    assert [(v.key, v.keep) for v in decided.victims] == [("PyTorchJob/a/e", 2)]


def test_an_elastic_job_never_shrinks_below_its_min_the_plan_evicts_instead() -> None:
    elastic = elastic_running("e", 0, 4, 3)
    decided = plan(preemptor_of(100, 1, 4), [elastic], fleet(m1={"n1": 0}))
    assert [(v.key, v.keep) for v in decided.victims] == [("PyTorchJob/a/e", None)]


def test_the_hub_plan_shrinks_a_victim_in_place() -> None:
    victim = elastic_running("e", 0, 4, 2, cluster="a", node="a-n0", leaf=None)
    waiting = replace(elastic_waiting("p", 1, 1, per_worker=2, priority=100), elastic=None)
    plan_ = plan_pass(view(waiting, clusters=(nodes("a", 0),),
                           preemption=PreemptionView((victim,))))
    shrink = next(i for i in plan_.intents if isinstance(i, Shrink))
    preempt = next(i for i in plan_.intents if isinstance(i, Preempt))
    assert (shrink.job, shrink.before, shrink.after, shrink.changed) == (
        "PyTorchJob/a/e", 4, 2, ("a",))
    assert shrink.preemptor == waiting.key
    assert "preempted by PyTorchJob ns/p" in shrink.reason
    assert preempt.victims == ()  # nobody evicted
    assert [w.reason for w in plan_.waits] == ["Preempting"]


# -- properties ------------------------------------------------------------------------------
@st.composite
def split_placements(draw: st.DrawFn) -> tuple[tuple[ClusterShare, ...], int]:
    counts = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    shares, offset = [], 0
    for i, n in enumerate(counts):
        roles = (("Master", 1), ("Worker", n)) if i == 0 else (("Worker", n),)
        offsets = (("Master", 0), ("Worker", offset)) if i == 0 else (("Worker", offset),)
        shares.append(ClusterShare(f"c{i}", roles, offsets))
        offset += n
    return tuple(shares), draw(st.integers(1, offset))


@given(split_placements())
def test_a_shrink_keeps_the_lowest_indices_contiguous(
        case: tuple[tuple[ClusterShare, ...], int]) -> None:
    shares, keep = case
    out, changed = shrunk_shares(shares, "Worker", keep)
    kept = sorted(dict(s.offsets)["Worker"] + i for s in out
                  for i in range(dict(s.replicas).get("Worker", 0)))
    assert kept == list(range(keep))
    assert out[0].replicas[0] == ("Master", 1)  # other roles untouched
    before = {s.cluster: s for s in shares}
    assert set(changed) == {s.cluster for s in shares
                            if s not in out} | {c for c in before if c not in
                                                {s.cluster for s in out}}


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 8), st.integers(1, 8), st.integers(0, 3), st.integers(1, 4))
def test_a_shrink_plan_fits_the_preemptor_and_gives_back_no_more_than_needed(
        size: int, low: int, free: int, need: int) -> None:
    low = min(low, size)
    victim = elastic_running("e", 0, size, low)
    clusters = fleet(m1={"n1": free})
    p = preemptor_of(100, 1, need)
    decided = plan(p, [victim], clusters)
    if decided.outcome is not Outcome.PREEMPT:
        return
    [v] = decided.victims
    if v.keep is None:  # evicted: shrinking to its min would not have been enough
        assert free + size - low < need
        return
    assert low <= v.keep < size
    assert fits(p, [v], clusters, limits_for(QuotaNode("root"), []))
    more = shrunk(victim, v.keep + 1)
    assert more is None or not fits(p, [more], clusters, limits_for(QuotaNode("root"), []))


def test_sizes_are_counted_on_the_elastic_role() -> None:
    demand = JobDemand("k", (Role("Master", 1, gpus(1), True), Role("Worker", 3, gpus(1))))
    assert count(demand, "Worker") == 3
    victim = elastic_running("e", 0, 4, 1, leaf="root/a")
    assert victim.charge == {GPU: 4, MAX_JOBS: 1}
    given_back = shrunk(victim, 1)
    assert given_back is not None
    assert given_back.charge == {GPU: 3}  # what it gives back: no job count


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 8), min_size=1, max_size=5), st.integers(1, 4),
       st.integers(1, 6), st.integers(0, 6))
def test_an_elastic_job_is_admitted_at_the_most_that_fits_and_never_below_its_min(
        free: list[int], per_worker: int, low: int, spread: int) -> None:
    high = low + spread
    job = elastic_waiting("e", low, high, per_worker=per_worker)
    plan_ = plan_pass(view(job, clusters=(nodes("a", *free),)))
    room = sum(f // per_worker for f in free)  # identical workers: a node holds floor(f/w)
    if room < low:
        assert not plan_.binds
        assert [w.reason for w in plan_.waits] == ["Unschedulable"]
        return
    [bind] = plan_.binds
    assert bind.shares[0].replicas == (("Worker", min(room, high)),)
    assert (bind.sized == "") == (room >= high)


@st.composite
def elastic_scenarios(draw: st.DrawFn) -> tuple[Preemptor, list[Running], list[ClusterView],
                                                QuotaLimits]:
    """Members of 4-GPU nodes filled by elastic jobs of identical workers and plain jobs, in
    tenants a and b (or no tree: x), and a waiting job."""
    nodes_ = [(c, f"n{i}") for c in ("m1", "m2")[:draw(st.integers(1, 2))]
              for i in range(draw(st.integers(1, 3)))]
    free = dict.fromkeys(nodes_, 4)
    jobs: list[Running] = []
    for index in range(draw(st.integers(1, 6))):
        priority = draw(st.sampled_from([-1, 0, 50, 100]))
        namespace = draw(st.sampled_from(["a", "b", "x"]))
        leaf = {"a": "root/a", "b": "root/b"}.get(namespace) if priority >= 0 else None
        cluster = draw(st.sampled_from(sorted({c for c, _ in nodes_})))
        per = draw(st.integers(1, 2))
        pods: list[Pod] = []
        for i in range(draw(st.integers(1, 5))):
            room = [n for n in nodes_ if n[0] == cluster and free[n] >= per]
            if not room:
                break
            node = draw(st.sampled_from(room))
            free[node] -= per
            pods.append(Pod(cluster, node[1], gpus(per), "worker", i))
        if not pods:
            continue
        total = per * len(pods)
        job = Running(f"PyTorchJob/{namespace}/j{index}", namespace, priority,
                      f"2026-01-01T00:00:{index:02d}Z", tuple(pods),
                      {GPU: total, MAX_JOBS: 1} if leaf else {}, leaf)
        if len(pods) > 1 and draw(st.integers(0, 3)):  # mostly elastic
            share = ClusterShare(cluster, (("Worker", len(pods)),), (("Worker", 0),))
            job = replace(job, elastic=Elasticity(
                "Worker", draw(st.integers(1, max(1, len(pods) // 2))), len(pods), (share,),
                {GPU: per} if leaf else {}))
        jobs.append(job)
    clusters = [ClusterView(c, True, node_groups=tuple(
        NodeGroup(1, gpus(free[(c, n)]), nodes=(n,)) for cc, n in nodes_ if cc == c))
        for c in sorted({c for c, _ in nodes_})]
    total = 4 * len(nodes_)
    a_max = draw(st.integers(1, total))
    root = QuotaNode("root", min={GPU: total}, max={GPU: total}, children=(
        QuotaNode("a", min={GPU: draw(st.integers(0, a_max))}, max={GPU: a_max},
                  namespaces=("a",)),
        QuotaNode("b", min={GPU: draw(st.integers(0, total))}, max={GPU: total},
                  namespaces=("b",))))
    namespace = draw(st.sampled_from(["a", "b", "x"]))
    leaf = {"a": "root/a", "b": "root/b"}.get(namespace)
    replicas, per = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    demand = JobDemand(f"PyTorchJob/{namespace}/p", (Role("Worker", replicas, gpus(per)),))
    p = Preemptor(demand.key, namespace, draw(st.sampled_from([50, 100])), demand,
                  PlacementRules(), {GPU: replicas * per, MAX_JOBS: 1} if leaf else {}, leaf)
    return p, jobs, clusters, limits_for(root, jobs)


@settings(max_examples=300, deadline=None)
@given(elastic_scenarios())
def test_plans_with_elastic_victims_fit_the_preemptor_and_spare_the_higher(
        scenario: tuple[Preemptor, list[Running], list[ClusterView], QuotaLimits]) -> None:
    p, jobs, clusters, limits = scenario
    decided = plan(p, jobs, clusters, limits)
    if decided.outcome is not Outcome.PREEMPT:
        if decided.outcome is Outcome.NO_PLAN:  # not even shrinking every elastic job
            shrinks = [s for j in jobs if j.elastic is not None and may_preempt(p, j, limits)
                       and (s := shrunk(j, j.elastic.min)) is not None]
            assert not shrinks or not fits(p, shrinks, clusters, limits) or \
                not any(pod.node for s in shrinks for pod in s.pods)
        return
    assert not fits(p, (), clusters, limits)  # no plan preempts for nothing
    assert all(v.priority < p.priority for v in decided.victims)
    assert all(may_preempt(p, v, limits) for v in decided.victims)
    assert fits(p, decided.victims, clusters, limits)
    shrinks = [v for v in decided.victims if v.keep is not None]
    for v in shrinks:
        assert v.elastic is not None
        assert v.elastic.min <= v.keep < v.elastic.size
        assert sorted(pod.index for pod in v.pods) == list(range(v.keep, v.elastic.size))
    assert not shrinks or len(shrinks) == len(decided.victims)  # shrinks, or evictions
    if not shrinks:  # evicting: shrinking every elastic job it may take was not enough
        possible = [s for j in jobs if j.elastic is not None and may_preempt(p, j, limits)
                    and (s := shrunk(j, j.elastic.min)) is not None]
        assert not possible or not fits(p, possible, clusters, limits)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 4)), min_size=1, max_size=4),
       st.lists(st.integers(0, 8), min_size=1, max_size=4))
def test_growth_never_passes_a_max_nor_spends_a_gpu_twice(
        jobs: list[tuple[int, int]], free: list[int]) -> None:
    """Elastic jobs at ``size`` with ``room`` to their max, on one member's nodes."""
    views = [elastic_bound(f"e{i}", size, 1, size + room) for i, (size, room) in enumerate(jobs)]
    grows = [i for i in plan_pass(view(*views, clusters=(nodes("a", *free),))).intents
             if isinstance(i, Grow)]
    by_job = {v.key: v for v in views}
    for grow in grows:
        elastic = by_job[grow.job].elastic
        assert elastic is not None
        assert grow.before < grow.after <= elastic.max
    assert sum(g.after - g.before for g in grows) == min(
        sum(free), sum(room for _, room in jobs))  # 1-GPU workers: every free GPU or all room


def test_a_job_waiting_for_quota_holds_back_the_growth_of_jobs_holding_quota() -> None:
    from planner.view import QuotaView
    from quota.engine import Holding
    root = QuotaNode("root", max={GPU: 8}, children=(
        QuotaNode("team", max={GPU: 3}, namespaces=("ns",)),))
    running_job = elastic_bound("e", 1, 1, 3)
    running_job = replace(running_job, quota=Job(running_job.key, "ns", {GPU: 1}, 0, "t"))
    tree = QuotaView(root, (Holding(running_job.quota, "t"),))
    grows = [i for i in plan_pass(view(running_job, clusters=(nodes("a", 8),),
                                       quota=tree)).intents if isinstance(i, Grow)]
    assert [(g.before, g.after) for g in grows] == [(1, 3)]  # up to the team's max of 3
    queued = replace(elastic_waiting("w", 4, 4), elastic=None,
                     policy=replace(POLICY, queues=True))
    queued = replace(queued, quota=Job(queued.key, "ns", {GPU: 4}, 0, queued.created))
    plan_ = plan_pass(view(running_job, queued, clusters=(nodes("a", 8),), quota=tree))
    assert [w.reason for w in plan_.waits] == ["QuotaExceeded"]
    assert not [i for i in plan_.intents if isinstance(i, Grow)]


def grows_of(*jobs: JobView, clusters: tuple[ClusterView, ...]) -> list[Grow]:
    return [i for i in plan_pass(view(*jobs, clusters=clusters)).intents if isinstance(i, Grow)]


SPLIT = PolicyView("p", PlacementRules(max_clusters=2))


def test_a_job_its_member_cannot_grow_grows_onto_another_when_its_policy_splits() -> None:
    job = replace(elastic_bound("e", 2, 2, 6), policy=SPLIT)
    [grow] = grows_of(job, clusters=(nodes("a", 1), nodes("b", 1), nodes("c", 2)))
    assert (grow.before, grow.after, grow.changed) == (2, 5, ("a", "c"))
    assert [(s.cluster, s.replicas, s.offsets) for s in grow.shares] == [
        ("a", (("Worker", 3),), (("Worker", 0),)),
        ("c", (("Worker", 2),), (("Worker", 3),))]  # after a's highest index: contiguous
    assert dict(grow.spent) == {"a": (gpus(1),), "c": (gpus(1), gpus(1))}
    assert grow.reason.startswith("grown 2→5 worker replicas on a (+1) and c (+2)")
    # a policy that keeps a job on one member keeps it growing there only
    [grow] = grows_of(elastic_bound("e", 2, 2, 6), clusters=(nodes("a", 1), nodes("c", 2)))
    assert grow.changed == ("a",)


def test_a_grown_share_waits_for_its_work_before_the_job_grows_again() -> None:
    job = replace(elastic_bound("e", 2, 2, 6), policy=SPLIT)
    [grow] = grows_of(job, clusters=(nodes("c", 2),))
    grown = replace(job, placement=grow.shares,
                    demand=JobDemand(job.key, (Role("Worker", 4, gpus(1)),)))
    assert not grows_of(grown, clusters=(nodes("c", 2),))  # c's Work is not there yet
    with_work = replace(grown, works=(*grown.works, WorkView("m-c/w-e", "c", "Running")))
    [again] = grows_of(with_work, clusters=(nodes("c", 2),))
    assert (again.before, again.after, again.changed) == (4, 6, ("c",))


def test_a_share_grows_only_within_the_topology_domain_its_pods_are_pinned_to() -> None:
    rack = "cloud.provider.com/topology-rack"
    cluster = ClusterView("a", True, node_groups=(
        NodeGroup(1, gpus(0), ((rack, "r1"),), ("a-n0",)),
        NodeGroup(1, gpus(4), ((rack, "r2"),), ("a-n1",))), topology_levels=(rack,))
    job = elastic_bound("e", 2, 2, 6)
    pinned = replace(job, placement=(replace(job.placement[0], domains=(((rack, "r1"),),)),))
    assert not grows_of(pinned, clusters=(cluster,))  # r1 is full; r2 is not the share's
    [grow] = grows_of(replace(pinned, placement=(replace(
        pinned.placement[0], domains=(((rack, "r2"),),)),)), clusters=(cluster,))
    assert grow.after == 6
    assert grow.shares[0].nodes == ("a-n0", "a-n1")
