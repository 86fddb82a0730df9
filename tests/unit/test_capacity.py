"""Free capacity per node, grouped by shape."""

from __future__ import annotations

from typing import Any

from member_agent.capacity import group_nodes, totals


def node(name: str, gpus: int = 8, *, ready: bool = True, unschedulable: bool = False,
         taint: str = "", model: str = "A100") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": model}},
        "spec": {"unschedulable": unschedulable,
                 "taints": [{"key": "k", "effect": taint}] if taint else []},
        "status": {"allocatable": {"cpu": "96", "memory": "768Gi", "pods": "110",
                                   "nvidia.com/gpu": str(gpus)},
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def pod(node_name: str, gpus: int, phase: str = "Running", cpu: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": f"p-{node_name}-{gpus}"},
            "spec": {"nodeName": node_name, "containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus), "cpu": cpu}}}]},
            "status": {"phase": phase}}


def test_identical_nodes_form_one_group_and_pods_take_from_their_node() -> None:
    nodes = [node(f"n{i}") for i in range(4)]
    groups = group_nodes(nodes, [pod("n2", 3)])
    assert [(g.count, g.free["nvidia.com/gpu"]) for g in groups] == [(3, 8), (1, 5)]
    assert groups[1].nodes == ["n2"]
    _, free = totals(groups)
    assert free["nvidia.com/gpu"] == 29
    assert free["cpu"] == 4 * 96000 - 1000
    assert groups[1].free["pods"] == 109


def test_finished_pods_free_their_resources() -> None:
    groups = group_nodes([node("n0")], [pod("n0", 8, phase="Succeeded"), pod("n0", 2, "Failed")])
    assert groups[0].free["nvidia.com/gpu"] == 8


def test_unschedulable_tainted_and_not_ready_nodes_are_left_out() -> None:
    nodes = [node("ok"), node("cordoned", unschedulable=True), node("tainted", taint="NoSchedule"),
             node("down", ready=False), node("soft", taint="PreferNoSchedule")]
    names = sorted(n for g in group_nodes(nodes, []) for n in g.nodes)
    assert names == ["ok", "soft"]


def test_gpu_models_are_kept_apart() -> None:
    groups = group_nodes([node("a", model="A100"), node("v", model="V100")], [])
    assert sorted(g.labels["nvidia.com/gpu.product"] for g in groups) == ["A100", "V100"]


def test_five_thousand_nodes_of_mixed_shapes_make_a_small_report() -> None:
    nodes = [node(f"n{i}", gpus=(8 if i % 3 else 4), model=("A100" if i % 2 else "H100"))
             for i in range(5000)]
    pods = [pod(f"n{i}", 1 + i % 4) for i in range(0, 5000, 7)]
    groups = group_nodes(nodes, pods)
    assert sum(g.count for g in groups) == 5000
    assert len(groups) <= 20
    assert all(len(g.nodes) <= 64 for g in groups)
