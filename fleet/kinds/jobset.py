"""JobSet: replicated Jobs, each of ``parallelism`` pods; JobSet's conditions and counts.

A replicated job is one role whose pods are its Jobs' pods, ``replicas x parallelism`` of
them, numbered Job by Job: pod ``i`` is pod ``i % parallelism`` of Job ``i // parallelism``.
A share of the gang keeps the JobSet's whole shape (the names and ranks of its pods depend on
it) and records its own pods per role apart (``protocol.SHARE_REPLICAS``). JobSet's success
policy is judged over the shares: under ``All`` the JobSet completes when every share holding
pods of a target replicated job completed its own, under ``Any`` when one did.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from fleet.api import protocol
from fleet.api.jobset import JOBSET_MANAGER
from fleet.api.kubeflow import MULTIKUEUE_MANAGER
from fleet.clients import resources as r
from fleet.kinds.base import Body, KindAdapter, deep_copy
from fleet.kinds.status import job_status_of

JOBSET_STATES = {"Failed": "Failed", "Completed": "Succeeded", "Suspended": "Suspended"}
JOB_COUNTS = ("ready", "succeeded", "failed", "active", "suspended")  # per replicated job


def parallelism(rjob: Mapping[str, Any]) -> int:
    return int((((rjob.get("template") or {}).get("spec") or {}).get("parallelism")) or 1)


def pods_per_role(body: Mapping[str, Any]) -> dict[str, int]:
    """Every replicated job's pods in the whole JobSet."""
    return {str(rjob["name"]): job_count(rjob) * parallelism(rjob)
            for rjob in replicated_jobs(body)}


def job_count(rjob: Mapping[str, Any]) -> int:
    """A replicated job's Jobs."""
    return int(rjob.get("replicas", 1))


def is_split(body: Mapping[str, Any]) -> bool:
    """Whether the JobSet is a member's share of one split across members."""
    share = protocol.share_replicas(body.get("metadata") or {})
    return share is not None and dict(share) != pods_per_role(body)


def reached_across(works: Sequence[Mapping[str, Any]]) -> dict[str, str] | None:
    """Each replicated job's progress over every share of a JobSet split across members
    (the Works' reports): ``Complete`` when every share holding its pods reports all its Jobs
    of it succeeded, ``Ready`` when ready or succeeded. None when nothing waits on it: not
    split, or no replicated job depends on another."""
    if len(works) < 2:
        return None
    body = works[0]["spec"]["manifests"][0]
    if not _waits(body):
        return None
    out: dict[str, str] = {}
    for rjob in replicated_jobs(body):
        name, width = str(rjob["name"]), parallelism(rjob)
        shares = [(work, (protocol.share_replicas(work["spec"]["manifests"][0]["metadata"])
                          or {}).get(name, 0)) for work in works]
        held = [(work, count) for work, count in shares if count]
        ready = complete = bool(held)
        for work, count in held:
            offset = int((work["spec"]["placement"].get("offsets") or {}).get(name, 0))
            jobs = len({i // width for i in range(offset, offset + count)})
            entries = job_status_of(work).get("replicatedJobsStatus") or []
            entry: Mapping[str, Any] = next((e for e in entries if e.get("name") == name), {})
            done = int(entry.get("succeeded") or 0)
            ready = ready and done + int(entry.get("ready") or 0) >= jobs
            complete = complete and done >= jobs
        if complete or ready:
            out[name] = "Complete" if complete else "Ready"
    return out


def _waits(body: Mapping[str, Any]) -> bool:
    spec = body.get("spec") or {}
    return (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder" or any(
        rjob.get("dependsOn") for rjob in replicated_jobs(body))


def replicated_jobs(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    jobs: list[Mapping[str, Any]] = (body.get("spec") or {}).get("replicatedJobs") or []
    return jobs


def true_conditions(status: Mapping[str, Any] | None) -> set[str]:
    return {str(c.get("type")) for c in (status or {}).get("conditions") or []
            if c.get("status") == "True"}


class JobSetAdapter(KindAdapter):
    resource = r.JOBSETS
    work_prefix = "jobset"
    own_managers = (JOBSET_MANAGER,)
    fleet_conditions = False
    replicas_field = "spec.replicatedJobs"

    def role_path(self, role: str) -> str:
        return f"{self.replicas_field}[name={role}]"

    def replica_specs(self, body: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
        share = protocol.share_replicas(body.get("metadata") or {})
        out: list[tuple[str, Mapping[str, Any]]] = []
        for rjob in replicated_jobs(body):
            name = str(rjob["name"])
            job_spec = (rjob.get("template") or {}).get("spec") or {}
            count = share.get(name, 0) if share is not None else \
                job_count(rjob) * parallelism(rjob)
            if count:
                out.append((name, {"replicas": count, "template": job_spec.get("template") or {},
                                   "restartPolicy": _restart_policy(job_spec)}))
        return out

    def leader_role(self, roles: Sequence[str]) -> str:
        return roles[0] if roles else ""

    def is_leader(self, role: str, roles: Sequence[str]) -> bool:
        return role == self.leader_role(roles)

    def with_replicas(self, body: Body, counts: Mapping[str, int]) -> Body:
        """The whole JobSet, its share's pods per role recorded apart (see module doc)."""
        out = deep_copy(body)
        share = {name: int(counts.get(name, 0)) for name in pods_per_role(body)}
        annotations = out.setdefault("metadata", {}).setdefault("annotations", {})
        annotations[protocol.SHARE_REPLICAS] = json.dumps(share, separators=(",", ":"))
        return out

    def state(self, status: Mapping[str, Any] | None) -> str:
        true = true_conditions(status)
        for condition, state in JOBSET_STATES.items():
            if condition in true:
                return state
        jobs = (status or {}).get("replicatedJobsStatus") or []
        if any(j.get("active") or j.get("ready") for j in jobs):
            return "Running"
        return "Created" if status and status.get("replicatedJobsStatus") is not None else ""

    def managed_by(self, body: Mapping[str, Any]) -> str | None:
        manager = (body.get("spec") or {}).get("managedBy")
        return manager if isinstance(manager, str) else None

    def for_member(self, body: Body) -> Body:
        """A member running the JobSet controller leaves a copy managed by another alone; the
        agent runs the copies it applied from Works whatever they name."""
        body.setdefault("spec", {})["managedBy"] = MULTIKUEUE_MANAGER
        return body

    def ttl(self, body: Mapping[str, Any]) -> int | None:
        value = (body.get("spec") or {}).get("ttlSecondsAfterFinished")
        return None if value is None else int(value)

    def active_deadline(self, body: Mapping[str, Any]) -> int | None:
        return None  # a Job's own deadline, counted by the member's agent

    def waiting_status(self, current: Mapping[str, Any] | None, reason: str, message: str,
                       now: str) -> Body:
        """JobSet's clients read its conditions: a waiting JobSet says why in ``queue``
        only, and keeps its conditions as they were (none)."""
        return {"conditions": list((current or {}).get("conditions") or []),
                "queue": {"reason": reason, "message": message}}

    def bound_status(self, current: Mapping[str, Any] | None, clusters: Sequence[str],
                     message: str, now: str) -> Body:
        return {"conditions": list((current or {}).get("conditions") or []),
                "clusters": list(clusters)}

    def aggregate(self, body: Mapping[str, Any], works: Sequence[Mapping[str, Any]],
                  now: str) -> Body:
        return merge_jobset_status(body, works, now)


def _restart_policy(job_spec: Mapping[str, Any]) -> str:
    """A Job re-creates a failed pod until its backoff limit (default 6, 0: never)."""
    limit = job_spec.get("backoffLimit")
    return "Never" if limit == 0 else "OnFailure"


def _share(work: Mapping[str, Any]) -> Mapping[str, int]:
    counts: Mapping[str, int] = ((work.get("spec") or {}).get("placement") or {}) \
        .get("replicas") or {}
    return counts


def completed_across(body: Mapping[str, Any], works: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the JobSet's success policy holds over its shares (module doc)."""
    policy = (body.get("spec") or {}).get("successPolicy") or {}
    targets = set(policy.get("targetReplicatedJobs") or pods_per_role(body))
    deciding = [w for w in works if any(_share(w).get(t, 0) for t in targets)]
    done = ["Completed" in true_conditions(job_status_of(w)) for w in deciding]
    if not done:
        return False
    return any(done) if policy.get("operator") == "Any" else all(done)


def merge_jobset_status(body: Mapping[str, Any], works: Sequence[Mapping[str, Any]],
                        now: str) -> Body:
    """The hub JobSet's status from its shares' reports: a share's failure fails it, the
    success policy over the shares completes it, counts add up (capped at the JobSet's)."""
    current: Mapping[str, Any] = body.get("status") or {}
    out: Body = {k: v for k, v in current.items() if k in ("clusters",)}
    reported = sorted((w for w in works if protocol.reported_job_status(w)),
                      key=lambda w: (w.get("metadata") or {}).get("name", ""))
    if not reported:
        out["conditions"] = list(current.get("conditions") or [])
        return out
    conditions: dict[str, Body] = {}
    for work in reported:  # every share's conditions; a later share's of a type wins...
        for condition in job_status_of(work).get("conditions") or []:
            conditions.setdefault(str(condition.get("type")), dict(condition))
    failed = next(((w, c) for w in reported for c in job_status_of(w).get("conditions") or []
                   if c.get("type") == "Failed" and c.get("status") == "True"), None)
    conditions.pop("Completed", None)  # ...but completion is judged over all of them
    if failed is not None:
        work, condition = failed
        cluster = ((work.get("spec") or {}).get("placement") or {}).get("cluster", "?")
        conditions["Failed"] = {**condition, "message": f"{cluster}: "
                                f"{condition.get('message', '')}"}
    elif completed_across(body, reported):
        conditions["Completed"] = {
            "type": "Completed", "status": "True", "reason": "AllJobsCompleted",
            "message": "jobset completed successfully", "lastTransitionTime": next(
                (c.get("lastTransitionTime") for w in reported
                 for c in job_status_of(w).get("conditions") or []
                 if c.get("type") == "Completed"), now)}
    out["conditions"] = sorted(conditions.values(),
                               key=lambda c: str(c.get("lastTransitionTime") or ""))
    whole = {str(j["name"]): job_count(j) for j in replicated_jobs(body)}
    counts: dict[str, dict[str, int]] = {}
    for work in reported:
        for entry in job_status_of(work).get("replicatedJobsStatus") or []:
            merged = counts.setdefault(str(entry.get("name")), {})
            for key in JOB_COUNTS:
                merged[key] = merged.get(key, 0) + int(entry.get(key) or 0)
    out["replicatedJobsStatus"] = [
        {"name": name, **{k: min(v, whole.get(name, v)) for k, v in counts[name].items()}}
        for name in whole if name in counts]
    for field in ("restarts", "restartsCountTowardsMax"):
        most = max(int(job_status_of(w).get(field) or 0) for w in reported)
        if most or field == "restarts":
            out[field] = most
    if "Failed" in conditions:
        out["terminalState"] = "Failed"
    elif "Completed" in conditions:
        out["terminalState"] = "Completed"
    return out


JOBSET = JobSetAdapter()

__all__ = ["JOBSET", "JOBSET_MANAGER", "JobSetAdapter"]
