"""Kubeflow v1 jobs: replica specs in a map keyed by replica type, Kubeflow conditions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fleet.api.kubeflow import MULTIKUEUE_MANAGER, OPERATOR_MANAGER
from fleet.clients import resources as r
from fleet.kinds.base import Body, KindAdapter, deep_copy
from fleet.kinds.status import merge_kubeflow_status


class KubeflowAdapter(KindAdapter):
    """Replica specs in a map keyed by replica type; without a leader, worker 0 leads."""

    fallback_leader = "Worker"
    own_managers = (OPERATOR_MANAGER,)

    def __init__(self, resource: r.Resource, field: str, leaders: tuple[str, ...],
                 work_prefix: str) -> None:
        self.resource = resource
        self.field = field
        self.leaders = leaders
        self.work_prefix = work_prefix
        self.replicas_field = f"spec.{field}"

    def replica_specs(self, body: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
        specs: Mapping[str, Any] = (body.get("spec") or {}).get(self.field) or {}
        return list(specs.items())

    def with_replicas(self, body: Body, counts: Mapping[str, int]) -> Body:
        out = deep_copy(body)
        specs = out["spec"][self.field]
        for name in list(specs):
            if counts.get(name, 0) == 0:
                del specs[name]
            else:
                specs[name]["replicas"] = counts[name]
        return out

    def state(self, status: Mapping[str, Any] | None) -> str:
        conditions = (status or {}).get("conditions") or []
        true = [c["type"] for c in conditions if c.get("status") == "True"]
        for terminal in ("Failed", "Succeeded"):
            if terminal in true:
                return terminal
        return true[-1] if true else ""

    def managed_by(self, body: Mapping[str, Any]) -> str | None:
        manager = ((body.get("spec") or {}).get("runPolicy") or {}).get("managedBy")
        return manager if isinstance(manager, str) else None

    def gang_minimum(self, body: Mapping[str, Any]) -> int | None:
        policy = ((body.get("spec") or {}).get("runPolicy") or {}).get("schedulingPolicy")
        minimum = (policy or {}).get("minAvailable")
        return minimum if isinstance(minimum, int) else None

    def for_member(self, body: Body) -> Body:
        """A member may run the training operator as well: MultiKueue's name is the one value
        besides its own that the operator accepts, and it leaves such a job alone (as it does
        MultiKueue's copies). The agent runs the copies it applied from Works, whatever they
        name."""
        spec = body.setdefault("spec", {})
        spec["runPolicy"] = {**(spec.get("runPolicy") or {}), "managedBy": MULTIKUEUE_MANAGER}
        return body

    def aggregate(self, body: Mapping[str, Any], works: Sequence[Mapping[str, Any]],
                  now: str) -> Body:
        return merge_kubeflow_status(body.get("status") or {}, works, self.leaders, now)


PYTORCH = KubeflowAdapter(r.PYTORCHJOBS, "pytorchReplicaSpecs", ("Master",), "pytorchjob")
TF = KubeflowAdapter(r.TFJOBS, "tfReplicaSpecs", ("Chief", "Master"), "tfjob")
MPI = KubeflowAdapter(r.KUBEFLOW_MPIJOBS, "mpiReplicaSpecs", ("Launcher",), "mpijob")
JAX = KubeflowAdapter(r.JAXJOBS, "jaxReplicaSpecs", (), "jaxjob")  # all workers decide
PADDLE = KubeflowAdapter(r.PADDLEJOBS, "paddleReplicaSpecs", ("Master",), "paddlejob")
XGBOOST = KubeflowAdapter(r.XGBOOSTJOBS, "xgbReplicaSpecs", ("Master",), "xgboostjob")
