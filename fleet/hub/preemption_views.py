"""From the hub's snapshot to the preemption planner's frozen inputs (:mod:`preemption`).

A running job is one that is bound, not finished, not already going (requeued) and not being
deleted; its pods are what its Works report, each on the node the member put it, with the
request of its role. Its quota leaf is the one it was admitted through (opportunistic jobs
and jobs of a policy that does not queue hold none).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fleet.hub import elastic as el
from fleet.hub import queueing as q
from fleet.hub import works as w
from fleet.hub.cache import Body, Snapshot
from fleet.hub.memo import Memo
from fleet.kinds import adapter_for
from fleet.kinds.base import InvalidJob, KindAdapter, condition
from preemption.model import Elasticity, Pod, Running
from propagation.jobkey import shown
from propagation.resources import Resources
from propagation.views import JobDemand
from quota.priority import is_opportunistic
from quota.tree import PlacedNode

TERMINATED = ("Succeeded", "Failed")
# A Work's role requests by (uid, generation): its manifest is the same until its generation
# moves, and a busy pass read the same Works' demand hundreds of times. Bounded, oldest out.
ROLE_REQUESTS: Memo[tuple[str, int], dict[str, Resources]] = Memo(kept=20_000)


def lowest_priority(classes: Mapping[str, int]) -> int:
    """The lowest priority any job can have now: 0 (T9k's least, and no class) or the lowest
    PriorityClass. A waiting job at this priority has nobody to preempt."""
    return min(0, *classes.values()) if classes else 0


def running_job(job: Body, snap: Snapshot, classes: Mapping[str, int],
                leaves: Mapping[str, PlacedNode],
                demand_of: Callable[[Mapping[str, Any]], JobDemand]) -> Running | None:
    """The job as a possible victim; None when it is not running (see the module)."""
    meta = job["metadata"]
    annotations = meta.get("annotations") or {}
    if meta.get("deletionTimestamp") or q.REQUEUE in annotations or \
            annotations.get(w.PLACEMENT) in (None, "", "[]"):
        return None
    adapter = adapter_for(job["apiVersion"], job["kind"])
    works = snap.works_of(meta["uid"])
    if adapter.is_finished(job) or w.succeeded_on_members(works):
        return None  # (ended, though its status may not say so yet: never a victim)
    try:
        quota_job = q.as_quota_job(job, classes, demand_of(job))
    except InvalidJob:
        return None
    admitted = annotations.get(q.ADMITTED_AT)
    leaf = leaves.get(meta["namespace"]) if admitted else None
    holds = leaf is not None and not is_opportunistic(quota_job.priority)
    return Running(
        quota_job.key, meta["namespace"], quota_job.priority,
        admitted or meta.get("creationTimestamp", ""),
        tuple(pods_of(works, adapter)),
        quota_job.charge if holds else {}, leaf.key if holds and leaf else None,
        _elasticity(job, demand_of(job)))


def _elasticity(job: Mapping[str, Any], demand: JobDemand) -> Elasticity | None:
    """A running elastic job that may shrink: its range, size and placement."""
    try:
        found = el.elastic_of(job)
    except InvalidJob:
        return None
    if found is None:
        return None
    role = next((r for r in demand.roles if r.name == found.role), None)
    size = el.placed_count(job, found.role)
    if role is None or size <= found.min:
        return None
    return Elasticity(found.role, found.min, size, w.placement_of(job), dict(role.request))


def pods_of(works: Sequence[Mapping[str, Any]], adapter: KindAdapter) -> list[Pod]:
    """Each reported pod of the job's Works that holds capacity, with its role's request;
    a pod whose role cannot be told is left out (never counted as freed)."""
    out = []
    for work in works:
        requests = _role_requests(work, adapter)
        if requests is None:
            continue
        cluster = work["spec"]["placement"]["cluster"]
        for pod in (work.get("status") or {}).get("pods") or []:
            if pod.get("phase") in TERMINATED:
                continue
            role = str(pod.get("role") or "")
            request = _request(requests, role)
            if request is not None:
                out.append(Pod(cluster, str(pod.get("node") or ""), request, role.lower(),
                               _index(pod)))
    return out


def _index(pod: Mapping[str, Any]) -> int:
    """The replica index a pod summary's labels carry; -1 when none does."""
    for key, value in (pod.get("labels") or {}).items():
        if key.endswith("/replica-index"):
            try:
                return int(value)
            except (TypeError, ValueError):
                return -1
    return -1


def _role_requests(work: Mapping[str, Any], adapter: KindAdapter
                   ) -> dict[str, Resources] | None:
    """Each role's request (by lower-case name) in the share a Work carries; None when its
    manifest cannot be read."""
    meta = work["metadata"]
    manifest = work["spec"]["manifests"][0]

    def read() -> dict[str, Resources]:
        return {r.name.lower(): r.request for r in adapter.demand("", manifest).roles}

    try:
        if not meta.get("uid"):
            return read()
        return ROLE_REQUESTS.get((str(meta["uid"]), int(meta.get("generation") or 0)), read)
    except InvalidJob:
        return None


def _request(requests: Mapping[str, Resources], role: str) -> Resources | None:
    if role.lower() in requests:
        return requests[role.lower()]
    return next(iter(requests.values())) if len(requests) == 1 else None


def with_preempted(status: Body, job: Mapping[str, Any], now: str) -> Body:
    """A waiting job's status, plus a Preempted condition naming the job that preempted it
    while it waits to run again (its Queuing condition says why it waits now)."""
    by = (job["metadata"].get("annotations") or {}).get(w.PREEMPTED_BY)
    if not by or not adapter_for(job["apiVersion"], job["kind"]).fleet_conditions:
        return status  # (a kind whose clients read its conditions hears it in an event)
    said = condition("Preempted", "Preempted", f"preempted by {shown(by)}; waits in its queue "
                     "again, in its place by priority and age", now, job.get("status"))
    return {**status, "conditions": [*(status.get("conditions") or []), said]}
