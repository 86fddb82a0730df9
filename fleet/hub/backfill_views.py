"""From the hub's snapshot to what backfill reads: each job's known runtime, and the running
jobs whose end is known (:class:`planner.view.TimedJob`).

A job's runtime is the smaller of its ``runPolicy.activeDeadlineSeconds`` (the member stops
it then) and its ``fleet.sh/expected-runtime`` annotation (the user's word). A running job
started when its members first reported it running (the hub job's ``startTime``), else when
it was bound (its Created condition): a stable time, so a reservation computed from it does
not move from one pass to the next.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleet.api.protocol import PLACEMENT, REQUEUE, expected_runtime
from fleet.hub.cache import Snapshot
from fleet.hub.preemption_views import pods_of
from fleet.hub.queueing import job_key
from fleet.hub.views import parse_time
from fleet.kinds import adapter_for
from fleet.kinds.base import InvalidJob, KindAdapter
from planner.view import TimedJob


def runtime_of(job: Mapping[str, Any], adapter: KindAdapter) -> int | None:
    """The job's known runtime in seconds, None when unknown. Raises InvalidJob naming the
    field when the deadline or the annotation is malformed or beyond its bound."""
    deadline = adapter.active_deadline(job)
    try:
        declared = expected_runtime(job["metadata"])
    except ValueError as exc:
        raise InvalidJob(str(exc)) from None
    known = [s for s in (deadline, declared) if s is not None]
    return min(known) if known else None


def started_at(job: Mapping[str, Any]) -> float | None:
    status = job.get("status") or {}
    when = parse_time(status.get("startTime"))
    if when is None:
        created = next((c for c in status.get("conditions") or []
                        if c.get("type") == "Created" and c.get("status") == "True"), None)
        when = parse_time((created or {}).get("lastTransitionTime"))
    if when is None:
        when = parse_time(job["metadata"].get("creationTimestamp"))
    return when.timestamp() if when is not None else None


def timed_jobs(snap: Snapshot) -> tuple[TimedJob, ...]:
    """Bound, unfinished jobs that are not going away and whose runtime is known, with the
    pods their members report (a job with a malformed runtime counts as unknown)."""
    out = []
    for job in snap.jobs.values():
        meta = job["metadata"]
        annotations = meta.get("annotations") or {}
        if meta.get("deletionTimestamp") or REQUEUE in annotations or \
                annotations.get(PLACEMENT) in (None, "", "[]"):
            continue
        adapter = adapter_for(job["apiVersion"], job["kind"])
        try:
            runtime = runtime_of(job, adapter)
        except InvalidJob:
            continue
        started = started_at(job)
        if runtime is None or started is None or adapter.is_finished(job):
            continue
        out.append(TimedJob(job_key(job), started, float(runtime),
                            tuple(pods_of(snap.works_of(meta["uid"]), adapter))))
    return tuple(sorted(out, key=lambda t: t.key))
