"""Fencing (invariant 6): which member jobs the agent may run, and which it must remove.

Pure: the agent's view of the Works in its hub namespace (one :class:`Fence` per Work) and the
member jobs it applied (:class:`MemberJob`, from its member-side cache) in; decisions with
reasons out, sorted, no I/O, no clock.

A member job runs only while a Work of its placement generation exists for it. A job whose
Work is gone (the hub deleted it: the job finished elsewhere, was deleted, or failed over while
this member was away) or whose Work now carries a newer generation (the job was placed again,
on this member too) is a stale copy: it is removed, so a member that returns after a failover
never runs the gang beside its new placement. The one exception is a job under purge mode
``Never``, which the user asked to keep after failover (Karmada's meaning: the user cleans up
redundant copies): it stays, but gets no new pods.

Nothing is decided until the agent has listed its Works once (``synced``): before that an
absent Work means nothing. A Work the agent knows of with an older generation than its member
job (its view lags the hub) holds the job: no new pods, nothing removed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from fleet.api.protocol import (
    JOB_UID,
    PHASE_RESERVE,
    PURGE_MODE,
    PURGE_NEVER,
    copy_work,
    placement_generation,
    work_generation,
    work_phase,
)
from propagation.jobkey import JobKey


@dataclass(frozen=True)
class Fence:
    """What one Work in the agent's hub namespace allows on the member."""

    job_uid: str
    generation: int
    purge_mode: str = ""
    reserving: bool = False  # phase Reserve: the copy is applied, its pods wait for Commit


@dataclass(frozen=True)
class MemberJob:
    key: JobKey
    uid: str  # the member object's uid (deletes are guarded by it)
    work: str  # the Work it was applied from, by name
    job_uid: str  # the hub job it is a copy of
    generation: int
    purge_mode: str = ""
    deleting: bool = False


class Action(Enum):
    RUN = "run"  # its Work of the same generation exists
    HOLD = "hold"  # no new pods, nothing removed: the agent cannot tell yet
    KEEP = "keep"  # stale, kept because the user chose purge mode Never; no new pods
    REMOVE = "remove"  # stale: delete it from the member


@dataclass(frozen=True)
class Verdict:
    job: MemberJob
    action: Action
    reason: str


def fence_of(work: Mapping[str, Any]) -> Fence:
    spec = work.get("spec") or {}
    annotations = work.get("metadata", {}).get("annotations") or {}
    return Fence(job_uid=str(spec.get("job", {}).get("uid", "")),
                 generation=work_generation(work),
                 purge_mode=str(annotations.get(PURGE_MODE) or ""),
                 reserving=work_phase(work) == PHASE_RESERVE)


def member_job(key: JobKey, body: Mapping[str, Any], namespace: str) -> MemberJob | None:
    """The fencing view of a member job; None for jobs not applied from a Work in
    ``namespace`` (jobs created on the member directly, or by another fleet's agent)."""
    meta = body.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    owner, work = copy_work(meta)
    if owner != namespace or not work:
        return None
    return MemberJob(key=key, uid=str(meta.get("uid", "")), work=work,
                     job_uid=str((meta.get("labels") or {}).get(JOB_UID, "")),
                     generation=placement_generation(meta),
                     purge_mode=str(annotations.get(PURGE_MODE) or ""),
                     deleting=bool(meta.get("deletionTimestamp")))


def judge(job: MemberJob, fence: Fence | None, *, synced: bool) -> Verdict:
    if not synced:
        return Verdict(job, Action.HOLD, "the agent has not listed its Works yet")
    if fence is None or fence.job_uid != job.job_uid:
        why = f"its Work {job.work} is gone from the hub" if fence is None \
            else f"its Work {job.work} now belongs to another job"
        if job.purge_mode == PURGE_NEVER:
            return Verdict(job, Action.KEEP, f"{why}; kept (purge mode Never)")
        return Verdict(job, Action.REMOVE, why)
    if fence.generation > job.generation:
        # the hub wants a fresh copy here: the old one goes whatever the purge mode
        return Verdict(job, Action.REMOVE, f"placement generation {job.generation} superseded "
                                           f"by {fence.generation}")
    if fence.generation < job.generation:
        return Verdict(job, Action.HOLD, f"its Work is at placement generation "
                                         f"{fence.generation}, the job at {job.generation}")
    if fence.reserving:
        return Verdict(job, Action.HOLD, "its Work reserves the nodes: pods wait for Commit")
    return Verdict(job, Action.RUN, f"placement generation {job.generation}")


def may_run(body: Mapping[str, Any], key: JobKey, namespace: str,
            fences: Mapping[str, Fence], *, synced: bool) -> Verdict | None:
    """Whether the member's job controller may create pods for ``body``: None for jobs fleet
    does not manage (always), else the verdict (pods only when RUN)."""
    job = member_job(key, body, namespace)
    if job is None:
        return None
    return judge(job, fences.get(job.work), synced=synced)


def sweep(jobs: Iterable[tuple[JobKey, Mapping[str, Any]]], namespace: str,
          fences: Mapping[str, Fence], *, synced: bool) -> list[Verdict]:
    """The stale copies among the member's jobs (REMOVE and KEEP verdicts), sorted by key."""
    out = []
    for key, body in sorted(jobs, key=lambda item: item[0]):
        job = member_job(key, body, namespace)
        if job is None or job.deleting:
            continue
        verdict = judge(job, fences.get(job.work), synced=synced)
        if verdict.action in (Action.REMOVE, Action.KEEP):
            out.append(verdict)
    return out


def orphaned_pods(pods: Mapping[JobKey, Iterable[Mapping[str, Any]]],
                  jobs: Mapping[JobKey, Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """Pods of fleet's copies (labelled with the hub job's uid) whose owning job is gone from
    the member, or was replaced by another copy of that name: (namespace, name, uid), sorted.
    The member's garbage collector removes them in time; this is for a member whose controller
    manager is not back yet (after an outage) when the agent removes a stale copy."""
    out = []
    for key, owned in pods.items():
        job_uid = str(((jobs.get(key) or {}).get("metadata") or {}).get("uid", ""))
        for pod in owned:
            meta = pod.get("metadata") or {}
            if JOB_UID not in (meta.get("labels") or {}) or meta.get("deletionTimestamp"):
                continue
            controllers = [ref for ref in meta.get("ownerReferences") or []
                           if ref.get("controller")]
            if any(ref.get("kind") != key.kind for ref in controllers):
                continue  # made by another controller (a member's own Trainer's Jobs)
            if job_uid not in {ref.get("uid") for ref in controllers}:
                out.append((str(meta.get("namespace", "")), str(meta.get("name", "")),
                            str(meta.get("uid", ""))))
    return sorted(out)


__all__ = ["Action", "Fence", "MemberJob", "Verdict", "fence_of",
           "judge", "may_run", "member_job", "orphaned_pods", "sweep"]
