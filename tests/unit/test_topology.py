"""Topology-aware placement: the pure packing within topology domains, the protocol that
carries the request, the levels and the chosen domain, and the agent's pinning."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e2e.jobs import seed_pytorchjob
from fleet.api import protocol
from fleet.api.cluster import Work
from fleet.hub.views import cluster_view
from fleet.hub.works import placement_of, work_body
from fleet.kinds import adapter_for
from fleet.kinds.base import InvalidJob
from member_agent.capacity import group_nodes, grouped, wire
from member_agent.topology import pinned
from propagation.division import ClusterShare, divide, taken
from propagation.fit import expand
from propagation.resources import Resources
from propagation.spent import with_assumed
from propagation.topology import place_roles
from propagation.views import (
    ClusterView,
    JobDemand,
    NodeGroup,
    PlacementRules,
    Role,
    TopologyRequest,
)

GPU = "nvidia.com/gpu"
BLOCK, RACK, HOST = protocol.DEFAULT_TOPOLOGY_LEVELS
Body = dict[str, Any]


def rack_group(block: str, rack: str, count: int, free: int, prefix: str) -> NodeGroup:
    return NodeGroup(count, Resources.of({GPU: free}), ((BLOCK, block), (RACK, rack)),
                     tuple(f"{prefix}-{i}" for i in range(count)))


def member(*groups: NodeGroup, levels: tuple[str, ...] = protocol.DEFAULT_TOPOLOGY_LEVELS,
           name: str = "m1") -> ClusterView:
    return ClusterView(name, True, node_groups=groups, topology_levels=levels)


def workers(n: int, per: int, level: str = RACK, required: bool = True) -> JobDemand:
    return JobDemand("pytorchjob/ns/j", (Role("Worker", n, Resources.of({GPU: per})),),
                     TopologyRequest(level, required))


# -- random members: racks of named nodes, and gangs of replicas that ask alike -----------
racks_strategy = st.lists(  # per rack: its block, and its nodes' free GPUs
    st.tuples(st.sampled_from(["b1", "b2"]), st.lists(st.integers(0, 8), min_size=1,
                                                       max_size=4)),
    min_size=1, max_size=6)


def random_member(racks: list[tuple[str, list[int]]]) -> tuple[ClusterView, dict[str, str]]:
    groups, rack_of = [], {}
    for index, (block, frees) in enumerate(racks):
        for n, free in enumerate(frees):
            group = rack_group(block, f"r{index}", 1, free, f"r{index}n{n}")
            groups.append(group)
            rack_of[group.nodes[0]] = f"r{index}"
    unlabelled = NodeGroup(2, Resources.of({GPU: 8}), (), ("loose-0", "loose-1"))
    return member(*groups, unlabelled), rack_of


def capacities(racks: list[tuple[str, list[int]]], per: int) -> list[int]:
    """How many replicas of ``per`` GPUs each rack holds (one node each)."""
    return [sum(free // per for free in frees) for _, frees in racks]


@settings(max_examples=150, deadline=None)
@given(racks=racks_strategy, replicas=st.integers(1, 12), per=st.integers(1, 4))
def test_a_required_gang_never_spans_two_domains(racks: list[tuple[str, list[int]]],
                                                  replicas: int, per: int) -> None:
    cluster, rack_of = random_member(racks)
    decision = divide(workers(replicas, per), [cluster], PlacementRules())
    fits_one = max(capacities(racks, per)) >= replicas
    assert decision.placed == fits_one, decision.reason
    if not decision.placed:
        # (a member whose nodes cannot hold the gang even spread is explained as without a
        # topology; else the reason names the level)
        anywhere = 2 * (8 // per) + sum(capacities(racks, per))
        assert anywhere < replicas or \
            f"no {RACK} domain holds all {replicas} replicas" in decision.reason
        return
    (share,) = decision.shares
    (domain,) = share.domains
    rack = dict(domain)[RACK]
    assert {rack_of.get(node) for node in share.nodes} == {rack}  # never the loose nodes
    assert capacities(racks, per)[int(rack[1:])] >= replicas


@settings(max_examples=150, deadline=None)
@given(racks=racks_strategy, replicas=st.integers(1, 16), per=st.integers(1, 4))
def test_a_preferred_gang_uses_no_more_domains_than_needed(
        racks: list[tuple[str, list[int]]], replicas: int, per: int) -> None:
    cluster, rack_of = random_member(racks)
    decision = divide(workers(replicas, per, required=False), [cluster], PlacementRules())
    ordered = sorted(capacities(racks, per), reverse=True)
    if sum(ordered) < replicas:
        assert not decision.placed
        return
    needed = next(k for k in range(1, len(ordered) + 1) if sum(ordered[:k]) >= replicas)
    (share,) = decision.shares
    assert len(share.domains) == needed
    used = {dict(d)[RACK] for d in share.domains}
    assert {rack_of.get(node) for node in share.nodes} <= used


def test_required_picks_the_rack_it_fits_most_tightly() -> None:
    cluster = member(rack_group("b1", "r1", 4, 8, "big"), rack_group("b1", "r2", 2, 4, "small"),
                     rack_group("b2", "r3", 1, 8, "one"))
    decision = divide(workers(2, 4), [cluster], PlacementRules())
    assert decision.shares[0].domains == (((BLOCK, "b1"), (RACK, "r2")),)
    assert decision.reason == f"fits m1 within {RACK}=r2"


def test_required_block_packs_across_the_racks_of_one_block() -> None:
    cluster = member(rack_group("b1", "r1", 1, 8, "a"), rack_group("b1", "r2", 1, 8, "b"),
                     rack_group("b2", "r3", 1, 8, "c"))
    (share,) = divide(workers(4, 4, level=BLOCK), [cluster], PlacementRules()).shares
    assert share.domains == (((BLOCK, "b1"),),)
    assert share.nodes == ("a-0", "b-0")


def test_required_hostname_puts_the_gang_on_one_named_node() -> None:
    cluster = member(rack_group("b1", "r1", 2, 4, "four"), rack_group("b1", "r1", 1, 8, "eight"))
    (share,) = divide(workers(4, 2, level=HOST), [cluster], PlacementRules()).shares
    assert share.nodes == ("eight-0",)
    assert share.domains == (((BLOCK, "b1"), (RACK, "r1"), (HOST, "eight-0")),)


def test_a_member_without_the_level_is_no_place_for_a_required_gang() -> None:
    plain = member(rack_group("b1", "r1", 4, 8, "n"), levels=(), name="plain")
    decision = divide(workers(2, 1), [plain], PlacementRules())
    assert not decision.placed
    assert f"plain: reports no topology level {RACK}" in decision.reason
    preferred = divide(workers(2, 1, required=False), [plain], PlacementRules())
    assert preferred.placed
    assert preferred.shares[0].domains == ()


def test_a_split_gang_keeps_each_share_within_one_rack() -> None:
    one = member(rack_group("b1", "r1", 1, 8, "a"), rack_group("b1", "r2", 1, 8, "b"), name="m1")
    two = member(rack_group("b1", "r1", 1, 8, "c"), name="m2")
    # m1 has room for all 4 replicas, but only over two racks: it takes what one rack holds.
    decision = divide(workers(4, 4), [one, two], PlacementRules(max_clusters=2))
    assert [(s.cluster, dict(s.replicas)["Worker"], len(s.domains))
            for s in decision.shares] == [("m1", 2, 1), ("m2", 2, 1)]


def test_jobs_without_topology_ignore_it() -> None:
    cluster = member(rack_group("b1", "r1", 1, 4, "a"), rack_group("b1", "r2", 1, 4, "b"))
    job = JobDemand("j", (Role("Worker", 2, Resources.of({GPU: 4})),))
    (share,) = divide(job, [cluster], PlacementRules()).shares
    assert share.domains == ()
    assert share.nodes == ("a-0", "b-0")


# -- the protocol ---------------------------------------------------------------------------
@pytest.mark.parametrize(("annotations", "expected"), [
    pytest.param({}, None, id="no request"),
    pytest.param({protocol.TOPOLOGY_REQUIRED: RACK}, (RACK, True), id="required rack"),
    pytest.param({protocol.TOPOLOGY_PREFERRED: BLOCK}, (BLOCK, False), id="preferred block"),
])
def test_a_jobs_topology_request_reads(annotations: dict[str, str],
                                       expected: tuple[str, bool] | None) -> None:
    assert protocol.topology_request({"annotations": annotations}) == expected


@pytest.mark.parametrize(("annotations", "field"), [
    pytest.param({protocol.TOPOLOGY_REQUIRED: "not a key!"}, protocol.TOPOLOGY_REQUIRED,
                 id="not a label key"),
    pytest.param({protocol.TOPOLOGY_PREFERRED: "x" * 5000}, protocol.TOPOLOGY_PREFERRED,
                 id="5000 characters"),
    pytest.param({protocol.TOPOLOGY_REQUIRED: RACK, protocol.TOPOLOGY_PREFERRED: RACK},
                 protocol.TOPOLOGY_REQUIRED, id="both"),
])
def test_an_invalid_request_names_its_annotation(annotations: dict[str, str],
                                                 field: str) -> None:
    with pytest.raises(ValueError, match=f"metadata.annotations\\[{field}\\]") as caught:
        protocol.topology_request({"annotations": annotations})
    assert len(str(caught.value)) < 400


def test_the_hub_holds_an_invalid_request_as_an_invalid_job() -> None:
    job = seed_pytorchjob("j", "ns")
    job["metadata"]["annotations"] = {protocol.TOPOLOGY_REQUIRED: "bad key/with/slashes"}
    with pytest.raises(InvalidJob, match="podset-required-topology"):
        adapter_for(job["apiVersion"], job["kind"]).demand("k", job)
    job["metadata"]["annotations"] = {protocol.TOPOLOGY_REQUIRED: RACK}
    demand = adapter_for(job["apiVersion"], job["kind"]).demand("k", job)
    assert demand.topology == TopologyRequest(RACK, True)


@pytest.mark.parametrize(("text", "levels"), [
    pytest.param(None, protocol.DEFAULT_TOPOLOGY_LEVELS, id="unset: the defaults"),
    pytest.param("example.com/zone, example.com/rack", ("example.com/zone", "example.com/rack"),
                 id="two levels"),
])
def test_an_agents_topology_levels_read(text: str | None, levels: tuple[str, ...]) -> None:
    assert protocol.topology_levels(text) == levels


@pytest.mark.parametrize("text", [f"{HOST},{RACK}", "a,a", ",".join(f"l{i}" for i in range(9)),
                                  "bad key"])
def test_invalid_topology_levels_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="topology levels"):
        protocol.topology_levels(text)


def work_of(job: Body, share: ClusterShare) -> Body:
    """The Work the hub writes for ``job`` bound as ``share`` (its placement read back as
    the share first), checked against the Work model."""
    job["metadata"].update(uid="u-1", generation=1)
    job["metadata"]["annotations"] = {protocol.PLACEMENT: protocol.encode_placement([share])}
    assert placement_of(job) == (share,)
    decoded = protocol.decode_placement(job)[0]
    body = work_body(job, adapter_for(job["apiVersion"], job["kind"]), decoded,
                     protocol.decode_placement(job))
    Work.model_validate(body)
    return body


def test_the_chosen_domains_travel_from_the_bind_to_the_work() -> None:
    domain = ((BLOCK, "b1"), (RACK, "r2"))
    share = ClusterShare("m1", (("Worker", 2),), (("Worker", 0),), ("n1",), domains=(domain,))
    body = work_of(seed_pytorchjob("j", "ns", workers=2, master=False), share)
    assert body["spec"]["placement"]["domains"] == [{BLOCK: "b1", RACK: "r2"}]
    assert protocol.share_domains(body["spec"]["placement"]) == (domain,)


# -- the agent: reporting racks, pinning pods ---------------------------------------------
def node(name: str, rack: str | None) -> Body:
    labels = {"nvidia.com/gpu.product": "A100", HOST: name}
    if rack:
        labels.update({BLOCK: "b1", RACK: rack})
    return {"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def test_the_agent_groups_nodes_by_rack_but_never_by_hostname() -> None:
    nodes = [node("a", "r1"), node("b", "r1"), node("c", "r2"), node("d", None)]
    groups = group_nodes(nodes, [])
    assert sorted((g.count, g.labels.get(RACK, "")) for g in groups) == [
        (1, ""), (1, "r2"), (2, "r1")]
    assert all(HOST not in g.labels for g in groups)
    flat = group_nodes(nodes, [], topology_levels=())
    assert [g.count for g in flat] == [4]


def test_the_agent_pins_every_template_and_keeps_their_own_affinity() -> None:
    job = seed_pytorchjob("j", "ns")
    own = {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [own]}}}
    before = copy.deepcopy(job)
    domains = [((BLOCK, "b1"), (RACK, "r1")), ((BLOCK, "b1"), (RACK, "r2"))]
    out = pinned(job, domains)
    assert job == before  # the Work's manifest is not touched

    def terms(role: str) -> list[Body]:
        spec = out["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]
        found: list[Body] = spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        return found

    rack = {"key": RACK, "operator": "In", "values": ["r1"]}
    assert terms("Worker") == [
        {"matchExpressions": [{"key": BLOCK, "operator": "In", "values": ["b1"]}, rack]},
        {"matchExpressions": [{"key": BLOCK, "operator": "In", "values": ["b1"]},
                              {**rack, "values": ["r2"]}]}]
    assert [t["matchExpressions"][0] for t in terms("Master")] == [own["matchExpressions"][0]] * 2
    assert pinned(job, []) == job


def test_a_bound_gang_is_taken_out_of_its_own_rack_for_the_next_decision() -> None:
    # r1's one node of 4 GPUs is the best fit for each replica alone, but the gang went to
    # r2: the next decision must see r2 less free, not r1.
    cluster = member(rack_group("b1", "r1", 1, 4, "a"), rack_group("b1", "r2", 2, 8, "b"))
    (share,) = divide(workers(2, 4), [cluster], PlacementRules()).shares
    assert share.domains == (((BLOCK, "b1"), (RACK, "r2")),)
    after = with_assumed(cluster, [Resources.of({GPU: 4})] * 2, share.domains)
    free = {"r1": 0, "r2": 0}
    for group in after.node_groups:
        free[dict(group.labels)[RACK]] += group.free.get(GPU, 0) * group.count
    assert free == {"r1": 4, "r2": 8}


def test_a_level_that_splits_the_report_past_its_bound_is_no_longer_reported() -> None:
    # One rack of 12 nodes with 12 different GPU counts: 12 groups, past 10 per domain.
    nodes = []
    for i in range(12):
        body = node(f"n{i}", "r1")
        body["status"]["allocatable"]["nvidia.com/gpu"] = str(i + 1)
        nodes.append(body)
    groups, levels = grouped(nodes, [], max_groups=2)
    assert levels == (HOST,)
    assert all(RACK not in g.labels and BLOCK not in g.labels for g in groups)
    groups, levels = grouped(nodes, [], max_groups=12)
    assert levels == protocol.DEFAULT_TOPOLOGY_LEVELS
    assert {g.labels[RACK] for g in groups} == {"r1"}


def test_a_preferred_gang_spreads_over_racks_of_one_block_when_it_can() -> None:
    # Two racks are needed either way; r1 (b1) is the largest, but b1 cannot hold the gang
    # and b2's two racks can, without crossing blocks.
    cluster = member(rack_group("b1", "r1", 3, 4, "a"), rack_group("b1", "r2", 1, 0, "b"),
                     rack_group("b2", "r3", 2, 4, "c"), rack_group("b2", "r4", 2, 4, "d"))
    (share,) = divide(workers(4, 4, required=False), [cluster], PlacementRules()).shares
    assert {dict(d)[BLOCK] for d in share.domains} == {"b2"}
    assert len(share.domains) == 2


def test_a_report_names_each_set_of_labels_once_and_the_hub_reads_them_back() -> None:
    nodes = [node("a", "r1"), node("b", "r1"), node("c", "r2"), node("d", None)]
    pods = [{"metadata": {"name": "p"}, "spec": {"nodeName": "a", "containers": [
        {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "3"}}}]},
        "status": {"phase": "Running"}}]
    groups, levels = grouped(nodes, pods)
    label_sets, wired = wire(groups)
    assert len(wired) == 4
    assert len(label_sets) == 3  # r1 (two groups), r2, and the node in no rack
    body = {"apiVersion": protocol.API_VERSION, "kind": "MemberCluster",
            "metadata": {"name": "m1"},
            "status": {"capacity": {"topologyLevels": list(levels), "labelSets": label_sets,
                                    "nodeGroups": wired}}}
    view = cluster_view(body, datetime.now(UTC), 60)
    assert view.topology_levels == protocol.DEFAULT_TOPOLOGY_LEVELS
    assert sorted((dict(g.labels).get(RACK, ""), g.free.get(GPU, 0)) for g in view.node_groups) \
        == [("", 8), ("r1", 5), ("r1", 8), ("r2", 8)]


# -- a role's own topology (Kueue's pod-set topology) ---------------------------------------
def master_and_workers(workers_n: int, per: int, level: str = RACK,
                       required: bool = True) -> JobDemand:
    """A master of 1 GPU anywhere, workers that keep to one domain of ``level``."""
    return JobDemand("pytorchjob/ns/j", (
        Role("Master", 1, Resources.of({GPU: 1}), leader=True),
        Role("Worker", workers_n, Resources.of({GPU: per}),
             topology=TopologyRequest(level, required))))


def test_a_roles_own_topology_packs_that_role_only() -> None:
    # r1 holds the 2 workers of 4 GPUs and nothing more; the master goes to r2.
    cluster = member(rack_group("b1", "r1", 1, 8, "a"), rack_group("b1", "r2", 1, 1, "b"))
    (share,) = divide(master_and_workers(2, 4), [cluster], PlacementRules()).shares
    assert share.domains == ()
    assert share.role_domains == (("Worker", (((BLOCK, "b1"), (RACK, "r1")),)),)
    assert share.nodes == ("a-0", "b-0")
    # the whole gang asked for one rack would not fit
    whole = JobDemand("j", tuple(replace(r, topology=None) for r in master_and_workers(2, 4)
                                 .roles), TopologyRequest(RACK, True))
    assert not divide(whole, [cluster], PlacementRules()).placed


def test_a_role_no_domain_holds_waits_naming_the_role() -> None:
    cluster = member(rack_group("b1", "r1", 1, 5, "a"), rack_group("b1", "r2", 1, 5, "b"))
    decision = divide(master_and_workers(2, 4), [cluster], PlacementRules())
    assert not decision.placed
    assert decision.reason == ("m1: no cloud.provider.com/topology-rack domain holds all 2 "
                               "Worker replicas (required topology "
                               "cloud.provider.com/topology-rack of Worker; the fullest, "
                               f"{RACK}=r1, holds 1)")


@settings(max_examples=150, deadline=None)
@given(racks=racks_strategy, replicas=st.integers(1, 8), per=st.integers(1, 4))
def test_a_required_role_never_spans_two_domains_nor_overfills_a_node(
        racks: list[tuple[str, list[int]]], replicas: int, per: int) -> None:
    cluster, rack_of = random_member(racks)
    demand = master_and_workers(replicas, per)
    packing = place_roles(cluster, expand(demand.roles))
    workers_fit = any(c >= replicas for c in capacities(racks, per))
    worker_racks = {rack_of.get(node) for replica, node in packing.placed
                    if replica.role == "Worker"}
    if workers_fit:
        assert not [r for r in packing.unplaced if r.role == "Worker"]
    assert len(worker_racks) <= 1
    assert None not in worker_racks  # never on the nodes that belong to no rack
    if worker_racks:
        [(role, (domain,))] = packing.role_domains
        assert (role, dict(domain)[RACK]) == ("Worker", next(iter(worker_racks)))
    free = {n: g.free.get(GPU, 0) for g in cluster.node_groups for n in g.nodes}
    for replica, node in packing.placed:
        free[node] -= replica.request.get(GPU, 0)
    assert min(free.values()) >= 0
    assert len(packing.placed) + len(packing.unplaced) == replicas + 1


def test_a_roles_domains_travel_to_the_work_and_pin_its_template_only() -> None:
    job = seed_pytorchjob("j", "ns", workers=2)
    domain = ((BLOCK, "b1"), (RACK, "r2"))
    share = ClusterShare("m1", (("Master", 1), ("Worker", 2)), (("Master", 0), ("Worker", 0)),
                         ("n1",), role_domains=(("Worker", (domain,)),))
    placement = work_of(job, share)["spec"]["placement"]
    assert placement["roleDomains"] == {"Worker": [{BLOCK: "b1", RACK: "r2"}]}
    assert "domains" not in placement
    out = pinned(job, protocol.share_domains(placement), protocol.share_role_domains(placement))
    specs = out["spec"]["pytorchReplicaSpecs"]
    # the master is not pinned; it prefers nodes outside the workers' rack
    assert specs["Master"]["template"]["spec"]["affinity"] == {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {
            "matchExpressions": [{"key": RACK, "operator": "NotIn", "values": ["r2"]}]}}]}}
    assert specs["Worker"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": BLOCK, "operator": "In", "values": ["b1"]},
                              {"key": RACK, "operator": "In", "values": ["r2"]}]}]


@pytest.mark.parametrize("key", [protocol.KUEUE_TOPOLOGY_REQUIRED, protocol.TOPOLOGY_REQUIRED])
def test_a_pod_templates_topology_annotation_is_its_roles(key: str) -> None:
    job = seed_pytorchjob("j", "ns", workers=2)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] = {
        "annotations": {key: RACK}}
    demand = adapter_for(job["apiVersion"], job["kind"]).demand("k", job)
    assert demand.topology is None
    assert [(r.name, r.topology) for r in demand.roles] == [
        ("Master", None), ("Worker", TopologyRequest(RACK, True))]
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]
    worker["annotations"] = {protocol.KUEUE_TOPOLOGY_PREFERRED: "not a key!"}
    with pytest.raises(InvalidJob, match=r"^spec\.pytorchReplicaSpecs\.Worker\.template\."
                       r"metadata\.annotations\[kueue\.x-k8s\.io/podset-preferred-topology\]"):
        adapter_for(job["apiVersion"], job["kind"]).demand("k", job)
    worker["annotations"] = {key: RACK}
    job["metadata"]["annotations"] = {protocol.TOPOLOGY_REQUIRED: BLOCK}
    with pytest.raises(InvalidJob, match="set one or the other"):
        adapter_for(job["apiVersion"], job["kind"]).demand("k", job)


def test_a_role_is_taken_out_of_its_own_rack_for_the_next_decision() -> None:
    # r1's one node (5 GPUs) holds one worker of 4 GPUs, so both go to r2 (two nodes of 8);
    # the master (1 GPU) fits r1's node most tightly. The next decision must see exactly
    # that: r1 4 GPUs free (where a worker, taken out anywhere, would fit best), r2 8.
    cluster = member(rack_group("b1", "r1", 1, 5, "a"), rack_group("b1", "r2", 2, 8, "b"))
    demand = master_and_workers(2, 4)
    (share,) = divide(demand, [cluster], PlacementRules()).shares
    assert share.role_domains == (("Worker", (((BLOCK, "b1"), (RACK, "r2")),)),)
    after = taken(cluster, share, {r.name: r.request for r in demand.roles})
    free = {"r1": 0, "r2": 0}
    for group in after.node_groups:
        free[dict(group.labels)[RACK]] += group.free.get(GPU, 0) * group.count
    assert free == {"r1": 4, "r2": 8}


def test_a_preferred_spread_ends_on_the_tightest_rack_that_holds_the_rest() -> None:
    # 10 replicas of 1 GPU: no rack holds them; r1 takes 8, and the 2 left go to r3 (2 free)
    # rather than breaking up r2 (8 free), which a later gang may need whole.
    cluster = member(rack_group("b1", "r1", 1, 8, "a"), rack_group("b1", "r2", 1, 8, "b"),
                     rack_group("b1", "r3", 1, 2, "c"))
    (share,) = divide(workers(10, 1, required=False), [cluster], PlacementRules()).shares
    assert [dict(d)[RACK] for d in share.domains] == ["r1", "r3"]
