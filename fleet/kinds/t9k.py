"""T9k jobs: TensorFlowTrainingJob (a list of typed replica specs) and MPIJob (one worker spec,
plus a launcher the member controller creates), with T9k phases and conditions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fleet.api.protocol import reported_job_status
from fleet.clients import resources as r
from fleet.kinds.base import Body, KindAdapter, RoleSpec, deep_copy
from fleet.kinds.status import job_status_of, leader_work


class TensorFlowTrainingJobAdapter(KindAdapter):
    resource = r.TENSORFLOWTRAININGJOBS
    leaders = ("chief",)
    has_phase = True
    replicas_field = "spec.replicaSpecs"

    def role_path(self, role: str) -> str:
        return f"{self.replicas_field}[type={role}]"

    def _roles(self, body: Mapping[str, Any]) -> list[RoleSpec]:
        specs = (body.get("spec") or {}).get("replicaSpecs") or []
        has_chief = any(s.get("type") == "chief" for s in specs)
        return [
            RoleSpec(s["type"], int(s.get("replicas", 1)), s.get("template") or {},
                     s["type"] == "chief" or (not has_chief and s["type"] == "worker"))
            for s in specs
        ]

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
    """The launcher requests nothing the hub counts: it runs beside the workers."""

    resource = r.T9K_MPIJOBS
    leaders = ("worker",)
    replicas_field = "spec"

    def role_path(self, role: str) -> str:
        return "spec.worker"

    def _roles(self, body: Mapping[str, Any]) -> list[RoleSpec]:
        worker = (body.get("spec") or {}).get("worker") or {}
        return [RoleSpec("worker", int(worker.get("replicas", 1)), worker.get("template") or {},
                         True)]

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
