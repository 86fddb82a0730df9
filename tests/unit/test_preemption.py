"""The fleet-wide preemption planner: tables of the cases the issue names, and properties over
random fleets (a plan always makes the preemptor fit, never touches a job of higher or equal
priority, never preempts for nothing, and takes the fewest victims)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from preemption.freed import with_freed
from preemption.model import Outcome, Pod, Preemptor, QuotaLimits, Running
from preemption.planner import may_preempt, plan, plan_reclaim
from preemption.quota_limits import fits_quota, on_borrowed, quota_limits, within_guarantee
from propagation.division import divide
from propagation.resources import Resources
from propagation.views import Affinity, ClusterView, JobDemand, NodeGroup, PlacementRules, Role
from quota.amounts import MAX_JOBS, add
from quota.tree import QuotaNode

GPU = "nvidia.com/gpu"


def gpus(n: int) -> Resources:
    return Resources.of({GPU: n})


def fleet(**clusters: dict[str, int]) -> list[ClusterView]:
    """cluster -> node -> free GPUs, one named node per group."""
    return [ClusterView(name, True, node_groups=tuple(
        NodeGroup(1, gpus(free), nodes=(node,)) for node, free in sorted(nodes.items())))
        for name, nodes in sorted(clusters.items())]


def running(name: str, priority: int, *pods: tuple[str, str, int], namespace: str = "a",
            started: str = "2026-01-01T00:00:00Z", leaf: str | None = "root/a") -> Running:
    total = sum(n for _, _, n in pods)
    holds = leaf is not None and priority >= 0
    return Running(f"PyTorchJob/{namespace}/{name}", namespace, priority, started,
                   tuple(Pod(c, node, gpus(n)) for c, node, n in pods),
                   {GPU: total, MAX_JOBS: 1} if holds else {}, leaf if holds else None)


def preemptor(priority: int, replicas: int, per_replica: int, namespace: str = "a",
              leaf: str | None = "root/a", preempted: bool = False) -> Preemptor:
    demand = JobDemand(f"PyTorchJob/{namespace}/p", (Role("Worker", replicas,
                                                          gpus(per_replica)),))
    charge = {GPU: replicas * per_replica, MAX_JOBS: 1} if priority >= 0 and leaf else {}
    return Preemptor(demand.key, namespace, priority, demand, PlacementRules(), charge,
                     leaf if priority >= 0 else None, preempted)


def tree(a_min: int, a_max: int, b_min: int, b_max: int, root: int) -> QuotaNode:
    return QuotaNode("root", min={GPU: root}, max={GPU: root}, children=(
        QuotaNode("a", min={GPU: a_min}, max={GPU: a_max}, namespaces=("a",)),
        QuotaNode("b", min={GPU: b_min}, max={GPU: b_max}, namespaces=("b",))))


def limits_for(root: QuotaNode, jobs: Sequence[Running]) -> QuotaLimits:
    usage: dict[str, dict[str, int]] = {}
    for job in jobs:
        if job.leaf is None:
            continue
        parts = job.leaf.split("/")
        for i in range(1, len(parts) + 1):
            key = "/".join(parts[:i])
            usage[key] = add(usage.get(key, {}), job.charge)
    return quota_limits(root, lambda key: usage.get(key, {}))


# -- the cases the issue names ---------------------------------------------------------------
def test_prod_preempts_a_test_job_of_its_own_tenant_at_its_max() -> None:
    test_job = running("test", 0, ("m1", "n1", 4))
    jobs = [test_job]
    limits = limits_for(tree(4, 4, 4, 4, 8), jobs)
    clusters = fleet(m1={"n1": 0, "n2": 4})  # room on n2, but tenant a is at its max
    decided = plan(preemptor(100, 1, 4), jobs, clusters, limits)
    assert decided.outcome is Outcome.PREEMPT
    assert decided.victims == (test_job,)


def test_a_guaranteed_job_goes_where_capacity_is_free_instead_of_preempting() -> None:
    jobs = [running("test", 0, ("m1", "n1", 4))]
    clusters = fleet(m1={"n1": 0}, m2={"n1": 4})
    decided = plan(preemptor(100, 1, 4), jobs, clusters, limits_for(tree(8, 8, 0, 8, 8), jobs))
    assert decided.outcome is Outcome.FITS
    assert decided.victims == ()
    assert decided.decision is not None
    assert decided.decision.shares[0].cluster == "m2"


def test_opportunistic_jobs_are_preempted_first() -> None:
    oppo = running("oppo", -1, ("m1", "n1", 4), namespace="b", leaf=None)
    test_job = running("test", 0, ("m1", "n2", 4), started="2026-01-01T00:00:09Z")
    jobs = [oppo, test_job]
    decided = plan(preemptor(100, 1, 4), jobs, fleet(m1={"n1": 0, "n2": 0}),
                   limits_for(tree(8, 8, 0, 8, 8), jobs))
    assert decided.victims == (oppo,)


def test_an_opportunistic_job_never_preempts() -> None:
    jobs = [running("oppo", -1, ("m1", "n1", 4), leaf=None)]
    decided = plan(preemptor(-1, 1, 4), jobs, fleet(m1={"n1": 0}))
    assert decided.outcome is Outcome.NO_PLAN


def test_no_plan_for_a_job_that_would_still_not_fit() -> None:
    jobs = [running("test", 0, ("m1", "n1", 2))]
    decided = plan(preemptor(100, 1, 8), jobs, fleet(m1={"n1": 2}),
                   limits_for(tree(8, 8, 0, 8, 8), jobs))
    assert decided.outcome is Outcome.NO_PLAN
    assert "would not fit" in decided.reason


def test_the_victim_must_free_one_node_not_merely_the_total() -> None:
    # 4 GPUs free in total across n1 and n2 after either victim, but only the older job on
    # n1 leaves 4 on one node: the younger, otherwise preferred, is spared.
    young = running("young", 0, ("m1", "n2", 2), started="2026-01-01T00:00:09Z")
    old = running("old", 0, ("m1", "n1", 2), started="2026-01-01T00:00:01Z")
    jobs = [young, old]
    decided = plan(preemptor(100, 1, 4), jobs, fleet(m1={"n1": 2, "n2": 1}),
                   limits_for(tree(8, 8, 0, 8, 8), jobs))
    assert decided.victims == (old,)


def test_fewest_victims_then_lowest_priority_then_youngest() -> None:
    small_a = running("small-a", 0, ("m1", "n1", 2), started="2026-01-01T00:00:05Z")
    small_b = running("small-b", 0, ("m1", "n1", 2), started="2026-01-01T00:00:06Z")
    big = running("big", 50, ("m1", "n2", 4))
    younger = running("younger", 50, ("m1", "n3", 4), started="2026-01-01T00:00:07Z")
    jobs = [small_a, small_b, big, younger]
    decided = plan(preemptor(100, 1, 4), jobs, fleet(m1={"n1": 0, "n2": 0, "n3": 0}),
                   limits_for(tree(16, 16, 0, 16, 16), jobs))
    assert decided.victims == (younger,)  # one victim beats two of lower priority


def test_another_tenants_job_within_its_min_is_never_taken() -> None:
    theirs = running("theirs", 0, ("m1", "n1", 4), namespace="b", leaf="root/b")
    jobs = [theirs]
    decided = plan(preemptor(100, 1, 4), jobs, fleet(m1={"n1": 0}),
                   limits_for(tree(4, 8, 4, 8, 8), jobs))
    assert decided.outcome is Outcome.NO_PLAN


def test_capacity_borrowed_by_another_tenant_is_taken_back_by_a_job_within_its_min() -> None:
    borrowed = running("borrowed", 0, ("m1", "n1", 4), namespace="b", leaf="root/b")
    own = running("own", 0, ("m1", "n2", 4), namespace="b", leaf="root/b",
                  started="2026-01-01T00:00:09Z")
    jobs = [borrowed, own]
    decided = plan(preemptor(100, 1, 4), jobs, fleet(m1={"n1": 0, "n2": 0}),
                   limits_for(tree(4, 8, 4, 8, 8), jobs))
    assert decided.outcome is Outcome.PREEMPT
    assert len(decided.victims) == 1


def test_without_a_quota_tree_capacity_alone_decides() -> None:
    other = running("other", 0, ("m1", "n1", 4), namespace="x", leaf=None)
    decided = plan(preemptor(100, 1, 4, namespace="y", leaf=None), [other],
                   fleet(m1={"n1": 0}))
    assert decided.victims == (other,)


def test_a_job_outside_every_tree_never_takes_a_tenants_quotad_job() -> None:
    tenant = running("tenant", 0, ("m1", "n1", 4))
    decided = plan(preemptor(100, 1, 4, namespace="y", leaf=None), [tenant],
                   fleet(m1={"n1": 0}), limits_for(tree(4, 8, 0, 8, 8), [tenant]))
    assert decided.outcome is Outcome.NO_PLAN


def test_a_preempted_job_takes_only_opportunistic_jobs_no_cascades() -> None:
    guaranteed = [running("test", 0, ("m1", "n1", 4))]
    decided = plan(preemptor(50, 1, 4, preempted=True), guaranteed, fleet(m1={"n1": 0}),
                   limits_for(tree(8, 8, 0, 8, 8), guaranteed))
    assert decided.outcome is Outcome.NO_PLAN
    assert "only opportunistic" in decided.reason
    # On idle capacity the chain ends: an opportunistic job preempts nobody.
    idle = running("idle", -1, ("m1", "n1", 4), namespace="x", leaf=None)
    jobs = [*guaranteed, idle]
    decided = plan(preemptor(50, 1, 4, preempted=True), jobs, fleet(m1={"n1": 0}),
                   limits_for(tree(8, 8, 0, 8, 8), jobs))
    assert decided.outcome is Outcome.PREEMPT
    assert decided.victims == (idle,)


def test_a_gang_split_across_clusters_frees_nodes_in_each() -> None:
    one = running("one", 0, ("m1", "n1", 4))
    two = running("two", 0, ("m2", "n1", 4))
    jobs = [one, two]
    p = preemptor(100, 2, 4)
    p = Preemptor(p.key, p.namespace, p.priority, p.demand,
                  PlacementRules(max_clusters=2), p.charge, p.leaf)
    decided = plan(p, jobs, fleet(m1={"n1": 0}, m2={"n1": 0}),
                   limits_for(tree(16, 16, 0, 16, 16), jobs))
    assert decided.victims in ((one, two), (two, one))
    assert decided.decision is not None
    assert len(decided.decision.shares) == 2


def test_equal_inputs_give_equal_plans() -> None:
    jobs = [running(f"j{i}", i % 3, ("m1", f"n{i}", 2)) for i in range(6)]
    clusters = fleet(m1={f"n{i}": 0 for i in range(6)})
    limits = limits_for(tree(16, 16, 0, 16, 16), jobs)
    assert plan(preemptor(100, 2, 2), jobs, clusters, limits) == plan(
        preemptor(100, 2, 2), list(reversed(jobs)), clusters, limits)


# -- properties ----------------------------------------------------------------------------
NODE_GPUS = 4


@st.composite
def scenarios(draw: st.DrawFn, max_jobs: int = 6, max_nodes: int = 3, max_replicas: int = 3
              ) -> tuple[Preemptor, list[Running], list[ClusterView], QuotaLimits]:
    nodes = [(c, f"n{i}") for c in ("m1", "m2")[:draw(st.integers(1, 2))]
             for i in range(draw(st.integers(1, max_nodes)))]
    free = dict.fromkeys(nodes, NODE_GPUS)
    jobs: list[Running] = []
    for index in range(draw(st.integers(0, max_jobs))):
        priority = draw(st.sampled_from([-1, 0, 50, 100]))
        namespace = draw(st.sampled_from(["a", "b", "x"]))
        pods = []
        for _ in range(draw(st.integers(1, 2))):
            room = [n for n in nodes if free[n] > 0]
            if not room:
                break
            node = draw(st.sampled_from(room))
            size = draw(st.integers(1, free[node]))
            free[node] -= size
            pods.append((node[0], node[1], size))
        if pods:
            leaf = {"a": "root/a", "b": "root/b"}.get(namespace)
            jobs.append(running(f"j{index}", priority, *pods, namespace=namespace,
                                started=f"2026-01-01T00:00:{index:02d}Z", leaf=leaf))
    clusters = [ClusterView(c, True, node_groups=tuple(
        NodeGroup(1, gpus(free[(c, n)]), nodes=(n,)) for cc, n in nodes if cc == c))
        for c in sorted({c for c, _ in nodes})]
    total = NODE_GPUS * len(nodes)
    a_max = draw(st.integers(1, total))
    root = tree(draw(st.integers(0, a_max)), a_max, draw(st.integers(0, total)), total, total)
    namespace = draw(st.sampled_from(["a", "b", "x"]))
    p = preemptor(draw(st.sampled_from([-1, 0, 50, 100])), draw(st.integers(1, max_replicas)),
                  draw(st.integers(1, NODE_GPUS)), namespace=namespace,
                  leaf={"a": "root/a", "b": "root/b"}.get(namespace))
    return p, jobs, clusters, limits_for(root, jobs)


SMALL_AND_LARGE = st.one_of(scenarios(), scenarios(max_jobs=14, max_nodes=6, max_replicas=6))


def fits(p: Preemptor, victims: Sequence[Running], clusters: Sequence[ClusterView],
         limits: QuotaLimits) -> bool:
    if not fits_quota(p, victims, limits):
        return False
    views = with_freed(clusters, (pod for v in victims for pod in v.pods))
    return divide(p.demand, views, p.rules).placed


@settings(max_examples=300, deadline=None)
@given(SMALL_AND_LARGE)
def test_a_plan_makes_the_preemptor_fit_and_touches_only_lower_priority_jobs(
        scenario: tuple[Preemptor, list[Running], list[ClusterView], QuotaLimits]) -> None:
    p, jobs, clusters, limits = scenario
    decided = plan(p, jobs, clusters, limits)
    if decided.outcome is Outcome.FITS:
        assert decided.victims == ()
        assert fits(p, (), clusters, limits)
        return
    # no plan preempts for nothing: it preempts only when it does not fit as things are
    assert not fits(p, (), clusters, limits)
    if decided.outcome is Outcome.NO_PLAN:
        assert decided.victims == ()
        if p.priority >= 0:  # then no set of jobs it may preempt would have let it fit
            eligible = [j for j in jobs if may_preempt(p, j, limits)]
            assert not fits(p, eligible, clusters, limits)
        return
    assert decided.victims
    assert all(v.priority < p.priority for v in decided.victims)
    assert all(may_preempt(p, v, limits) for v in decided.victims)
    assert fits(p, decided.victims, clusters, limits)
    for spared in decided.victims:  # none is taken in vain
        assert not fits(p, [v for v in decided.victims if v is not spared], clusters, limits)


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_a_plan_takes_the_fewest_victims(
        scenario: tuple[Preemptor, list[Running], list[ClusterView], QuotaLimits]) -> None:
    p, jobs, clusters, limits = scenario
    decided = plan(p, jobs, clusters, limits)
    if decided.outcome is not Outcome.PREEMPT:
        return
    eligible = [j for j in jobs if may_preempt(p, j, limits)]
    fewest = next(size for size in range(1, len(eligible) + 1)
                  if any(fits(p, subset, clusters, limits)
                         for subset in combinations(eligible, size)))
    if fewest <= 3:
        assert len(decided.victims) == fewest


def test_beyond_the_exact_search_a_greedy_pass_still_takes_none_in_vain() -> None:
    # Five whole nodes needed, each held by its own job; one more job elsewhere is spared.
    jobs = [running(f"j{i}", i % 2, ("m1", f"n{i}", 4), started=f"2026-01-01T00:00:0{i}Z")
            for i in range(6)]
    decided = plan(preemptor(100, 5, 4), jobs, fleet(m1={f"n{i}": 0 for i in range(6)}),
                   limits_for(tree(32, 32, 0, 32, 32), jobs))
    assert decided.outcome is Outcome.PREEMPT
    assert len(decided.victims) == 5
    spared = {j.key for j in jobs} - {v.key for v in decided.victims}
    assert spared == {"PyTorchJob/a/j1"}  # priority 1 and the oldest of those: most valuable


def test_jobs_on_clusters_the_preemptor_may_not_use_are_never_victims() -> None:
    elsewhere = running("elsewhere", 0, ("m2", "n1", 4))
    p = preemptor(100, 1, 4)
    p = Preemptor(p.key, p.namespace, p.priority, p.demand,
                  PlacementRules(affinity=Affinity(cluster_names=("m1",))), p.charge, p.leaf)
    decided = plan(p, [elsewhere], fleet(m1={"n1": 0}, m2={"n1": 0}),
                   limits_for(tree(8, 8, 0, 8, 8), [elsewhere]))
    assert decided.outcome is Outcome.NO_PLAN


# -- a guarantee claimed back for the nodes, whatever the borrowers' priority -----------------
def test_a_job_within_its_guarantee_takes_back_a_node_from_a_borrower_of_any_priority() -> None:
    """Team b borrows beyond its min (8 of 4) with jobs of higher priority than team a's
    gang, which is within its own min and fits no node: one of b's jobs goes (the youngest),
    the other stays."""
    borrowed = running("borrowed", 100, ("m1", "n1", 4), namespace="b", leaf="root/b")
    other = running("other", 100, ("m1", "n2", 4), namespace="b", leaf="root/b",
                    started="2026-01-01T00:00:09Z")
    jobs = [borrowed, other]
    limits = limits_for(tree(4, 8, 4, 8, 8), jobs)
    assert plan(preemptor(0, 1, 4), jobs, fleet(m1={"n1": 0, "n2": 0}),
                limits).outcome is Outcome.NO_PLAN  # by priority: nobody
    decided = plan_reclaim(preemptor(0, 1, 4), jobs, fleet(m1={"n1": 0, "n2": 0}), limits)
    assert decided.outcome is Outcome.PREEMPT
    assert [v.key for v in decided.victims] == ["PyTorchJob/b/other"]  # the youngest
    assert "within its guarantee" in decided.reason


def test_a_claim_takes_back_its_own_cells_from_a_tenant_within_its_min() -> None:
    """Both teams within their min, every node holds one of b's jobs: a's gang takes back
    the node of its cells (HiveD: another cluster runs on a VC's cells only as a guest), and
    never b's job on b's own cell."""
    on_a_cell = running("guest", 100, ("m1", "n1", 2), namespace="b", leaf="root/b")
    on_b_cell = running("home", 100, ("m1", "n2", 2), namespace="b", leaf="root/b",
                        started="2026-01-01T00:00:09Z")
    jobs = [on_a_cell, on_b_cell]
    limits = limits_for(tree(4, 8, 4, 8, 8), jobs)
    clusters = fleet(m1={"n1": 2, "n2": 2})
    assert plan_reclaim(preemptor(0, 1, 4), jobs, clusters,
                        limits).outcome is Outcome.NO_PLAN  # without cells: b is within
    decided = plan_reclaim(preemptor(0, 1, 4), jobs, clusters, limits, {"m1/n1": "root/a"})
    assert decided.outcome is Outcome.PREEMPT
    assert [v.key for v in decided.victims] == ["PyTorchJob/b/guest"]
    assert plan_reclaim(preemptor(0, 1, 4), jobs, clusters, limits,
                        {"m1/n3": "root/a"}).outcome is Outcome.NO_PLAN  # no guest there


def test_a_preemptor_takes_victims_on_its_own_cells_before_those_on_other_tenants() -> None:
    """Two opportunistic jobs, each on a whole node: the younger stands on b's cell, the
    older on a's. a's job takes the older one (freed there, it is at home: on b's cell it
    would be a guest b takes back); without cells, the younger as always."""
    on_b_cell = running("young", -1, ("m1", "n1", 4), namespace="x", leaf=None,
                        started="2026-01-01T00:00:09Z")
    on_a_cell = running("old", -1, ("m1", "n2", 4), namespace="x", leaf=None)
    jobs = [on_b_cell, on_a_cell]
    clusters = fleet(m1={"n1": 0, "n2": 0})
    limits = limits_for(tree(4, 8, 4, 8, 8), jobs)
    owners = {"m1/n1": "root/b", "m1/n2": "root/a"}
    for decided, taken in ((plan(preemptor(1, 1, 4), jobs, clusters, limits), "young"),
                           (plan(preemptor(1, 1, 4), jobs, clusters, limits, owners), "old"),
                           (plan_reclaim(preemptor(0, 1, 4), jobs, clusters, limits, owners),
                            "old")):
        assert [v.key for v in decided.victims] == [f"PyTorchJob/x/{taken}"]


def test_no_guarantee_is_claimed_from_a_tenant_within_its_min_or_beyond_ones_own() -> None:
    theirs = running("theirs", 0, ("m1", "n1", 4), namespace="b", leaf="root/b")
    jobs = [theirs]
    within_theirs = limits_for(tree(4, 8, 4, 8, 8), jobs)
    assert plan_reclaim(preemptor(0, 1, 4), jobs, fleet(m1={"n1": 0}),
                        within_theirs).outcome is Outcome.NO_PLAN
    beyond_ours = limits_for(tree(2, 8, 0, 8, 8), jobs)  # b borrows, but a asks 4 of 2
    assert plan_reclaim(preemptor(0, 1, 4), jobs, fleet(m1={"n1": 0}),
                        beyond_ours).outcome is Outcome.NO_PLAN


@st.composite
def claims(draw: st.DrawFn) -> tuple[Preemptor, list[Running], list[ClusterView], QuotaLimits]:
    """A scenario whose preemptor is a guaranteed job of team a guaranteed the whole fleet,
    team b guaranteed a random part of it (some of its jobs borrow): many of these claim."""
    p, jobs, clusters, _ = draw(scenarios(max_jobs=10, max_nodes=4))
    role = p.demand.roles[0]
    total = NODE_GPUS * sum(len(c.node_groups) for c in clusters)
    b_min = draw(st.integers(0, total))
    return (preemptor(0, role.replicas, role.request[GPU]), jobs, clusters,
            limits_for(tree(total, total, b_min, total, 2 * total), jobs))


@settings(max_examples=300, deadline=None)
@given(st.one_of(SMALL_AND_LARGE, claims()))
def test_a_reclaim_for_nodes_makes_the_claim_fit_and_takes_only_borrowed_or_idle_capacity(
        scenario: tuple[Preemptor, list[Running], list[ClusterView], QuotaLimits]) -> None:
    p, jobs, clusters, limits = scenario
    decided = plan_reclaim(p, jobs, clusters, limits)
    if decided.outcome is not Outcome.PREEMPT:
        assert decided.victims == ()
        return
    assert not fits(p, (), clusters, limits)  # never for nothing
    assert within_guarantee(p, limits)
    for victim in decided.victims:  # opportunistic, or another tenant's, on borrowed capacity
        assert victim.priority < 0 or (victim.leaf not in (None, p.leaf)
                                       and on_borrowed(victim, GPU, limits))
    assert fits(p, decided.victims, clusters, limits)
    for spared in decided.victims:  # none is taken in vain
        assert not fits(p, [v for v in decided.victims if v is not spared], clusters, limits)
