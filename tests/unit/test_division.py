"""Gang division: tables of fleets and jobs, and properties over random ones."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from propagation.binding import binding_message
from propagation.division import Decision, divide
from propagation.resources import Resources
from propagation.spent import with_assumed
from propagation.views import (
    Affinity,
    ClusterView,
    FitMode,
    JobDemand,
    NodeGroup,
    PlacementRules,
    Role,
    Taint,
    Toleration,
)

GPU = "nvidia.com/gpu"


def gpus(n: int, cpu: int = 1000) -> Resources:
    return Resources.of({GPU: n, "cpu": cpu})


def cluster(name: str, *groups: tuple[int, int], ready: bool = True,
            labels: dict[str, str] | None = None, taints: tuple[Taint, ...] = ()) -> ClusterView:
    return ClusterView(name, ready, tuple(sorted((labels or {}).items())), taints,
                       tuple(NodeGroup(count, gpus(free, 64000)) for count, free in groups))


def pytorch(master: int, workers: int, per_replica: int = 1) -> JobDemand:
    return JobDemand("pytorchjob/default/j", (
        Role("Master", master, gpus(per_replica), leader=True),
        Role("Worker", workers, gpus(per_replica)),
    ))


def shares(decision: Decision) -> dict[str, dict[str, int]]:
    return {s.cluster: dict(s.replicas) for s in decision.shares}


def test_seed_job_lands_whole_on_one_cluster_with_the_exact_event_text() -> None:
    decision = divide(pytorch(1, 2), [cluster("member1", (4, 8)), cluster("member2", (4, 8))],
                      PlacementRules())
    assert shares(decision) == {"member1": {"Master": 1, "Worker": 2}}
    assert binding_message(decision.shares) == (
        "Binding has been scheduled successfully. Result: {member1:0,[{master 1} {worker 2}]}")


def test_tightest_fit_in_the_scarcest_resource_wins() -> None:
    roomy = cluster("a-roomy", (4, 8))
    snug = cluster("b-snug", (1, 3))
    assert shares(divide(pytorch(1, 2), [roomy, snug], PlacementRules())) == {
        "b-snug": {"Master": 1, "Worker": 2}}


def test_node_aware_refuses_what_summed_mode_accepts_under_fragmentation() -> None:
    fragmented = cluster("frag", (8, 1))  # 8 free GPUs in total, one per node
    job = JobDemand("j", (Role("Worker", 2, gpus(4)),))
    node_aware = divide(job, [fragmented], PlacementRules())
    summed = divide(job, [fragmented], PlacementRules(fit_mode=FitMode.SUMMED))
    assert not node_aware.placed
    assert "find no node with room" in node_aware.reason
    assert shares(summed) == {"frag": {"Worker": 2}}


def test_split_only_when_the_policy_allows_it_and_then_whole() -> None:
    clusters = [cluster("m1", (2, 8)), cluster("m2", (2, 8))]
    job = pytorch(1, 3, per_replica=8)  # 4 replicas of 8 GPUs: no single cluster holds them
    assert not divide(job, clusters, PlacementRules()).placed
    split = divide(job, clusters, PlacementRules(max_clusters=2, gang=True))
    assert shares(split) == {"m1": {"Master": 1, "Worker": 1}, "m2": {"Worker": 2}}
    assert dict(split.shares[1].offsets) == {"Worker": 1}
    assert binding_message(split.shares).endswith(
        "{m1:0,[{master 1} {worker 1}]} {m2:0,[{worker 2}]}")


def test_not_ready_affinity_and_taints_explain_themselves() -> None:
    clusters = [
        cluster("down", (4, 8), ready=False),
        cluster("gpu-a100", (4, 8), labels={"gpu": "a100"}),
        cluster("tainted", (4, 8), taints=(Taint("maintenance", "yes", "NoSchedule"),)),
    ]
    rules = PlacementRules(affinity=Affinity(match_labels=(("gpu", "v100"),)))
    decision = divide(pytorch(1, 1), clusters, rules)
    assert not decision.placed
    assert "down: not ready" in decision.reason
    assert "gpu-a100: label gpu=v100 required" in decision.reason
    tolerant = PlacementRules(affinity=Affinity(cluster_names=("tainted",)),
                              tolerations=(Toleration("maintenance", "Exists"),))
    assert shares(divide(pytorch(1, 1), clusters, tolerant)) == {
        "tainted": {"Master": 1, "Worker": 1}}


def test_assumed_capacity_is_not_spent_twice() -> None:
    member = cluster("m", (1, 8))
    first = pytorch(1, 3, per_replica=2)
    assert divide(first, [member], PlacementRules()).placed
    assumed = with_assumed(member, [gpus(2, 1000)] * 4)
    assert not divide(pytorch(1, 0, per_replica=1), [assumed], PlacementRules()).placed


@st.composite
def fleets(draw: st.DrawFn) -> list[ClusterView]:
    count = draw(st.integers(1, 4))
    return [
        cluster(f"c{i}", *draw(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 8)),
                                         min_size=1, max_size=3)))
        for i in range(count)
    ]


@st.composite
def jobs(draw: st.DrawFn) -> JobDemand:
    return JobDemand("j", (
        Role("Master", draw(st.integers(0, 1)), gpus(draw(st.integers(0, 8))), leader=True),
        Role("Worker", draw(st.integers(1, 6)), gpus(draw(st.integers(0, 8)))),
    ))


@settings(max_examples=300, deadline=None)
@given(fleets(), jobs(), st.integers(1, 3))
def test_every_placement_fits_node_by_node_and_is_all_or_nothing(
        clusters: list[ClusterView], job: JobDemand, max_clusters: int) -> None:
    decision = divide(job, clusters, PlacementRules(max_clusters=max_clusters))
    again = divide(job, list(reversed(clusters)), PlacementRules(max_clusters=max_clusters))
    assert decision == again, "equal inputs in another order give the same decision"
    if not decision.placed:
        assert decision.reason
        return
    placed = {role.name: 0 for role in job.roles}
    for share in decision.shares:
        for role, count in share.replicas:
            placed[role] += count
    assert placed == {role.name: role.replicas for role in job.roles}, "all replicas or none"
    assert len(decision.shares) <= max_clusters
    by_name = {c.name: c for c in clusters}
    for share in decision.shares:  # re-pack each share by brute force: it must fit its nodes
        free = [g.free for g in by_name[share.cluster].node_groups for _ in range(g.count)]
        requests = sorted((r.request for r in job.roles for _ in range(dict(
            share.replicas).get(r.name, 0))), key=lambda q: -q.get(GPU, 0))
        assert _fits(requests, free)


def _fits(requests: list[Resources], free: list[Resources]) -> bool:
    if not requests:
        return True
    head, rest = requests[0], requests[1:]
    for i, node in enumerate(free):
        if head.fits_in(node) and _fits(rest, [*free[:i], node - head, *free[i + 1:]]):
            return True
    return False


def test_duplicated_runs_a_whole_copy_on_every_cluster_that_fits() -> None:
    from propagation.views import SchedulingType

    clusters = [cluster("m1", (4, 8)), cluster("m2", (1, 1)), cluster("m3", (2, 8))]
    decision = divide(pytorch(1, 2), clusters,
                      PlacementRules(scheduling_type=SchedulingType.DUPLICATED, gang=False))
    assert shares(decision) == {"m1": {"Master": 1, "Worker": 2}, "m3": {"Master": 1, "Worker": 2}}
    assert all(s.copy for s in decision.shares)


def test_divided_without_gang_follows_static_weights() -> None:
    from propagation.views import DivisionPreference

    clusters = [cluster("m1", (4, 8)), cluster("m2", (4, 8))]
    rules = PlacementRules(gang=False, preference=DivisionPreference.WEIGHTED, static_weights=(
        (Affinity(cluster_names=("m1",)), 1), (Affinity(cluster_names=("m2",)), 3)))
    job = JobDemand("j", (Role("Worker", 8, gpus(1)),))
    assert shares(divide(job, clusters, rules)) == {"m1": {"Worker": 2}, "m2": {"Worker": 6}}


def test_divided_without_gang_by_available_replicas_and_aggregated() -> None:
    from propagation.views import DivisionPreference

    clusters = [cluster("m1", (1, 8)), cluster("m2", (3, 8))]  # room for 8 and 24 replicas
    job = JobDemand("j", (Role("Worker", 8, gpus(1)),))
    dynamic = PlacementRules(gang=False, preference=DivisionPreference.WEIGHTED)
    assert shares(divide(job, clusters, dynamic)) == {"m1": {"Worker": 2}, "m2": {"Worker": 6}}
    aggregated = PlacementRules(gang=False, preference=DivisionPreference.AGGREGATED)
    assert shares(divide(job, clusters, aggregated)) == {"m2": {"Worker": 8}}


def test_reasons_from_many_clusters_are_counted_not_listed() -> None:
    from propagation.division import said
    few = [f"m{i}: not ready" for i in range(3)]
    assert said(few) == "m0: not ready; m1: not ready; m2: not ready"
    many = [f"m{i:02d}: agent heartbeat {100 + i}s old" for i in range(60)] + [
        f"g{i}: short of {i} GPUs in total" for i in range(3)] + ["x: taint a=b not tolerated"]
    text = said(many)
    assert text == ("m00: agent heartbeat 100s old (and 59 more alike); "
                    "g0: short of 0 GPUs in total (and 2 more alike); "
                    "x: taint a=b not tolerated")
