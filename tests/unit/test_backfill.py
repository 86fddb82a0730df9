"""Backfill without starvation: the planner's reservation for the first gang that does not
fit, and which jobs may start before it (:mod:`planner.backfill`)."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.api.protocol import EXPECTED_RUNTIME, MAX_EXPECTED_RUNTIME, expected_runtime
from fleet.hub.backfill_views import counted, runtime_of
from fleet.kinds import adapter_for
from fleet.kinds.base import InvalidJob
from planner import PassView, plan_pass
from planner.backfill import KEPT_BACK, RESERVED, clock_text
from planner.intents import Bind, Wait
from planner.view import JobView, PolicyView, QuotaView, Stage, TimedJob
from preemption.freed import with_freed
from preemption.model import Pod
from propagation.division import divide
from propagation.resources import GPU, Resources
from propagation.spent import with_assumed
from propagation.views import (
    Affinity,
    ClusterView,
    JobDemand,
    NodeGroup,
    PlacementRules,
    Role,
)
from quota.engine import Holding, Job, QueuePolicy
from quota.tree import QuotaNode

NOW = 1_000_000.0
NODE = Resources.of({GPU: 8})
POLICY = PolicyView("p", PlacementRules())


def fleet(busy: Mapping[str, Sequence[bool]]) -> dict[str, ClusterView]:
    """Members of named 8-GPU nodes, each busy (nothing free) or idle."""
    return {name: ClusterView(name, True, node_groups=tuple(
        NodeGroup(1, Resources.of({GPU: 0 if taken else 8}), nodes=(f"{name}-n{i}",))
        for i, taken in enumerate(nodes))) for name, nodes in busy.items()}


def job(name: str, nodes: int, runtime: float | None = None, order: int = 0) -> JobView:
    """A gang of ``nodes`` whole-node replicas."""
    key = f"PyTorchJob/ns/{name}"
    return JobView(key, name, f"t{order:04d}-{name}", Stage.WAITING,
                   JobDemand(key, (Role("Worker", nodes, NODE),)), policy=POLICY,
                   runtime=runtime)


def timed(name: str, ends_in: float, *nodes: str) -> TimedJob:
    return TimedJob(f"PyTorchJob/ns/{name}", NOW - 10, ends_in + 10,
                    tuple(Pod(n.split("-")[0], n, NODE) for n in nodes))


def view(jobs: Sequence[JobView], members: Mapping[str, ClusterView],
         running: Sequence[TimedJob] = (), now: float = NOW) -> PassView:
    return PassView(now, "now", tuple(jobs), dict(members), dict(members), timed=tuple(running))


def waits(plan_intents: object) -> dict[str, Wait]:
    return {w.job.split("/")[-1]: w for w in plan_intents.waits}  # type: ignore[attr-defined]


def test_a_gang_that_does_not_fit_is_reserved_and_only_jobs_ending_first_pass_it() -> None:
    members = fleet({"a": [True, True, True, False]})  # n0, n1: ending in 100 s; n2 for good
    running = [timed("blocker", 100, "a-n0", "a-n1")]
    plan = plan_pass(view([job("big", 3, order=1), job("unknown", 1, order=2),
                           job("long", 1, runtime=500, order=3),
                           job("short", 1, runtime=50, order=4)], members, running))
    why = waits(plan)
    assert why["big"].reason == RESERVED
    assert f"holds 24 GPUs from {clock_text(NOW + 100)}" in why["big"].message
    assert "PyTorchJob ns/blocker" in why["big"].message
    assert why["unknown"].reason == KEPT_BACK
    assert "its runtime is unknown" in why["unknown"].message
    assert why["long"].reason == KEPT_BACK
    assert "past then" in why["long"].message
    [bind] = plan.binds
    assert bind.job == "PyTorchJob/ns/short"
    assert bind.backfill.startswith("backfilled: ends by")


def test_a_job_on_capacity_the_head_does_not_need_runs_whatever_its_runtime() -> None:
    members = fleet({"a": [True, True, False], "b": [False]})
    on_b = replace(POLICY, rules=PlacementRules(affinity=Affinity(cluster_names=("b",))))
    running = [timed("blocker", 100, "a-n0", "a-n1")]
    plan = plan_pass(view([job("big", 3, order=1),
                           replace(job("elsewhere", 1, order=2), policy=on_b)],
                          members, running))
    # b's node is not one the head can use: a job without a runtime runs there.
    assert waits(plan)["big"].reason == RESERVED
    assert [b.job for b in plan.binds] == ["PyTorchJob/ns/elsewhere"]
    assert not plan.binds[0].backfill


def test_no_running_job_of_known_runtime_means_no_reservation_as_before() -> None:
    members = fleet({"a": [True, True, False]})
    plan = plan_pass(view([job("big", 3, order=1), job("small", 1, order=2)], members))
    assert waits(plan)["big"].reason == "Unschedulable"
    assert [b.job for b in plan.binds] == ["PyTorchJob/ns/small"]  # BestEffortFIFO, unchanged


def test_a_gang_that_could_never_fit_reserves_nothing() -> None:
    members = fleet({"a": [True, False]})
    plan = plan_pass(view([job("huge", 5, order=1), job("small", 1, order=2)], members,
                          [timed("blocker", 100, "a-n0")]))
    assert waits(plan)["huge"].reason == "Unschedulable"
    assert [b.job for b in plan.binds] == ["PyTorchJob/ns/small"]


def test_the_last_reservation_stands_while_its_start_cannot_be_computed_again() -> None:
    members = fleet({"a": [True, True, False, False]})
    running = [timed("blocker", 100, "a-n0", "a-n1")]
    first = plan_pass(view([job("big", 4, order=1)], members, running))
    assert set(first.reservations) == {"big"}
    # A job just bound has not reported its pods: nothing says when the head fits now.
    members = fleet({"a": [True, True, True, False]})
    later = replace(view([job("big", 4, order=1), job("unknown", 1, order=2),
                          job("short", 1, runtime=30, order=3)], members, now=NOW + 5),
                    reservations=first.reservations)
    plan = plan_pass(later)
    why = waits(plan)
    assert (why["big"].reason, why["unknown"].reason) == (RESERVED, KEPT_BACK)
    assert [b.job for b in plan.binds] == ["PyTorchJob/ns/short"]
    assert plan.reservations == first.reservations
    # Long past its start it is dropped: the pass decides as without backfill.
    stale = plan_pass(replace(later, now=NOW + 100 + 301))
    assert waits(stale)["big"].reason == "Unschedulable"
    assert not stale.reservations


@pytest.mark.parametrize("policy", [QueuePolicy.PRIORITY, QueuePolicy.BLOCK])
def test_a_queue_blocked_by_its_reserved_head_lets_through_only_what_ends_first_unless_strict(
        policy: QueuePolicy) -> None:
    """Priority keeps its starvation bound (here 1: one job admitted past the head blocks
    the queue), and only a job that ends before the head could start passes the block;
    Block stays strict: nothing passes its head."""
    members = fleet({"a": [True, True, False, False]})
    queued = replace(POLICY, queues=True)

    def queued_job(name: str, nodes: int, runtime: float | None, order: int) -> JobView:
        plain = job(name, nodes, runtime, order)
        return replace(plain, policy=queued, quota=Job(plain.key, "ns", {GPU: 8 * nodes}, 0,
                                                       plain.created))
    root = QuotaNode("root", {GPU: 64}, {GPU: 64},
                     children=(QuotaNode("team", {GPU: 64}, {GPU: 64}, ("ns",)),))
    past = Holding(Job("PyTorchJob/ns/earlier", "ns", {GPU: 16}, 0, "t0002-earlier"), "t9999")
    quota = QuotaView(root, (past,), {"root/team": policy}, starvation_bound=1)
    plan = plan_pass(replace(view([queued_job("big", 4, None, 1),
                                   queued_job("unknown", 1, None, 3),
                                   queued_job("short", 1, 30.0, 4)], members,
                                  [timed("blocker", 100, "a-n0", "a-n1")]), quota=quota))
    why = waits(plan)
    assert why["big"].reason == RESERVED
    assert why["unknown"].reason == "QuotaExceeded"
    assert "waits for PyTorchJob/ns/big first" in why["unknown"].message
    if policy is QueuePolicy.PRIORITY:
        assert [b.job for b in plan.binds] == ["PyTorchJob/ns/short"]
    else:
        assert not plan.binds
        assert why["short"].reason == "QuotaExceeded"


def test_a_job_bound_ahead_in_the_pass_gives_its_nodes_back_to_the_reservation() -> None:
    """``first`` (ends in 10 s) is bound ahead of ``big`` in the same pass: big starts when
    first ends. (Counted as running for good, first left big no start at all, and ``mid``
    took a node big needs then.)"""
    members = fleet({"a": [False, False, True, False]})  # n2 ends in 200 s
    running = [timed("blocker", 200, "a-n2")]
    plan = plan_pass(view([job("first", 2, runtime=10, order=1), job("big", 3, order=2),
                           job("mid", 1, runtime=100, order=3)], members, running))
    why = waits(plan)
    assert [b.job for b in plan.binds] == ["PyTorchJob/ns/first"]
    assert why["big"].reason == RESERVED
    assert f"from {clock_text(NOW + 10)}" in why["big"].message
    assert why["mid"].reason == KEPT_BACK


# -- the runtime a job declares -------------------------------------------------------------
@pytest.mark.parametrize(("text", "seconds"), [
    ("600", 600), ("90s", 90), ("10m", 600), ("2h", 7200), ("1d", 86400), (" 5m ", 300)])
def test_expected_runtime_reads_seconds_or_a_unit(text: str, seconds: int) -> None:
    assert expected_runtime({"annotations": {EXPECTED_RUNTIME: text}}) == seconds


@pytest.mark.parametrize("text", ["", "ten", "-5", "0", "1.5h", "5w", "9" * 40,
                                  f"{MAX_EXPECTED_RUNTIME + 1}", "3650000d"])
def test_a_bad_expected_runtime_names_the_field(text: str) -> None:
    with pytest.raises(ValueError, match=r"metadata\.annotations\[fleet\.sh/expected-runtime\]"):
        expected_runtime({"annotations": {EXPECTED_RUNTIME: text}})


def test_the_runtime_is_the_smaller_of_deadline_and_declaration_and_bad_ones_are_invalid() -> None:
    adapter = adapter_for("kubeflow.org/v1", "PyTorchJob")
    body = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "j", "namespace": "ns", "annotations": {EXPECTED_RUNTIME: "5m"}},
            "spec": {"runPolicy": {"activeDeadlineSeconds": 120}}}
    assert runtime_of(body, adapter) == 120
    assert runtime_of({**body, "spec": {}}, adapter) == 300
    with pytest.raises(InvalidJob, match=r"spec\.runPolicy\.activeDeadlineSeconds"):
        runtime_of({**body, "spec": {"runPolicy": {"activeDeadlineSeconds": 10**12}}}, adapter)
    with pytest.raises(InvalidJob, match="expected-runtime"):
        runtime_of({**body, "metadata": {**body["metadata"], "annotations": {
            EXPECTED_RUNTIME: "soon"}}}, adapter)


# -- properties -----------------------------------------------------------------------------
NODES = st.lists(st.booleans(), min_size=1, max_size=6)
RUNTIMES = st.one_of(st.none(), st.integers(1, 400).map(float))


@st.composite
def scenes(draw: st.DrawFn) -> tuple[dict[str, ClusterView], list[TimedJob], list[JobView]]:
    """Members with busy and idle nodes; the busy ones held by running jobs that end at a
    known time or not at all (as far as the planner knows); waiting gangs, some with a
    runtime."""
    busy = draw(st.dictionaries(st.sampled_from(["a", "b"]), NODES, min_size=1))
    members = fleet(busy)
    running: list[TimedJob] = []
    for cluster, nodes in sorted(busy.items()):
        taken = [f"{cluster}-n{i}" for i, b in enumerate(nodes) if b]
        while taken:
            size = draw(st.integers(1, len(taken)))
            mine, taken = taken[:size], taken[size:]
            ends = draw(st.one_of(st.none(), st.integers(-20, 300)))
            if ends is not None:  # otherwise it never ends as far as the planner knows
                running.append(timed(f"r{len(running)}-{cluster}", float(ends), *mine))
    jobs = [job(f"w{i}", draw(st.integers(1, 5)), draw(RUNTIMES), order=i)
            for i in range(draw(st.integers(1, 8)))]
    return members, running, jobs


def at(members: Mapping[str, ClusterView], running: Sequence[TimedJob], start: float,
       binds: Sequence[Bind], runtimes: Mapping[str, float | None]) -> list[ClusterView]:
    """The fleet at ``start``: running jobs ended by then gone, this pass's binds that run
    past then still there."""
    views = with_freed(list(members.values()),
                       (p for t in running if t.ends <= start for p in t.pods))
    by_name = {v.name: v for v in views}
    for bind in binds:
        runtime = runtimes[bind.job]
        if runtime is None or NOW + runtime > start:
            for cluster, requests in bind.spent:
                by_name[cluster] = with_assumed(by_name[cluster], list(requests))
    return list(by_name.values())


@settings(max_examples=200, deadline=None)
@given(scenes())
def test_jobs_started_past_a_reserved_head_never_delay_its_start(
        scene: tuple[dict[str, ClusterView], list[TimedJob], list[JobView]]) -> None:
    members, running, jobs = scene
    plan = plan_pass(view(jobs, members, running))
    reserved = [w for w in plan.waits if w.reason == RESERVED]
    runtimes = {j.key: j.runtime for j in jobs}
    if not reserved:
        assert not [w for w in plan.waits if w.reason == KEPT_BACK]
        assert not [b for b in plan.binds if b.backfill]
        return
    [head_wait] = reserved  # one reservation a pass
    head = next(j for j in jobs if j.key == head_wait.job)
    # The head's start, as computed with nothing started behind it: the pass planned again
    # with only the jobs ahead of it and itself.
    ahead = [j for j in jobs if j.created <= head.created]
    alone = plan_pass(view(ahead, members, running))
    [alone_wait] = [w for w in alone.waits if w.job == head.key]
    assert alone_wait == head_wait  # same start, same message: nobody behind moved it
    start = _start_of(head, members, running, alone.binds, runtimes)
    assert start is not None
    # ...and with everything started behind it, it still fits then.
    assert divide(head.demand, at(members, running, start, plan.binds, runtimes),  # type: ignore[arg-type]
                  POLICY.rules).placed
    for bind in plan.binds:
        if bind.job > head.key and bind.backfill:  # no backfill without a known runtime
            runtime = runtimes[bind.job]
            assert runtime is not None
            assert NOW + runtime <= start


def _start_of(head: JobView, members: Mapping[str, ClusterView], running: Sequence[TimedJob],
              binds: Sequence[Bind], runtimes: Mapping[str, float | None]) -> float | None:
    """The earliest end (or now) at which the head fits, checked by brute force: the running
    jobs' ends, and those of the jobs bound ahead of it in the pass."""
    assert head.demand is not None
    ends = [NOW + r for b in binds if (r := runtimes[b.job]) is not None]
    for start in sorted({NOW, *(max(NOW, t.ends) for t in running), *ends}):
        if divide(head.demand, at(members, running, start, binds, runtimes),
                  POLICY.rules).placed:
            return start
    return None


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 6), st.lists(st.tuples(st.integers(0, 200), st.integers(1, 3),
                                             st.integers(1, 300)), min_size=1, max_size=25))
def test_a_reserved_gang_is_never_starved_by_a_stream_of_small_jobs(
        nodes: int, stream: list[tuple[int, int, int]]) -> None:
    """A whole-fleet gang arrives first; small jobs of known, finite runtimes keep arriving.
    Driving the planner over time (each job ending at its runtime), the gang starts no later
    than the end of the jobs that were running when it arrived."""
    busy: dict[str, tuple[str, float, float]] = {}  # node -> (job, started, runtime)
    first = TimedJob("PyTorchJob/ns/first", NOW, 100.0, tuple(
        Pod("a", f"a-n{i}", NODE) for i in range(nodes // 2 + 1)))
    for pod in first.pods:
        busy[pod.node] = (first.key, first.started, first.runtime)
    big = job("big", nodes, runtime=1000.0, order=0)
    arrivals = sorted((NOW + t, i, size, float(r)) for i, (t, size, r) in enumerate(stream))
    waiting: list[JobView] = [big]
    events = [a[0] for a in arrivals] + [first.ends]
    heapq.heapify(events)
    started_big = None
    bound_at_arrival = first.ends  # every job running when it came ends by then
    while events and started_big is None:
        clock = heapq.heappop(events)
        while arrivals and arrivals[0][0] <= clock:
            _, i, size, runtime = arrivals.pop(0)
            waiting.append(job(f"s{i:03d}", size, runtime=runtime, order=i + 1))
        for node, (_, began, runtime) in list(busy.items()):
            if began + runtime <= clock:
                del busy[node]
        current = {"a": ClusterView("a", True, node_groups=tuple(
            NodeGroup(1, Resources.of({GPU: 0 if f"a-n{i}" in busy else 8}),
                      nodes=(f"a-n{i}",)) for i in range(nodes)))}
        running = _timed(busy)
        plan = plan_pass(view(waiting, current, running, now=clock))
        for bind in plan.binds:
            started = next(j for j in waiting if j.key == bind.job)
            waiting.remove(started)
            if started.key == big.key:
                started_big = clock
                break
            assert started.runtime is not None
            for share in bind.shares:
                for node in share.nodes:
                    busy[node] = (started.key, clock, started.runtime)
            heapq.heappush(events, clock + started.runtime)
    assert started_big is not None
    assert started_big <= bound_at_arrival


def _timed(busy: Mapping[str, tuple[str, float, float]]) -> list[TimedJob]:
    by_job: dict[str, list[str]] = {}
    times: dict[str, tuple[float, float]] = {}
    for node, (key, began, runtime) in sorted(busy.items()):
        by_job.setdefault(key, []).append(node)
        times[key] = (began, runtime)
    return [TimedJob(key, times[key][0], times[key][1],
                     tuple(Pod("a", n, NODE) for n in nodes)) for key, nodes in by_job.items()]


def test_a_pod_already_gone_from_its_nodes_report_is_not_given_back_twice() -> None:
    usage = {("a", "a-n0"): {GPU: 8}, ("a", "a-n1"): {GPU: 0}}
    pods = [Pod("a", "a-n0", NODE), Pod("a", "a-n0", NODE), Pod("a", "a-n1", NODE),
            Pod("a", "", NODE)]
    # n0 reports one pod's worth in use; n1 none (its pod ended, the Work not yet updated)
    assert counted(pods, usage) == [Pod("a", "a-n0", NODE)]
