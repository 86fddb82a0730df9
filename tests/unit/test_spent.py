"""Capacity taken out of a view: joining the nodes a view splits out back into their groups
at once must give what joining them one by one gives."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from propagation.resources import Resources
from propagation.spent import _all_joined, _joined
from propagation.views import NodeGroup

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
