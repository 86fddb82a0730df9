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
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from fleet.clients.leases import NotLeading
from fleet.hub import stages
from fleet.hub.binder import Binder
from fleet.hub.cache import Body, Cache, Snapshot
from fleet.hub.dispatch import Dispatcher
from fleet.hub.hub_writes import DeleteWork, HubWrite, ResizeWork, RewriteWork, Say, WriteStatus
from fleet.hub.job_views import work_key
from fleet.hub.moves import Moves
from fleet.hub.telling import Telling
from fleet.kinds import adapter_for
from fleet.kinds.base import InvalidJob
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
        self.telling = Telling(self.cache, self.dispatcher)
        self.binder = Binder(self.cache, self.dispatcher, self.telling)
        self.moves = Moves(self.cache, self.dispatcher, self.telling, self.binder,
                           self.carry_out)

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

    # -- a plan's intents -------------------------------------------------------------------
    def write(self, intents: Sequence[Intent], ctx: PassContext) -> None:
        """Carry out ``intents`` in order, the waiting statuses (the plan's last intents,
        one per job) side by side at the end; one failing never stops the others."""
        statuses = []
        for intent in intents:
            if isinstance(intent, QueueReport):
                continue  # (fleet.hub.reporting publishes the Queues)
            job = ctx.job(intent.job)
            if job is None:
                continue
            try:
                if isinstance(intent, Bind):
                    self.start_bind(intent, job, ctx)
                elif isinstance(intent, Wait):
                    adapter = adapter_for(job["apiVersion"], job["kind"])
                    status = self.telling.waiting_status(intent, job, adapter)
                    if status is not None:
                        statuses.append((intent.job, self.side_by_side(
                            self.telling.write_status, job, adapter, status)))
                else:
                    self.write_one(intent, job, ctx)
            except Exception as exc:
                self.failures.failed(intent.job, f"{type(intent).__name__} not written for",
                                     exc)
        self.wait_for(statuses, "Wait not written for")

    def write_one(self, intent: Intent, job: Body, ctx: PassContext) -> None:
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
                moves.preempt(intent, job, adapter, ctx.job(intent.claimant))
            case Preempt():
                moves.preempt_for(intent, job, ctx.job)
            case Grow() | Shrink():
                moves.resize(intent, job, adapter, ctx.snap)
            case FailOver():
                moves.fail_over(intent, job, adapter, ctx.works(job))
            case RemoveWorks():
                moves.remove_works(intent, ctx.works(job))
            case Unbind():
                moves.unbind(intent, job, adapter)
            case Release():
                self.dispatcher.release(job, adapter)
            case Expire():
                log.info("deleting %s: %s", intent.job, intent.reason)
                self.dispatcher.delete_job(job, adapter)

    def start_bind(self, bind: Bind, job: Body, ctx: PassContext) -> None:
        spent: dict[str, list[Resources]] = {}
        for cluster, requests in bind.spent:
            spent.setdefault(cluster, []).extend(requests)
        with self._lock:
            self._inflight[job["metadata"]["uid"]] = (spent, ctx.holdings.get(bind.job))
        stages.CLOCK.decided(job["metadata"]["uid"])
        self._pool.submit(self._bind, bind, job, ctx.snap)

    def _bind(self, bind: Bind, job: Body, snap: Snapshot) -> None:
        try:
            self.binder.bind(bind, job, snap)
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
                self.telling.write_status(dict(write.job), adapter, write.status)
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

    def wait_for(self, written: Sequence[tuple[str, Future[Any]]], what: str) -> None:
        """The pass waits for its side-by-side writes; one failing is logged, not raised."""
        for key, future in written:
            try:
                future.result()
            except Exception as exc:
                self.failures.failed(key, what, exc)
