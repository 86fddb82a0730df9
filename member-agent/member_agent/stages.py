"""The agent's steps of a job's way, timed where they happen: a Work dispatched (created on
the hub) -> applied to the member -> all its pods created -> all of them running, each observed
in ``fleet_stage_seconds`` from the step before it."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from fleet import metrics
from fleet.api.protocol import is_applied

LIMIT = 10_000  # Works followed at once; the oldest is forgotten beyond (memory stays bounded)


class StageClock:
    def __init__(self, limit: int = LIMIT) -> None:
        self._reached: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._limit = limit

    def applied(self, work: Mapping[str, Any]) -> None:
        """A Work applied for the first time by this agent; one the member already ran (an
        agent restart, a takeover) is not timed again from its creation."""
        if is_applied(work):
            return
        meta = work["metadata"]
        now = time.time()
        created = meta.get("creationTimestamp")
        if created:
            since = datetime.fromisoformat(str(created).replace("Z", "+00:00")).timestamp()
            metrics.STAGE_SECONDS.labels("applied").observe(max(0.0, now - since))
        with self._lock:
            self._reached[meta["name"]] = ("applied", now)
            while len(self._reached) > self._limit:
                self._reached.popitem(last=False)

    def progress(self, work: str, pods: Sequence[Mapping[str, Any]], expected: int) -> None:
        """Called with a Work's pods whenever its status is computed."""
        with self._lock:
            reached = self._reached.get(work)
            if reached is None or len(pods) < expected:
                return
            stage, since = reached
            now = time.time()
            if stage == "applied":
                metrics.STAGE_SECONDS.labels("pods_created").observe(now - since)
                stage, since = "pods_created", now
                self._reached[work] = (stage, since)
            if all(p.get("phase") in ("Running", "Succeeded") for p in pods):
                metrics.STAGE_SECONDS.labels("running").observe(now - since)
                del self._reached[work]


STAGES = StageClock()
