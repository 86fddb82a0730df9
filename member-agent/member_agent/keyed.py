"""A small pool that runs work per key: keys run in parallel, one key never twice at once, and
a key that changes while it runs runs once more with only its latest item (older ones are
superseded). The agent applies Works with it, so one slow apply does not hold up the rest."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


class LatestPerKey(Generic[T]):
    def __init__(self, run: Callable[[T], None], workers: int, name: str) -> None:
        self._run = run
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._running: set[str] = set()
        self._pending: dict[str, T] = {}

    def submit(self, key: str, item: T) -> None:
        with self._lock:
            if key in self._running:
                self._pending[key] = item
                return
            self._running.add(key)
        self._pool.submit(self._work, key, item)

    def _work(self, key: str, item: T) -> None:
        while True:
            try:
                self._run(item)
            except Exception:  # one item's failure must not stop its key
                log.exception("work on %s failed", key)
            with self._lock:
                if key not in self._pending:
                    self._running.discard(key)
                    return
                item = self._pending.pop(key)
