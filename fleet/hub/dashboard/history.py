"""The leader's short memory of the fleet over time: per quota queue, the GPUs in use and the
jobs waiting, one sample every ``step`` seconds for the last hour.

Bounded twice: at most ``capacity`` samples (the oldest go first) and at most
:data:`MAX_QUEUES` queues a sample (a chart of more lines than that is not read anyway). A
sample keeps its figures as tuples beside one tuple of queue names shared by every sample
while the tree stays the same: an hour of a 64-queue tree is about 1.5 MiB at the most. It
lives in the leader's memory only, so it starts again when another replica takes over (the
page says since when it counts); no Prometheus is needed to see the last hour.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from fleet import clock
from fleet.hub.dashboard import payloads as pl

STEP_SECONDS = 10.0
WINDOW_SECONDS = 3600.0
MAX_QUEUES = 64


class _Sample(NamedTuple):
    at: str
    names: tuple[str, ...]
    used: tuple[int, ...]
    waiting: tuple[int, ...]


class History:
    def __init__(self, step: float = STEP_SECONDS, window: float = WINDOW_SECONDS) -> None:
        self.step = step
        self._samples: deque[_Sample] = deque(maxlen=max(1, int(window / step)))
        self._lock = threading.Lock()

    def add(self, at: datetime, queues: Sequence[pl.QueueNode]) -> None:
        shown = queues[:MAX_QUEUES]
        names = tuple(q["name"] for q in shown)
        with self._lock:
            if self._samples and self._samples[-1].names == names:
                names = self._samples[-1].names  # one tuple for every sample of a tree
            self._samples.append(_Sample(
                clock.text(at=at), names,
                tuple(q["gpus"]["used"] for q in shown),
                tuple(q["waitingCount"] for q in shown)))

    def clear(self) -> None:
        """Forget everything: this replica stopped leading (what it saw since is not the
        leader's), or starts again."""
        with self._lock:
            self._samples.clear()

    def read(self) -> pl.History:
        with self._lock:
            samples = list(self._samples)
        return pl.History(
            since=samples[0].at if samples else "", stepSeconds=self.step,
            capacity=self._samples.maxlen or 0,
            samples=[pl.Sample(at=s.at, used=dict(zip(s.names, s.used, strict=True)),
                               waiting=dict(zip(s.names, s.waiting, strict=True)))
                     for s in samples])
