"""From the hub's snapshot to what backfill reads: each job's known runtime, and the running
jobs whose end is known (:class:`planner.view.TimedJob`).

A job's runtime is the smaller of its ``runPolicy.activeDeadlineSeconds`` (the member stops
it then) and its ``fleet.sh/expected-runtime`` annotation (the user's word). A running job
started when its members first reported it running (the hub job's ``startTime``), else when
it was bound (its Created condition): a stable time, so a reservation computed from it does
not move from one pass to the next.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from fleet.api.protocol import EXPECTED_RUNTIME, PLACEMENT, REQUEUE, expected_runtime
from fleet.hub.cache import Snapshot
from fleet.hub.preemption_views import pods_of
from fleet.hub.views import parse_time
from fleet.kinds import adapter_for
from fleet.kinds.base import InvalidJob, KindAdapter
from planner.view import TimedJob
from preemption.model import Pod
from propagation.jobkey import JobKey


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


def declares_runtime(job: Mapping[str, Any]) -> bool:
    run_policy = (job.get("spec") or {}).get("runPolicy") or {}
    return EXPECTED_RUNTIME in (job["metadata"].get("annotations") or {}) or \
        run_policy.get("activeDeadlineSeconds") is not None


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


def node_usage(snap: Snapshot) -> dict[tuple[str, str], dict[str, int]]:
    """What each named node of each member reports in use (allocatable less free)."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    for body in snap.clusters.values():
        capacity = (body.get("status") or {}).get("capacity") or {}
        for group in capacity.get("nodeGroups") or []:
            allocatable, free = group.get("allocatable") or {}, group.get("free") or {}
            used = {r: int(a) - int(free.get(r, 0)) for r, a in allocatable.items()}
            for node in group.get("nodes") or []:
                out[(body["metadata"]["name"], node)] = used
    return out


def counted(pods: Sequence[Pod], usage: dict[tuple[str, str], dict[str, int]]) -> list[Pod]:
    """The pods that still hold what their node reports in use: a Work's pod list and its
    member's capacity report are written at different times, and a pod already gone from
    the report must not be given back twice (the node would seem larger than it is)."""
    out = []
    for pod in pods:
        used = usage.get((pod.cluster, pod.node))
        if used is None or any(used.get(r, 0) < amount for r, amount in pod.request.items()):
            continue
        usage[(pod.cluster, pod.node)] = {r: v - pod.request.get(r, 0) for r, v in used.items()}
        out.append(pod)
    return out


def timed_job(job: Mapping[str, Any], snap: Snapshot) -> TimedJob | None:
    """A bound, unfinished job that is not going away and whose runtime is known, with the
    pods its members report (a job with a malformed runtime counts as unknown)."""
    meta = job["metadata"]
    annotations = meta.get("annotations") or {}
    if meta.get("deletionTimestamp") or REQUEUE in annotations or \
            annotations.get(PLACEMENT) in (None, "", "[]"):
        return None
    if not declares_runtime(job):  # most jobs: a walk of dict lookups
        return None
    adapter = adapter_for(job["apiVersion"], job["kind"])
    try:
        runtime = runtime_of(job, adapter)
    except InvalidJob:
        return None
    started = started_at(job)
    if runtime is None or started is None or adapter.is_finished(job):
        return None
    return TimedJob(JobKey.of_body(job), started, float(runtime),
                    tuple(pods_of(snap.works_of(meta["uid"]), adapter)))


def timed_jobs(snap: Snapshot) -> tuple[TimedJob, ...]:
    """Every running job of known runtime (:func:`timed_job`), with the pods their nodes
    still count in use."""
    usage = node_usage(snap)
    found = [t for job in snap.jobs.values() if (t := timed_job(job, snap)) is not None]
    return tuple(replace(t, pods=tuple(counted(t.pods, usage)))
                 for t in sorted(found, key=lambda t: t.key))
