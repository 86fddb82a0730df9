"""The hub's observe step for bound jobs, as writes to make: their Works' reports become the
job's status, and a spec change of the job (pause, resume, debug, suspend, run policy)
goes to its Works.

It mirrors state between objects the hub already placed and decides nothing (what to place,
move or remove is the planner's), as Karmada's status and binding controllers sit beside its
scheduler. It writes nothing either: it returns :mod:`fleet.hub.hub_writes` for the
:class:`~fleet.hub.writer.Writer`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fleet.api.protocol import (
    MEMBER_WAITING,
    PEERS_REACHED,
    REPLICA_FAILURE,
    reported_job_status,
)
from fleet.hub import elastic as el
from fleet.hub import member_failures as mf
from fleet.hub import queueing as q
from fleet.hub import reservations
from fleet.hub import works as w
from fleet.hub.cache import Body
from fleet.hub.hub_writes import DeleteWork, HubWrite, ResizeWork, RewriteWork, Say, WriteStatus
from fleet.hub.views import parse_time
from fleet.kinds import jobset as jobsets
from fleet.kinds.base import InvalidJob, KindAdapter

_VOLATILE = {"lastReconcileTime"}
# A bound job's first status is its members' first report (a job that waited still shows
# why until then), unless none comes this long after its Works were created: then the
# bound status. One write instead of two on the path every job takes.
FIRST_REPORT_WAIT_SECONDS = 3.0


@dataclass(frozen=True)
class Mirrored:
    writes: list[HubWrite]
    settled: bool  # False: its status waits for its members' first report (look again)


def mirror(job: Body, adapter: KindAdapter, works: Sequence[Body], stamp: str,
           now: datetime) -> Mirrored:
    """What one bound job's mirror writes."""
    placement = w.decode_placement(job)
    writes = spec_changes(job, adapter, placement, works)
    if not writes:
        writes = peer_progress(works)
    status = status_writes(job, adapter, works, stamp, now)
    if status is None:
        return Mirrored(writes, False)
    return Mirrored(writes + status, True)


def spec_changes(job: Body, adapter: KindAdapter, placement: list[dict[str, Any]],
                 works: Sequence[Body]) -> list[HubWrite]:
    """Carry a spec change of a bound job to its Works. A change of replica counts is not
    carried: the job was divided for the counts it had, so it would need a new placement
    (an event says so)."""
    out = resized_shares(job, adapter, placement, works)
    stale = [wk for wk in works if w.outdated(job, wk)
             and not wk["metadata"].get("deletionTimestamp")]
    if not stale:
        return out
    placed: dict[str, int] = {}
    for share in placement:
        for role, count in share["replicas"].items():
            placed[role] = placed.get(role, 0) + count
    generation = str(job["metadata"].get("generation", 1))
    try:
        wanted = {r.name: r.replicas for r in adapter.roles(job)}
        elastic = el.elastic_of(job)
        if elastic is not None and elastic.min <= placed.get(elastic.role, 0) <= elastic.max:
            wanted[elastic.role] = placed[elastic.role]  # the hub sizes an elastic job
    except InvalidJob as exc:  # changed beyond the bounds (under an older CRD)
        refusal = f"{exc}; the job keeps running as divided ({placed})"
    else:
        placed = {**dict.fromkeys(wanted, 0), **placed}
        refusal = "" if wanted == {k: v for k, v in placed.items() if v or k in wanted} \
            else (f"replicas changed to {wanted} after the job was divided as {placed}; "
                  "delete and re-create the job to re-divide it")
    if refusal:  # the refusal remembered on the Works, so that it is said once
        return [*out, *(RewriteWork(work, work["spec"]["manifests"][0], generation)
                        for work in stale),
                Say(job, "ReplicasChangeIgnored", refusal, "Warning")]
    shares = {s["cluster"]: s for s in placement}
    for work in stale:
        placed_share = shares.get(work["spec"]["placement"]["cluster"])
        if placed_share is not None:
            out.append(RewriteWork(work, w.member_manifest(job, adapter, placed_share,
                                                           placement, work["metadata"]["name"]),
                                   generation))
    return out


def peer_progress(works: Sequence[Body]) -> list[HubWrite]:
    """A split JobSet's Works carry how far each replicated job got over every share
    (``PEERS_REACHED`` on the member copy), so that one depending on it waits for the pods
    no agent of its own sees. Written when that changes (twice per replicated job at most)."""
    live = [wk for wk in works if not wk["metadata"].get("deletionTimestamp")]
    if not live or live[0]["spec"]["manifests"][0].get("kind") != "JobSet":
        return []
    reached = jobsets.reached_across(live)
    if reached is None:
        return []
    text = json.dumps(reached, sort_keys=True, separators=(",", ":"))
    out: list[HubWrite] = []
    for work in live:
        manifest = work["spec"]["manifests"][0]
        annotations = manifest["metadata"].get("annotations") or {}
        if annotations.get(PEERS_REACHED, "{}") != text:
            marked = {**manifest, "metadata": {**manifest["metadata"], "annotations": {
                **annotations, PEERS_REACHED: text}}}
            out.append(RewriteWork(work, marked, str(
                (work["metadata"].get("annotations") or {}).get(w.JOB_GENERATION, ""))))
    return out


def resized_shares(job: Body, adapter: KindAdapter, placement: list[dict[str, Any]],
                   works: Sequence[Body], now: str = "") -> list[HubWrite]:
    """An elastic job's Works carry its placement's replica counts: a Work whose share was
    resized (or whose rewrite failed, or whose hub died in between) is rewritten, and the
    Work of a share a shrink removed goes."""
    if el.elastic_of_or_none(job) is None:
        return []
    shares = {s["cluster"]: s for s in placement}
    out: list[HubWrite] = []
    for work in works:
        if work["metadata"].get("deletionTimestamp"):
            continue
        share = shares.get(work["spec"]["placement"]["cluster"])
        if share is None:
            out.append(DeleteWork(work))
        elif dict(work["spec"]["placement"].get("replicas") or {}) != share["replicas"]:
            out.append(ResizeWork(work, w.member_manifest(job, adapter, share, placement,
                                                          work["metadata"]["name"]),
                                  share, now))
    return out


def status_writes(job: Body, adapter: KindAdapter, works: Sequence[Body], stamp: str,
                  now: datetime) -> list[HubWrite] | None:
    """The job's status from its Works' reports, when it changed; a member failure also
    said once in an event. None while its status waits for its members' first report. A
    finished job whose Works are gone (completed as its requeue landed) keeps its members'
    last word."""
    if not works and adapter.is_finished(job):
        return []
    current = job.get("status") or {}
    clusters = sorted({wk["spec"]["placement"]["cluster"] for wk in works}) \
        or current.get("clusters", [])
    reported = any(reported_job_status(wk) for wk in works)
    waited = not current or bool(current.get("queue"))  # shows nothing, or why it waited
    if reported or not waited:
        status = adapter.aggregate(job, works, stamp)
    elif awaiting_first_report(works, now):
        return None
    else:  # bound, and no member has said anything yet
        status = adapter.bound_status(current, clusters, "bound to " + ", ".join(clusters)
                                      + "; no member has reported the job yet", stamp)
    failure, wait = mf.replica_failure(works), mf.member_wait(works)
    status = q.with_admitted(el.with_resized(mf.with_member_conditions(status, failure, wait),
                                             job), job)
    status = reservations.with_condition(status, reservations.condition(works, stamp, current))
    status["clusters"] = clusters
    out: list[HubWrite] = []
    if differs(current, status):
        out.append(WriteStatus(job, status))
    said = mf.current(current, REPLICA_FAILURE)
    if failure is not None and said != (failure["reason"], failure["message"]):
        # once per new failure: the condition above is compared before it is written
        out.append(Say(job, failure["reason"], failure["message"], "Warning"))
    said = mf.current(current, MEMBER_WAITING)
    if wait is not None and (said or ("", ""))[0] != wait["reason"]:
        # once per new cause (its message counts what the quota holds now: not a new one)
        out.append(Say(job, wait["reason"], wait["message"], "Normal"))
    return out


def awaiting_first_report(works: Sequence[Mapping[str, Any]], now: datetime) -> bool:
    """Whether Works just created (none has reported) may still be waited for."""
    created = [parse_time(wk["metadata"].get("creationTimestamp")) for wk in works]
    newest = max((c for c in created if c is not None), default=None)
    return newest is not None and (now - newest).total_seconds() < FIRST_REPORT_WAIT_SECONDS


def differs(current: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    def strip(status: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in status.items() if k not in _VOLATILE and v not in (None, [], {})}
    return strip(current) != strip(new)
