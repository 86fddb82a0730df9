"""The hub's scheduling loop: snapshot -> plan -> write -> observe, as often as things change.

A pass takes a snapshot of the cache and builds the planner's frozen view of it
(:mod:`fleet.hub.pass_view`), asks the pure planner for the pass's intents
(:func:`planner.plan_pass`: bindings, waits, preemptions, failovers, Works to complete or
remove), mirrors its bound jobs' Works into their status (:mod:`fleet.hub.mirror`) and has
the writer carry the intents out (:mod:`fleet.hub.writer`; binds in the background, guarded
by the job's resourceVersion). What a pass knows lives in the pass; the scheduler keeps only
its timers, and the writer what it is still writing.
"""

from __future__ import annotations

import collections
import heapq
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from datetime import datetime

from fleet import clock, metrics
from fleet.clients.leases import LeaderElector, NotLeading
from fleet.hub.cache import Body, Cache, Changes, Snapshot
from fleet.hub.collector import Collector
from fleet.hub.dispatch import Dispatcher, now_text
from fleet.hub.job_views import Context
from fleet.hub.pass_view import Carried, PassViewBuilder, creation_order
from fleet.hub.reporting import Reporting
from fleet.hub.status_mirror import mirror
from fleet.hub.views import cluster_view
from fleet.hub.writer import PassContext, Writer
from fleet.kinds import adapter_for
from planner import PassView, Plan, plan_pass
from planner.intents import Bind
from planner.view import JobView, Stage
from propagation.jobkey import JobKey
from propagation.resources import Resources
from propagation.views import ClusterView, FitMode
from quota.engine import Holding

log = logging.getLogger(__name__)
MAX_MIRRORED = 100_000  # bound jobs whose last mirrored versions are remembered
QUEUE_REPORT_SECONDS = 1.0  # the Queues' status (usage, pending) is written this often
# ... when more jobs than this wait (each report merges every leaf's classes); with fewer, every
# pass reports, so a small fleet's Queues say at once what its jobs say
QUEUE_REPORT_EVERY_PASS_BELOW = 1000
# While this many binds wait for a writer, the next pass waits (at most this long): see
# Writer.binds_queued.
BIND_BACKLOG_WAIT_SECONDS = 1.0
RETRY_SECONDS = 1.0  # a job whose mirror failed, or waits for its first report, is looked
# at again this soon


@dataclass(frozen=True)
class Settings:
    fit_mode: FitMode = FitMode.NODE_AWARE
    heartbeat_timeout: float = 15.0  # a member is lost when its agent is silent this long
    capacity_stale_after: float = 90.0  # no new work on a member whose report is this old
    resync_seconds: float = 2.0  # a pass runs at least this often (heartbeats age, leases)
    # Placed jobs looked at each pass in turn, whatever happened (a slow sweep beside the
    # changes and timers that bring them: nothing is missed for long).
    sweep_per_pass: int = 32
    pass_gap_seconds: float = 0.05  # the least time between passes
    lease_namespace: str = "fleet-system"
    starvation_bound: int = 5
    # Binds decided by one pass at most: a burst is placed over consecutive passes, each
    # short (its writes flow and the lease is renewed between them).
    max_binds_per_pass: int = 32
    # Fault injection only (the chaos scenario of long passes): seconds each pass waits
    # between its plan and its writes, so a leader can lose its lease with a plan in hand.
    chaos_pass_pause: float = 0.0


@dataclass
class Scheduler:
    cache: Cache
    dispatcher: Dispatcher
    elector: LeaderElector
    settings: Settings = field(default_factory=Settings)
    workers: int = 16  # concurrent bind writers (bind, Works, events, status)

    def __post_init__(self) -> None:
        self.writer = Writer(self.cache, self.dispatcher, self.workers)
        self.views = PassViewBuilder(self.settings.fit_mode, self.settings.starvation_bound,
                                     self.settings.max_binds_per_pass)
        # When to look at a placed job again though nothing changed (the plan's look_at:
        # tolerations, TTLs, reservation deadlines), as a heap, the latest time per uid.
        self._timers: list[tuple[float, str]] = []
        self._due: dict[str, float] = {}
        self._members: dict[str, tuple[bool, str]] = {}  # ready and stale, last pass
        self._sweep: collections.deque[str] = collections.deque()
        self._next_queue_report = 0.0  # the Queues' status, at most once a second
        # What the last plan left for the next (capacity held for preemptors, when to plan
        # again for a job that had no plan, backfill's reservation, the waiting jobs): the
        # planner itself keeps nothing. None: the next pass looks at every job.
        self._carried: Carried | None = None
        self._growing: set[str] = set()  # elastic jobs below their max: looked at each pass
        self._placed: set[str] = set()  # jobs bound or going, not settled: swept in turn
        self.reporting = Reporting(self.dispatcher, self.writer.submit)
        # Bound jobs by uid: the versions of the job and its Works last mirrored.
        self._mirrored: dict[str, tuple[object, ...]] = {}
        # Mirrors written off the pass: (job, the versions mirrored, settled, the writes).
        self._mirroring: list[tuple[JobView, tuple[object, ...], bool, Future[None]]] = []
        self.collector = Collector()

    def run(self, stop: threading.Event) -> None:
        """Passes while this replica leads (its elector renews the lease on a thread of its
        own); what passes carry is dropped whenever leadership comes or goes."""
        self.collector.start()
        try:
            self._run(stop)
        finally:
            self.collector.stop()

    def _run(self, stop: threading.Event) -> None:
        led = False
        while not stop.is_set():
            leading = self.elector.leading
            if leading != led:
                self.forget()
                led = leading
            took = 0.0
            if leading:
                started, cpu = time.monotonic(), time.thread_time()
                try:
                    with metrics.SCHEDULING_PASS_SECONDS.time():
                        self.pass_once()
                except NotLeading:
                    log.info("pass stopped: this replica no longer leads")
                except Exception:  # a bug in one pass must not stop the hub
                    log.exception("scheduling pass failed")
                took = time.monotonic() - started
                metrics.SCHEDULING_PASS_CPU_SECONDS.observe(time.thread_time() - cpu)
            # Let events gather: a pass costs the same for one change as for a hundred, and
            # under a burst they arrive a few hundred a second. At least as long as the pass
            # took: its writes are off the pass, and passes back to back (a change always
            # comes while one runs) held the interpreter from the watches and writers that
            # bring the next pass its changes.
            stop.wait(max(self.settings.pass_gap_seconds, took))
            self.writer.binds_queued(below=self.workers, timeout=BIND_BACKLOG_WAIT_SECONDS)
            self.cache.wait_for_change(self.settings.resync_seconds)

    # -- one pass -----------------------------------------------------------------------
    def pass_once(self) -> Plan:
        self.collector.tick()  # now and then, what full collections kept is walked again
        # In-flight binds first, then the snapshot: a bind that finishes in between is then
        # in the snapshot with its writes, never seen as unbound with a stale version.
        inflight = self.writer.inflight()
        changes = self.cache.take_changed()
        snap = self.cache.snapshot()
        now = clock.now()
        clusters = self.cluster_views(snap, now)
        context, anew = self.views.context(snap)
        carried = self._carried if self._carried is not None and not anew else Carried(
            *(self._carried.holds, self._carried.retry_at, self._carried.reservations)
            if self._carried is not None else ())
        due = self.due(now.timestamp()) | self.on_flipped(snap, clusters) | self.swept()
        looked = self.jobs_to_look_at(snap, inflight, due, changes,
                                      everything=carried.waiting is None)
        waiting = self._carried.waiting if self._carried is not None else None
        report = time.monotonic() >= self._next_queue_report or (
            waiting is not None and len(waiting) < QUEUE_REPORT_EVERY_PASS_BELOW)
        if report:
            self._next_queue_report = time.monotonic() + QUEUE_REPORT_SECONDS
        view = replace(self.pass_view(snap, now, clusters, inflight, list(looked.values()),
                                      changes, carried, context), report_queues=report)
        started = time.perf_counter()
        plan = plan_pass(view)
        observe_plan(plan, time.perf_counter() - started)
        self._carried = Carried(plan.holds, plan.retry_at, plan.reservations, plan.waiting)
        self._growing = {v.uid for v in view.jobs if _grows(v)}
        self._placed -= changes.gone | {v.uid for v in view.jobs}
        self._placed |= {v.uid for v in view.jobs
                         if v.stage is not Stage.WAITING and v.uid not in plan.settled}
        for uid in plan.settled:
            self.views.jobs.forget(uid)
        for uid, when in plan.look_at.items():
            self.look_again(uid, when)
        ctx = PassContext(snap, now, looked, holdings_of(plan.binds))
        if self.settings.chaos_pass_pause and plan.binds:
            time.sleep(self.settings.chaos_pass_pause)
        self.mirror(view, ctx)
        self.writer.write(plan.intents, ctx)
        self.reporting.offer(snap, clusters, now, plan.queues)
        return plan

    def cluster_views(self, snap: Snapshot, now: datetime) -> list[ClusterView]:
        """The members, each judged fresh by when this hub last heard from it (never by
        the agent's clock against this one: they may be skewed)."""
        return [cluster_view(b, now, self.settings.heartbeat_timeout,
                             snap.heartbeat_lease(b["metadata"]["name"]),
                             self.settings.capacity_stale_after,
                             heard=snap.heard_at(b["metadata"]["name"], now),
                             reported=snap.reported_at(b["metadata"]["name"], now))
                for b in snap.clusters.values()]

    def forget(self) -> None:
        """Drop what passes carry (a replica that lost the lead, or is about to lead): the
        next pass looks at every job again."""
        self._carried = None

    def look_again(self, uid: str, when: float) -> None:
        """Look at the job (by uid) again at ``when`` at the latest."""
        if self._due.get(uid, when + 1) > when:
            self._due[uid] = when
            heapq.heappush(self._timers, (when, uid))

    def due(self, now: float) -> set[str]:
        """Placed jobs whose time (the plan's ``look_at``) has come."""
        out = set()
        while self._timers and self._timers[0][0] <= now:
            when, uid = heapq.heappop(self._timers)
            if self._due.get(uid) == when:
                del self._due[uid]
                out.add(uid)
        return out

    def on_flipped(self, snap: Snapshot, clusters: Sequence[ClusterView]) -> set[str]:
        """The jobs on members that became ready or not, fresh or stale, or left, since the
        last pass (their shares' health changed with no change to them)."""
        now = {c.name: (c.ready, c.stale_reason) for c in clusters}
        flipped = {name for name in now.keys() | self._members.keys()
                   if now.get(name) != self._members.get(name)}
        self._members = now
        if not flipped:
            return set()
        return {wk["spec"]["job"]["uid"] for wk in snap.works.values()
                if wk["spec"]["placement"]["cluster"] in flipped}

    def swept(self) -> set[str]:
        """A few placed jobs in turn, every pass: each is looked at every few seconds."""
        if not self._sweep:
            self._sweep.extend(sorted(self._placed))
        count = min(self.settings.sweep_per_pass, len(self._sweep))
        return {self._sweep.popleft() for _ in range(count)}

    def jobs_to_look_at(self, snap: Snapshot, inflight: Mapping[str, object],
                        due: set[str], changes: Changes, *, everything: bool = False
                        ) -> dict[str, Body]:
        """By key, in creation order: every job when ``everything``; else the changed ones
        (or whose Works changed), growing elastic ones and the ``due`` ones (uids); never
        one whose bind is being written."""
        if everything:
            candidates: list[Body] = list(snap.jobs.values())
        else:
            found = {key: body for key in changes.jobs if (body := snap.jobs.get(key))}
            for uid in (*changes.work_jobs, *self._growing, *due):
                body = snap.job_of(uid)
                if body is not None:
                    found[Cache.key(body)] = body
            candidates = list(found.values())
        jobs: dict[str, Body] = {}
        skipped: set[tuple[str, str, str]] = set()
        for job in sorted(candidates, key=creation_order):
            if job["metadata"]["uid"] in inflight:
                skipped.add(Cache.key(job))  # its bind is being written; the next pass sees it
                continue
            jobs[JobKey.of_body(job)] = job
        if skipped:
            self.cache.mark_changed(skipped)
        return jobs

    def pass_view(self, snap: Snapshot, now: datetime, clusters: Sequence[ClusterView],
                  inflight: Mapping[str, Mapping[str, list[Resources]]], jobs: list[Body],
                  changes: Changes | None = None, carried: Carried | None = None,
                  context: Context | None = None, stamp: str | None = None) -> PassView:
        """The planner's view of ``jobs``, the ones to look at this pass, and of the waiting
        ones ``carried`` brings (its time as text ``stamp``, by default the clock's to the
        microsecond: the admission stamp, by which a reclaim takes the most recently admitted
        job first, as Kueue does; whole seconds made most of a busy hub's admissions tie, and
        the tie went by name, so a job about to finish was taken as often as one just bound)."""
        assumed: dict[str, list[Resources]] = {}
        for spent in inflight.values():  # decided, Works not yet in the cache
            for cluster, requests in spent.items():
                assumed.setdefault(cluster, []).extend(requests)
        return self.views.build(
            snap, now, stamp or clock.text(micro=True, at=now), changes or Changes(), jobs,
            clusters, assumed,
            lambda job, exc: self.writer.failures.failed(JobKey.of_body(job),
                                                         "job skipped this pass", exc),
            carried or Carried(), context, self.writer.inflight_holdings(),
            self.writer.reclaiming())

    def mirror(self, view: PassView, ctx: PassContext) -> None:
        """Bound jobs looked at: their Works' reports into their status, their spec changes
        into their Works (:mod:`fleet.hub.status_mirror` says what to write; the writer
        writes it). Each job's writes go off the pass, side by side with other jobs' (the
        pass waiting for them took seconds once the API server was busy, and held every
        decision behind it); a job whose writes have not landed is left to a later pass."""
        self.mirrors_landed(view.now)
        stamp = now_text()
        for job_view in view.jobs:
            if job_view.stage is not Stage.BOUND or self.writer.writing_to(job_view.uid):
                continue
            job = ctx.looked[job_view.key]
            if self.writer.outdated(job):
                continue  # a write of ours landed since the snapshot: the next pass sees it
            works = ctx.snap.works_of(job_view.uid)
            # What the mirror reads: unchanged since it last ran without error, it would
            # find nothing to write (a job looked at for its timer, say).
            versions = (job["metadata"].get("resourceVersion"),
                        tuple(wk["metadata"].get("resourceVersion") for wk in works))
            if self._mirrored.get(job_view.uid) == versions:
                continue
            mirrored = mirror(job, adapter_for(job["apiVersion"], job["kind"]), works, stamp,
                              ctx.now)
            if not mirrored.writes:
                self.mirrored(job_view.uid, versions, mirrored.settled, view.now)
                continue
            self._mirroring.append((job_view, versions, mirrored.settled, self.writer.off_pass(
                job, self.writer.carry_out, mirrored.writes)))

    def mirrors_landed(self, now: float) -> None:
        """What the writes of earlier passes' mirrors came to."""
        going = []
        for job_view, versions, settled, running in self._mirroring:
            if not running.done():
                going.append((job_view, versions, settled, running))
                continue
            try:
                running.result()
            except Exception as exc:
                self.writer.failures.failed(job_view.key, "job's mirror not written", exc)
                self._mirrored.pop(job_view.uid, None)
                self.look_again(job_view.uid, now + RETRY_SECONDS)
                continue
            self.mirrored(job_view.uid, versions, settled, now)
        self._mirroring = going

    def mirrored(self, uid: str, versions: tuple[object, ...], settled: bool, now: float
                 ) -> None:
        self._mirrored.pop(uid, None)
        if not settled:  # its first report is waited for a moment more
            self.look_again(uid, now + RETRY_SECONDS)
            return
        if len(self._mirrored) >= MAX_MIRRORED:
            self._mirrored.pop(next(iter(self._mirrored)))  # the longest unchanged
        self._mirrored[uid] = versions


def observe_plan(plan: Plan, seconds: float) -> None:
    """Decision metrics. Division time is the pass's planning time shared among the jobs it
    divided (the planner reads no clock)."""
    placed = len(plan.binds)
    unschedulable = sum(1 for why in plan.waits if why.reason == "Unschedulable")
    if placed:
        metrics.DECISIONS.labels("placed").inc(placed)
    if unschedulable:
        metrics.DECISIONS.labels("unschedulable").inc(unschedulable)
    for _ in range(placed + unschedulable):
        metrics.DECISION_SECONDS.observe(seconds / (placed + unschedulable))
    metrics.PENDING_JOBS.set(len(plan.waits))


def _grows(view: JobView) -> bool:
    """A bound elastic job below its max: every pass may grow it."""
    e = view.elastic
    return e is not None and view.stage is Stage.BOUND and view.demand is not None and \
        next((r.replicas for r in view.demand.roles if r.name == e.role), e.max) < e.max


def holdings_of(binds: Sequence[Bind]) -> dict[str, Holding]:
    """The quota each admitted bind takes (its job's, at the size it was bound)."""
    return {b.job: Holding(b.holds, b.admitted_at) for b in binds
            if b.admitted_at and b.holds is not None}
