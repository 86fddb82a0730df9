"""Kubeflow training jobs, ``kubeflow.org/v1``: PyTorchJob, TFJob, MPIJob, JAXJob, PaddleJob
and XGBoostJob.

Field names, defaults and status follow the Kubeflow training-operator v1 API so that
manifests written for it apply unchanged. Replica-type keys are validated by CEL.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict, JsonValue

from fleet.api import limits
from fleet.api.base import Condition, CustomResource, KubeModel
from fleet.api.pods import PodTemplateSpec

KUBEFLOW_V1 = "kubeflow.org/v1"
# runPolicy.managedBy as training-operator v1.9 reads it: unset or its own name, the job is
# fleet's (the hub places it); MultiKueue's, another controller runs it and the hub leaves it
# alone. The operator's webhook refuses any other value, and any change after creation.
OPERATOR_MANAGER = "kubeflow.org/training-operator"
MULTIKUEUE_MANAGER = "kueue.x-k8s.io/multikueue"
MANAGERS = (OPERATOR_MANAGER, MULTIKUEUE_MANAGER)


class RestartPolicy(StrEnum):
    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"
    NEVER = "Never"
    EXIT_CODE = "ExitCode"


class CleanPodPolicy(StrEnum):
    ALL = "All"
    RUNNING = "Running"
    NONE = "None"


class ReplicaSpec(KubeModel):
    replicas: Annotated[int, Field(ge=1, le=limits.MAX_REPLICAS,
                                   description="Pods of this type (default 1).")] = 1
    restart_policy: RestartPolicy | None = Field(
        default=None, description="Never, OnFailure, Always or ExitCode (default Never)."
    )
    template: PodTemplateSpec


class SchedulingPolicy(KubeModel):
    min_available: int | None = Field(default=None, ge=1, le=limits.MAX_JOB_REPLICAS)
    queue: str | None = Field(default=None, max_length=limits.MAX_NAME)
    priority_class: str | None = Field(default=None, max_length=limits.MAX_NAME)
    schedule_timeout_seconds: int | None = Field(default=None, ge=0, le=limits.MAX_SECONDS)


class RunPolicy(KubeModel):
    clean_pod_policy: CleanPodPolicy | None = Field(
        default=None, description="Which pods to delete when the job finishes (default None)."
    )
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0, le=limits.MAX_SECONDS)
    active_deadline_seconds: int | None = Field(default=None, ge=1, le=limits.MAX_SECONDS)
    backoff_limit: int | None = Field(default=None, ge=0, le=limits.MAX_BACKOFF_LIMIT)
    scheduling_policy: SchedulingPolicy | None = None
    suspend: bool | None = None
    managed_by: str | None = Field(
        default=None, max_length=limits.MAX_NAME,
        description=f"Who runs the job: {OPERATOR_MANAGER} (the default: fleet places and runs "
        f"it) or {MULTIKUEUE_MANAGER} (left to MultiKueue: the hub neither places it nor "
        "writes its status). Immutable.",
        json_schema_extra={"x-kubernetes-validations": [
            {"rule": f"self in {list(MANAGERS)}",
             "message": f"spec.runPolicy.managedBy: must be {' or '.join(MANAGERS)}"},
            {"rule": "self == oldSelf", "message": "spec.runPolicy.managedBy: is immutable"},
        ]})


class ReplicaStatus(KubeModel):
    active: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    label_selector: dict[str, object] | None = None
    selector: str | None = None


class QueueInfo(KubeModel):
    """Why a job waits on the hub, and where (hub only)."""

    name: str | None = Field(default=None, description="The quota queue the job waits in.")
    position: int | None = Field(
        default=None, description="1 is the next job the queue admits; jobs admitted already "
        "do not count.")
    reason: str | None = None
    message: str | None = None


class JobStatus(KubeModel):
    """The Kubeflow job status: conditions Created, Running, Restarting, Succeeded, Failed,
    Suspended; per-replica-type counts; start and completion times. On the hub a job also
    shows a Queuing condition while it waits, ``queue`` and the ``clusters`` it runs on."""

    conditions: list[Condition] = Field(default_factory=list)
    replica_statuses: dict[str, ReplicaStatus] = Field(default_factory=dict)
    start_time: str | None = None
    completion_time: str | None = None
    last_reconcile_time: str | None = None
    restart_count: int | None = Field(
        default=None, description="Replicas re-created so far, counted against backoffLimit."
    )
    queue: QueueInfo | None = None
    clusters: list[str] = Field(default_factory=list)


def _rule(rule: str, message: str) -> JsonDict:
    return {"rule": rule, "message": message}


def _total_replicas(field: str) -> JsonDict:
    """The job's replicas over all types (a type's default is 1) stay within the job cap."""
    return _rule(f"self.map(k, has(self[k].replicas) ? self[k].replicas : 1).sum() "
                 f"<= {limits.MAX_JOB_REPLICAS}",
                 f"{field}[*].replicas: the job's replicas must add up to at most "
                 f"{limits.MAX_JOB_REPLICAS}")


def _replica_rules(field: str, allowed: tuple[str, ...], container: str,
                   *extra: JsonDict) -> JsonDict:
    """CEL rules on a map of replica specs: known types, the kind's container in each, the
    job's total of replicas."""
    names = ", ".join(allowed)
    quoted = ", ".join(f"'{a}'" for a in allowed)
    rules: list[JsonValue] = [
        _rule(f"self.all(k, k in [{quoted}])", f"{field}: replica type must be one of {names}"),
        _total_replicas(field),
        _rule(f"self.all(k, self[k].template.spec.containers.exists(c, c.name == '{container}'))",
              f"{field}[*].template.spec.containers: each replica type needs a container named "
              f"'{container}'"),
        *extra,
    ]
    return {"x-kubernetes-validations": rules}


def _exactly_one(field: str, role: str) -> JsonDict:
    return _rule(f"!('{role}' in self) || !has(self['{role}'].replicas) "
                 f"|| self['{role}'].replicas == 1",
                 f"{field}.{role}.replicas: must be 1")


MAX_REPLICA_TYPES = limits.MAX_REPLICA_TYPES


def _replica_specs(rules: JsonDict, description: str) -> Any:
    """A required map of replica specs by type, at least one and at most the cap of types,
    checked by ``rules``."""
    return Field(min_length=1, max_length=MAX_REPLICA_TYPES, json_schema_extra=rules,
                 description=description)

PYTORCH_TYPES = ("Master", "Worker")
TF_TYPES = ("Chief", "Master", "Worker", "PS", "Evaluator")
MPI_TYPES = ("Launcher", "Worker")


# An elasticPolicy's range: a missing bound takes the other's value, a given pair is ordered.
MIN_NOT_ABOVE_MAX = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
    _rule("!has(self.minReplicas) || !has(self.maxReplicas) || "
          "self.minReplicas <= self.maxReplicas",
          "spec.elasticPolicy.minReplicas: must not be greater than maxReplicas")]})


class RDZVConf(KubeModel):
    key: str = Field(max_length=limits.MAX_LABEL_VALUE)
    value: str = Field(default="", max_length=limits.MAX_TEXT)


class ElasticPolicy(KubeModel):
    """torchrun elastic training (the training-operator's ``elasticPolicy``): fleet runs
    anywhere from minReplicas to maxReplicas workers, admitted at what fits, grown as
    capacity frees and shrunk instead of evicted when preempted."""

    model_config = MIN_NOT_ABOVE_MAX

    min_replicas: int | None = Field(default=None, ge=1, le=limits.MAX_JOB_REPLICAS)
    max_replicas: int | None = Field(default=None, ge=1, le=limits.MAX_JOB_REPLICAS)
    rdzv_backend: str | None = Field(default=None, max_length=limits.MAX_TEXT)
    rdzv_host: str | None = Field(default=None, max_length=limits.MAX_TEXT)
    rdzv_port: int | None = Field(default=None, ge=1, le=65535)
    rdzv_id: str | None = Field(default=None, max_length=limits.MAX_TEXT)
    rdzv_conf: list[RDZVConf] | None = Field(default=None, max_length=limits.MAX_LABEL_VALUES)
    standalone: bool | None = None
    max_restarts: int | None = Field(default=None, ge=0, le=limits.MAX_REPLICAS)
    n_proc_per_node: int | None = Field(default=None, ge=1, le=limits.MAX_SLOTS_PER_WORKER)


class PyTorchJobSpec(KubeModel):
    pytorch_replica_specs: dict[str, ReplicaSpec] = _replica_specs(
        _replica_rules("spec.pytorchReplicaSpecs", PYTORCH_TYPES, "pytorch",
                       _exactly_one("spec.pytorchReplicaSpecs", "Master")),
        "Master (at most 1 replica) and Worker replica specs.")
    run_policy: RunPolicy | None = None
    elastic_policy: ElasticPolicy | None = None
    nproc_per_node: str | None = Field(default=None, max_length=limits.MAX_LABEL_VALUE)


class PyTorchJob(CustomResource[PyTorchJobSpec, JobStatus]):
    api_version: str = KUBEFLOW_V1
    kind: str = "PyTorchJob"


class SuccessPolicy(StrEnum):
    DEFAULT = ""
    ALL_WORKERS = "AllWorkers"


class TFJobSpec(KubeModel):
    tf_replica_specs: dict[str, ReplicaSpec] = _replica_specs(
        _replica_rules("spec.tfReplicaSpecs", TF_TYPES, "tensorflow",
                       _rule("!('Chief' in self && 'Master' in self)",
                             "spec.tfReplicaSpecs: Chief and Master are one role; set only one"),
                       _exactly_one("spec.tfReplicaSpecs", "Chief"),
                       _exactly_one("spec.tfReplicaSpecs", "Master")),
        "Chief (or Master), Worker, PS and Evaluator replica specs.")
    run_policy: RunPolicy | None = None
    success_policy: SuccessPolicy | None = None
    enable_dynamic_worker: bool | None = None


class TFJob(CustomResource[TFJobSpec, JobStatus]):
    api_version: str = KUBEFLOW_V1
    kind: str = "TFJob"


class MPIJobSpec(KubeModel):
    slots_per_worker: int | None = Field(
        default=None, ge=1, le=limits.MAX_SLOTS_PER_WORKER,
        description="MPI slots per worker in the hostfile (default 1)."
    )
    clean_pod_policy: CleanPodPolicy | None = Field(
        default=None, description="Deprecated: use runPolicy.cleanPodPolicy."
    )
    mpi_replica_specs: dict[str, ReplicaSpec] = _replica_specs(
        {"x-kubernetes-validations": [
            _rule("self.all(k, k in ['Launcher', 'Worker'])",
                  "spec.mpiReplicaSpecs: replica type must be one of Launcher, Worker"),
            _rule("'Launcher' in self", "spec.mpiReplicaSpecs.Launcher: is required"),
            _total_replicas("spec.mpiReplicaSpecs"),
            _exactly_one("spec.mpiReplicaSpecs", "Launcher"),
        ]},
        "Launcher (exactly 1 replica) and Worker replica specs.")
    run_policy: RunPolicy | None = None
    main_container: str | None = Field(default=None, max_length=limits.MAX_LABEL_VALUE)


class MPIJob(CustomResource[MPIJobSpec, JobStatus]):
    api_version: str = KUBEFLOW_V1
    kind: str = "MPIJob"


JAX_TYPES = ("Worker",)
PADDLE_TYPES = ("Master", "Worker")
XGBOOST_TYPES = ("Master", "Worker")


class JAXJobSpec(KubeModel):
    jax_replica_specs: dict[str, ReplicaSpec] = _replica_specs(
        _replica_rules("spec.jaxReplicaSpecs", JAX_TYPES, "jax"),
        "Worker replica specs (worker 0 is JAX's coordinator).")
    run_policy: RunPolicy | None = None


class JAXJob(CustomResource[JAXJobSpec, JobStatus]):
    api_version: str = KUBEFLOW_V1
    kind: str = "JAXJob"


class PaddleElasticPolicy(KubeModel):
    """Paddle's elastic range, kept as the operator's API has it: fleet runs a PaddleJob at
    its replicas and does not resize it (only PyTorchJob's torchrun is resized)."""

    model_config = MIN_NOT_ABOVE_MAX

    min_replicas: int | None = Field(default=None, ge=1, le=limits.MAX_JOB_REPLICAS)
    max_replicas: int | None = Field(default=None, ge=1, le=limits.MAX_JOB_REPLICAS)
    max_restarts: int | None = Field(default=None, ge=0, le=limits.MAX_REPLICAS)


class PaddleJobSpec(KubeModel):
    paddle_replica_specs: dict[str, ReplicaSpec] = _replica_specs(
        _replica_rules("spec.paddleReplicaSpecs", PADDLE_TYPES, "paddle"),
        "Master (parameter servers; without it the job runs collective) and Worker replica "
        "specs.")
    run_policy: RunPolicy | None = None
    elastic_policy: PaddleElasticPolicy | None = None


class PaddleJob(CustomResource[PaddleJobSpec, JobStatus]):
    api_version: str = KUBEFLOW_V1
    kind: str = "PaddleJob"


class XGBoostJobSpec(KubeModel):
    xgb_replica_specs: dict[str, ReplicaSpec] = _replica_specs(
        _replica_rules("spec.xgbReplicaSpecs", XGBOOST_TYPES, "xgboost",
                       _rule("'Master' in self", "spec.xgbReplicaSpecs.Master: is required"),
                       _exactly_one("spec.xgbReplicaSpecs", "Master")),
        "Master (exactly 1 replica, the tracker) and Worker replica specs.")
    run_policy: RunPolicy | None = None


class XGBoostJob(CustomResource[XGBoostJobSpec, JobStatus]):
    api_version: str = KUBEFLOW_V1
    kind: str = "XGBoostJob"
