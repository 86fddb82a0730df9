"""Capacity taken out of a view: joining the nodes a view splits out back into their groups
at once must give what joining them one by one gives, and what is held on named nodes comes
off them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from propagation.resources import Resources
from propagation.spent import _all_joined, _joined, with_held_each
from propagation.views import ClusterView, NodeGroup

GPU = "nvidia.com/gpu"


def group(free: int, rack: int, named: bool, index: int, count: int = 1) -> NodeGroup:
    names = tuple(f"n{index}-{i}" for i in range(count)) if named else ()
    return NodeGroup(count, Resources.of({GPU: free}), (("rack", str(rack)),), names)


shapes = st.tuples(st.integers(0, 3), st.integers(0, 1), st.booleans())


@given(st.lists(shapes, max_size=8), st.lists(shapes, max_size=8))
def test_joining_all_at_once_is_joining_one_by_one(groups: list[tuple[int, int, bool]],
                                                   taken: list[tuple[int, int, bool]]) -> None:
    before = [group(*shape, index=i, count=2) for i, shape in enumerate(groups)]
    nodes = [group(*shape, index=100 + i) for i, shape in enumerate(taken)]
    one_by_one = list(before)
    for node in nodes:
        one_by_one = _joined(one_by_one, node) or [*one_by_one, node]
    assert _all_joined(list(before), nodes) == one_by_one


@given(st.lists(st.tuples(st.integers(0, 8), st.integers(1, 3)), min_size=1, max_size=5),
       st.lists(st.tuples(st.integers(0, 4), st.integers(1, 4), st.lists(
           st.integers(0, 12), min_size=1, max_size=3)), max_size=6), st.booleans())
def test_held_requests_come_off_their_nodes_and_none_goes_below_zero(
        groups: list[tuple[int, int]], parts: list[tuple[int, int, list[int]]],
        roomy: bool) -> None:
    """Every request held on reported nodes comes off one of them: the member's free GPUs
    drop by what was held (less what the nodes lacked), its nodes stay as many, none below
    zero."""
    room = 100 if roomy else 0  # (100: every request fits on any node)
    nodes = [group(free + room, i % 2, True, i, count)
             for i, (free, count) in enumerate(groups)]
    names = [n for g in nodes for n in g.nodes]
    cluster = ClusterView("m", True, node_groups=tuple(nodes))
    held = [([Resources.of({GPU: gpus})] * replicas, [names[i % len(names)] for i in picks])
            for gpus, replicas, picks in parts]
    after = with_held_each(cluster, held)
    assert sum(g.count for g in after.node_groups) == len(names)
    assert all(g.free.get(GPU, 0) >= 0 for g in after.node_groups)
    total = sum(g.count * g.free.get(GPU, 0) for g in after.node_groups)
    before = sum(g.count * g.free.get(GPU, 0) for g in nodes)
    asked = sum(gpus * replicas for gpus, replicas, _ in parts)
    assert before - asked <= total <= before
    if roomy:  # exactly what was held
        assert total == before - asked


def held_one_by_one(cluster: ClusterView, parts: list[tuple[list[Resources], list[str]]]
                    ) -> dict[str, dict[str, int]]:
    """The rule, request by request: each goes to the named node it fits best (least left,
    scarcest resource first), else to the one with most free, ties to the node listed first;
    a node's amounts never go below zero."""
    free = {n: dict(g.free.items_) for g in cluster.node_groups for n in g.nodes[:g.count]}
    position = {n: i for i, n in enumerate(free)}
    touched: set[str] = set()
    for requests, nodes in parts:
        candidates = [n for n in nodes if n in free]
        for request in requests:
            if not candidates:
                continue
            names = sorted(request.items_, key=lambda item: (item[0] != GPU, item[0]))

            def rank(node: str) -> tuple[object, ...]:
                left = tuple(free[node].get(k, 0) - v for k, v in names)  # noqa: B023
                fits = min(left, default=0) >= 0
                return (not fits, left if fits else tuple(-x for x in left), position[node])

            best = min(candidates, key=rank)
            if best not in touched:
                touched.add(best)
                free[best] = {k: max(0, v) for k, v in free[best].items()}
            for name, amount in request.items_:
                free[best][name] = max(0, free[best].get(name, 0) - amount)
    return free


@given(st.lists(st.tuples(st.integers(-1, 8), st.integers(0, 4), st.integers(1, 3)),
                min_size=1, max_size=6),
       st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(1, 6), st.lists(
           st.integers(0, 20), min_size=1, max_size=4)), max_size=6))
def test_held_requests_go_where_the_rule_puts_them_one_by_one(
        groups: list[tuple[int, int, int]], parts: list[tuple[int, int, int, list[int]]]
        ) -> None:
    """All parts at once place each request as taking them one at a time does (alike
    requests in a row keep to the node the first one fitted best while it fits)."""
    nodes = [NodeGroup(count, Resources.of({GPU: gpus, "cpu": cpus}), (),
                       tuple(f"n{i}-{j}" for j in range(count)))
             for i, (gpus, cpus, count) in enumerate(groups)]
    names = [n for g in nodes for n in g.nodes]
    cluster = ClusterView("m", True, node_groups=tuple(nodes))
    held = [([Resources.of({GPU: gpus, "cpu": cpus})] * replicas,
             [names[i % len(names)] for i in picks]) for gpus, cpus, replicas, picks in parts]
    after = {n: dict(g.free.items_) for g in with_held_each(cluster, held).node_groups
             for n in g.nodes[:g.count]}
    expected = held_one_by_one(cluster, held)
    assert {n: {k: v for k, v in f.items() if v} for n, f in after.items()} == \
        {n: {k: v for k, v in f.items() if v} for n, f in expected.items()}
