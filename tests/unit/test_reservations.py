"""Reservations: the nodes a Work names are held for its unbound pods, then released."""

from __future__ import annotations

from typing import Any

from e2e.jobs import seed_pytorchjob
from member_agent.capacity import group_nodes
from member_agent.reservations import held_on_nodes, reservations

Body = dict[str, Any]
GPU = "nvidia.com/gpu"


def work(name: str = "w", nodes: tuple[str, ...] = ("n1", "n2")) -> Body:
    job = seed_pytorchjob("j")  # 1 master + 2 workers, 1 GPU each
    job["metadata"]["uid"] = "uid-1"
    return {"metadata": {"name": name},
            "spec": {"job": {"uid": "uid-1"}, "manifests": [job],
                     "placement": {"cluster": "m", "nodes": list(nodes),
                                   "replicas": {"Master": 1, "Worker": 2}}}}


def pod(node: str | None) -> Body:
    return {"metadata": {"name": f"p-{node}", "labels": {"fleet.sh/job-uid": "uid-1"}},
            "spec": {"nodeName": node} if node else {}, "status": {"phase": "Pending"}}


def node(name: str) -> Body:
    return {"metadata": {"name": name},
            "status": {"allocatable": {"cpu": "8", "memory": "64Gi", GPU: "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def test_unbound_replicas_are_held_on_the_named_nodes() -> None:
    held = reservations([work()], [pod(None)], {"w": 0.0}, now=1.0)
    assert [h.work for h in held] == ["w"]
    totals = held_on_nodes(held)
    assert totals["n1"][GPU] == 2
    assert totals["n2"][GPU] == 1
    groups = group_nodes([node("n1"), node("n2"), node("n3")], [], reserved=totals)
    assert {g.nodes[0]: g.free[GPU] for g in groups} == {"n1": 6, "n2": 7, "n3": 8}


def test_bound_pods_release_their_share_of_the_reservation() -> None:
    held = reservations([work()], [pod("n1"), pod("n1")], {"w": 0.0}, now=1.0)
    assert sum(a[GPU] for a in held_on_nodes(held).values()) == 1
    held = reservations([work()], [pod("n1"), pod("n1"), pod("n2")], {"w": 0.0}, now=1.0)
    assert held == []


def test_a_share_bound_once_holds_nothing_even_after_its_pods_finish() -> None:
    assert reservations([work()], [], {"w": 0.0}, now=1.0, bound={"w"}) == []


def test_a_reservation_times_out_and_needs_named_nodes() -> None:
    assert reservations([work()], [], {"w": 0.0}, now=121.0) == []
    assert reservations([work(nodes=())], [], {"w": 0.0}, now=1.0) == []


def test_placeholders_count_as_bound_and_their_work_is_still_named() -> None:
    reserving = work()
    reserving["spec"]["placement"]["phase"] = "Reserve"
    placeholders = [pod("n1"), pod("n1"), pod("n2")]  # they carry the job's uid too
    [held] = reservations([reserving], placeholders, {"w": 0.0}, now=1.0)
    assert (held.work, dict(held.by_node)) == ("w", {})
    assert reservations([work()], placeholders, {"w": 0.0}, now=1.0) == []
