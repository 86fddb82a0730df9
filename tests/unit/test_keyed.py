"""Per-key work: keys run in parallel, a key never twice at once, only its latest item."""

from __future__ import annotations

import threading
import time

from member_agent.keyed import LatestPerKey


def test_a_busy_key_runs_again_with_only_its_latest_item() -> None:
    seen: list[tuple[str, int]] = []
    gate = threading.Event()
    running: set[str] = set()
    overlap: list[str] = []

    def run(item: tuple[str, int]) -> None:
        key, _ = item
        if key in running:
            overlap.append(key)
        running.add(key)
        gate.wait(2)
        seen.append(item)
        running.discard(key)

    pool: LatestPerKey[tuple[str, int]] = LatestPerKey(run, workers=4, name="t")
    for version in range(5):
        pool.submit("a", ("a", version))
    pool.submit("b", ("b", 0))
    time.sleep(0.1)
    gate.set()
    deadline = time.monotonic() + 5
    while len(seen) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    assert sorted(seen) == [("a", 0), ("a", 4), ("b", 0)]
    assert not overlap
