"""The hub's write step: carrying out a plan's intents against the API server.

Every write is idempotent and guarded: a bind by the job's resourceVersion (two hubs never
bind one job), a status by the version it was computed from, a Work by its deterministic
name. A bind and its Works are written in the background (deciding the next pass does not
wait for them); until they are, the job is "in flight": the next pass leaves it out and
takes its capacity as assumed. Everything else is written in plan order before the next pass.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar

from fleet import metrics
from fleet.api import protocol as p
from fleet.hub import coalescing, reservations, stages
from fleet.hub import elastic as el
from fleet.hub import preemption_views as pv
from fleet.hub import queueing as q
from fleet.hub import works as w
from fleet.hub.cache import Body, Cache, Snapshot
from fleet.hub.dispatch import Dispatcher, now_text
from fleet.hub.job_views import work_key
from fleet.hub.mirror import follow_resize
from fleet.hub.pass_view import leaf_queue_names
from fleet.hub.views import parse_time
from fleet.kinds import adapter_for
from fleet.kinds.base import InvalidJob, KindAdapter
from planner.backfill import KEPT_BACK, RESERVED
from planner.intents import (
    Bind,
    Commit,
    Dispatch,
    Expire,
    FailOver,
    Grow,
    Intent,
    Preempt,
    QueueReport,
    Release,
    RemoveWorks,
    Requeue,
    Resize,
    RollBack,
    Shrink,
    Unbind,
    Wait,
)
from propagation.jobkey import JobKey
from propagation.resources import Resources
from quota.engine import Holding

log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")
ROLLED_BACK = "reservation rolled back"  # how a rolled-back job's requeue reason starts


@dataclass(frozen=True)
class PassContext:
    """What one pass's writes read: its snapshot, its time, and the jobs it looked at."""

    snap: Snapshot
    now: datetime
    looked: Mapping[str, Body]  # the jobs of the pass's view, by key
    # The quota each admitted bind takes, by job key: held while its bind is written.
    holdings: Mapping[str, Holding] = field(default_factory=dict)

    def job(self, key: str) -> Body | None:
        """A job of the snapshot (one the pass did not look at: a waiting job it carried, a
        preemption's victim)."""
        return self.looked.get(key) or self.snap.job_named(key)

    def works(self, job: Body) -> dict[str, Body]:
        uid = job["metadata"]["uid"]
        return {work_key(wk): wk for wk in (*self.snap.works_of(uid),
                                            *self.snap.evicting_of(uid))}


@dataclass
class FailureLog:
    """Log a job's failure with its traceback once, not on every pass: a job that cannot be
    handled stays skipped, and the log says so again only when the error changes."""

    _said: dict[str, str] = field(default_factory=dict)  # job key -> the error last logged

    def failed(self, key: str, what: str, exc: Exception) -> None:
        text = f"{type(exc).__name__}: {exc}"[:500]
        if self._said.get(key) == text:
            log.debug("%s %s: %s", what, key, text)
            return
        if len(self._said) >= 10_000:  # bounded: forget the oldest
            self._said.pop(next(iter(self._said)))
        self._said[key] = text
        if isinstance(exc, InvalidJob):
            log.warning("%s %s: %s", what, key, text)
        else:
            log.exception("%s %s", what, key)


@dataclass
class Writer:
    cache: Cache
    dispatcher: Dispatcher
    workers: int = 16  # concurrent bind writers (bind, Works, events, status)
    # Jobs (by uid) whose bind is being written: what each spends per cluster, and the
    # quota it holds (the next pass counts both, as the cache does not have them yet).
    _inflight: dict[str, tuple[dict[str, list[Resources]], Holding | None]] = field(
        default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    failures: FailureLog = field(default_factory=FailureLog)

    def __post_init__(self) -> None:
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="dispatch")
        # The statuses of one pass (waits, and the members' reports mirrored), written side
        # by side (each job's own object) and all of them before the pass goes on: a
        # thousand in a row held a pass for seconds.
        self._statuses = ThreadPoolExecutor(self.workers, thread_name_prefix="status")

    def submit(self, write: Callable[P, object], *args: P.args, **kwargs: P.kwargs) -> None:
        """A write off the pass (the pass does not wait for it, nor see it fail)."""
        self._pool.submit(write, *args, **kwargs)

    def side_by_side(self, write: Callable[P, T], *args: P.args, **kwargs: P.kwargs
                     ) -> Future[T]:
        """A write of the pass beside its others (the pass waits for its result)."""
        return self._statuses.submit(write, *args, **kwargs)

    def inflight(self) -> dict[str, dict[str, list[Resources]]]:
        """Jobs (by uid) whose bind is being written, and what each spends per cluster."""
        with self._lock:
            return {uid: dict(spent) for uid, (spent, _) in self._inflight.items()}

    def inflight_holdings(self) -> list[Holding]:
        """The quota of the binds being written."""
        with self._lock:
            return [held for _, held in self._inflight.values() if held is not None]

    def write(self, intents: Sequence[Intent], ctx: PassContext) -> None:
        """Carry out ``intents`` in order, the waiting statuses (the plan's last intents,
        one per job) side by side at the end; one failing never stops the others."""
        statuses = []
        for intent in intents:
            job = ctx.job(intent.job) if not isinstance(intent, QueueReport) else None
            try:
                if isinstance(intent, QueueReport):
                    continue  # (fleet.hub.reporting publishes the Queues)
                if job is None:
                    continue
                elif isinstance(intent, Bind):
                    self.start_bind(intent, job, ctx)
                elif isinstance(intent, Wait):
                    adapter = adapter_for(job["apiVersion"], job["kind"])
                    status = self.waiting_status(intent, job, adapter)
                    if status is not None:
                        statuses.append((intent, self.side_by_side(
                            self.write_status, job, adapter, status)))
                else:
                    self.write_one(intent, job, ctx)
            except Exception as exc:
                key = "" if isinstance(intent, QueueReport) else intent.job
                self.failures.failed(key, f"{type(intent).__name__} not written for", exc)
        for wait, written in statuses:
            try:
                written.result()
            except Exception as exc:
                self.failures.failed(wait.job, "Wait not written for", exc)

    def write_one(self, intent: Intent, job: Body, ctx: PassContext) -> None:
        adapter = adapter_for(job["apiVersion"], job["kind"])
        match intent:
            case Dispatch():
                self.complete_dispatch(intent, job, adapter, ctx.snap)
            case Commit():
                self.commit(intent, job, ctx)
            case RollBack():
                self.roll_back(intent, job, adapter)
            case Wait():
                self.show_waiting(intent, job, adapter)
            case Requeue():
                self.preempt(intent, job, adapter, ctx)
            case Preempt():
                self.preempt_for(intent, job, ctx)
            case Grow() | Shrink():
                self.resize(intent, job, adapter, ctx)
            case FailOver():
                self.fail_over(intent, job, adapter, ctx)
            case RemoveWorks():
                self.remove_works(intent, ctx.works(job))
            case Unbind():
                # a job that ran (not a reservation rolled back before it could) starts its
                # queue's starvation count again
                again = {} if intent.reason.startswith(ROLLED_BACK) \
                    else {p.REQUEUED_AT: now_text()}
                unbound = self.dispatcher.unbind(job, adapter, again)
                if unbound is not None:
                    self.cache.upsert("jobs", unbound)
                    preempted = w.PREEMPTED_BY in (job["metadata"].get("annotations") or {})
                    status = pv.with_preempted(
                        adapter.waiting_status(None, "Preempted" if preempted else "Requeued",
                                               intent.reason, now_text()),
                        unbound, now_text())
                    if intent.reason.startswith(ROLLED_BACK):
                        status = reservations.with_condition(status, reservations.rolled_back(
                            intent.reason, now_text(), job.get("status")))
                    self.write_status(unbound, adapter, status)
            case Release():
                self.dispatcher.release(job, adapter)
            case Expire():
                log.info("deleting %s: %s", intent.job, intent.reason)
                self.dispatcher.delete_job(job, adapter)

    # -- binding ------------------------------------------------------------------------
    def start_bind(self, bind: Bind, job: Body, ctx: PassContext) -> None:
        spent: dict[str, list[Resources]] = {}
        for cluster, requests in bind.spent:
            spent.setdefault(cluster, []).extend(requests)
        with self._lock:
            self._inflight[job["metadata"]["uid"]] = (spent, ctx.holdings.get(bind.job))
        stages.CLOCK.decided(job["metadata"]["uid"])
        self._pool.submit(self.bind, bind, job, ctx)

    def bind(self, bind: Bind, job: Body, ctx: PassContext) -> None:
        """Bind, create every Work (or roll back), then tell: events and status."""
        meta = job["metadata"]
        adapter = adapter_for(job["apiVersion"], job["kind"])
        try:
            failed_over = parse_time((meta.get("annotations") or {}).get(w.FAILOVER_SINCE))
            extra: dict[str, str | None] = {
                q.ADMITTED_AT: bind.admitted_at or None,
                p.ADMITTED_BY: bind.admitted_by or None,
                w.PURGE_MODE: bind.purge_mode or None,
                w.FAILOVER_SINCE: None,
                w.FAILOVER_AVOID: None,
                w.PREEMPTED_BY: None,
                p.REQUEUED_AT: None,
                w.RESIZED: el.resized_mark("Sized", bind.sized, now_text()) if bind.sized
                else None,
                p.RESERVED_PLACEMENT: "true" if bind.reserve else None,
                p.RESERVE_RETRY_AT: None,
                p.TENANT: bind.tenant or None,
            }
            shares = w.placement_dicts(bind.shares)
            bound = self.dispatcher.bind(job, adapter, w.encode_placement(bind.shares),
                                         list(bind.clusters), extra)
            if bound is None:
                return  # changed under us; the next pass sees the new version
            self.cache.upsert("jobs", bound)
            if failed_over is not None:
                metrics.FAILOVER_SECONDS.observe((ctx.now - failed_over).total_seconds())
            bound_at = time.time()
            try:
                deps = self.dependencies(bound, adapter, ctx.snap, bind.propagate_deps)
                phase = p.PHASE_RESERVE if bind.reserve else ""
                created = self.dispatcher.create_works(
                    [w.work_body(bound, adapter, share, shares, deps, phase) for share in shares])
            except Exception:
                metrics.DISPATCH_ERRORS.inc()
                log.exception("dispatch of %s failed; rolled back", bind.job)
                self.dispatcher.unbind(bound, adapter)
                return
            for work in created:
                self.cache.upsert("works", work)
            if failed_over is None:  # a failover is timed by fleet_failover_seconds
                tree = q.active_tree(ctx.snap)
                names = leaf_queue_names(tree[1]) if tree else {}
                stages.CLOCK.dispatched(meta, bind.admitted_at or None, bound_at, time.time(),
                                        names.get(bind.admitted_by, ""))
            if bind.admitted_by:  # (said by the job's Admitted condition: no event of its own)
                metrics.ADMISSIONS.inc()
            if bind.sized:
                self.dispatcher.event(bound, "Resized", bind.sized)
            self.dispatcher.event(bound, "ScheduleBindingSucceed", bind.reason)
            if bind.backfill:
                metrics.DECISIONS.labels("backfilled").inc()
                self.dispatcher.event(bound, "Backfilled", bind.backfill)
            if bind.reserve:
                metrics.RESERVATIONS.labels("reserving").inc()
                self.dispatcher.event(bound, p.RESERVING, "reserving the nodes of every share "
                                      "before any pod starts: " + ", ".join(bind.clusters))
            if bound.get("status"):  # it said it waits: say at once that it no longer does
                self.write_status(bound, adapter, q.with_admitted(adapter.bound_status(
                    bound.get("status"), list(bind.clusters), bind.reason, now_text()), bound))
            # else its first status comes from its members' first report (the mirror)
            log.info("bound %s/%s: %s", meta["namespace"], meta["name"], bind.reason)
        except Exception:
            log.exception("writing the decision for %s failed", bind.job)
        finally:
            with self._lock:
                self._inflight.pop(meta["uid"], None)
            # looked at again next pass, whatever happened (a bind not written waits again)
            self.cache.mark_changed({Cache.key(job)})
            self.cache.poke()

    def dependencies(self, job: Body, adapter: KindAdapter, snap: Snapshot,
                     propagate_deps: bool) -> list[Body]:
        """What the job's Works carry after it: the PriorityClasses it names, always (a
        member without them refuses its pods), then with propagateDeps what it references."""
        classes = q.priority_class_manifests(job, snap)
        if not propagate_deps:
            return classes
        return [*classes, *self.dispatcher.dependencies(job, adapter)]

    def complete_dispatch(self, intent: Dispatch, job: Body, adapter: KindAdapter,
                          snap: Snapshot) -> None:
        """Roll forward: the Works of a recorded placement that are missing."""
        placement = w.decode_placement(job)
        log.info("completing dispatch of %s to %s", intent.job, list(intent.clusters))
        deps = self.dependencies(job, adapter, snap, intent.propagate_deps)
        phase = w.dispatch_phase(job, snap.works_of(job["metadata"]["uid"]))
        for work in self.dispatcher.create_works(
                [w.work_body(job, adapter, s, placement, deps, phase) for s in placement
                 if s["cluster"] in intent.clusters]):
            self.cache.upsert("works", work)

    # -- reservations: the second phase --------------------------------------------------
    def commit(self, intent: Commit, job: Body, ctx: PassContext) -> None:
        """Every member holds its share: its Works move to phase Commit (the pods start)."""
        works = ctx.works(job)
        for name in intent.works:
            if name in works:
                committed = self.dispatcher.commit_work(works[name])
                if committed is not None:
                    self.cache.upsert("works", committed)
        metrics.RESERVATIONS.labels("committed").inc()
        self.dispatcher.event(job, "Committed", intent.reason)
        log.info("committed %s: %s", intent.job, intent.reason)

    def roll_back(self, intent: RollBack, job: Body, adapter: KindAdapter) -> None:
        """A member refused or did not confirm: the job goes back to waiting (its Works and
        their placeholders go), to be placed again after ``intent.retry_at``."""
        reason = f"{ROLLED_BACK}: {intent.reason}"
        if not self.dispatcher.mark_requeue(job, adapter, reason,
                                            {p.RESERVE_RETRY_AT: f"{intent.retry_at:.3f}"}):
            return
        metrics.RESERVATIONS.labels("rolled_back").inc()
        self.dispatcher.event(job, "RolledBack", intent.reason, "Warning")
        log.info("rolled back %s: %s", intent.job, intent.reason)

    # -- moving and removing ------------------------------------------------------------
    def preempt(self, intent: Requeue, victim: Body, adapter: KindAdapter,
                ctx: PassContext) -> None:
        if not self.dispatcher.mark_requeue(victim, adapter, intent.reason):
            return
        metrics.PREEMPTIONS.labels("reclaim").inc()
        self.dispatcher.event(victim, "Preempted", intent.reason, "Warning")
        claimant = ctx.job(intent.claimant)
        if claimant is not None:
            self.dispatcher.event(claimant, "Reclaimed",
                                  f"preempted {JobKey(intent.job).display} to reclaim quota")
        log.info("preempted %s for %s", intent.job, intent.claimant)

    def preempt_for(self, intent: Preempt, preemptor: Body, ctx: PassContext) -> None:
        """Priority preemption (or a guarantee taking nodes back): each victim goes back to
        its queue, marked preempted by ``intent.job`` (cleared when it is bound again)."""
        for key, reason in intent.victims:
            victim = ctx.job(key)
            if victim is None:
                continue
            adapter = adapter_for(victim["apiVersion"], victim["kind"])
            if self.dispatcher.mark_requeue(victim, adapter, reason,
                                            {w.PREEMPTED_BY: intent.job}):
                metrics.PREEMPTIONS.labels(intent.kind).inc()
                self.dispatcher.event(victim, "Preempted", reason, "Warning")
                log.info("preempted %s for %s", key, intent.job)
        self.dispatcher.event(preemptor, "Preempting", intent.reason)

    def resize(self, intent: Resize, job: Body, adapter: KindAdapter, ctx: PassContext) -> None:
        """An elastic job grown or shrunk in place: its placement (same generation), then
        the Works of the clusters whose share changed; an event and its Resized condition
        say so; a member it grows onto gets its Work now. A Work not rewritten (or created)
        now is by the status mirror (``follow_resize``), or the next pass (``Dispatch``)."""
        grown = intent.grown
        now = now_text()
        resized = self.dispatcher.resize(
            job, adapter, w.encode_placement(intent.shares), [s.cluster for s in intent.shares],
            el.resized_mark("Grown" if grown else "Shrunk", intent.reason, now))
        if resized is None:
            return  # changed under us; the next pass decides again
        self.cache.upsert("jobs", resized)
        works = [wk for wk in ctx.snap.works_of(job["metadata"]["uid"])
                 if wk["spec"]["placement"]["cluster"] in intent.changed]
        follow_resize(self.dispatcher, self.cache, resized, adapter,
                      w.placement_dicts(intent.shares), works, now)
        have = {wk["spec"]["placement"]["cluster"] for wk in works}
        new = tuple(c for c in intent.changed if c not in have)
        if isinstance(intent, Grow) and new:  # grown onto a member it did not use
            self.complete_dispatch(Dispatch(intent.job, new, intent.propagate_deps), resized,
                                   adapter, ctx.snap)
        metrics.RESIZES.labels("grow" if grown else "shrink").inc()
        self.dispatcher.event(resized, "Resized", intent.reason)
        if isinstance(intent, Shrink):
            metrics.PREEMPTIONS.labels("shrink").inc()
        log.info("resized %s: %s", intent.job, intent.reason)

    def fail_over(self, intent: FailOver, job: Body, adapter: KindAdapter,
                  ctx: PassContext) -> None:
        metrics.FAILOVERS.labels("cluster_lost" if intent.lost_clusters
                                 else "unschedulable").inc()
        started = datetime.fromtimestamp(intent.since, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        self.dispatcher.event(job, "FailedOver", intent.reason, "Warning")
        marks = {w.FAILOVER_SINCE: started, w.FAILOVER_AVOID: ",".join(intent.avoid)}
        log.info("failing over %s: %s", intent.job, intent.reason)
        works = ctx.works(job)
        mine = [works[name] for name in intent.works if name in works]
        if intent.evict_after is not None:  # Graciously
            deadline = datetime.fromtimestamp(intent.evict_after, UTC).strftime(
                "%Y-%m-%dT%H:%M:%SZ")
            for work in mine:
                self.dispatcher.evict(work, deadline)
            unbound = self.dispatcher.unbind(job, adapter, marks)
            if unbound is not None:
                self.cache.upsert("jobs", unbound)
            return
        for work in mine:
            self.dispatcher.set_purge_mode(work, intent.purge_mode)
        self.dispatcher.mark_requeue(job, adapter, f"failed over: {intent.reason}", marks)

    def remove_works(self, intent: RemoveWorks, works: Mapping[str, Body]) -> None:
        """Purge-mode overrides first, then each Work: a lost member's agent cannot release
        it, so the hub drops its finalizer; then it is deleted unless already going."""
        found = [(r, works[r.work]) for r in intent.works if r.work in works]
        for removal, work in found:
            if removal.purge_now:
                self.dispatcher.set_purge_mode(work, "Immediately")
        for removal, work in found:
            if removal.drop_agent_finalizer:
                self.dispatcher.drop_agent_finalizer(work)
            if removal.delete:
                self.dispatcher.delete_work(work)

    # -- telling ------------------------------------------------------------------------
    def show_waiting(self, why: Wait, job: Body, adapter: KindAdapter) -> None:
        status = self.waiting_status(why, job, adapter)
        if status is not None:
            self.write_status(job, adapter, status)

    def waiting_status(self, why: Wait, job: Body, adapter: KindAdapter) -> Body | None:
        """The job's status saying why it waits; None when the one it shows will do."""
        queue = (job.get("status") or {}).get("queue") or {}
        shown: dict[str, str | int] = {"reason": why.reason, "message": why.message}
        if why.queue:
            shown |= {"name": why.queue, "position": why.position}
        if not coalescing.needs_write(queue, shown):
            return None
        status = pv.with_preempted(adapter.waiting_status(
            job.get("status"), why.reason, why.message, now_text()), job, now_text())
        # a rollback is said until the job is placed again
        status = reservations.with_condition(status, reservations.kept(job.get("status")))
        status["queue"] = shown
        if why.reason in (RESERVED, KEPT_BACK) and queue.get("reason") != why.reason:
            self.dispatcher.event(job, why.reason, why.message)  # once as it starts
        return status

    def write_status(self, job: Body, adapter: KindAdapter, status: Mapping[str, Any]) -> None:
        written = self.dispatcher.write_status(job, adapter, status)
        if written is not None:
            self.cache.upsert("jobs", written)
