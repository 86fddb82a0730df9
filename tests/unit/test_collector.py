"""The hub's collector policy: what a full collection left alive is frozen as it ends, never
the garbage made after it, and thawed now and then so that cycles that died frozen are
collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from fleet.hub.collector import Collector


class Node:
    def __init__(self) -> None:
        self.peer: Node = self


@pytest.fixture
def collector() -> Iterator[Collector]:
    gc.unfreeze()
    made = Collector(thaw_seconds=3600)
    made.start()
    yield made
    made.stop()
    gc.unfreeze()


def test_a_full_collection_freezes_what_it_left_alive(collector: Collector) -> None:
    gc.collect(1)
    assert gc.get_freeze_count() == 0  # no full collection since it started
    kept = [[i] for i in range(1000)]
    gc.collect()
    assert gc.get_freeze_count() >= len(kept)


def test_a_cycle_dropped_after_the_full_collection_is_not_frozen(collector: Collector
                                                                  ) -> None:
    gc.collect()
    dropped = Node()
    gone = weakref.ref(dropped)
    del dropped
    collector.tick()  # a pass between the full collection and the next young one
    gc.collect(1)
    assert gone() is None


def test_a_thaw_hands_everything_back_to_the_collector() -> None:
    thawing = Collector(thaw_seconds=0.0)
    gc.collect()
    gc.freeze()
    assert gc.get_freeze_count() > 0
    thawing.tick()
    assert gc.get_freeze_count() == 0


def test_stopped_it_freezes_nothing(collector: Collector) -> None:
    collector.stop()
    gc.collect()
    assert gc.get_freeze_count() == 0
