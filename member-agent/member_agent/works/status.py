"""Each Work's status, reported to the hub when what it reports changes.

A Work's status is its member job's state and status (cut to the protocol's size), its pods'
summaries, when all its pods were first bound, whether the member refuses or cannot run it
(``Healthy``), and its reservation's verdict. It is built from the agent's caches and written
as a diff against what was last reported.

The reporter is driven by changes, not by a poll over every Work: a Work is looked at again
when its member job, one of its pods or its refusal changes (the member caches call
:meth:`StatusReporter.job_changed`), when it is applied or its hub copy changes
(:meth:`StatusReporter.mark`), every round while it is in a reservation's phases (its
placeholders depend on any pod of the member), and every ``resync`` seconds for all Works
(client-go's resync, a safety net). Changes that come within ``batch`` seconds of each other
are written once, and a Work's changes short of its end (applied, pods starting, running)
are written at most once every ``hold`` seconds, counted from its first look: as the Job
controller batches its pods' updates for a second, a short job is told once, finished, not
three times (at Kueue's scale most jobs end within a second of starting, and each write of a
Work is the hub API server's work). Its end, a change of its health and a reservation's
progress are written at once. Each Work's write starts as soon as a writer is free, not when the
round before has been written: written round by round, a member finishing a few hundred
short jobs a minute reported each one after the slowest write of the round before (two
seconds at Kueue's scale on one member), and the hub freed their quota that much later. A
Work changed while its write is under way is written again once it lands.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from fleet.api import protocol, size
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube
from fleet.clients.patches import merge_diff
from fleet.kinds import adapter_for
from member_agent.member_failures import health
from member_agent.stages import STAGES
from member_agent.state import MemberState
from member_agent.works.book import WorkBook, job_key
from member_agent.works.holds import ReservationHolds
from propagation.jobkey import JobKey

log = logging.getLogger(__name__)
Body = dict[str, Any]
WRITERS = 16  # Work status writes under way at once
BACKOFF_SECONDS = 1.0  # after a write the hub refused or did not answer: do not hammer it


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class StatusReporter:
    def __init__(self, hub: Kube, cluster: str, namespace: str, state: MemberState,
                 book: WorkBook, holds: ReservationHolds, *, batch: float = 0.05,
                 resync: float = 30.0, reserving_every: float = 0.5,
                 hold: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.hub, self.cluster, self.namespace = hub, cluster, namespace
        self.state, self.book, self.holds = state, book, holds
        self.batch, self.resync, self.reserving_every = batch, resync, reserving_every
        self.hold, self.clock = hold, clock
        self._lock = threading.Lock()
        self._landed = threading.Condition(self._lock)  # a write under way ended
        self._dirty: set[str] = set()
        self._wake = threading.Event()
        self._reported: dict[str, Body] = {}  # Work name -> the status last written
        self._bound_at: dict[str, str] = {}  # Work name -> when all its pods were bound
        self._unhealthy_since: dict[str, str] = {}
        self._cut: dict[str, str] = {}  # Work name -> why its job's status was cut
        self._writers = ThreadPoolExecutor(WRITERS, thread_name_prefix="work-status")
        self._sending: set[str] = set()  # Works whose write is under way
        self._again: set[str] = set()  # ... and changed meanwhile: written again after it
        self._refused = False  # a write since the last round failed
        self._told_at: dict[str, float] = {}  # Work name -> when first looked at or written
        self._held: dict[str, float] = {}  # Work name -> when its held change is written
        self.written: Callable[[str], None] = lambda name: None  # (a bench traces it)

    # -- what to look at ------------------------------------------------------------------
    def mark(self, *names: str) -> None:
        with self._lock:
            self._dirty.update(names)
        self._wake.set()

    def job_changed(self, key: JobKey) -> None:
        """The member job ``key``, one of its pods or its refusal changed."""
        names = self.book.names_of(key)
        if names:
            self.mark(*names)

    def applied(self, work: Body, new: bool, before: Body | None) -> None:
        """The applier put the Work on the member."""
        name = work["metadata"]["name"]
        with self._lock:
            if before is not None and _replicas(before) != _replicas(work):
                self._bound_at.pop(name, None)  # resized: bound again once its new pods are
            bound = protocol.bound_time(work)
            if new and bound:
                self._bound_at[name] = bound  # a restarted agent does not report it anew
        self.mark(name)

    def forget(self, name: str, *, wholly: bool) -> None:
        """The Work is purged (``wholly``: gone; a Work of the same name made later starts
        afresh: healthy, its pods not bound, its reservation's clock at zero)."""
        with self._lock:
            self._reported.pop(name, None)
            self._dirty.discard(name)
            self._held.pop(name, None)
            self._told_at.pop(name, None)
            if wholly:
                self._bound_at.pop(name, None)
                self._unhealthy_since.pop(name, None)
                self._cut.pop(name, None)

    def bound(self) -> set[str]:
        """The Works whose pods have all been bound once (their reservation is over)."""
        with self._lock:
            return set(self._bound_at)

    # -- the loop --------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        last_resync = time.monotonic()
        while not stop.is_set():
            reserving = self.book.reserving()
            self._wake.wait(min(self.reserving_every if reserving else self.resync,
                                self.next_held()))
            self._wake.clear()
            stop.wait(self.batch)  # let a burst of changes come in: one write for them
            names = self.take_marked() | self.take_due()
            if time.monotonic() - last_resync >= self.resync:
                names |= self.book.names()
                last_resync = time.monotonic()
            try:
                self.send([*names, *reserving])
            except Exception:  # keep reporting whatever one Work does
                log.exception("work status report failed")
            with self._lock:
                refused, self._refused = self._refused, False
            if refused:
                stop.wait(BACKOFF_SECONDS)

    def take_marked(self) -> set[str]:
        with self._lock:
            names, self._dirty = self._dirty, set()
        return names

    def next_held(self) -> float:
        """Seconds until the first held change is due (a day when none is held)."""
        with self._lock:
            first = min(self._held.values(), default=None)
        return 86_400.0 if first is None else max(0.0, first - self.clock())

    def take_due(self) -> set[str]:
        now = self.clock()
        with self._lock:
            due = {name for name, at in self._held.items() if at <= now}
            for name in due:
                del self._held[name]
        return due

    def _hold(self, name: str, work: Mapping[str, Any], status: Mapping[str, Any],
              before: Mapping[str, Any]) -> bool:
        """Whether the change is held back (and marked to be written when its time comes):
        one short of the Work's end, its health unchanged, no reservation under way, written
        or first looked at less than ``hold`` seconds ago."""
        manifest = work["spec"]["manifests"][0]
        if adapter_for(manifest["apiVersion"], manifest["kind"]).finished(
                status.get("jobStatus")) or protocol.work_phase(work) \
                or _healthy(status) != _healthy(before or {"conditions": [HEALTHY]}):
            return False
        with self._lock:
            told = self._told_at.setdefault(name, self.clock())  # first looked at
            if self.clock() >= told + self.hold:
                return False
            self._held.setdefault(name, told + self.hold)
        self._wake.set()  # the loop's wait now ends sooner
        return True

    def send(self, names: Iterable[str]) -> None:
        """Write the status of each named Work that changed, without waiting for it: each
        as soon as a writer is free. One whose write is under way is written again once
        that lands (what it wrote may predate the change); one that fails is marked to be
        looked at again."""
        for name in sorted(set(names)):
            work = self.book.get(name)
            if work is None:
                continue
            with self._lock:
                if name in self._sending:
                    self._again.add(name)
                    continue
                self._sending.add(name)
            try:
                self.holds.refresh(work)  # (one after another: see report)
                future = self._writers.submit(self._report_one, name)
            except BaseException:
                self._sent_now(name)
                raise
            future.add_done_callback(functools.partial(self._sent, name))

    def _sent(self, name: str, done: Future[bool]) -> None:
        written = done.exception() is None and done.result()
        if done.exception() is not None:
            log.error("work status report failed", exc_info=done.exception(),
                      extra={"work": name})
        with self._lock:
            self._refused |= not written
        self._sent_now(name)
        if not written:
            self.mark(name)

    def report(self, names: Iterable[str]) -> bool:
        """Write the status of each named Work that changed, side by side, and wait for
        them; False when the hub refused or could not be reached (the Works not written are
        looked at again next round). A Work's write already under way lands first: sent
        earlier, it may say less (still running, where this says succeeded), and landing
        last it would be the Work's last word before a purge (the hub then runs the job
        again)."""
        todo = []
        for name in sorted(set(names)):
            work = self.book.get(name)
            if work is not None:
                # one after another: a Work's placeholders are placed among the member's pods
                self.holds.refresh(work)
                todo.append(name)
        with self._lock:
            while self._sending.intersection(todo):
                self._landed.wait()
            self._sending.update(todo)  # the loop's writes of them wait, marked again
        try:
            results = list(self._writers.map(self._report_one, todo))
        finally:
            for name in todo:
                self._sent_now(name)
        unwritten = [name for name, written in zip(todo, results, strict=True) if not written]
        if unwritten:
            self.mark(*unwritten)
        return not unwritten

    def _sent_now(self, name: str) -> None:
        """The Work's write landed (or failed): one it changed meanwhile is written again."""
        with self._lock:
            self._sending.discard(name)
            again = name in self._again
            self._again.discard(name)
            self._landed.notify_all()
        if again:
            self.mark(name)

    def _report_one(self, name: str) -> bool:
        work = self.book.get(name)
        if work is None:
            return True
        status = self.work_status(work)
        with self._lock:
            before = self._reported.get(name) or work.get("status") or {}
        patch = merge_diff(before, status)
        if patch and self._hold(name, work, status, before):
            return True
        if patch:
            try:
                self.hub.patch(r.WORKS, name, {"status": patch}, self.namespace,
                               subresource="status")
            except errors.NotFound:
                return True
            except errors.ApiError as exc:
                log.warning("work status not reported yet: %s", exc, extra={"work": name})
                return False
        with self._lock:
            if self.book.get(name) is not None:  # not purged meanwhile
                self._reported[name] = status
                if patch:
                    self._told_at[name] = self.clock()
        if patch:
            self.written(name)
        return True

    # -- what a Work reports --------------------------------------------------------------
    def work_status(self, work: Mapping[str, Any]) -> Body:
        manifest = work["spec"]["manifests"][0]
        key = job_key(work)
        job, job_pods = self.state.stores.read(key)
        adapter = adapter_for(manifest["apiVersion"], manifest["kind"])
        share = health(self.cluster, job_pods, self.state.stores.refusal(key))
        job_status = (job or {}).get("status") or {}
        state = adapter.state(job_status) or ("Applied" if job else "Pending")
        reported, cut = size.reported_status(job_status)
        name = work["metadata"]["name"]
        self._note_cut(name, cut)
        expected = sum(role.replicas for role in adapter.roles(manifest))
        pods = [_summary(p) for p in sorted(job_pods, key=lambda p: p["metadata"]["name"])]
        STAGES.progress(name, [p["phase"] for p in pods], expected)
        with self._lock:
            if name not in self._bound_at and \
                    len([p for p in pods if p.get("node")]) >= expected:
                self._bound_at[name] = stamp()
                self.state.changed.set()  # its reservation ends: the capacity report changes
            if share.healthy:
                self._unhealthy_since.pop(name, None)
            else:
                self._unhealthy_since.setdefault(name, stamp())
            bound_at = self._bound_at.get(name)
            unhealthy_since = self._unhealthy_since.get(name)
        created = work["metadata"].get("creationTimestamp")
        verdict = self.holds.verdict(name)
        reserved = [] if verdict is None else [{
            "type": protocol.RESERVED,
            "status": "True" if verdict.state == protocol.RESERVED else "False",
            "reason": verdict.state, "message": verdict.message[:1024],
            "lastTransitionTime": created}]
        return protocol.work_status(
            applied=job is not None,
            state=state, job_status=reported, pods=pods, bound_time=bound_at,
            conditions=[{"type": protocol.APPLIED, "status": "True" if job else "False",
                         "reason": "AppliedToMember" if job else "Applying",
                         "message": f"job applied on {self.cluster}" if job else "",
                         "lastTransitionTime": created},
                        {"type": protocol.HEALTHY, "status": "True" if share.healthy else "False",
                         "reason": share.reason, "message": share.message,
                         "lastTransitionTime": unhealthy_since or created},
                        *reserved])

    def _note_cut(self, name: str, cut: str | None) -> None:
        with self._lock:
            if not cut:
                self._cut.pop(name, None)
                return
            if self._cut.get(name) == cut:
                return
            self._cut[name] = cut
        log.warning("reporting part of a member job's status: %s", cut, extra={"work": name})


HEALTHY = {"type": protocol.HEALTHY, "status": "True"}  # as a Work not yet told is taken


def _healthy(status: Mapping[str, Any]) -> str | None:
    return next((c.get("status") for c in status.get("conditions") or []
                 if c.get("type") == protocol.HEALTHY), None)


def _replicas(work: Mapping[str, Any]) -> Mapping[str, Any]:
    return dict(((work.get("spec") or {}).get("placement") or {}).get("replicas") or {})


def _summary(pod: Mapping[str, Any]) -> Body:
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    exit_code = None
    for item in containers:
        terminated = (item.get("state") or {}).get("terminated")
        if terminated is not None:
            exit_code = terminated.get("exitCode")
    summary: Body = {
        "name": meta["name"],
        "role": next((v for k, v in (meta.get("labels") or {}).items()
                      if k.endswith("/replica-type")), None),
        "phase": status.get("phase") or "Pending",
        "ready": any(c.get("type") == "Ready" and c.get("status") == "True"
                     for c in status.get("conditions") or []),
        "restarts": sum(int(c.get("restartCount", 0)) for c in containers),
        "node": spec.get("nodeName"),
        "exitCode": exit_code,
        "startTime": status.get("startTime"),
        # for the hub's mirror of the pod (fleet.hub.pod_mirrors)
        "labels": meta.get("labels") or None,
        "containers": [c["name"] for c in spec.get("containers") or []] or None,
    }
    return {k: v for k, v in summary.items() if v is not None}
