"""One reconcile of one job, as a pure function: job + observed pods + time -> decision.

The order follows the Kubeflow operators: a finished job only cleans up (and, with a TTL, is
deleted); a suspended or paused job loses its pods; otherwise missing replicas are created,
failed ones restarted per their policy and the shared backoff limit, the status is computed
from the pods, and the active deadline is checked. ``runtime`` carries the decision out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from fleet.api import limits
from fleet.clients.resources import Resource
from member_agent.controllers import core
from member_agent.controllers.kind import Body, JobKind, Observed

# What a malformed spec raises where the controller reads it (a value of the wrong type, a
# field missing, a number too large for a date): such a job fails with reason InvalidSpec.
MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError)
INVALID = "InvalidSpec"


@dataclass(frozen=True)
class Decision:
    create: tuple[Body, ...] = ()  # pods
    delete: tuple[str, ...] = ()  # pod names
    services: tuple[Body, ...] = ()  # Services to exist before the pods
    objects: tuple[tuple[Resource, Body], ...] = ()  # per-job objects, kept as given
    status: Body | None = None  # the new status, None if unchanged
    requeue_after: float | None = None  # seconds (deadline, TTL, waiting for the gang)
    delete_job: bool = False  # TTL after finishing has passed
    events: tuple[tuple[str, str, str], ...] = ()  # (type, reason, message)


def stamp(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def check(kind: JobKind, job: Mapping[str, Any]) -> str | None:
    """Why the controller cannot run ``job`` as it is (the message names the field), or None.

    The hub's CRD bounds these, but a job may have been stored under an older CRD, or applied
    to the member directly: nothing is expanded from a count that was not checked here."""
    try:
        types = kind.replica_types(job)
        kind.run_mode(job)
        numbers = {"backoffLimit": kind.backoff_limit(job), "activeDeadlineSeconds":
                   kind.deadline(job), "ttlSecondsAfterFinished": kind.ttl(job)}
        kind.cleanup(job)
    except MALFORMED as exc:
        return f"has a spec the controller cannot read ({_short(exc)})"
    for rtype in types:
        if not 0 <= rtype.replicas <= limits.MAX_REPLICAS:
            return (f"asks for {_short(rtype.replicas)} replicas of {rtype.name}, outside "
                    f"0..{limits.MAX_REPLICAS}")
        if not 0 <= rtype.offset <= limits.MAX_JOB_REPLICAS:
            return f"has replica offset {_short(rtype.offset)} for {rtype.name}"
    total = sum(t.replicas for t in types)
    if total > limits.MAX_JOB_REPLICAS + 1:  # + a T9k MPI launcher the controller adds
        return f"asks for {total} replicas, more than {limits.MAX_JOB_REPLICAS}"
    bounds = {"backoffLimit": limits.MAX_BACKOFF_LIMIT, "activeDeadlineSeconds":
              limits.MAX_SECONDS, "ttlSecondsAfterFinished": limits.MAX_SECONDS}
    for name, value in numbers.items():
        if value is not None and not 0 <= value <= bounds[name]:
            return f"has {name} {_short(value)}, outside 0..{bounds[name]}"
    return None


def invalid(kind: JobKind, job: Mapping[str, Any], pods: Sequence[core.ObservedPod],
            observed: Observed, problem: str) -> Decision:
    """A job that cannot run fails for good (no retry loop): reason InvalidSpec, its pods go."""
    old: Mapping[str, Any] = job.get("status") or {}
    delete = tuple(p.name for p in pods if not p.deleting)
    if kind.finished(old):
        return Decision(delete=delete)
    now = stamp(observed.now)
    status = kind.fail(job, {**old, "conditions": list(old.get("conditions") or [])},
                       INVALID, problem, now)
    return Decision(delete=delete, status=status,
                    events=(("Warning", INVALID, f"the job {problem}"),))


def decide(kind: JobKind, job: Mapping[str, Any], pods: Sequence[core.ObservedPod],
           observed: Observed) -> Decision:
    problem = check(kind, job)
    if problem is not None:
        return invalid(kind, job, pods, observed, problem)
    try:
        return _decide(kind, job, pods, observed)
    except MALFORMED as exc:  # a field the checks above do not read (a pod template's env)
        return invalid(kind, job, pods, observed,
                       f"has a spec the controller cannot use ({_short(exc)})")


def _short(value: object, size: int = 200) -> str:
    """A value or error as text short enough for a condition (it may be a 1 MiB string)."""
    text = value if isinstance(value, str) else (
        f"{type(value).__name__}: {value}" if isinstance(value, Exception) else repr(value))
    return text if len(text) <= size else f"{text[:size]}... ({len(text)} characters)"


def _decide(kind: JobKind, job: Mapping[str, Any], pods: Sequence[core.ObservedPod],
            observed: Observed) -> Decision:
    now = stamp(observed.now)
    types = kind.replica_types(job)
    old: Mapping[str, Any] = job.get("status") or {}
    finished = kind.finished(old)
    mode = kind.run_mode(job)
    leader = kind.leader([t.name for t in types])

    def make_plan(stop: bool) -> core.Plan:
        return core.plan(
            job["metadata"]["name"], types, pods,
            restarts_so_far=kind.restarts_so_far(old), backoff_limit=kind.backoff_limit(job),
            stop=stop, evict=bool(mode.stop) and not finished,
            hold=not observed.gang_admitted, variant=mode.variant, attempt=mode.attempt,
            retryable_codes=kind.retryable_codes, decisive=frozenset({leader}),
            held=kind.held_types(job, types, pods),
        )

    result = make_plan(finished or bool(mode.stop))
    status = kind.status(job, types, result, pods, mode, observed, now)
    if not finished and kind.finished(status):
        # The job ends now: nothing more is created or restarted in this pass.
        result = replace(make_plan(True), exhausted=result.exhausted)
        status = kind.status(job, types, result, pods, mode, observed, now)
    requeue: list[float] = []
    deadline = kind.deadline(job)
    if deadline and not kind.finished(status) and not mode.stop and status.get("startTime"):
        left = (parse_time(status["startTime"]) + timedelta(seconds=deadline)
                - observed.now).total_seconds()
        if left <= 0:
            result = make_plan(True)
            status = kind.fail(job, kind.status(job, types, result, pods, mode, observed, now),
                               "DeadlineExceeded",
                               f"was active longer than activeDeadlineSeconds ({deadline} s)",
                               now)
        else:
            requeue.append(left + 0.1)
    delete = list(result.delete)
    events: list[tuple[str, str, str]] = []
    for rtype, index in result.restarted:
        events.append(("Warning", "Restarting",
                       f"replica {rtype} {index} failed; re-creating it (restart "
                       f"{kind.restarts_so_far(status)} of the job)"))
    if kind.finished(status):
        delete += [name for name in kind.clean_up(job, pods, kind.failed(status))
                   if name not in delete]
    by_name = {t.name: t for t in types}
    create: list[Body] = []
    services: list[Body] = []
    for rtype_name, index in result.create:
        create.append(kind.pod(job, by_name[rtype_name], index, mode.variant, observed.gang))
        service = kind.service(job, rtype_name, index)
        if service is not None:
            services.append(service)
    if not observed.gang_admitted and not kind.finished(status):
        requeue.append(2.0)  # the gang scheduler's PodGroup phase is not watched: poll it
    delete_job = False
    ttl = kind.ttl(job)
    if kind.finished(status) and ttl is not None and status.get("completionTime"):
        left = (parse_time(status["completionTime"]) + timedelta(seconds=ttl)
                - observed.now).total_seconds()
        if left <= 0:
            delete_job = True
        else:
            requeue.append(left + 0.1)
    if not kind.finished(old) and kind.finished(status):
        events.append(("Warning" if kind.failed(status) else "Normal",
                       "Failed" if kind.failed(status) else "Succeeded",
                       _final_message(status)))
    changed = _strip(old) != _strip(status)
    return Decision(tuple(create), tuple(delete), tuple(services),
                    tuple(kind.objects(job, types, pods)),
                    status if changed else None, min(requeue) if requeue else None,
                    delete_job, tuple(events))


def _final_message(status: Mapping[str, Any]) -> str:
    for condition in reversed(status.get("conditions") or []):
        if condition.get("status") == "True" and condition.get("type") in (
                "Succeeded", "Failed", "Completed"):
            return str(condition.get("message") or condition["type"])
    return "finished"


def _strip(status: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in status.items() if v not in (None, {}, [])}
