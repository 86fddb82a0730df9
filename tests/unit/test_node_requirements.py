"""A role's required node labels (a GPU model, say): division only packs its replicas onto
nodes whose labels satisfy them, in node-aware and in summed mode."""

from __future__ import annotations

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
