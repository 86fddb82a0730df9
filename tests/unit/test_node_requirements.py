"""A role's required node labels (a GPU model, say): division only packs its replicas onto
nodes whose labels satisfy them, in node-aware and in summed mode; the hub reads them from a
pod template's nodeSelector and required node affinity on the labels members report."""

from __future__ import annotations

from typing import Any

from e2e.jobs import seed_pytorchjob
from fleet.kinds import adapter_for
from fleet.kinds.base import node_requirements
from propagation.division import divide
from propagation.fit import Bins, expand, pack
from propagation.resources import Resources
from propagation.views import (
    ClusterView,
    FitMode,
    JobDemand,
    NodeGroup,
    NodeLabelIn,
    PlacementRules,
    Role,
)

GPU = "nvidia.com/gpu"
MODEL = "nvidia.com/gpu.product"
ZONE = "topology.kubernetes.io/zone"
Body = dict[str, Any]


def node(count: int, gpus: int, model: str, names: tuple[str, ...] = ()) -> NodeGroup:
    return NodeGroup(count, Resources.of({GPU: gpus, "cpu": 64000}), ((MODEL, model),), names)


def job(replicas: int, per: int, *models: str) -> JobDemand:
    needs = (NodeLabelIn(MODEL, models),) if models else ()
    return JobDemand("j", (Role("Worker", replicas, Resources.of({GPU: per, "cpu": 1000}),
                                node_requirements=needs),))


def placed(decision_shares: object) -> dict[str, int]:
    return {s.cluster: dict(s.replicas)["Worker"] for s in decision_shares}  # type: ignore[attr-defined]


def test_a_model_requirement_skips_the_tighter_cluster_without_that_model() -> None:
    tight = ClusterView("a", True, node_groups=(node(1, 2, "V100"),))
    roomy = ClusterView("b", True, node_groups=(node(2, 8, "T4"),))
    assert placed(divide(job(2, 1), [tight, roomy], PlacementRules()).shares) == {"a": 2}
    decision = divide(job(2, 1, "T4"), [tight, roomy], PlacementRules())
    assert placed(decision.shares) == {"b": 2}


def test_replicas_only_take_nodes_whose_model_they_accept() -> None:
    mixed = ClusterView("m", True, node_groups=(node(1, 8, "G2", ("g2-0",)),
                                                node(1, 2, "T4", ("t4-0",))))
    two = divide(job(2, 1, "T4"), [mixed], PlacementRules())
    assert two.shares[0].nodes == ("t4-0",)
    three = divide(job(3, 1, "T4"), [mixed], PlacementRules())
    assert not three.placed
    assert "find no node with room" in three.reason
    none = divide(job(1, 1, "A100"), [mixed], PlacementRules())
    assert not none.placed
    assert "no node with nvidia.com/gpu.product in [A100]" in none.reason
    either = divide(job(3, 1, "A100", "G2"), [mixed], PlacementRules())
    assert either.shares[0].nodes == ("g2-0",)


def test_summed_mode_sums_only_the_nodes_a_replica_accepts() -> None:
    mixed = ClusterView("m", True, node_groups=(node(1, 8, "G2"), node(2, 1, "T4")))
    summed = PlacementRules(fit_mode=FitMode.SUMMED)
    assert divide(job(2, 1, "T4"), [mixed], summed).placed
    short = divide(job(3, 1, "T4"), [mixed], summed)
    assert not short.placed
    assert "exceed the summed free capacity of the nodes with" in short.reason
    # summed mode still ignores how the accepted capacity is split over nodes
    assert divide(job(1, 2, "T4"), [mixed], summed).placed
    assert not divide(job(1, 2, "T4"), [mixed], PlacementRules()).placed


def test_without_requirements_labels_do_not_split_buckets() -> None:
    groups = (node(1, 4, "G2"), node(1, 4, "T4"))
    assert len(Bins(groups, (GPU,))._buckets) == 1
    assert len(Bins(groups, (GPU,), by_labels=True)._buckets) == 2
    packing = pack(expand(job(2, 4).roles), groups)
    assert not packing.unplaced


def test_weighted_division_counts_only_accepted_nodes() -> None:
    a = ClusterView("a", True, node_groups=(node(4, 1, "G2"), node(1, 1, "T4")))
    b = ClusterView("b", True, node_groups=(node(3, 1, "T4"),))
    decision = divide(job(4, 1, "T4"), [a, b], PlacementRules(gang=False))
    assert placed(decision.shares) == {"a": 1, "b": 3}


# -- from the pod templates ------------------------------------------------------------------
def template(spec: Body) -> Body:
    return {"spec": {"containers": [{"name": "c"}], **spec}}


def affinity(*terms: list[Body]) -> Body:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}}


def test_selector_and_affinity_on_reported_labels_become_requirements() -> None:
    assert node_requirements(template({"nodeSelector": {MODEL: "A100", "kubernetes.io/os":
                                                        "linux"}})) == (
        NodeLabelIn(MODEL, ("A100",)),)  # a key members do not report is the member's
    both = template({
        "nodeSelector": {MODEL: "A100"},
        "affinity": affinity([{"key": MODEL, "operator": "In", "values": ["A100", "H100"]},
                              {"key": ZONE, "operator": "In", "values": ["z1", "z2"]},
                              {"key": ZONE, "operator": "NotIn", "values": ["z1"]}])})
    assert node_requirements(both) == (NodeLabelIn(MODEL, ("A100",)),
                                       NodeLabelIn(ZONE, ("z1", "z2")))
    pinned = template({"nodeSelector": {"kubernetes.io/hostname": "node-3"}})
    assert node_requirements(pinned) == (NodeLabelIn("kubernetes.io/hostname", ("node-3",)),)
    ored = template({"affinity": affinity([{"key": MODEL, "operator": "In", "values": ["A"]}],
                                          [{"key": MODEL, "operator": "In", "values": ["B"]}])})
    assert node_requirements(ored) == ()  # several terms are ORed: left to the member
    for junk in ({"nodeSelector": 5}, {"affinity": {"nodeAffinity": 1}},
                 {"affinity": {"nodeAffinity": {
                     "requiredDuringSchedulingIgnoredDuringExecution": {
                         "nodeSelectorTerms": [5]}}}}, {"affinity": {"nodeAffinity": {
                     "requiredDuringSchedulingIgnoredDuringExecution": {
                         "nodeSelectorTerms": [{"matchExpressions": 3}]}}}}):
        assert node_requirements(template(junk)) == ()


def member(name: str, model: str) -> ClusterView:
    return ClusterView(name, True, node_groups=(
        NodeGroup(4, Resources.of({"nvidia.com/gpu": 8, "cpu": 96_000, "memory": 1 << 40}),
                  ((MODEL, model),)),))


def test_a_job_asking_for_a_gpu_model_goes_where_its_nodes_are() -> None:
    job = seed_pytorchjob("j", "ns", gpus=1)
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["nodeSelector"] = {MODEL: "NVIDIA-H100"}
    demand = adapter_for(job["apiVersion"], job["kind"]).demand("k", job)
    fleet = [member("a100s", "NVIDIA-A100"), member("h100s", "NVIDIA-H100")]
    assert [s.cluster for s in divide(demand, fleet, PlacementRules()).shares] == ["h100s"]
    decision = divide(demand, fleet[:1], PlacementRules())
    assert not decision.placed
    assert "no node with nvidia.com/gpu.product in [NVIDIA-H100]" in decision.reason


def test_a_replica_pinned_to_a_node_by_its_hostname_goes_there() -> None:
    """Groups never carry the hostname label, yet a nodeSelector on kubernetes.io/hostname is
    a common pin: the named node is the only one that takes it (it was never placed)."""
    cluster = ClusterView("m1", True, node_groups=(node(3, 8, "A100", ("n1", "n2")),))
    pinned = JobDemand("j", (Role("Worker", 1, Resources.of({GPU: 8}), node_requirements=(
        NodeLabelIn("kubernetes.io/hostname", ("n2",)),)),))
    decision = divide(pinned, [cluster], PlacementRules())
    assert decision.placed
    assert decision.shares[0].nodes == ("n2",)
    two = JobDemand("j", (Role("Worker", 2, Resources.of({GPU: 8}),
                               node_requirements=pinned.roles[0].node_requirements),))
    assert not divide(two, [cluster], PlacementRules()).placed  # one node, one replica
    elsewhere = JobDemand("j", (Role("Worker", 1, Resources.of({GPU: 8}), node_requirements=(
        NodeLabelIn("kubernetes.io/hostname", ("n9",)),)),))
    assert "no node with kubernetes.io/hostname in [n9]" in divide(
        elsewhere, [cluster], PlacementRules()).reason
