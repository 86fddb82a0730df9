"""What the hub tells of a job on the job itself: its status while it waits, coalesced
(:mod:`fleet.hub.coalescing`), and every status it writes (written back into the cache, so
the next pass reads what it wrote)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from fleet import metrics
from fleet.hub import coalescing, reservations
from fleet.hub import preemption_views as pv
from fleet.hub.cache import Body, Cache, resource_version
from fleet.hub.dispatch import Dispatcher, now_text
from fleet.kinds.base import KindAdapter
from planner.backfill import KEPT_BACK, RESERVED
from planner.intents import Wait

WAITING = "Waiting"  # the event of a job whose kind carries no fleet conditions
# What a job status the hub writes says, as fleet_job_status_writes_total counts it
Why = Literal["waiting", "reported", "requeued"]
for _why in get_args(Why):  # each shown from the start, at 0
    metrics.JOB_STATUS_WRITES.labels(_why)


@dataclass
class Telling:
    cache: Cache
    dispatcher: Dispatcher

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
        if adapter.fleet_conditions:  # a rollback is said until the job is placed again
            status = reservations.with_condition(status, reservations.kept(job.get("status")))
        elif queue.get("reason") != why.reason:
            self.waiting_event(job, adapter, why.reason, why.message)
        status["queue"] = shown
        if why.reason in (RESERVED, KEPT_BACK) and queue.get("reason") != why.reason:
            self.dispatcher.event(job, why.reason, why.message)  # once as it starts
        return status

    def waiting_event(self, job: Body, adapter: KindAdapter, reason: str, message: str) -> None:
        """An event saying why a job waits, for a kind with no fleet conditions: its clients
        (Trainer's SDK) read only its own conditions, so a condition would mislead them."""
        if not adapter.fleet_conditions:
            self.dispatcher.event(job, WAITING, f"{reason}: {message}")

    def write_status(self, job: Body, adapter: KindAdapter, status: Mapping[str, Any],
                     why: Why) -> None:
        """Write ``status`` (counted by ``why``: a label of fleet_job_status_writes_total) if
        it changes the job's."""
        written = self.dispatcher.write_status(job, adapter, status)
        if written is None:
            return
        self.cache.upsert("jobs", written)
        if resource_version(written) != resource_version(job):
            metrics.JOB_STATUS_WRITES.labels(why).inc()
