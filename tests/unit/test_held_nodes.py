"""Reservations: the nodes a Work names are held for its unbound pods, then released."""

from __future__ import annotations

from typing import Any

from e2e.jobs import seed_pytorchjob
from member_agent.capacity import group_nodes
from member_agent.held_nodes import held_nodes, held_on_nodes

Body = dict[str, Any]
GPU = "nvidia.com/gpu"


def work(name: str = "w", nodes: tuple[str, ...] = ("n1", "n2"), *, gpus: int = 1,
         workers: int = 2) -> Body:
    job = seed_pytorchjob("j", gpus=gpus, workers=workers)  # 1 master, 1 GPU each by default
    job["metadata"]["uid"] = "uid-1"
    return {"metadata": {"name": name},
            "spec": {"job": {"uid": "uid-1"}, "manifests": [job],
                     "placement": {"cluster": "m", "nodes": list(nodes),
                                   "replicas": {"Master": 1, "Worker": workers}}}}


def pod(node: str | None) -> Body:
    return {"metadata": {"name": f"p-{node}", "labels": {"fleet.sh/job-uid": "uid-1"}},
            "spec": {"nodeName": node} if node else {}, "status": {"phase": "Pending"}}


def room(**gpus: int) -> dict[str, dict[str, int]]:
    """Free amounts per node after the bound pods: GPUs as given, cpu and memory plenty."""
    return {name: {GPU: free, "cpu": 64_000, "memory": 2**40} for name, free in gpus.items()}


EIGHT_FREE = room(n1=8, n2=8, n3=8)


def node(name: str) -> Body:
    return {"metadata": {"name": name},
            "status": {"allocatable": {"cpu": "8", "memory": "64Gi", GPU: "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def test_unbound_replicas_are_held_on_the_named_nodes() -> None:
    held = held_nodes([work()], [pod(None)], EIGHT_FREE, {"w": 0.0}, now=1.0)
    assert [h.work for h in held] == ["w"]
    totals = held_on_nodes(held)
    assert totals["n1"][GPU] == 2
    assert totals["n2"][GPU] == 1
    groups = group_nodes([node("n1"), node("n2"), node("n3")], [], reserved=totals)
    assert {g.nodes[0]: g.free[GPU] for g in groups} == {"n1": 6, "n2": 7, "n3": 8}


def test_bound_pods_release_their_share_of_the_reservation() -> None:
    held = held_nodes([work()], [pod("n1"), pod("n1")], EIGHT_FREE, {"w": 0.0}, now=1.0)
    assert sum(a[GPU] for a in held_on_nodes(held).values()) == 1
    held = held_nodes([work()], [pod("n1"), pod("n1"), pod("n2")], EIGHT_FREE, {"w": 0.0},
                        now=1.0)
    assert held == []


def test_unbound_replicas_are_held_where_the_pods_already_bound_left_room() -> None:
    # Four whole-node replicas packed onto n1..n4; the member's scheduler bound two of them
    # on n1 and n2 (their room is now none). The other two can only go to n3 and n4: held on
    # n1 and n2 as well, they would leave n3 and n4 reported free while the hub trusts the
    # report for the whole share, and a second gang would be bound there.
    gang = work(nodes=("n1", "n2", "n3", "n4"), gpus=8, workers=3)
    held = held_nodes([gang], [pod("n1"), pod("n2")], room(n1=0, n2=0, n3=8, n4=8),
                        {"w": 0.0}, now=1.0)
    assert {n: a[GPU] for n, a in held_on_nodes(held).items()} == {"n3": 8, "n4": 8}


def test_a_replica_whose_named_nodes_filled_is_held_where_it_still_fits() -> None:
    gang = work(nodes=("n1",), gpus=8, workers=0)  # another workload took n1 meanwhile
    held = held_nodes([gang], [], room(n1=0, n2=4, n3=8), {"w": 0.0}, now=1.0)
    assert {n: a[GPU] for n, a in held_on_nodes(held).items()} == {"n3": 8}
    held = held_nodes([gang], [], room(n1=2, n2=4), {"w": 0.0}, now=1.0)  # fits nowhere
    assert {n: a[GPU] for n, a in held_on_nodes(held).items()} == {"n1": 8}


def test_a_share_bound_once_holds_nothing_even_after_its_pods_finish() -> None:
    assert held_nodes([work()], [], EIGHT_FREE, {"w": 0.0}, now=1.0, bound={"w"}) == []


def test_a_reservation_times_out_and_needs_named_nodes() -> None:
    assert held_nodes([work()], [], EIGHT_FREE, {"w": 0.0}, now=121.0) == []
    assert held_nodes([work(nodes=())], [], EIGHT_FREE, {"w": 0.0}, now=1.0) == []


def test_placeholders_count_as_bound_and_their_work_is_still_named() -> None:
    reserving = work()
    reserving["spec"]["placement"]["phase"] = "Reserve"
    placeholders = [pod("n1"), pod("n1"), pod("n2")]  # they carry the job's uid too
    [held] = held_nodes([reserving], placeholders, EIGHT_FREE, {"w": 0.0}, now=1.0)
    assert (held.work, dict(held.by_node)) == ("w", {})
    assert held_nodes([work()], placeholders, EIGHT_FREE, {"w": 0.0}, now=1.0) == []
