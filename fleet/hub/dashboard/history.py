"""The leader's short memory of the fleet over time: per quota queue, the GPUs in use and the
jobs waiting, one sample every ``step`` seconds for the last hour.

Bounded twice: at most ``capacity`` samples (the oldest go first) and at most
:data:`MAX_QUEUES` queues a sample. It lives in the leader's memory only, so it starts again
when another replica takes over (the page says since when it counts); no Prometheus is needed
to see the last hour.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from datetime import datetime

from fleet.hub.dashboard import payloads as pl

STEP_SECONDS = 10.0
WINDOW_SECONDS = 3600.0
MAX_QUEUES = 200  # a tree this large is drawn from its first queues


class History:
    def __init__(self, step: float = STEP_SECONDS, window: float = WINDOW_SECONDS) -> None:
        self.step = step
        self._samples: deque[pl.Sample] = deque(maxlen=max(1, int(window / step)))
        self._lock = threading.Lock()

    def add(self, at: datetime, queues: Sequence[pl.QueueNode]) -> None:
        shown = queues[:MAX_QUEUES]
        sample = pl.Sample(at=at.isoformat(timespec="seconds").replace("+00:00", "Z"),
                           used={q["name"]: q["gpus"]["used"] for q in shown},
                           waiting={q["name"]: q["waitingCount"] for q in shown})
        with self._lock:
            self._samples.append(sample)

    def clear(self) -> None:
        """Forget everything: this replica stopped leading (what it saw since is not the
        leader's), or starts again."""
        with self._lock:
            self._samples.clear()

    def read(self) -> pl.History:
        with self._lock:
            samples = list(self._samples)
        return pl.History(since=samples[0]["at"] if samples else "", stepSeconds=self.step,
                          capacity=self._samples.maxlen or 0, samples=samples)
