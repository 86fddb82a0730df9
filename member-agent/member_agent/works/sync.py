"""The agent's Work loop, wired: the watch hands each Work to a per-Work pool, which purges,
applies or records it; the remover sweeps stale copies; the reporter writes status back.

Threads (each ``run`` takes the agent's stop event): ``watch`` (the hub's Works),
``fencing`` (stale copies and orphaned placeholders), ``drift`` (jobs deleted on the member
put back), ``status`` (Work status to the hub). Several Works apply at once, each Work's
events in order (:class:`~member_agent.keyed.LatestPerKey`), so one slow apply holds up no
other Work.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from fleet.api.protocol import member_namespace
from fleet.clients import errors
from fleet.clients.kube import Kube
from member_agent.controllers import placeholders as ph
from member_agent.held_nodes import HeldNodes, held_nodes
from member_agent.keyed import LatestPerKey
from member_agent.state import MemberState
from member_agent.works.applying import Applier, is_reserving
from member_agent.works.book import WorkBook, job_key
from member_agent.works.holds import ReservationHolds
from member_agent.works.removing import Remover
from member_agent.works.status import StatusReporter
from member_agent.works.watch import WorkWatch
from propagation.jobkey import JobKey

log = logging.getLogger(__name__)
Body = dict[str, Any]
# A Work's purge: how often the member's job may change between its last report and its
# deletion before it is deleted as it is, and how long the member's watch is waited for.
LAST_WORD_ATTEMPTS = 5
CATCH_UP_SECONDS = 2.0
CATCH_UP_PAUSE = 0.05


class WorkSync:
    def __init__(self, hub: Kube, member: Kube, cluster: str, state: MemberState, *,
                 fence_interval: float = 2.0,
                 placeholder_image: str = ph.DEFAULT_IMAGE) -> None:
        self.cluster, self.state = cluster, state
        self.namespace = member_namespace(cluster)
        self.fence_interval = fence_interval
        self.wake: Callable[[JobKey], None] = lambda key: None  # the job controller's queue
        self.sweep_now = threading.Event()
        self.book = WorkBook()
        self.holds = ReservationHolds(member, self.namespace, state, self.book,
                                      image=placeholder_image)
        self.remover = Remover(hub, member, cluster, self.namespace, state, self.book)
        self.applier = Applier(hub, member, cluster, self.namespace, state, self.book,
                               self.remover)
        self.status = StatusReporter(hub, cluster, self.namespace, state, self.book,
                                     self.holds)
        self.watch = WorkWatch(hub, self.namespace, on_work=self._queue,
                               on_list=self.sweep_now.set)
        self.appliers: LatestPerKey[tuple[Body, bool]] = LatestPerKey(
            lambda item: self.handle(item[0], deleted=item[1]), workers=4, name="apply")
        state.stores.listeners.append(self.status.job_changed)

    # -- for the job controller and the capacity report ----------------------------------
    @property
    def synced(self) -> threading.Event:
        return self.watch.synced

    def may_run(self, job: Mapping[str, Any], key: JobKey) -> bool:
        return self.watch.may_run(job, key)

    def take_slot(self, job: Mapping[str, Any], slot: ph.Slot) -> str | None:
        return self.holds.take_slot(job, slot)

    def held(self, pods: list[Body], room: Mapping[str, Mapping[str, int]]
             ) -> list[HeldNodes]:
        """What this member holds for its Works' unbound pods (see ``held_nodes``)."""
        return held_nodes(self.book.works(), pods, room, self.book.first_seen(),
                          time.monotonic(), bound=self.status.bound())

    # -- threads -----------------------------------------------------------------------
    def threads(self) -> list[tuple[str, Callable[[threading.Event], None]]]:
        return [("hub-works", self.watch.run), ("hub-status", self.status.run),
                ("fencing", self.fence_loop), ("drift", self.drift_loop)]

    def fence_loop(self, stop: threading.Event) -> None:
        def placeholders() -> None:
            fences = self.watch.fences()
            self.holds.sweep(lambda: {n: f.job_uid for n, f in fences.items()},
                             self.watch.synced.is_set())

        self.remover.run(stop, self.sweep_now, self.fence_interval, placeholders,
                         self.watch.fences, self.watch.synced)

    def drift_loop(self, stop: threading.Event) -> None:
        self.applier.run_drift_repair(stop, self.watch.current, lambda work: self.appliers.submit(
            work["metadata"]["name"], (work, False)))

    # -- one Work's event ----------------------------------------------------------------
    def _queue(self, work: Body, deleted: bool) -> None:
        self.appliers.submit(work["metadata"]["name"], (work, deleted))

    def handle(self, work: Body, *, deleted: bool) -> None:
        name = work["metadata"]["name"]
        if deleted:
            self._forget(name, wholly=True)
            self.remover.released(work)
            return
        try:
            if work["metadata"].get("deletionTimestamp"):
                self._purge(work)
                self._forget(name, wholly=False)
            elif self.applier.is_applied(work):
                self.book.update(work)  # a status or metadata change: nothing to apply
                self.status.mark(name)
            else:
                self._apply(work)
        except errors.ApiError as exc:
            log.warning("work %s not applied: %s", name, exc)

    def _purge(self, work: Body) -> None:
        """The Work's copy off the member, its last state told first: a job that ended
        before its Work was deleted (a requeue that came too late) is said to have, and the
        hub never runs it again. The job is deleted only at the version that was told (a
        precondition), so one that ended between the report and the deletion is told again
        first; after ``LAST_WORD_ATTEMPTS`` changes in a row it goes as it is."""
        name = work["metadata"]["name"]
        for _ in range(LAST_WORD_ATTEMPTS):
            told = self._job_version(work)
            self.status.report([name])
            if self.remover.purge(work, job_version=told):
                return
            self._catch_up(work, told)
        self.status.report([name])
        self.remover.purge(work)

    def _job_version(self, work: Body) -> str | None:
        job = self.state.stores.read(job_key(work))[0]
        return None if job is None else job["metadata"].get("resourceVersion")

    def _catch_up(self, work: Body, seen: str | None) -> None:
        """Until the member's watch brings the job's version newer than ``seen``."""
        deadline = time.monotonic() + CATCH_UP_SECONDS
        while self._job_version(work) == seen and time.monotonic() < deadline:
            time.sleep(CATCH_UP_PAUSE)

    def _apply(self, work: Body) -> None:
        new, before, applied = self.applier.apply(work)
        self.status.applied(work, new, before)
        self.wake(job_key(work))  # e.g. committed: its pods may start now
        if is_reserving(work):
            self.holds.refresh(work, applied)  # its placeholders now, not at the next report

    def _forget(self, name: str, *, wholly: bool) -> None:
        self.book.drop(name)
        self.status.forget(name, wholly=wholly)
        if wholly:
            self.holds.forget(name)  # any reservation it held ends
        self.state.changed.set()
        self.sweep_now.set()  # its placeholders go
