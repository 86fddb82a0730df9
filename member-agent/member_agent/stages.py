"""The agent's steps of a job's way, timed where they happen: a Work dispatched (sent by the
hub) -> applied to the member (hubsync) -> all its pods created -> all of them running (both
seen as the agent computes the Work's status from its pods, every half second or on their
change), each observed in ``fleet_stage_seconds`` from the step before it.

The first step spans two processes: it is timed from the Work's dispatched-at annotation (the
hub's clock, to the microsecond; hosts whose clocks differ add their offset), else from its
creationTimestamp (whole seconds)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from fleet import metrics
from fleet.api.protocol import DISPATCHED_AT, is_applied

LIMIT = 10_000  # Works followed at once; the oldest is forgotten beyond (memory stays bounded)


def _epoch(text: object) -> float | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


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
        sent = (meta.get("annotations") or {}).get(DISPATCHED_AT) or \
            meta.get("creationTimestamp")
        since = _epoch(sent) if sent else None
        if since is not None:
            metrics.STAGE_SECONDS.labels("applied").observe(max(0.0, now - since))
        with self._lock:
            self._reached[meta["name"]] = ("applied", now)
            while len(self._reached) > self._limit:
                self._reached.popitem(last=False)

    def progress(self, work: str, phases: Sequence[str], expected: int) -> None:
        """The phases of a Work's job's pods as the agent reports them: every one created,
        then every one running."""
        with self._lock:
            reached = self._reached.get(work)
            if reached is None or len(phases) < expected:
                return
            stage, since = reached
            now = time.time()
            if stage == "applied":
                metrics.STAGE_SECONDS.labels("pods_created").observe(now - since)
                stage, since = "pods_created", now
                self._reached[work] = (stage, since)
            if all(phase in ("Running", "Succeeded") for phase in phases):
                metrics.STAGE_SECONDS.labels("running").observe(now - since)
                del self._reached[work]


STAGES = StageClock()
