"""A bounded memo for what the hub reads out of cached objects again and again.

A busy pass reads the same jobs' and Works' specs many times (their demand, role requests,
PriorityClass names) while only their statuses change. :class:`Memo` keeps the last
``kept`` answers, the least recently used out first, safe to share between threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Memo(Generic[K, V]):
    def __init__(self, kept: int) -> None:
        self.kept = kept
        self._found: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The answer kept for ``key``, else ``make()``'s, kept (an exception is not)."""
        with self._lock:
            if key in self._found:
                self._found.move_to_end(key)
                return self._found[key]
        found = make()
        with self._lock:
            self._found[key] = found
            while len(self._found) > self.kept:
                self._found.popitem(last=False)
        return found
