"""The hub's collector policy: what a full collection left alive is frozen, and thawed now
and then so that cycles that died frozen are collected."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from fleet.hub.collector import Collector


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_a_full_collection_is_followed_by_a_freeze() -> None:
    collector = Collector(thaw_seconds=3600)
    collector.tick()
    assert gc.get_freeze_count() == 0  # no full collection since it started
    kept = [[i] for i in range(1000)]
    gc.collect()
    collector.tick()
    assert gc.get_freeze_count() >= len(kept)
    gc.unfreeze()
    collector.tick()
    assert gc.get_freeze_count() == 0  # nothing collected since: nothing frozen again


def test_a_thaw_hands_everything_back_to_the_collector() -> None:
    collector = Collector(thaw_seconds=0.0)
    gc.collect()
    gc.freeze()
    assert gc.get_freeze_count() > 0
    collector.tick()
    assert gc.get_freeze_count() == 0
