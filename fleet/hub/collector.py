"""The hub's garbage collector: what survived a full collection is not traversed again.

At 10,000 jobs the hub holds some 850,000 objects the collector tracks (the cached jobs'
JSON, their views, the members' capacity). CPython runs a full collection whenever a
quarter as many objects again have survived the young generations, and each walks them
all: 0.7 s of CPU at that size, about one pass in three, in whichever thread allocated
(measured in the scale bench's passes: two full collections in five passes took 1.5 s of
the passes' 3.2 s). The cached objects are plain JSON, freed by their reference counts when
replaced, so the collector finds nothing among them.

:class:`Collector` freezes (``gc.freeze``) what a full collection left alive: later
collections walk only what was made since. A frozen object is still freed when its last
reference goes; only a reference cycle that was alive at a freeze and dies after it waits
for the next thaw (``gc.unfreeze`` every ``thaw_seconds``), when one full collection walks
everything again.
"""

from __future__ import annotations

import gc
import time

THAW_SECONDS = 1800.0


class Collector:
    def __init__(self, thaw_seconds: float = THAW_SECONDS) -> None:
        self.thaw_seconds = thaw_seconds
        self._full = self._full_collections()
        self._thaw_at = time.monotonic() + thaw_seconds

    @staticmethod
    def _full_collections() -> int:
        return int(gc.get_stats()[-1]["collections"])

    def tick(self) -> None:
        """Call between passes: freeze after a full collection, thaw now and then."""
        if time.monotonic() >= self._thaw_at:
            self._thaw_at = time.monotonic() + self.thaw_seconds
            gc.unfreeze()  # the next full collection walks everything once
            self._full = self._full_collections()
            return
        full = self._full_collections()
        if full != self._full:
            self._full = full
            gc.freeze()
