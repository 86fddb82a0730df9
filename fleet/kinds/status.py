"""How member-reported job statuses add up to the hub job's status.

A job's share on each cluster reports its own status through its Work. The hub job shows the
share that holds the leader (master, launcher, chief, or replica 0 of the first role) as the
job's life, adds any other share's failure, and sums replica counts over all shares, so that
success and failure follow the kind's rules wherever the deciding replica runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fleet.api.protocol import reported_job_status

Body = dict[str, Any]


def leader_work(works: Sequence[Mapping[str, Any]], leaders: Sequence[str]) -> Mapping[str, Any]:
    """The Work holding the leader replica, else the one holding replica 0 of any role."""
    def holds(work: Mapping[str, Any], roles: Sequence[str] | None) -> bool:
        placement = work.get("spec", {}).get("placement", {})
        counts: Mapping[str, int] = placement.get("replicas", {})
        offsets: Mapping[str, int] = placement.get("offsets", {})
        return any(counts.get(role, 0) > 0 and offsets.get(role, 0) == 0
                   for role in (roles if roles is not None else counts))

    ordered = sorted(works, key=lambda w: w.get("metadata", {}).get("name", ""))
    for roles in (leaders, None):
        for work in ordered:
            if holds(work, roles):
                return work
    return ordered[0]


def job_status_of(work: Mapping[str, Any]) -> Mapping[str, Any]:
    """The member job's status a Work reports ({} before any)."""
    return reported_job_status(work) or {}


def _cluster(work: Mapping[str, Any]) -> str:
    return str(work.get("spec", {}).get("placement", {}).get("cluster", "?"))


def merge_kubeflow_status(current: Mapping[str, Any], works: Sequence[Mapping[str, Any]],
                          leaders: Sequence[str], now: str) -> Body:
    reported = [w for w in works if reported_job_status(w)]
    out: Body = {k: v for k, v in current.items() if k in ("clusters",)}
    if not reported:
        out["conditions"] = [c for c in current.get("conditions", [])
                             if c.get("type") == "Created"]
        return out
    lead = leader_work(reported, leaders)
    lead_status: Mapping[str, Any] = job_status_of(lead)
    conditions: list[Body] = [dict(c) for c in lead_status.get("conditions", [])]
    failed_elsewhere = [
        (w, c) for w in reported if w is not lead
        for c in job_status_of(w).get("conditions", [])
        if c.get("type") == "Failed" and c.get("status") == "True"
    ]
    if failed_elsewhere and not any(c["type"] == "Failed" and c["status"] == "True"
                                    for c in conditions):
        work, cond = failed_elsewhere[0]
        conditions = [c for c in conditions if c["type"] != "Running"]
        conditions.append({
            "type": "Failed", "status": "True", "reason": cond.get("reason", "JobFailed"),
            "message": f"{_cluster(work)}: {cond.get('message', '')}",
            "lastTransitionTime": cond.get("lastTransitionTime", now),
            "lastUpdateTime": cond.get("lastUpdateTime", now),
        })
    out["conditions"] = conditions

    replica_statuses: dict[str, Body] = {}
    for work in reported:
        for role, counts in (job_status_of(work).get("replicaStatuses") or {}).items():
            merged = replica_statuses.setdefault(role, {})
            for key in ("active", "succeeded", "failed"):
                if counts.get(key):
                    merged[key] = merged.get(key, 0) + counts[key]
    if any(c["type"] == "Succeeded" and c["status"] == "True" for c in conditions):
        for counts in replica_statuses.values():  # Kubeflow: what still runs has succeeded
            if counts.get("active"):
                counts["succeeded"] = counts.get("succeeded", 0) + counts.pop("active")
    out["replicaStatuses"] = replica_statuses
    starts = [job_status_of(w).get("startTime") for w in reported]
    if any(starts):
        out["startTime"] = min(s for s in starts if s)
    if lead_status.get("completionTime"):
        out["completionTime"] = lead_status["completionTime"]
    return out
