"""Jobs already placed: keep their Works complete, move them when a share stays unhealthy,
take their Works away when they are deleted or requeued, and expire them when finished."""

from __future__ import annotations

import math

from planner.intents import (
    Completed,
    Dispatch,
    Expire,
    FailOver,
    Intent,
    Release,
    RemoveWorks,
    Unbind,
    WorkRemoval,
)
from planner.reserving import reserving, settle_reservation
from planner.view import JobView, PassView, Stage, WorkView
from propagation.failover import ShareHealth, decide_failover

SUCCEEDED = "Succeeded"
RUNNING_STATES = ("Running", SUCCEEDED)
TICK = 0.01  # past a deadline, not on it: a toleration is exceeded strictly


def settle(job: JobView, view: PassView) -> list[Intent]:
    """Everything but placing: what a bound, requeued or deleted job needs written."""
    if job.stage is Stage.DELETING:
        return finalize(job, view)
    out: list[Intent] = []
    if job.evicting:
        out += sweep_evicting(job, view)
    if job.stage is Stage.REQUEUED:
        out += finish_requeue(job, view)
    elif job.stage is Stage.BOUND:
        out += complete_dispatch(job)
        out += expire(job, view)
        reservation = settle_reservation(job, view)
        out += reservation
        if not job.finished and not reservation:
            out += fail_over(job, view)
    return out


def settled(job: JobView) -> bool:
    """Whether nothing is left to decide for ``job`` until it, its Works or a member change,
    or its :func:`next_look` comes: finished, bound or not, with no Work being evicted (its
    TTL, the one thing left, is a timer). The hub stops sweeping it and keeps no view of it."""
    return job.stage is Stage.DONE or (
        job.stage is Stage.BOUND and job.finished and not job.evicting)


def next_look(job: JobView, view: PassView) -> float | None:
    """When settling ``job`` may decide something new though nothing about it changes: a
    share's toleration running out, its TTL, its reservation's deadline, an evicted Work's
    time up. None when only a change (to it, its Works, a member) can."""
    times: list[float] = [w.evict_after for w in job.evicting
                          if w.evict_after is not None and not w.deleting]
    if job.stage is Stage.BOUND:
        if job.finished and job.ttl_seconds is not None and job.finished_at is not None:
            times.append(job.finished_at + job.ttl_seconds)
        if reserving(job) and not job.finished:
            started = min((w.created for w in job.works if w.created is not None),
                          default=None)
            if started is not None:
                times.append(started + view.reserve_seconds)
        settings = job.policy.failover if job.policy else None
        if settings is not None and not job.finished:
            for work in job.works:
                health = share_health(work, view)
                if not health.healthy and not math.isinf(health.unhealthy_for):
                    times.append(view.now - health.unhealthy_for + settings.toleration_seconds
                                 + TICK)
    later = [t for t in times if t > view.now]
    return min(later) if later else (view.now + TICK if times else None)


def _lost(view: PassView, cluster: str) -> bool:
    member = view.clusters.get(cluster)
    return member is None or not member.ready


def finalize(job: JobView, view: PassView) -> list[Intent]:
    """A deleted job: its Works go (a lost member's at once, the rest by their agents), and
    its dispatch finalizer as soon as every Work is going: as under the training operator,
    the job is gone at once while its pods are stopped (each Work's own finalizer holds it
    until its agent has purged the member; a member lost meanwhile is purged on return)."""
    if not job.dispatch_finalizer:
        return []
    works = (*job.works, *job.evicting)
    if all(w.deleting and not _lost(view, w.cluster) for w in works):
        return [Release(job.key)]
    return [RemoveWorks(job.key, tuple(
        WorkRemoval(w.name, delete=not w.deleting,
                    purge_now=w.keeps_copy and not w.deleting,
                    drop_agent_finalizer=_lost(view, w.cluster)) for w in works),
        "job deleted", release=True)]


def finish_requeue(job: JobView, view: PassView) -> list[Intent]:
    """A preempted or failed-over job: once its Works are gone it is unbound and waits in
    its queue again (its quota was released when it was marked). One that every member
    reported succeeded (it ended before the requeue reached them, its Works going or not)
    ran: it is completed, never run again (and one whose finished status was written for
    that, its mark not yet taken off, too)."""
    if job.finished or _ran_to_success(job):
        return [Completed(job.key, f"its members reported it succeeded before its requeue "
                                   f"({job.requeue_reason}) reached them: not run again")]
    if job.works:
        return [RemoveWorks(job.key, tuple(
            WorkRemoval(w.name, delete=not w.deleting,
                        drop_agent_finalizer=_lost(view, w.cluster)) for w in job.works),
            f"requeued: {job.requeue_reason}")]
    return [Unbind(job.key, job.requeue_reason)]


def _ran_to_success(job: JobView) -> bool:
    """Every share of its placement reported succeeded, by a Work still here or gone."""
    succeeded = {w.cluster for w in (*job.works, *job.ended) if w.state == SUCCEEDED}
    running = {w.cluster for w in job.works if w.state != SUCCEEDED}
    shares = {s.cluster for s in job.placement} or {w.cluster for w in job.works}
    return bool(shares) and shares <= succeeded and not running


def sweep_evicting(job: JobView, view: PassView) -> list[Intent]:
    """Graciously: old Works go once the new placement runs, or when their time is up."""
    running = bool(job.works) and all(w.state in RUNNING_STATES for w in job.works)
    going = tuple(WorkRemoval(w.name) for w in job.evicting if not w.deleting and (
        running or job.finished or (w.evict_after is not None and view.now >= w.evict_after)))
    return [RemoveWorks(job.key, going, "evicted")] if going else []


def complete_dispatch(job: JobView) -> list[Intent]:
    have = {w.cluster for w in job.works}
    missing = tuple(s.cluster for s in job.placement if s.cluster not in have)
    if not missing or job.finished:
        return []
    policy = job.policy
    return [Dispatch(job.key, missing, bool(policy and policy.propagate_deps),
                     bool(policy and policy.member_trainer))]


def expire(job: JobView, view: PassView) -> list[Intent]:
    """ttlSecondsAfterFinished: the hub deletes the finished job (its Works, and so the
    member jobs, go with it); members leave a federated job's TTL to the hub."""
    if not job.finished or job.ttl_seconds is None or job.finished_at is None:
        return []
    age = view.now - job.finished_at
    if age < job.ttl_seconds:
        return []
    return [Expire(job.key, f"finished {int(age)} s ago (ttlSecondsAfterFinished "
                            f"{job.ttl_seconds})")]


def share_health(work: WorkView, view: PassView) -> ShareHealth:
    member = view.clusters.get(work.cluster)
    if member is None or not member.ready:
        since = view.lost_since.get(work.cluster)
        # A removed member never comes back: its shares are past any toleration.
        lost_for = math.inf if member is None else (view.now - since) if since else 0.0
        why = member.not_ready_reason if member else "cluster removed"
        return ShareHealth(work.cluster, False, lost_for, f"cluster lost ({why})", True)
    if work.unhealthy:
        since = view.now if work.unhealthy_since is None else work.unhealthy_since
        return ShareHealth(work.cluster, False, view.now - since,
                           work.unhealthy_reason.removeprefix(f"{work.cluster}: "))
    return ShareHealth(work.cluster, True)


def fail_over(job: JobView, view: PassView) -> list[Intent]:
    settings = job.policy.failover if job.policy else None
    if settings is None:
        return []
    shares = [share_health(w, view) for w in job.works]
    decision = decide_failover(shares, settings.toleration_seconds)
    if decision is None:
        return []
    since = min((view.now - s.unhealthy_for for s in shares
                 if not s.healthy and not math.isinf(s.unhealthy_for)), default=view.now)
    graceful = settings.purge_mode == "Graciously"
    return [FailOver(job.key, decision.reason, settings.purge_mode, since,
                     tuple(s.cluster for s in shares if not s.healthy),
                     decision.lost_clusters,
                     view.now + settings.grace_period_seconds if graceful else None,
                     tuple(w.name for w in job.works))]
