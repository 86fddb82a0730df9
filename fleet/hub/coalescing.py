"""When a waiting job's status is worth a write: its status write-backs coalesced.

Every pass says why each unplaced job waits and where it stands in its queue. Written as is,
a queue of thousands rewrites every job's status on every pass: each admission moves every
job behind it up one place, and each changes the usage a QuotaExceeded message quotes. At
10,000 pending jobs that was most of the hub's writes and, since the pass writes them, most
of its pass time. So a waiting status is rewritten when its reason or its queue changes; at
the head of its queue (the first :data:`EXACT_POSITIONS` places, where a user waits for a job
to start) when its place or its message other than the numbers in it changes; further back
only when the position shown is off by half or more, the message refreshed with it: a job
moves from place 5,000 to the head in about a dozen writes. Behind the head a message that
changes in kind alone (which quota binds, which job a paused borrowing waits for) waits for
the next of those writes: under contention it flips from pass to pass, and cost a write a
pass for every job behind. A job in no queue is rewritten when its message changes in kind.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

EXACT_POSITIONS = 1  # a queue's head: shown exactly, message and all
_DIGITS = re.compile(r"\d+(?:\.\d+)?(?:[KMGTPE]i|m)?")  # a number, with a quantity's unit


def _kind(message: object) -> str:
    return _DIGITS.sub("#", str(message or ""))


def needs_write(shown: Mapping[str, object], wanted: Mapping[str, object]) -> bool:
    """Whether the queue status ``shown`` on a job must be replaced by ``wanted`` (both with
    ``reason`` and ``message``; ``name`` and ``position`` for a job in a quota queue)."""
    if shown == wanted:
        return False
    if set(shown) != set(wanted) or any(shown.get(k) != wanted.get(k)
                                        for k in ("reason", "name")):
        return True
    old, new = _position(shown), _position(wanted)
    if not new:  # in no queue: its message is all it says
        return _kind(shown.get("message")) != _kind(wanted.get("message"))
    if min(old, new) <= EXACT_POSITIONS:  # the head: its place and message exactly
        return old != new or _kind(shown.get("message")) != _kind(wanted.get("message"))
    return max(old, new) >= 2 * min(old, new)


def _position(queue: Mapping[str, object]) -> int:
    value = queue.get("position", 0)
    return value if isinstance(value, int) else 0
