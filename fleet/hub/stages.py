"""The hub's steps of a job's way, each timed by the hub as it takes it and observed in
``fleet_stage_seconds`` from the step before it:

created (the API server) -> queued (the hub's watch delivered the job) -> admitted (a pass
decided its placement: admitted by its quota queue, or placed at once where no queue applies)
-> bound (the placement written on the job) -> dispatched (every Work of it written).

Only ``queued`` reads an API timestamp (the creation happens in the API server, whose
creationTimestamp has whole seconds, so it reads up to 1 s long); the others are this
process's clock. The agent times the rest (``member_agent.stages``), from the moment the hub
sent the Work (:data:`fleet.api.protocol.DISPATCHED_AT`).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from fleet import metrics
from fleet.api import protocol as p
from fleet.hub.views import parse_time

LIMIT = 20_000  # jobs followed at once (pending ones); the oldest is forgotten beyond


class HubStageClock:
    def __init__(self, limit: int = LIMIT) -> None:
        self._seen: OrderedDict[str, float] = OrderedDict()  # uid -> when queued
        self._decided: dict[str, float] = {}  # uid -> when a pass decided it (insertion order)
        self._lock = threading.Lock()
        self._limit = limit

    def seen(self, job: Mapping[str, Any]) -> None:
        """A job from the hub's watch: the first sight of one not placed yet is ``queued``."""
        meta = job.get("metadata") or {}
        uid = meta.get("uid")
        if not uid or p.PLACEMENT in (meta.get("annotations") or {}):
            return
        now = time.time()
        with self._lock:
            if uid in self._seen:
                return
            self._seen[uid] = now
            while len(self._seen) > self._limit:
                self._seen.popitem(last=False)
        created = parse_time(meta.get("creationTimestamp"))
        if created is not None and p.REQUEUED_AT not in (meta.get("annotations") or {}):
            # (a requeued job waits again from now: its creation is no step before it)
            metrics.STAGE_SECONDS.labels("queued").observe(max(0.0, now - created.timestamp()))

    def forget(self, job: Mapping[str, Any]) -> None:
        uid = (job.get("metadata") or {}).get("uid", "")
        with self._lock:
            self._seen.pop(uid, None)
            self._decided.pop(uid, None)

    def decided(self, uid: str) -> None:
        """A pass chose the job's placement (its bind is being written)."""
        with self._lock:
            self._decided[uid] = time.time()
            while len(self._decided) > self._limit:  # binds that never finished
                self._decided.pop(next(iter(self._decided)))

    def dispatched(self, meta: Mapping[str, Any], admitted_at: str | None, bound_at: float,
                   dispatched_at: float, queue: str) -> None:
        """A decision written: its job's admitted, bound and dispatched stages.
        ``admitted_at``: the admission stamp of a job its quota queue admitted."""
        uid = meta.get("uid", "")
        with self._lock:
            seen = self._seen.pop(uid, None)
            decided = self._decided.pop(uid, None)
        created = parse_time(meta.get("creationTimestamp"))
        if admitted_at and created is not None:  # from creation, as Kueue's admission wait
            admitted = parse_time(admitted_at)
            at = decided or (admitted.timestamp() if admitted else bound_at)
            metrics.ADMISSION_WAIT.labels(queue).observe(max(0.0, at - created.timestamp()))
        if decided is not None:
            if seen is not None:  # (not when a hub that restarted since saw it queued)
                metrics.STAGE_SECONDS.labels("admitted").observe(max(0.0, decided - seen))
            metrics.STAGE_SECONDS.labels("bound").observe(max(0.0, bound_at - decided))
        metrics.STAGE_SECONDS.labels("dispatched").observe(max(0.0, dispatched_at - bound_at))


CLOCK = HubStageClock()
