"""The fragmentation study on a tiny inventory: node-aware division never leaves more GPUs
unallocated than summed at equal fill, and no pod lands on a node whose model it rejects."""

from __future__ import annotations

from fleet.sim.fragmentation import Member, StudyConfig, measure, run_curve, shapes_of, study
from fleet.sim.trace import Node, Pod
from propagation.views import FitMode

GIB = 2**30


def node(i: int, model: str, gpus: int = 4, cpu: int = 16000) -> Node:
    return Node(f"n{i}", cpu, 64 * GIB, gpus, model)


def pod(name: str, gpus: int, milli: int = 1000, cpu: int = 4000,
        models: tuple[str, ...] = ()) -> Pod:
    return Pod(name, cpu, 8 * GIB, gpus, milli if gpus else 0, models, "LS", 0.0, None)


NODES = tuple(node(i, "T4" if i % 3 == 0 else "G2") for i in range(12))
PODS = (pod("whole", 1), pod("pair", 2), pod("share", 1, 300), pod("cpu", 0, cpu=6000),
        pod("t4", 1, models=("T4",)), pod("t4-share", 1, 500, models=("T4",)))


def test_node_aware_never_leaves_more_unallocated_than_summed() -> None:
    config = StudyConfig(clusters=3, repeats=3, give_up=30, max_fill=1.3)
    result = study(NODES, PODS, "tiny", "tiny", config)
    levels = result.levels()
    assert levels
    assert levels[-1] >= 0.9
    worse = 0
    for fill in levels:
        aware = result.mean(FitMode.NODE_AWARE, fill, "unallocated")
        summed = result.mean(FitMode.SUMMED, fill, "unallocated")
        assert aware <= summed + 1e-9, (fill, aware, summed)
        worse += summed > aware
    assert worse, "the tiny fleet should show summed mode stranding something"
    assert sum(c.hub_misses for c in result.curves[FitMode.NODE_AWARE]) == 0


def test_no_pod_lands_on_a_model_it_rejects() -> None:
    member = Member("c0", NODES)
    t4 = pod("t4", 1, models=("T4",))
    placed = 0
    while member.place(t4) is not None:
        placed += 1
    t4_nodes = [n for n in member.nodes if n.model == "T4"]
    assert placed == 4 * len(t4_nodes)
    assert all(not any(n.gpus) for n in t4_nodes)
    assert all(n.gpus == [1000] * 4 for n in member.nodes if n.model != "T4")


def test_a_constraining_variant_fills_differently_than_an_unconstrained_one() -> None:
    config = StudyConfig(clusters=2, give_up=20, max_fill=1.2)
    free = tuple(pod(f"p{i}", 1) for i in range(4))
    only_t4 = tuple(pod(f"p{i}", 1, models=("T4",)) for i in range(4))
    for mode in (FitMode.NODE_AWARE, FitMode.SUMMED):
        a = run_curve(NODES, free, mode, config, 0, "x")
        b = run_curve(NODES, only_t4, mode, config, 0, "x")
        assert a.points[-1].unallocated == 0.0
        # only a third of the nodes are T4: two thirds of the GPUs stay unallocated
        assert abs(b.points[-1].unallocated - 2 / 3) < 1e-9


def test_a_shared_gpu_is_allocated_from_its_first_share() -> None:
    member = Member("c0", (node(0, "G2", gpus=2),))
    shapes, coverage = shapes_of((pod("s", 1, 500), pod("s", 1, 500)), 10)
    assert coverage == 1.0
    member.place(pod("s", 1, 300))
    member.place(pod("s", 1, 300))
    unallocated, fragmented, allocated = measure([member], shapes, 2)
    assert member.nodes[0].gpus == [400, 1000]  # best fit: the second share joins the first
    assert unallocated == 0.5
    assert abs(allocated - 0.3) < 1e-9
    assert abs(fragmented - 0.2) < 1e-9  # a 500 share cannot use the 400 left on the first
