"""Whether the hub's caches have synced: client-go's ``HasSynced`` for kopf's watches.

kopf says nothing when a watch's first listing is over (and an empty listing sends no event
at all), so the hub lists every watched resource once itself at startup and counts its caches
synced once each object that listing returned has come through a watch, as itself or as its
deletion, or is gone from a later listing. The readiness probe waits for that: a replica
that answers webhooks before then would judge from a partial view.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable


class InitialSync:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: set[Hashable] = set()  # through a watch before the listing came back
        self._waiting: set[Hashable] | None = None  # None until the startup listing is done

    def saw(self, key: Hashable) -> None:
        """A watch delivered ``key`` (an upsert or a deletion)."""
        with self._lock:
            if self._waiting is None:
                self._seen.add(key)
            else:
                self._waiting.discard(key)

    def listed(self, keys: Iterable[Hashable]) -> None:
        """What the startup listing returned: every one of them must come through a watch."""
        with self._lock:
            self._waiting = set(keys) - self._seen
            self._seen = set()

    def still_there(self, keys: Iterable[Hashable]) -> None:
        """A later listing: objects deleted since the first one may never come through the
        watch (its own listing came after their deletion), so they are no longer waited for."""
        with self._lock:
            if self._waiting is not None:
                self._waiting &= set(keys)

    def synced(self) -> bool:
        with self._lock:
            return self._waiting is not None and not self._waiting

    def missing(self) -> int:
        """How many listed objects no watch has delivered yet (-1 before the listing)."""
        with self._lock:
            return -1 if self._waiting is None else len(self._waiting)
