"""T9k jobs: TensorFlowTrainingJob (a list of typed replica specs) and MPIJob (one worker spec,
plus a launcher the member controller creates), with T9k phases and conditions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fleet import jobkeys
from fleet.api.protocol import reported_job_status
from fleet.clients import resources as r
from fleet.kinds.base import Body, KindAdapter, deep_copy
from fleet.kinds.naming import derived_name
from fleet.kinds.status import job_status_of, leader_work


class TensorFlowTrainingJobAdapter(KindAdapter):
    """A list of typed replica specs; the chief leads, else the worker (seed 003)."""

    resource = r.TENSORFLOWTRAININGJOBS
    work_prefix = "t9k-tfjob"
    leaders = ("chief",)
    fallback_leader = "worker"
    has_phase = True
    replicas_field = "spec.replicaSpecs"

    def role_path(self, role: str) -> str:
        return f"{self.replicas_field}[type={role}]"

    def replica_specs(self, body: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
        return [(spec["type"], spec) for spec in (body.get("spec") or {}).get("replicaSpecs")
                or []]

    def is_leader(self, role: str, roles: Sequence[str]) -> bool:
        return role == self.leader_role(roles)

    def with_replicas(self, body: Body, counts: Mapping[str, int]) -> Body:
        out = deep_copy(body)
        kept = []
        for spec in out["spec"]["replicaSpecs"]:
            if counts.get(spec["type"], 0) > 0:
                spec["replicas"] = counts[spec["type"]]
                kept.append(spec)
        out["spec"]["replicaSpecs"] = kept
        return out

    def state(self, status: Mapping[str, Any] | None) -> str:
        return str((status or {}).get("phase") or "")

    def aggregate(self, body: Mapping[str, Any], works: Sequence[Mapping[str, Any]],
                  now: str) -> Body:
        return merge_t9k_status(body.get("status") or {}, works, self.leaders)


class T9kMPIJobAdapter(TensorFlowTrainingJobAdapter):
    """One worker spec. The launcher, which the member's controller adds, requests nothing
    the hub counts: it runs beside the workers, with the share holding worker 0."""

    resource = r.T9K_MPIJOBS
    work_prefix = "t9k-mpijob"
    leaders = ("worker",)
    replicas_field = "spec"

    def role_path(self, role: str) -> str:
        return "spec.worker"

    def generated_secrets(self, body: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        """The SSH key the launcher and workers share (``<job>-ssh``)."""
        return ((derived_name(str(body["metadata"]["name"]), "ssh"), jobkeys.SSH),)

    def replica_specs(self, body: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
        worker = (body.get("spec") or {}).get("worker") or {}
        return [("worker", {"replicas": worker.get("replicas", 1),
                            "template": worker.get("template") or {}})]

    def with_replicas(self, body: Body, counts: Mapping[str, int]) -> Body:
        out = deep_copy(body)
        out["spec"]["worker"]["replicas"] = counts.get("worker", 0)
        return out


def merge_t9k_status(current: Mapping[str, Any], works: Sequence[Mapping[str, Any]],
                     leaders: Sequence[str]) -> Body:
    reported = [w for w in works if reported_job_status(w)]
    out: Body = {k: v for k, v in current.items() if k in ("clusters",)}
    if not reported:
        out["phase"] = current.get("phase") or "Pending"
        out["conditions"] = list(current.get("conditions", []))
        return out
    lead = job_status_of(leader_work(reported, leaders))
    out.update({k: v for k, v in lead.items()
                if k in ("conditions", "phase", "tensorboard", "startTime", "completionTime")})
    phases = [job_status_of(w).get("phase") for w in reported]
    if "Failed" in phases:
        out["phase"] = "Failed"
    tasks: list[Body] = []
    aggregate: dict[str, int] = {}
    for work in reported:
        status = job_status_of(work)
        tasks.extend(status.get("tasks") or [])
        for key, value in (status.get("aggregate") or {}).items():
            aggregate[key] = aggregate.get(key, 0) + int(value)
    out["tasks"] = tasks
    out["aggregate"] = aggregate
    out["backoffCount"] = sum(int(job_status_of(w).get("backoffCount", 0))
                              for w in reported)
    return out


T9K_TF = TensorFlowTrainingJobAdapter()
T9K_MPI = T9kMPIJobAdapter()

__all__ = ["T9K_MPI", "T9K_TF"]
