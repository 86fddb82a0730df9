"""The hub and the simulator decide alike: one corpus of snapshots (hand-made, and taken from
a replay of the trace), each given to the hub's shell as the objects its cache would hold
(snapshot -> view -> plan, no API server involved) and to the simulator as its simulated
members and gangs; the two plans must be equal, intent for intent."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import pytest

from fleet.api.cluster import member_namespace
from fleet.hub import queueing as q
from fleet.hub import works as w
from fleet.hub.cache import Cache, Changes
from fleet.hub.pass_view import Carried
from fleet.hub.scheduler import Scheduler, Settings
from fleet.hub.views import cluster_view
from fleet.sim.engine import GPU, Event, Running, Scenario, Simulation, node_name
from fleet.sim.trace import DEFAULT_TRACE, Gang, Node, Trace, load
from planner import Plan, plan_pass
from planner.intents import Grow, Preempt, Requeue, Shrink
from planner.view import Hold
from propagation.resources import Resources
from quota.engine import QueuePolicy
from quota.queues import queue_names
from quota.tree import QuotaNode, walk

TRACE = DEFAULT_TRACE
Body = dict[str, Any]


def text(seconds: float) -> str:
    """Times as the hub writes them (the simulator is given the same format)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class State:
    """One moment of a simulation: what both sides are asked to plan from."""

    sim: Simulation
    pending: dict[str, Gang]
    running: dict[str, Running]
    admitted_at: dict[str, str]
    now: float


# -- the hub's side: the objects its cache would hold --------------------------------------

def quota_body(node: QuotaNode) -> Body:
    out: Body = {"name": node.name, "min": dict(node.min), "max": dict(node.max)}
    if node.namespaces:
        out["namespaces"] = list(node.namespaces)
    if node.children:
        out["children"] = [quota_body(c) for c in node.children]
    return out


def job_body(state: State, gang: Gang) -> Body:
    run = state.running.get(gang.name)
    annotations: dict[str, str] = {}
    if run is not None:
        nodes = sorted({node_name(run.cluster, n) for n in run.placed})
        annotations = {w.PLACEMENT: json.dumps([{
            "cluster": f"c{run.cluster}", "replicas": {"Worker": run.size},
            "offsets": {"Worker": 0}, "nodes": nodes}]),
            q.ADMITTED_AT: state.admitted_at[gang.name]}
    elif gang.name in state.sim.gangs.preempted_by:
        annotations = {w.PREEMPTED_BY: state.sim.gangs.preempted_by[gang.name]}
    container = {"name": "main", "image": "trainer", "resources": {"requests": {
        "cpu": f"{gang.cpu}m", "memory": str(gang.memory), GPU: str(gang.gpus)}}}
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": gang.name, "namespace": gang.tenant, "uid": f"uid-{gang.name}",
                     "resourceVersion": "1", "generation": 1,
                     "creationTimestamp": state.sim.time_text(gang.arrival),
                     "annotations": annotations,
                     "finalizers": [w.FINALIZER] if run is not None else []},
        "spec": {"runPolicy": {"schedulingPolicy": {
                     "priorityClass": f"p{state.sim.gangs.priority(gang)}"}},
                 "pytorchReplicaSpecs": {"Worker": {
                     "replicas": gang.replicas, "restartPolicy": "Never",
                     "template": {"spec": {"containers": [container]}}}},
                 **({"elasticPolicy": {"minReplicas": elastic.min,
                                       "maxReplicas": elastic.max}}
                    if (elastic := state.sim.gangs.elastic_range(gang)) else {})},
    }


def work_body(state: State, gang: Gang, job: Body) -> Body:
    """The job's Work as its agent reports it: each placed replica a Running pod on its
    node (the nodes a preemption plan frees)."""
    run = state.running[gang.name]
    pods = [{"name": f"{gang.name}-worker-{i}", "role": "Worker", "phase": "Running",
             "node": node_name(run.cluster, n),
             "labels": {"training.kubeflow.org/replica-index": str(i)}}
            for i, n in enumerate(run.placed)]
    return {"apiVersion": "fleet.sh/v1alpha1", "kind": "Work",
            "metadata": {"name": w.work_name(job), "resourceVersion": "1",
                         "namespace": member_namespace(f"c{run.cluster}")},
            "spec": {"job": {"uid": job["metadata"]["uid"]},
                     "placement": {"cluster": f"c{run.cluster}",
                                   "replicas": {"Worker": run.size}},
                     "manifests": [job]},
            "status": {"state": "Running", "boundTime": state.admitted_at[gang.name],
                       "pods": pods}}


def allocatable(sim: Simulation, cluster: int, node: str) -> dict[str, int]:
    """What the simulated node holds in all, as an agent reports it (its cells' shape)."""
    cpu, memory, gpus = sim.members.allocatable[cluster][int(node.rpartition("n")[2])]
    return {"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpus}


def hub_plan(state: State) -> Plan:
    """The hub's shell on the cache it would hold: snapshot -> view -> plan."""
    sim, cache = state.sim, Cache()
    now = text(state.now)
    for index, view in enumerate(sim.views):
        cache.upsert("clusters", {
            "apiVersion": "fleet.sh/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": f"c{index}", "resourceVersion": "1"},
            "status": {"lastHeartbeatTime": now,
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "capacity": {"observedTime": now, "nodeGroups": [
                           {"count": 1, "free": dict(g.free.items_),
                            "allocatable": allocatable(sim, index, node),
                            "labels": dict(g.labels), "nodes": [node]}
                           for g in view.node_groups for node in g.nodes]}}})
    cache.upsert("quotatrees", {
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
        "metadata": {"name": "tree", "namespace": q.TREE_NAMESPACE, "resourceVersion": "1"},
        "spec": {"root": quota_body(sim.tree)}})
    names = queue_names(p.path for p in walk(sim.tree))
    for leaf, policy in sim.queue_policies.items():
        cache.upsert("queues", {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "Queue",
            "metadata": {"name": names[tuple(leaf.split("/"))], "resourceVersion": "1",
                         "namespace": q.QUEUE_NAMESPACE},
            "spec": {"queuePolicy": policy.value}})
    # the classes the jobs name, and the lowest any job of the simulation has (the floor)
    for value in {*range(4), sim.floor}:
        cache.upsert("priorityclasses", {"apiVersion": "scheduling.k8s.io/v1",
                                         "kind": "PriorityClass", "value": value,
                                         "metadata": {"name": f"p{value}",
                                                      "resourceVersion": "1"}})
    cache.upsert("clusterpolicies", {
        "apiVersion": "policy.one.alibabacloud.com/v1alpha1",
        "kind": "ClusterPropagationPolicy",
        "metadata": {"name": "queued-gangs", "resourceVersion": "1"},
        "spec": {"suspension": {"scheduling": True},
                 "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided",
                                                     "customSchedulingType": "Gang"}},
                 "resourceSelectors": [{"apiVersion": "kubeflow.org/v1",
                                        "kind": "PyTorchJob"}]}})
    for gang in [*state.pending.values(), *(r.gang for r in state.running.values())]:
        job = job_body(state, gang)
        cache.upsert("jobs", job)
        if gang.name in state.running:
            cache.upsert("works", work_body(state, gang, job))
    snap = cache.snapshot()
    when = datetime.fromtimestamp(state.now, UTC)
    clusters = [cluster_view(b, when, 15.0, None) for b in snap.clusters.values()]
    # the hub's own shell, without its writer or leader election: snapshot -> view -> plan
    hub = Scheduler(cache, None, None,  # type: ignore[arg-type]
                    Settings(fit_mode=sim.policy.rules.fit_mode))
    # the last plan's preemption state, by the hub's uids
    carried = Carried({f"uid-{k}": v for k, v in sim.holds.items()},
                      {f"uid-{k}": v for k, v in sim.retry_at.items()})
    looked = hub.jobs_to_look_at(snap, {}, set(), Changes(), everything=True)
    return plan_pass(hub.pass_view(snap, when, clusters, {}, list(looked.values()),
                                   carried=carried, stamp=now))


def sim_plan(state: State) -> Plan:
    return plan_pass(state.sim.pass_view(state.pending, state.running, state.admitted_at,
                                         state.now))


# -- the corpus ---------------------------------------------------------------------------

def simulation(nodes: list[Node], scenario: Scenario, tenants: tuple[str, ...],
               gangs: tuple[Gang, ...] = (), clusters: int = 2) -> Simulation:
    """A simulation that plans as the hub does: with priority preemption."""
    return Simulation(Trace(tuple(nodes), gangs, "hand-made"),
                      replace(scenario, preemption=True), clusters=clusters, tenants=tenants,
                      time_text=text)


def gang(name: str, tenant: str, arrival: float, replicas: int, gpus: int,
         priority: int = 0) -> Gang:
    return Gang(name, tenant, arrival, 600.0, replicas, 4000, 16 << 30, gpus, priority)


def start(sim: Simulation, state: State, g: Gang, cluster: int, admitted: float,
          size: int = 0) -> None:
    placed = sim.place(cluster, g, size or g.replicas)
    assert len(placed) == (size or g.replicas)
    state.running[g.name] = Running(g, cluster, placed, admitted, size=len(placed))
    state.admitted_at[g.name] = text(admitted)


T0 = 1_767_225_600.0  # 2026-01-01


def hand_made() -> list[tuple[str, State]]:
    node = Node("n", 64000, 256 << 30, 8, "A100")
    cases = []
    # fits, priority order, capacity exhausted, a gang too big for any member
    sim = simulation([node] * 4, Scenario("s"), ("team-a", "team-b"))
    state = State(sim, {g.name: g for g in (
        gang("a1", "team-a", T0, 2, 4), gang("a2", "team-a", T0 + 1, 2, 8, priority=3),
        gang("b1", "team-b", T0 + 2, 1, 8), gang("b2", "team-b", T0 + 3, 3, 8),
        gang("b3", "team-b", T0 + 4, 1, 16))}, {}, {}, T0 + 10)
    cases.append(("fit-and-order", state))
    # no borrowing: quota exceeded
    sim = simulation([node] * 4, Scenario("s", borrowing=False), ("team-a", "team-b"))
    state = State(sim, {g.name: g for g in (
        gang("a1", "team-a", T0, 2, 8), gang("a2", "team-a", T0 + 1, 1, 8),
        gang("b1", "team-b", T0 + 2, 1, 4))}, {}, {}, T0 + 10)
    cases.append(("quota-exceeded", state))
    # reclaim: team-a borrows beyond its min, team-b's gang within its guarantee waits; the
    # quota's victims (the lowest priority, youngest) free one member's nodes, or (for
    # nodes) two of one member's, though not the quota's choice
    for name, layout in (("reclaim", (0, 1, 0, 1)), ("reclaim-for-nodes", (0, 0, 1, 1))):
        sim = simulation([node] * 4, Scenario("s"), ("team-a", "team-b"))
        state = State(sim, {"b1": gang("b1", "team-b", T0 + 50, 2, 8)}, {}, {}, T0 + 60)
        for i, cluster in enumerate(layout):
            start(sim, state, gang(f"a{i}", "team-a", T0 + i, 1, 8, priority=i % 2), cluster,
                  T0 + 5 + i)
        cases.append((name, state))
    # a Block queue: the first gang that does not fit holds back the ones behind it
    sim = simulation([node] * 2, Scenario("s", queue_policy=QueuePolicy.BLOCK),
                     ("team-a",), clusters=1)
    state = State(sim, {g.name: g for g in (
        gang("a1", "team-a", T0, 1, 8), gang("a2", "team-a", T0 + 1, 2, 8),
        gang("a3", "team-a", T0 + 2, 1, 4))}, {}, {}, T0 + 10)
    start(sim, state, gang("a0", "team-a", T0 - 10, 1, 4), 0, T0 - 5)
    cases.append(("block-queue", state))
    # no node fits a replica (the summed capacity would): unschedulable, the next one fits
    sim = simulation([node] * 2, Scenario("s"), ("team-a",), clusters=1)
    state = State(sim, {g.name: g for g in (
        gang("a1", "team-a", T0, 1, 16), gang("a2", "team-a", T0 + 1, 1, 8))}, {}, {}, T0 + 10)
    cases.append(("no-node-fits", state))
    cases += preempting()
    return cases


def preempting() -> list[tuple[str, State]]:
    """Snapshots where priority preemption decides: victims, lazy placement, a hold."""
    node = Node("n", 64000, 256 << 30, 8, "A100")
    cases = []
    # a tenant at its max: its priority-3 gang preempts its youngest lowest-priority one
    sim = simulation([node] * 2, Scenario("s", borrowing=False), ("team-a",), clusters=1)
    state = State(sim, {"a9": gang("a9", "team-a", T0 + 50, 1, 8, priority=3)}, {}, {},
                  T0 + 60)
    for i, prio in enumerate((1, 0)):
        start(sim, state, gang(f"a{i}", "team-a", T0 + i, 1, 8, priority=prio), 0, T0 + 5 + i)
    cases.append(("priority-preempt", state))
    # opportunistic gangs fill the fleet: a guaranteed gang takes the nodes of as few of
    # them as it needs (the youngest first), across members; a second one is no cascade
    gangs = tuple(gang(f"o{i}", "team-o", T0 + i, 1, 8) for i in range(4))
    waiting = (gang("a1", "team-a", T0 + 50, 2, 8), gang("a2", "team-a", T0 + 51, 1, 8))
    sim = simulation([node] * 4, Scenario("s", opportunistic=("team-o",)),
                     ("team-a", "team-o"), gangs + waiting)
    state = State(sim, {g.name: g for g in waiting}, {}, {}, T0 + 60)
    for i, g in enumerate(gangs):
        start(sim, state, g, i % 2, T0 + 5 + i)
    cases.append(("opportunistic-preempted", state))
    # lazy preemption: free nodes on another member take the gang, nobody is preempted
    sim = simulation([node] * 4, Scenario("s", opportunistic=("team-o",)),
                     ("team-a", "team-o"), gangs[:2] + waiting[:1])
    state = State(sim, {"a1": waiting[0]}, {}, {}, T0 + 60)
    for i, g in enumerate(gangs[:2]):
        start(sim, state, g, 0, T0 + 5 + i)
    cases.append(("lazy-elsewhere", state))
    # the capacity freed for a preemptor is held: it binds before an older, higher gang
    sim = simulation([node] * 2, Scenario("s"), ("team-a", "team-b"), clusters=1)
    state = State(sim, {g.name: g for g in (gang("b1", "team-b", T0, 1, 8, priority=3),
                                            gang("a2", "team-a", T0 + 5, 1, 8, priority=2))},
                  {}, {}, T0 + 60)
    start(sim, state, gang("a0", "team-a", T0 - 50, 1, 8, priority=2), 0, T0 - 40)
    request = Resources.of({"cpu": 4000, "memory": 16 << 30, GPU: 8})
    sim.holds["a2"] = Hold((("c0", (request,)),), T0 + 300, "preempting a1 lets it fit")
    sim.gangs.preempted_by["b1"] = "PyTorchJob.kubeflow.org/team-a/a7"
    cases.append(("hold-first", state))
    return cases + elastic_cases()


def elastic_cases() -> list[tuple[str, State]]:
    """Elastic gangs (2..4 workers): admitted at what fits, grown, shrunk for a preemptor."""
    node = Node("n", 64000, 256 << 30, 8, "A100")
    cases = []
    sim = simulation([node] * 2, Scenario("s", elastic=True), ("team-a",), clusters=1)
    state = State(sim, {"e": gang("e", "team-a", T0, 4, 8)}, {}, {}, T0 + 10)
    start(sim, state, gang("x", "team-a", T0 - 50, 1, 8), 0, T0 - 40)
    cases.append(("elastic-sized", state))  # one node left: its min would be 2, so it waits
    sim = simulation([node] * 3, Scenario("s", elastic=True), ("team-a",), clusters=1)
    state = State(sim, {"e": gang("e", "team-a", T0, 4, 8)}, {}, {}, T0 + 10)
    start(sim, state, gang("x", "team-a", T0 - 50, 1, 8), 0, T0 - 40)
    cases.append(("elastic-at-its-min", state))
    sim = simulation([node] * 4, Scenario("s", elastic=True), ("team-a",), clusters=1)
    state = State(sim, {"w": gang("w", "team-a", T0 + 5, 1, 4)}, {}, {}, T0 + 10)
    start(sim, state, gang("e", "team-a", T0, 4, 8), 0, T0 + 1, size=2)
    cases.append(("elastic-grows", state))
    sim = simulation([node] * 4, Scenario("s", elastic=True, borrowing=False), ("team-a",),
                     clusters=1)
    state = State(sim, {"p": gang("p", "team-a", T0 + 5, 1, 8, priority=3)}, {}, {}, T0 + 10)
    start(sim, state, gang("e", "team-a", T0, 4, 8), 0, T0 + 1)
    cases.append(("elastic-shrunk", state))
    return cases


# The trace as the simulator's priority table runs it: one opportunistic tenant, preemption.
TRACE_SCENARIO = Scenario("trace", preemption=True, opportunistic=("tenant-3",))


def from_trace(every: int = 25, most: int = 6) -> list[tuple[str, State]]:
    """Moments of a replay of the trace's first pods: each ``every``-th pass with gangs
    waiting, and the first ``most`` passes that preempt by priority (gangs without a
    GPU-model constraint: the hub does not read one yet)."""
    trace = load(TRACE, limit=250, load_factor=0.9, inventory=0.02)  # contended: preempts
    gangs = tuple(g for g in trace.gangs if not g.models)
    sim = Simulation(Trace(trace.nodes, gangs, trace.rules), TRACE_SCENARIO, clusters=4,
                     time_text=text)
    taken: list[tuple[str, State]] = []
    schedule, passes = sim.schedule, [0]

    def moment(pending: dict[str, Gang], running: dict[str, Running],
               admitted_at: dict[str, str], now: float) -> Callable[[], State]:
        """What is needed to rebuild this moment (a simulation is built only for the ones
        kept)."""
        free = [[list(node) for node in member] for member in sim.members.free]
        holds, retry_at = dict(sim.holds), dict(sim.retry_at)
        preempted_by = dict(sim.gangs.preempted_by)
        state = State(sim, dict(pending), dict(running), dict(admitted_at), now)

        def build() -> State:
            copy = Simulation(Trace(trace.nodes, gangs, trace.rules), TRACE_SCENARIO,
                              clusters=4, time_text=text)
            copy.members.free = free
            copy.members.refresh()
            copy.holds, copy.retry_at = holds, retry_at
            copy.gangs.preempted_by = preempted_by
            return replace(state, sim=copy)
        return build

    def watched(pending: dict[str, Gang], running: dict[str, Running],
                admitted_at: dict[str, str], now: float, events: list[Event]) -> None:
        """Every ``every``-th pass with gangs waiting, and the first passes that preempt."""
        passes[0] += 1
        before = moment(pending, running, admitted_at, now) if pending else None
        preemptions = sim.outcome.priority_preemptions
        schedule(pending, running, admitted_at, now, events)
        if before is None:
            return
        if passes[0] % every == 0 and counts["regular"] < most:
            counts["regular"] += 1
        elif sim.outcome.priority_preemptions > preemptions and counts["preempting"] < most:
            counts["preempting"] += 1
        else:
            return
        taken.append((f"trace-pass-{passes[0]}", before()))

    counts = {"regular": 0, "preempting": 0}
    sim.schedule = watched  # type: ignore[method-assign]
    sim.run()
    assert counts == {"regular": most, "preempting": most}
    return taken


CASES = hand_made()


@pytest.mark.parametrize(("name", "state"), CASES, ids=[n for n, _ in CASES])
def test_hub_and_simulator_plan_alike_on_hand_made_snapshots(name: str, state: State) -> None:
    plan = sim_plan(state)
    assert plan.intents == hub_plan(state).intents
    assert plan.binds or plan.waits  # each case decides something


def test_the_hand_made_corpus_covers_every_decision() -> None:
    plans = {name: sim_plan(state) for name, state in CASES}
    reasons = {i.reason for plan in plans.values() for i in plan.waits}
    assert {"QuotaExceeded", "Unschedulable", "Reclaiming"} <= reasons
    assert any("waits for" in i.message for i in plans["block-queue"].waits)
    assert any(isinstance(i, Requeue) for i in plans["reclaim"].intents)
    [for_nodes] = [i for i in plans["reclaim-for-nodes"].intents if isinstance(i, Preempt)]
    assert [v for v, _ in for_nodes.victims] == [
        "PyTorchJob.kubeflow.org/team-a/a2", "PyTorchJob.kubeflow.org/team-a/a3"]
    assert "claims the guarantee of root/team-b" in for_nodes.victims[0][1]
    assert [b.job.rsplit("/", 1)[1] for b in plans["fit-and-order"].binds] == ["a2", "a1", "b1"]
    victims = {name: [v for i in plan.intents if isinstance(i, Preempt) for v, _ in i.victims]
               for name, plan in plans.items()}
    assert victims["priority-preempt"] == ["PyTorchJob.kubeflow.org/team-a/a1"]
    assert victims["opportunistic-preempted"] == [
        "PyTorchJob.kubeflow.org/team-o/o3", "PyTorchJob.kubeflow.org/team-o/o1"]
    assert not victims["lazy-elsewhere"]
    assert plans["lazy-elsewhere"].binds
    assert [b.job for b in plans["hold-first"].binds] == ["PyTorchJob.kubeflow.org/team-a/a2"]
    assert not plans["elastic-sized"].binds
    [sized] = plans["elastic-at-its-min"].binds
    assert sized.shares[0].replicas == (("Worker", 2),)
    assert "admitted with 2 of 2..4" in sized.sized
    assert [(i.before, i.after) for i in plans["elastic-grows"].intents
            if isinstance(i, Grow)] == [(2, 3)]  # the 4-GPU gang waiting takes half a node
    assert [(i.before, i.after) for i in plans["elastic-shrunk"].intents
            if isinstance(i, Shrink)] == [(4, 3)]
    assert not victims["elastic-shrunk"]


def test_hub_and_simulator_plan_alike_on_moments_of_the_trace() -> None:
    decided = preempts = 0
    for _name, state in from_trace():
        plan = sim_plan(state)
        assert plan.intents == hub_plan(state).intents
        decided += len(plan.binds) + len(plan.waits)
        preempts += sum(1 for i in plan.intents if isinstance(i, Preempt))
    assert decided
    assert preempts  # the corpus holds passes that preempt
