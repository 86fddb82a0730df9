"""The hub's garbage collector: what survived a full collection is not traversed again.

At 10,000 jobs the hub holds some 850,000 objects the collector tracks (the cached jobs'
JSON, their views, the members' capacity). CPython runs a full collection whenever a
quarter as many objects again have survived the young generations, and each walks them
all: 0.7 s of CPU at that size, about one pass in three, in whichever thread allocated
(measured in the scale bench's passes: two full collections in five passes took 1.5 s of
the passes' 3.2 s). The cached objects are plain JSON, freed by their reference counts when
replaced, so the collector finds nothing among them.

:class:`Collector` freezes (``gc.freeze``) what a full collection left alive, the moment it
ends (a ``gc.callbacks`` hook): later collections walk only what was made since. Freezing
then, not at some later point, matters: everything tracked at a freeze is frozen, garbage
too, and a reference cycle frozen is not collected until the next thaw; right after a full
collection there is none. A frozen object is still freed when its last reference goes; only
a cycle that was alive at a freeze and dies after it waits for the next thaw
(``gc.unfreeze`` every ``thaw_seconds``), when one full collection walks everything again.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Mapping
from typing import Any

THAW_SECONDS = 1800.0
FULL = 2  # the oldest generation: a collection of it is a full one


class Collector:
    def __init__(self, thaw_seconds: float = THAW_SECONDS) -> None:
        self.thaw_seconds = thaw_seconds
        self._thaw_at = time.monotonic() + thaw_seconds

    def start(self) -> None:
        if self._collected not in gc.callbacks:
            gc.callbacks.append(self._collected)

    def stop(self) -> None:
        if self._collected in gc.callbacks:
            gc.callbacks.remove(self._collected)

    @staticmethod
    def _collected(phase: str, info: Mapping[str, Any]) -> None:
        # After a full collection every generation is empty but the oldest, which holds
        # only what survived it.
        if phase == "stop" and info.get("generation") == FULL:
            gc.freeze()

    def tick(self) -> None:
        """Call between passes: thaw now and then."""
        if time.monotonic() >= self._thaw_at:
            self._thaw_at = time.monotonic() + self.thaw_seconds
            gc.unfreeze()  # the next full collection walks everything once
