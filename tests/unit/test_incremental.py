"""Incremental scheduling decides what a full pass decides.

Two planners are driven through the same random stream of arrivals, job ends, members'
reports and passes, and must bind the same jobs to the same shares on every pass (their
worlds stay equal while they do):

- the incremental one is handed only the jobs that arrived since the last pass and the
  :class:`~planner.waiting.Waiting` its last plan returned: classes waiting for capacity
  stay parked until a member frees some. Against a full pass over every waiting job from
  scratch, nothing parked may ever be a job the full pass places: no wakeup is lost.
- a full pass decides each class by its first job; against deciding every job on its own
  (``singletons``) it binds alike wherever the class reasoning holds: when no leaf holds a
  guarantee. (With guarantees, a claim can pause a leaf's borrowing and an admission lift
  it again within one pass: deciding one by one then lets later jobs of a class overtake
  the earlier ones it paused; a class keeps its jobs in order and waits for the next pass.)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from planner import PassView, plan_pass
from planner.intents import Bind
from planner.plan import Plan
from planner.view import JobView, PolicyView, QuotaView, Stage
from planner.waiting import Waiting, class_of
from propagation.division import ClusterShare, taken
from propagation.resources import Resources
from propagation.views import ClusterView, JobDemand, NodeGroup, PlacementRules, Role
from quota.engine import Holding, Job, QuotaLedger
from quota.tree import QuotaNode

GPU = "nvidia.com/gpu"
SPLIT = PolicyView("split", PlacementRules(gang=True, max_clusters=2), queues=True)
ONE = PolicyView("one", PlacementRules(gang=True), queues=True)


@dataclass
class World:
    """Members and the jobs running on them; what a planner sees of it."""

    base: dict[str, ClusterView]
    root: QuotaNode | None
    running: dict[str, tuple[JobView, Bind]] = field(default_factory=dict)

    def capacity(self) -> dict[str, ClusterView]:
        out = dict(self.base)
        for job, bind in sorted(self.running.values(), key=lambda r: r[0].key):
            assert job.demand is not None
            requests = {role.name: role.request for role in job.demand.roles}
            for share in bind.shares:
                out[share.cluster] = taken(out[share.cluster], share, requests)
        return out

    def holdings(self) -> list[Holding]:
        return [Holding(job.quota, bind.admitted_at) for job, bind in self.running.values()
                if job.quota is not None and bind.admitted_at]

    def view(self, now: float, jobs: Sequence[JobView], waiting: Waiting | None,
             ledger: QuotaLedger | None, max_binds: int = 0) -> PassView:
        capacity = self.capacity()
        quota = None
        if self.root is not None:
            quota = QuotaView(self.root, ledger=ledger or QuotaLedger.of(self.root,
                                                                         self.holdings()))
        return PassView(now, f"{now:015.3f}", tuple(jobs), capacity, capacity, quota=quota,
                        waiting=waiting, max_binds=max_binds)


@st.composite
def members(draw: st.DrawFn) -> dict[str, ClusterView]:
    out = {}
    for i in range(draw(st.integers(1, 3))):
        groups = tuple(NodeGroup(draw(st.integers(1, 3)), Resources.of({
            GPU: draw(st.sampled_from((1, 2, 4, 8))),
            "cpu": draw(st.sampled_from((8000, 32000)))}))
            for _ in range(draw(st.integers(1, 3))))
        name = f"m{i}"
        out[name] = ClusterView(name, True, node_groups=groups)
    return out


@st.composite
def trees(draw: st.DrawFn, guarantees: bool = True) -> QuotaNode | None:
    if draw(st.booleans()):
        return None
    total = draw(st.integers(4, 40))
    a = draw(st.integers(0, total)) if guarantees else 0
    b = draw(st.integers(0, total - a)) if guarantees else 0
    return QuotaNode("root", {GPU: total}, {GPU: total}, children=(
        QuotaNode("a", {GPU: a}, {GPU: total}, ("a",)),
        QuotaNode("b", {GPU: b}, {GPU: draw(st.integers(1, total))}, ("b",))))


@st.composite
def arrivals(draw: st.DrawFn, start: int, now: float) -> list[JobView]:
    out = []
    for i in range(start, start + draw(st.integers(0, 4))):
        namespace = draw(st.sampled_from("ab"))
        gpus = draw(st.sampled_from((1, 2, 4, 8)))
        replicas = draw(st.integers(1, 3))
        priority = draw(st.integers(0, 1))
        policy = draw(st.sampled_from((SPLIT, ONE)))
        key = f"PyTorchJob.kubeflow.org/{namespace}/j{i:03d}"
        roles = (Role("Worker", replicas, Resources.of({GPU: gpus, "cpu": 4000})),)
        demand = JobDemand(key, roles)
        created = f"{now:015.3f}"
        out.append(JobView(key, f"uid-{i}", created, Stage.WAITING, demand, policy=policy,
                           quota=Job(key, namespace, dict(demand.total), priority, created),
                           priority=priority))
    return out


def binds(plan: Plan) -> list[tuple[str, tuple[ClusterShare, ...]]]:
    return [(b.job, b.shares) for b in plan.binds]


def drive(base: dict[str, ClusterView], root: QuotaNode | None, data: st.DataObject,
          incremental: bool) -> None:
    """Passes of the planner under test (incremental, or full by classes) against a
    reference (full by classes, or job by job) over one random stream."""
    reference_world, world = World(dict(base), root), World(dict(base), root)
    waiting_jobs: dict[str, JobView] = {}
    carried: Waiting | None = None
    ledger = QuotaLedger.of(root, []) if root is not None else None
    made = 0
    log: list[str] = []
    cap = data.draw(st.sampled_from((0, 0, 1, 2)))  # a pass's binds at most
    for step in range(data.draw(st.integers(1, 12))):
        now = 1000.0 + step
        new = data.draw(arrivals(made, now))
        made += len(new)
        log += [f"{step}: + {j.key} {j.policy.name if j.policy else ''} "
                f"{j.demand.roles[0].replicas if j.demand else 0}x"
                f"{j.quota.request if j.quota else ''} p{j.priority}" for j in new]
        waiting_jobs.update({j.key: j for j in new})
        ended = [key for key in sorted(world.running) if data.draw(st.booleans())]
        for each in (reference_world, world):
            for key in ended:
                each.running.pop(key)
        if ledger is not None:
            ledger = ledger.changed((), ended)
        if data.draw(st.booleans()):  # a member reports a node more
            name = data.draw(st.sampled_from(sorted(base)))
            more = NodeGroup(1, Resources.of({GPU: data.draw(st.sampled_from((2, 8))),
                                              "cpu": 32000}))
            for each in (reference_world, world):
                each.base[name] = replace(each.base[name], node_groups=(
                    *each.base[name].node_groups, more))
        everyone = list(waiting_jobs.values())
        reference = plan_pass(reference_world.view(now, everyone, None, None, cap),
                              singletons=not incremental)
        plan = plan_pass(world.view(now, new, carried, ledger, cap) if incremental
                         else world.view(now, everyone, None, None, cap))
        log += [f"{step}: ended {ended}"]
        assert binds(plan) == binds(reference), "\n".join([
            *log, f"reference {binds(reference)}", f"under test {binds(plan)}",
            f"waits {[(w.job, w.reason, w.message) for w in reference.waits]}",
            f"parked {carried.parked if carried else None}"])
        log += [f"{step}: bound {[b.job for b in plan.binds]}"]
        carried = plan.waiting
        for each, decided in ((reference_world, reference), (world, plan)):
            for bind in decided.binds:
                each.running[bind.job] = (waiting_jobs[bind.job], bind)
        for bind in plan.binds:
            job = waiting_jobs.pop(bind.job)
            if ledger is not None and job.quota is not None:
                ledger = ledger.changed([Holding(job.quota, bind.admitted_at)], ())
        assert {j.key for j in carried.jobs()} == set(waiting_jobs)


@settings(max_examples=int(os.environ.get('MANY', '150')), deadline=None)
@given(members(), trees(), st.data())
def test_incremental_passes_bind_as_full_ones(base: dict[str, ClusterView],
                                              root: QuotaNode | None,
                                              data: st.DataObject) -> None:
    drive(base, root, data, incremental=True)


@settings(max_examples=int(os.environ.get('MANY', '150')), deadline=None)
@given(members(), trees(guarantees=False), st.data())
def test_classes_bind_as_jobs_decided_one_by_one(base: dict[str, ClusterView],
                                                 root: QuotaNode | None,
                                                 data: st.DataObject) -> None:
    drive(base, root, data, incremental=False)


def test_a_class_waiting_for_capacity_is_parked_until_a_member_frees_some() -> None:
    """Ten jobs alike that do not fit: the first pass decides the first of them and parks
    the class; a pass with nothing freed decides none of them; a member reporting a node
    more wakes the class, and its jobs are placed in order."""
    member = ClusterView("m0", True, node_groups=(NodeGroup(1, Resources.of({GPU: 4})),))
    world = World({"m0": member}, None)
    jobs = [JobView(f"PyTorchJob.kubeflow.org/a/j{i}", f"u{i}", f"t{i}", Stage.WAITING,
                    JobDemand(f"j{i}", (Role("Worker", 1, Resources.of({GPU: 8})),)),
                    policy=ONE) for i in range(10)]
    plan = plan_pass(world.view(1.0, jobs, None, None))
    assert not plan.binds
    assert len(plan.waits) == 10  # each says why, once
    [parked] = plan.waiting.parked.values()
    assert parked.head == "u0"
    assert parked.members == {"m0"}
    again = plan_pass(world.view(2.0, [], plan.waiting, None))
    assert not again.binds  # nothing changed: nothing decided or said
    assert not again.waits
    world.base["m0"] = replace(member, node_groups=(NodeGroup(2, Resources.of({GPU: 8})),))
    woken = plan_pass(world.view(3.0, [], again.waiting, None))
    assert [b.job.rsplit("/", 1)[1] for b in woken.binds] == ["j0", "j1"]
    assert class_of(jobs[5]) in woken.waiting.parked
