"""The Works of this member's hub namespace, as the hub says: watched through an
:class:`~fleet.clients.informer.Informer`, each Work's fence (its job and placement
generation) kept for the member's job controller, each event handed on.

Fences are updated on the watch's thread before the event is handed on, so by the time a
Work is applied its fence is known, and a job whose Work is gone or superseded is refused
pods at once (:mod:`member_agent.fencing` decides).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from fleet.clients import resources as r
from fleet.clients.informer import DELETED, Informer
from fleet.clients.kube import Kube
from member_agent import fencing
from member_agent.fencing import Action, Fence
from propagation.jobkey import JobKey

Body = dict[str, Any]


class WorkWatch:
    def __init__(self, hub: Kube, namespace: str, *,
                 on_work: Callable[[Body, bool], None],
                 on_list: Callable[[], None] = lambda: None) -> None:
        self.namespace = namespace
        self._on_work = on_work
        self._fences: dict[str, Fence] = {}
        self._lock = threading.Lock()
        self.informer = Informer(hub, r.WORKS, namespace, handle=self._seen, listed=on_list)

    @property
    def synced(self) -> threading.Event:
        """Set once the Works have been listed: before that an absent Work means nothing."""
        return self.informer.synced

    def run(self, stop: threading.Event) -> None:
        self.informer.run(stop)

    def current(self, name: str) -> Body | None:
        """The hub's latest copy of a Work, as the watch last said."""
        return self.informer.get(self.namespace, name)

    def fences(self) -> dict[str, Fence]:
        with self._lock:
            return dict(self._fences)

    def may_run(self, job: Mapping[str, Any], key: JobKey) -> bool:
        """For the member's job controller: whether ``job`` may get pods now."""
        with self._lock:
            verdict = fencing.may_run(job, key, self.namespace, self._fences,
                                      synced=self.synced.is_set())
        return verdict is None or verdict.action is Action.RUN

    def _seen(self, kind: str, work: Body) -> None:
        name = work["metadata"]["name"]
        deleted = kind == DELETED
        with self._lock:
            if deleted or work["metadata"].get("deletionTimestamp"):
                self._fences.pop(name, None)
            else:
                self._fences[name] = fencing.fence_of(work)
        self._on_work(work, deleted)
