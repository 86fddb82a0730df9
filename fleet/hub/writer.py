"""The hub's write step: the one owner of the hub's writes. It carries out a plan's intents
(:mod:`planner.intents`) and the writes the status mirror asks for (:mod:`fleet.hub.hub_writes`)
against the API server, through :class:`~fleet.hub.dispatch.Dispatcher`.

Every write is idempotent and guarded: a bind by the job's resourceVersion (two hubs never
bind one job), a status by the version it was computed from, a Work by its deterministic
name, all of them by the leader's term. A bind and its Works are written in the background
(:mod:`fleet.hub.binder`; deciding the next pass does not wait for them); until they are,
the job is "in flight": the next pass leaves it out and takes its capacity and quota as
assumed. The changes to placed jobs (:mod:`fleet.hub.moves`) are written in plan order
before the next pass; statuses (:mod:`fleet.hub.telling`) side by side at the end.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ParamSpec, TypeVar, cast

from fleet.clients.leases import NotLeading
from fleet.hub import stages
from fleet.hub.binder import Binder
from fleet.hub.cache import Body, Cache, Snapshot, resource_version
from fleet.hub.dispatch import Dispatcher
from fleet.hub.hub_writes import DeleteWork, HubWrite, ResizeWork, RewriteWork, Say, WriteStatus
from fleet.hub.job_views import work_key
from fleet.hub.moves import Moves
from fleet.hub.telling import Telling
from fleet.kinds import adapter_for
from fleet.kinds.base import InvalidJob, KindAdapter
from planner.intents import (
    Bind,
    Commit,
    Completed,
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
    RollBack,
    Shrink,
    Unbind,
    Wait,
)
from propagation.resources import Resources
from quota.engine import Holding

log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")
# The moves a busy queue makes pass after pass (reclaims, priority preemptions), written off
# the pass: written in it, a pass that preempted a few dozen jobs took seconds, and no job was
# placed meanwhile. (The rarer moves, failover and resizes among them, stay in the pass.)
OFF_PASS = (Requeue, Preempt, Unbind, RemoveWorks, Completed)


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
        elif isinstance(exc, NotLeading):
            log.info("%s %s: this replica no longer leads", what, key)
        else:
            log.exception("%s %s", what, key)


@dataclass
class Writer:
    cache: Cache
    dispatcher: Dispatcher
    workers: int = 16  # concurrent writers of binds (bind, Works), and again of moves
    # Jobs (by uid) whose bind is being written: what each spends per cluster, and the
    # quota it holds (the next pass counts both, as the cache does not have them yet).
    _inflight: dict[str, tuple[dict[str, list[Resources]], Holding | None]] = field(
        default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    failures: FailureLog = field(default_factory=FailureLog)

    def __post_init__(self) -> None:
        # Binds have writers of their own: behind a preemption's moves (a Work's removal
        # alone is two requests) a decided bind waited seconds for a writer, its quota
        # taken but idle.
        self._binds = ThreadPoolExecutor(self.workers, thread_name_prefix="bind")
        self._queued_binds = 0  # binds decided, not started
        self._bind_started = threading.Condition(self._lock)
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="dispatch")
        # The statuses passes write, side by side and off the pass: a pass that waited for
        # its statuses took seconds once the API server was busy, and every decision (a
        # finished job's quota going to the next) waited with it. The members' reports
        # mirrored (a finished job frees its quota) apart from the waiting statuses (most
        # of the writes in a busy queue, coalesced, and the first to wait): neither waits
        # behind the other, and binds have more writers than both.
        self._statuses = ThreadPoolExecutor(self.workers, thread_name_prefix="status")
        self._waits = ThreadPoolExecutor(self.workers // 4, thread_name_prefix="wait")
        # jobs (by uid) with a write off the pass under way, and that write
        self._under_way: dict[str, Future[object]] = {}
        self._reclaiming: set[str] = set()  # jobs (by key) whose reclaim is being written
        self.telling = Telling(self.cache, self.dispatcher)
        self.binder = Binder(self.cache, self.dispatcher, self.telling)
        self.moves = Moves(self.cache, self.dispatcher, self.telling, self.binder,
                           self.carry_out)

    def submit(self, write: Callable[P, object], *args: P.args, **kwargs: P.kwargs) -> None:
        """A write off the pass (the pass does not wait for it, nor see it fail)."""
        self._pool.submit(write, *args, **kwargs)

    # -- writes off the pass -------------------------------------------------------------
    def writing(self) -> bool:
        """Whether any write off the pass is under way."""
        with self._lock:
            return bool(self._under_way)

    def writing_to(self, uid: str) -> bool:
        """Whether a write of an earlier pass to the job (by uid) is under way."""
        with self._lock:
            return uid in self._under_way

    def off_pass(self, job: Body, write: Callable[P, T], *args: P.args, **kwargs: P.kwargs
                 ) -> Future[T]:
        """A write of ``job``'s statuses from its members' reports, which the pass does not
        wait for (:meth:`_off_pass`)."""
        return self._off_pass(self._statuses, [job], write, *args, **kwargs)

    def _off_pass(self, pool: ThreadPoolExecutor, jobs: Sequence[Body], write: Callable[P, T],
                  *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """``write`` to ``jobs`` on ``pool``, which the pass does not wait for. Until it
        lands no pass writes to them again (:meth:`writing_to`); then they are looked at
        again: what it wrote is in the cache (or comes by the watch), or, if it failed, the
        next pass decides anew."""
        uids = [str(job["metadata"].get("uid", "")) for job in jobs]
        keys = {Cache.key(job) for job in jobs}

        def landed(done: Future[T]) -> None:
            with self._lock:
                for uid in uids:
                    if self._under_way.get(uid) is done:
                        del self._under_way[uid]
            self.cache.mark_changed(keys)
            self.cache.poke()

        with self._lock:
            future = pool.submit(write, *args, **kwargs)
            for uid in uids:
                self._under_way[uid] = cast("Future[object]", future)
        future.add_done_callback(landed)
        return future

    def after_writes(self, job: Body) -> Body:
        """The job as the cache has it once a write under way to it has landed, when
        nothing but its status changed since it was decided on: a bind sent with the
        version it was decided on would be refused as a conflict, and decided again a pass
        later. Otherwise the job as it was decided on."""
        with self._lock:
            under_way = self._under_way.get(str(job["metadata"].get("uid", "")))
        if under_way is not None and not under_way.cancel():  # a waiting status not sent
            wait([under_way])  # yet is said no more; one under way lands first
        newer = self.cache.snapshot_job(Cache.key(job))
        if newer is None or resource_version(newer) <= resource_version(job) or \
                _but_status(newer) != _but_status(job):
            return job
        return newer

    def outdated(self, job: Body) -> bool:
        """Whether the cache has a newer version of the job than the pass decided on (a
        write of ours landed since)."""
        newer = self.cache.snapshot_job(Cache.key(job))
        return newer is not None and resource_version(newer) > resource_version(job)

    def changing(self, job: Body) -> bool:
        """Whether a write of ours to the job is under way or landed since the pass's
        snapshot: writing to it now would be refused (the version decided on is old), or
        preempt a job whose members just reported it finished. The next pass decides
        again."""
        return self.writing_to(str(job["metadata"].get("uid", ""))) or self.outdated(job)

    def inflight(self) -> dict[str, dict[str, list[Resources]]]:
        """Jobs (by uid) whose bind is being written, and what each spends per cluster."""
        with self._lock:
            return {uid: dict(spent) for uid, (spent, _) in self._inflight.items()}

    def inflight_holdings(self) -> list[Holding]:
        """The quota of the binds being written."""
        with self._lock:
            return [held for _, held in self._inflight.values() if held is not None]

    # -- a plan's intents -------------------------------------------------------------------
    def write(self, intents: Sequence[Intent], ctx: PassContext) -> None:
        """Carry out ``intents`` in order: binds, moves (:data:`OFF_PASS`) and waiting
        statuses off the pass, a job's moves in their order; one failing never stops the
        others."""
        moving: dict[str, list[Intent]] = {}
        # A reclaim's requeue lands before any later bind of the pass is sent: those binds
        # may spend the quota it frees. One that gave nothing back (its victim changed too
        # often to be marked, or the write failed) abandons them: the tree is never above
        # its max.
        reclaims: list[Future[bool]] = []
        for intent in intents:
            if isinstance(intent, QueueReport):
                continue  # (fleet.hub.reporting publishes the Queues)
            job = ctx.job(intent.job)
            if job is None:
                continue
            try:
                if isinstance(intent, Bind):
                    self.start_bind(intent, job, ctx, after=tuple(reclaims))
                elif isinstance(intent, Requeue):
                    reclaims.append(self._reclaim(intent, [*moving.pop(intent.job, []), intent],
                                                  job, ctx))
                elif isinstance(intent, OFF_PASS):
                    moving.setdefault(intent.job, []).append(intent)
                elif isinstance(intent, Wait):
                    self.tell_waiting(intent, job)
                else:
                    self.write_one(intent, job, ctx)
            except Exception as exc:
                self.failures.failed(intent.job, f"{type(intent).__name__} not written for",
                                     exc)
        for key, moves in moving.items():
            job = ctx.job(key)
            if job is not None:
                targets = _written_by(moves, job, ctx)
                if not any(map(self.changing, targets)):
                    self._off_pass(self._pool, targets, self._move, key, moves, job, ctx)

    def _reclaim(self, intent: Requeue, moves: Sequence[Intent], job: Body,
                 ctx: PassContext) -> Future[bool]:
        """A reclaim's requeue (and the job's moves before it), off the pass; until it
        lands, the job holds no quota in the passes' view (:meth:`reclaiming`). Its result:
        whether the victim's quota was given back."""
        with self._lock:
            self._reclaiming.add(intent.job)
        future = self._off_pass(self._pool, _written_by(moves, job, ctx), self._move,
                                intent.job, moves, job, ctx)

        def landed(_: Future[bool]) -> None:
            with self._lock:
                self._reclaiming.discard(intent.job)

        future.add_done_callback(landed)
        return future

    def reclaiming(self) -> frozenset[str]:
        """The jobs (keys) whose requeue for a reclaim is being written."""
        with self._lock:
            return frozenset(self._reclaiming)

    def tell_waiting(self, why: Wait, job: Body) -> None:
        if self.changing(job):
            return  # said again, if still needed, once the write under way has landed
        adapter = adapter_for(job["apiVersion"], job["kind"])
        status = self.telling.waiting_status(why, job, adapter)
        if status is not None:
            self._off_pass(self._waits, [job], self._told, why.job, job, adapter, status)

    def _move(self, key: str, moves: Sequence[Intent], job: Body, ctx: PassContext) -> bool:
        """Write a job's moves in order; whether all were written (a reclaim's requeue:
        and gave its quota back)."""
        for intent in moves:
            try:
                written = self.write_one(intent, job, ctx)
            except Exception as exc:
                self.failures.failed(key, f"{type(intent).__name__} not written for", exc)
                written = False
            if not written:
                return False  # the next in order may depend on it: the next pass decides
        return True

    def _told(self, key: str, job: Body, adapter: KindAdapter, status: Body) -> None:
        try:
            self.telling.write_status(job, adapter, status, "waiting")
        except Exception as exc:
            self.failures.failed(key, "Wait not written for", exc)

    def write_one(self, intent: Intent, job: Body, ctx: PassContext) -> bool:
        """Carry out one intent; False only for a reclaim's requeue that gave nothing back
        (:meth:`Moves.preempt`)."""
        adapter = adapter_for(job["apiVersion"], job["kind"])
        moves = self.moves
        match intent:
            case Dispatch():
                self.binder.complete_dispatch(intent, job, adapter, ctx.snap)
            case Commit():
                moves.commit(intent, job, ctx.works(job))
            case RollBack():
                moves.roll_back(intent, job, adapter)
            case Requeue():
                return moves.preempt(intent, job, adapter, ctx.job(intent.claimant))
            case Preempt():
                moves.preempt_for(intent, job, ctx.job)
            case Grow() | Shrink():
                moves.resize(intent, job, adapter, ctx.snap)
            case FailOver():
                moves.fail_over(intent, job, adapter, ctx.works(job))
            case RemoveWorks():
                moves.remove_works(intent, ctx.works(job), job, adapter)
            case Unbind():
                moves.unbind(intent, job, adapter)
            case Completed():  # the Works gone after saying so have the last word too
                ended = ctx.snap.ended_of(job["metadata"]["uid"])
                moves.completed(intent, job, adapter,
                                {**{work_key(wk): wk for wk in ended}, **ctx.works(job)})
            case Release():
                self.dispatcher.release(job, adapter)
            case Expire():
                log.info("deleting %s: %s", intent.job, intent.reason)
                self.dispatcher.delete_job(job, adapter)
        return True

    def start_bind(self, bind: Bind, job: Body, ctx: PassContext,
                   after: Sequence[Future[bool]] = ()) -> None:
        """Write the bind in the background, once the reclaims ``after`` have landed; not
        at all when one of them did not."""
        spent: dict[str, list[Resources]] = {}
        for cluster, requests in bind.spent:
            spent.setdefault(cluster, []).extend(requests)
        with self._lock:
            self._inflight[job["metadata"]["uid"]] = (spent, ctx.holdings.get(bind.job))
            self._queued_binds += 1
        stages.CLOCK.decided(job["metadata"]["uid"])
        self._binds.submit(self._bind, bind, job, ctx.snap, after)

    def binds_queued(self, below: int, timeout: float) -> None:
        """Wait (``timeout`` seconds at most) until fewer than ``below`` decided binds wait
        for a writer. A pass deciding more while earlier binds still wait decides on a
        state older than its binds will land in, and takes the interpreter from the
        writers that would land them."""
        with self._bind_started:
            self._bind_started.wait_for(lambda: self._queued_binds < below, timeout)

    def _bind(self, bind: Bind, job: Body, snap: Snapshot,
              after: Sequence[Future[bool]] = ()) -> None:
        with self._bind_started:
            self._queued_binds -= 1
            self._bind_started.notify_all()
        try:
            wait(after)
            if not all(reclaim.result() for reclaim in after):
                log.info("bind of %s abandoned: a reclaim it may spend did not land", bind.job)
                return
            self.binder.bind(bind, self.after_writes(job), snap)
        except NotLeading:
            log.info("bind of %s abandoned: this replica no longer leads", bind.job)
        except Exception:
            log.exception("writing the decision for %s failed", bind.job)
        finally:
            with self._lock:
                self._inflight.pop(job["metadata"]["uid"], None)
            # looked at again next pass, whatever happened (a bind not written waits again)
            self.cache.mark_changed({Cache.key(job)})
            self.cache.poke()

    # -- what the status mirror asks for ----------------------------------------------------
    def carry_out(self, writes: Sequence[HubWrite]) -> None:
        """Write ``writes`` in order (one object's writes in the order they came)."""
        for write in writes:
            self.carry_out_one(write)

    def carry_out_one(self, write: HubWrite) -> None:
        dispatcher, cache = self.dispatcher, self.cache
        match write:
            case WriteStatus():
                adapter = adapter_for(write.job["apiVersion"], write.job["kind"])
                self.telling.write_status(dict(write.job), adapter, write.status, "reported")
            case RewriteWork():
                written = dispatcher.update_work(write.work, dict(write.manifest),
                                                 write.generation)
                if written is not None:
                    cache.upsert("works", written)
            case ResizeWork():
                written = dispatcher.resize_work(write.work, dict(write.manifest),
                                                 write.share, write.when)
                if written is not None:
                    cache.upsert("works", written)
            case DeleteWork():
                dispatcher.delete_work(write.work)
            case Say():
                dispatcher.event(write.obj, write.reason, write.message, write.kind)


def _written_by(moves: Sequence[Intent], job: Body, ctx: PassContext) -> list[Body]:
    """The jobs a job's moves write to: a preemption's victims (its preemptor only hears an
    event: the waiting status it is told meanwhile must not hold the preemption back), the
    job itself for the others."""
    out: dict[str, Body] = {}
    for move in moves:
        if isinstance(move, Preempt):
            out.update((k, v) for k, _ in move.victims if (v := ctx.job(k)) is not None)
        else:
            out[str(job["metadata"].get("uid", ""))] = job
    return list(out.values())


def _but_status(job: Mapping[str, Any]) -> dict[str, Any]:
    """The job but its status and resourceVersion (what a status write changes)."""
    out = {k: v for k, v in job.items() if k != "status"}
    out["metadata"] = {k: v for k, v in (job.get("metadata") or {}).items()
                       if k != "resourceVersion"}
    return out

