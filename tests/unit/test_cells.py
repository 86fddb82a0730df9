"""Each tenant's cells: whole nodes dealt in proportion to its guaranteed GPUs, a slice of
every node shape, deterministic."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.hub.queueing import queue_objects
from fleet.hub.views import cell_nodes
from quota.cells import CellNode, Cells, deal, for_share, guarantees, node_key
from quota.tree import QuotaNode

GPU = "nvidia.com/gpu"


def nodes(*shapes: tuple[str, int, int]) -> list[CellNode]:
    """(model, GPUs, count) per shape, dealt round-robin over two clusters."""
    out = []
    for s, (model, gpus, count) in enumerate(shapes):
        for i in range(count):
            out.append(CellNode(f"m{i % 2}", f"{model}-{s}-{i:03d}", gpus, (model, gpus)))
    return out


def gpus_of(owners: dict[str, str], fleet: list[CellNode]) -> Counter[str]:
    held: Counter[str] = Counter()
    for node in fleet:
        if node.key in owners:
            held[owners[node.key]] += node.gpus
    return held


def test_each_tenant_owns_its_guarantee_in_every_shape() -> None:
    fleet = nodes(("A100", 8, 8), ("T4", 2, 16))  # 64 + 32 GPUs
    owners = deal(fleet, {"root/a": 48, "root/b": 24})
    held = gpus_of(owners, fleet)
    assert 48 <= held["root/a"] < 48 + 8  # its guarantee, at most one node over
    assert 24 <= held["root/b"] < 24 + 8
    by_shape = Counter((owners[n.key], n.shape[0]) for n in fleet if n.key in owners)
    assert by_shape[("root/a", "A100")] == 4
    assert by_shape[("root/b", "A100")] == 2
    assert by_shape[("root/a", "T4")] >= 7
    assert by_shape[("root/b", "T4")] >= 3
    assert len(owners) < len(fleet)  # a quarter of the fleet is guaranteed to nobody


def test_guarantees_beyond_the_fleet_are_scaled_down() -> None:
    fleet = nodes(("A100", 8, 4))
    owners = deal(fleet, {"root/a": 64, "root/b": 32, "root/none": 0})
    assert Counter(owners.values()) == {"root/a": 3, "root/b": 1}


def test_no_guarantee_no_cells() -> None:
    assert deal(nodes(("A100", 8, 4)), {}) == {}
    assert deal(nodes(("cpu", 0, 4)), {"root/a": 8}) == {}


def test_the_leaves_guarantees_are_read_from_the_tree() -> None:
    root = QuotaNode("root", min={GPU: 16}, children=(
        QuotaNode("a", min={GPU: 12}), QuotaNode("b", min={"cpu": 4}),
        QuotaNode("c", children=(QuotaNode("d", min={GPU: 4}),))))
    assert guarantees(root) == {"root/a": 12, "root/b": 0, "root/c/d": 4}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["A100", "V100", "T4"]), st.integers(0, 8),
                          st.integers(1, 6)), min_size=1, max_size=4),
       st.dictionaries(st.sampled_from(["root/a", "root/b", "root/c"]),
                       st.integers(0, 80), max_size=3), st.randoms())
def test_cells_are_whole_nodes_dealt_the_same_whatever_the_order(
        shapes: list[tuple[str, int, int]], wanted: dict[str, int], rnd: object) -> None:
    fleet = nodes(*shapes)
    owners = deal(fleet, wanted)
    shuffled = list(fleet)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert deal(shuffled, wanted) == owners
    held = gpus_of(owners, fleet)
    biggest = max(n.gpus for n in fleet)
    total = sum(n.gpus for n in fleet)
    for leaf in owners.values():
        assert wanted.get(leaf, 0) > 0  # only a guarantee owns
        assert held[leaf] - wanted[leaf] < biggest  # never more than one node over
    if sum(wanted.values()) <= total:  # and short only when the nodes ran out
        short = [t for t, g in wanted.items() if held[t] < g]
        assert not short or len(owners) == sum(1 for n in fleet if n.gpus)
    cells = Cells(owners)
    assert {node_key(c, n) for t in wanted for c, names in cells.by_tenant.get(t, {}).items()
            for n in names} == set(owners)


def test_a_share_names_the_cells_it_was_packed_onto_first_at_most_the_bound() -> None:
    owned = tuple(f"n{i:03d}" for i in range(100))
    named = for_share(owned, ("x", "n050", "n007"))
    assert named[:2] == ("n050", "n007")  # packed there (and owned); "x" is not a cell
    assert len(named) == 64
    assert named[2:5] == ("n000", "n001", "n002")


def test_the_cells_bound_is_the_works_schema_bound() -> None:
    from fleet.api.protocol import MAX_SHARE_CELLS
    from quota.cells import CELLS_PER_SHARE
    assert CELLS_PER_SHARE == MAX_SHARE_CELLS


def test_each_leaf_queue_shows_its_cells_per_member() -> None:
    """The hub's Queue of a leaf lists how many nodes of each member its guarantee owns
    (``kubectl fleet get queues -o wide``: CELLS); a parent's lists none."""
    root = QuotaNode("root", max={GPU: 16}, children=(
        QuotaNode("a", min={GPU: 8}, max={GPU: 16}, namespaces=("a",)),))
    tree = {"metadata": {"name": "tree", "namespace": "kube-system"}}
    states = {s.name: s.body["status"] for s in queue_objects(
        tree, root, {}, {}, {"root/a": {"m1": 2, "m0": 1}})}
    assert states["root-a"]["cells"] == {"m0": 1, "m1": 2}
    assert "cells" not in states["root"]


def test_a_members_cell_nodes_stay_the_same_as_its_nodes_fill() -> None:
    """A report groups nodes by what is free on them, so a bind moves a node to another
    group; the nodes the cells are dealt from must read the same, or every report of a
    busy fleet would deal the cells again (a fifth of a pass at 100 members)."""
    def member(groups: list[tuple[int, list[str]]]) -> dict[str, object]:
        return {"apiVersion": "fleet.sh/v1alpha1", "kind": "MemberCluster",
                "metadata": {"name": "m0", "resourceVersion": str(len(groups))},
                "status": {"capacity": {"nodeGroups": [
                    {"count": len(names), "allocatable": {GPU: 8}, "free": {GPU: free},
                     "nodes": names} for free, names in groups]}}}

    empty = member([(8, ["n1", "n2", "n3"])])
    busy = member([(8, ["n3"]), (2, ["n2"]), (0, ["n1"])])
    assert [n.name for n in cell_nodes(empty)] == ["n1", "n2", "n3"]
    assert cell_nodes(busy) == cell_nodes(empty)
