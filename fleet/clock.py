"""The wall clock fleet's processes stamp and compare times with.

A replica's clock may be off the others' and the API server's: the leadership chaos scenario
runs two hubs a minute apart by setting ``FLEET_CHAOS_CLOCK_OFFSET_SECONDS`` (bounded to an
hour), and every wall-clock read that reaches an object or a decision goes through here so the
offset reaches it too. (An injected offset rather than libfaketime: faking the C library's
clocks breaks Python's own waits.) Durations use ``time.monotonic`` and never come here."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

MAX_OFFSET_SECONDS = 3600.0


def _offset_from_environment() -> timedelta:
    try:
        seconds = float(os.environ.get("FLEET_CHAOS_CLOCK_OFFSET_SECONDS", "0") or 0)
    except ValueError:
        seconds = 0.0
    return timedelta(seconds=max(-MAX_OFFSET_SECONDS, min(MAX_OFFSET_SECONDS, seconds)))


OFFSET = _offset_from_environment()


def now() -> datetime:
    """The current time in UTC, as this process's clock tells it."""
    return datetime.now(UTC) + OFFSET


def text(*, micro: bool = False, at: datetime | None = None) -> str:
    """The current time (or ``at``) as the API's timestamps carry it (to the second or the
    microsecond)."""
    return (at or now()).strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")
