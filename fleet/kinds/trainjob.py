"""TrainJob (Kubeflow Trainer v2): placed and run as the JobSet its runtime makes of it.

The hub reads a TrainJob through the JobSet resolved from it and the runtime snapshot it was
made with (:mod:`fleet.kinds.trainer_runtime`): its gang is that JobSet's pods, its Works
carry that JobSet (a member needs neither Trainer v2 nor its runtimes), and its status is
Trainer's view of the JobSet the members report: ``Complete`` and ``Failed`` copied from the
JobSet's ``Completed`` and ``Failed`` (type renamed, reason and message kept), ``Suspended``
True while suspended and False (``Resumed``) once resumed, ``jobsStatus`` one entry per
replicated job with all five counts. Nothing else: the SDK reads a TrainJob with no conditions
as running once its node pods run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fleet import jobkeys
from fleet.api import protocol
from fleet.api.trainer import NAMESPACED_RUNTIME, TRAINER_GROUP, TRAINER_V1ALPHA1, TRAINJOB_MANAGER
from fleet.clients import resources as r
from fleet.kinds import flux
from fleet.kinds.base import Body, KindAdapter, condition, deep_copy
from fleet.kinds.deps import CONFIGMAP, SECRET
from fleet.kinds.jobset import JOB_COUNTS, JOBSET, merge_jobset_status, true_conditions
from fleet.kinds.naming import derived_name
from fleet.kinds.trainer_runtime import hostfile_config_map, resolve, snapshot_of, ssh_secret

TRAINJOB_STATES = {"Failed": "Failed", "Complete": "Succeeded", "Completed": "Succeeded",
                   "Suspended": "Suspended"}
DEADLINE, DEADLINE_MESSAGE = "DeadlineExceeded", "TrainJob exceeded its active deadline"


def resolved(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """The JobSet a TrainJob runs as (a member copy already is one)."""
    if body.get("kind") == "JobSet":
        return body
    return resolve(body, snapshot_of(body))


class TrainJobAdapter(KindAdapter):
    resource = r.TRAINJOBS
    work_prefix = "trainjob"
    own_managers = (TRAINJOB_MANAGER,)
    replicas_field = "spec.trainer.numNodes"
    runs_on_members = False
    fleet_conditions = False

    def role_path(self, role: str) -> str:
        return f"spec.runtimeRef (replicated job {role})"

    def replica_specs(self, body: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
        return JOBSET.replica_specs(resolved(body))

    def leader_role(self, roles: Sequence[str]) -> str:
        return JOBSET.leader_role(roles)

    def is_leader(self, role: str, roles: Sequence[str]) -> bool:
        return JOBSET.is_leader(role, roles)

    def with_replicas(self, body: Body, counts: Mapping[str, int]) -> Body:
        """The share as the JobSet it runs as, the TrainJob's labels and annotations on it."""
        share = JOBSET.with_replicas(dict(resolved(body)), counts)
        meta, own = share["metadata"], body.get("metadata") or {}
        meta["labels"] = {**(meta.get("labels") or {}), **(own.get("labels") or {})}
        meta["annotations"] = {**(own.get("annotations") or {}), **(meta.get("annotations") or {})}
        return share

    def for_member(self, body: Body) -> Body:
        return JOBSET.for_member(body)

    def for_member_trainer(self, body: Mapping[str, Any]) -> tuple[Body, Body]:
        """The TrainJob as a member's own Trainer runs it (``fleet.sh/trainjob-runner:
        member-trainer``), and the runtime it names there: the snapshot the hub resolved it
        against, as a TrainingRuntime of its own beside it, so that the member runs what the
        hub placed whatever runtimes of that name the member has. Its ``managedBy`` is left
        to the member's Trainer."""
        meta = body["metadata"]
        snapshot = snapshot_of(body)
        runtime_name = derived_name(str(meta["name"]), "runtime")
        job = deep_copy(dict(body))
        job["spec"] = {k: v for k, v in (job.get("spec") or {}).items() if k != "managedBy"}
        job["spec"]["runtimeRef"] = {"apiGroup": TRAINER_GROUP, "kind": NAMESPACED_RUNTIME,
                                     "name": runtime_name}
        job.pop("status", None)
        runtime = {"apiVersion": TRAINER_V1ALPHA1, "kind": NAMESPACED_RUNTIME,
                   "metadata": {"name": runtime_name, "namespace": meta["namespace"],
                                "labels": {protocol.JOB_UID: str(meta.get("uid", ""))}},
                   "spec": deep_copy(dict(snapshot.get("spec") or {}))}
        return job, runtime

    def state(self, status: Mapping[str, Any] | None) -> str:
        true = true_conditions(status)
        for kind, state in TRAINJOB_STATES.items():
            if kind in true:
                return state
        jobs = (status or {}).get("jobsStatus") or (status or {}).get("replicatedJobsStatus") \
            or []
        return "Running" if any(j.get("active") or j.get("ready") for j in jobs) else ""

    def generated_secrets(self, body: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        """An MPI runtime's SSH key, a flux runtime's CURVE certificate."""
        jobset = resolved(body)
        annotations = jobset["metadata"].get("annotations") or {}
        name = str(jobset["metadata"]["name"])
        out = []
        if protocol.MPI_HOSTS in annotations:
            out.append((ssh_secret(name), jobkeys.SSH))
        if protocol.FLUX in annotations:
            out.append((flux.curve_secret(name), jobkeys.CURVE))
        return tuple(out)

    def dependencies(self, body: Mapping[str, Any]) -> set[tuple[str, str]]:
        """What the pods reference, less what the member's agent makes (the policies' keys,
        hostfile and scripts)."""
        name = str(body["metadata"]["name"])
        made = {(SECRET, secret) for secret, _ in self.generated_secrets(body)} | {
            (CONFIGMAP, hostfile_config_map(name)), (CONFIGMAP, flux.config_map(name))}
        return super().dependencies(body) - made

    def managed_by(self, body: Mapping[str, Any]) -> str | None:
        manager = (body.get("spec") or {}).get("managedBy")
        return manager if isinstance(manager, str) else None

    def ttl(self, body: Mapping[str, Any]) -> int | None:
        return None

    def active_deadline(self, body: Mapping[str, Any]) -> int | None:
        value = (body.get("spec") or {}).get("activeDeadlineSeconds")
        return None if value is None else int(value)

    def waiting_status(self, current: Mapping[str, Any] | None, reason: str, message: str,
                       now: str) -> Body:
        return JOBSET.waiting_status(current, reason, message, now)

    def bound_status(self, current: Mapping[str, Any] | None, clusters: Sequence[str],
                     message: str, now: str) -> Body:
        return JOBSET.bound_status(current, clusters, message, now)

    def aggregate(self, body: Mapping[str, Any], works: Sequence[Mapping[str, Any]],
                  now: str) -> Body:
        current: Mapping[str, Any] = body.get("status") or {}
        run_by_trainer = [w for w in works if _manifest_kind(w) == "TrainJob"]
        if run_by_trainer:  # by the member's own Trainer: its status is Trainer's already
            reported = (run_by_trainer[0].get("status") or {}).get("jobStatus") or {}
            return {**{k: v for k, v in current.items() if k == "clusters"},
                    "conditions": [dict(c) for c in reported.get("conditions") or []
                                   if c.get("type") in TRAINER_CONDITIONS],
                    "jobsStatus": [dict(j) for j in reported.get("jobsStatus") or []]}
        jobset = merge_jobset_status({**resolved(body), "status": {}}, works, now)
        return trainjob_status(current, jobset, bool((body.get("spec") or {}).get("suspend")),
                               now)


TRAINER_CONDITIONS = ("Suspended", "Complete", "Failed")


def _manifest_kind(work: Mapping[str, Any]) -> str:
    manifests = (work.get("spec") or {}).get("manifests") or [{}]
    return str(manifests[0].get("kind") or "")


def trainjob_status(current: Mapping[str, Any], jobset: Mapping[str, Any], suspended: bool,
                    now: str) -> Body:
    """Trainer's TrainJob status over its JobSet's (module doc)."""
    out: Body = {k: v for k, v in current.items() if k in ("clusters",)}
    conditions = [dict(c) for c in current.get("conditions") or []  # (the cache's: copies)
                  if c.get("type") == "Suspended"]
    if suspended:
        conditions = [condition("Suspended", "Suspended", "TrainJob is suspended", now,
                                current)]
    elif any(c.get("status") == "True" for c in conditions):
        conditions = [{"type": "Suspended", "status": "False", "reason": "Resumed",
                       "message": "TrainJob is resumed", "lastTransitionTime": now}]
    for kind, renamed in (("Completed", "Complete"), ("Failed", "Failed")):
        found = next((c for c in jobset.get("conditions") or []
                      if c.get("type") == kind and c.get("status") == "True"), None)
        if found is not None:
            reason = found.get("reason") or kind
            conditions.append({"type": renamed, "status": "True", "reason": reason,
                               "message": DEADLINE_MESSAGE if reason == DEADLINE
                               else found.get("message") or "",
                               "lastTransitionTime": found.get("lastTransitionTime") or now})
    for kept in conditions:
        kept.pop("lastUpdateTime", None)
    out["conditions"] = conditions
    out["jobsStatus"] = [{"name": entry["name"], **{k: int(entry.get(k) or 0) for k in JOB_COUNTS}}
                         for entry in jobset.get("replicatedJobsStatus") or []]
    return out


TRAINJOB = TrainJobAdapter()

__all__ = ["TRAINJOB", "TrainJobAdapter", "resolved"]
