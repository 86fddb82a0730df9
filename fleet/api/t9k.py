"""T9k jobs, ``batch.tensorstack.dev/v1beta1``: MPIJob and TensorFlowTrainingJob (seeds 000, 003).

Replica types are lower case (``worker``, ``chief``, ``ps``, ``evaluator``, ``launcher``).
The restart policy of a replica spec overrides its template's. ``runMode`` switches a job into
debug mode (replicas deployed, training not started) or pause mode (replicas deleted).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict, JsonValue

from fleet.api import limits
from fleet.api.base import Condition, CustomResource, KubeModel
from fleet.api.kubeflow import QueueInfo, RestartPolicy
from fleet.api.pods import ITEMS_PRESERVED, PRESERVE, Arguments, OpenModel, PodTemplateSpec

T9K_V1BETA1 = "batch.tensorstack.dev/v1beta1"


class T9kScheduler(KubeModel):
    queue: str = Field(min_length=1, max_length=limits.MAX_NAME)
    priority: int | None = Field(default=None, ge=0, le=100)


class SchedulerPolicy(KubeModel):
    t9k_scheduler: T9kScheduler | None = None


class ReplicaModeSpec(KubeModel):
    """How one replica type behaves in debug mode, or comes back from pause mode."""

    type: str = Field(min_length=1, max_length=limits.MAX_LABEL_VALUE)
    skip_init_container: bool | None = Field(default=None, description="Default false.")
    command: Arguments | None = None
    args: Arguments | None = None


ModeSpecs = Annotated[list[ReplicaModeSpec], Field(max_length=limits.MAX_MODE_SPECS)]


class DebugMode(KubeModel):
    enabled: bool = False
    replica_specs: ModeSpecs = Field(default_factory=list)


PAUSE_IMMUTABLE = {
    "x-kubernetes-validations": [
        {
            "rule": "!has(oldSelf.resumeSpecs) || (has(self.resumeSpecs) "
            "&& self.resumeSpecs == oldSelf.resumeSpecs)",
            "message": "spec.runMode.pause.resumeSpecs cannot be changed after creation",
        }
    ]
}


class PauseMode(KubeModel):
    enabled: bool = False
    resume_specs: ModeSpecs | None = None


class RunMode(KubeModel):
    debug: DebugMode | None = None
    pause: Annotated[PauseMode | None, Field(json_schema_extra=PAUSE_IMMUTABLE)] = None


class CleanUpPolicy(StrEnum):
    NONE = "None"
    ALL = "All"
    UNFINISHED = "Unfinished"


class T9kStatus(OpenModel):
    """conditions Initialized, Running, ReplicaFailure, Completed, Failed, Paused; phase Pending,
    Running, Paused, Resuming, Succeeded, Failed, Unknown; per-type tasks; aggregate counts."""

    conditions: list[Condition] = Field(default_factory=list)
    phase: str | None = None
    tasks: list[dict[str, Any]] = Field(
        default_factory=list, json_schema_extra=ITEMS_PRESERVED
    )
    aggregate: dict[str, int] | None = None
    tensorboard: dict[str, Any] | None = Field(default=None, json_schema_extra=PRESERVE)
    backoff_count: int | None = Field(default=None, description="Restarts of all replicas.")
    start_time: str | None = None
    completion_time: str | None = None
    queue: QueueInfo | None = None
    clusters: list[str] = Field(default_factory=list)


def _mpi_worker_rule() -> dict[str, object]:
    return {
        "x-kubernetes-validations": [
            {
                "rule": "self.template.spec.containers.exists(c, c.name == 'mpi-worker')",
                "message": "spec.worker.template.spec.containers: a container named "
                "'mpi-worker' is required (it runs sshd and the MPI processes)",
            }
        ]
    }


def _mode_types_rule(types: str, names: str) -> JsonDict:
    """Debug and resume specs name replica types the job has (CEL over the whole spec)."""
    rules: list[JsonValue] = []
    for path, field in (("runMode.debug", "replicaSpecs"), ("runMode.pause", "resumeSpecs")):
        rules.append({
            "rule": f"!has(self.runMode) || !has(self.{path}) || !has(self.{path}.{field}) || "
                    f"self.{path}.{field}.all(s, s.type in {types})",
            "message": f"spec.{path}.{field}[*].type: must name a replica type of the job "
                       f"({names})",
        })
    return {"x-kubernetes-validations": rules}


class MPIWorker(KubeModel):
    replicas: int = Field(default=1, ge=1, le=limits.MAX_REPLICAS)
    extra_mpi_args: Arguments = Field(
        default_factory=list, alias="extraMPIArgs", description="Extra mpirun arguments."
    )
    cmd: Arguments = Field(min_length=1, description="The command each MPI process runs.")
    template: PodTemplateSpec


class SSHConfig(KubeModel):
    ssh_auth_mount_path: str | None = Field(
        default=None, pattern=r"^/", max_length=limits.MAX_TEXT,
        description="Where the job's SSH key is mounted "
        "(default /root/.ssh); another path means sshd runs as a non-root user.")
    sshd_path: str | None = Field(default=None, pattern=r"^/", max_length=limits.MAX_TEXT,
                                  description="Absolute sshd path.")


class MPIRunPolicy(KubeModel):
    clean_up_workers: bool | None = None
    backoff_limit: int | None = Field(default=None, ge=0, le=limits.MAX_BACKOFF_LIMIT)
    active_deadline_seconds: int | None = Field(default=None, ge=1, le=limits.MAX_SECONDS)


class MPIJobSpec(KubeModel):
    model_config = ConfigDict(json_schema_extra=_mode_types_rule("['worker', 'launcher']",
                                                                 "worker, launcher"))

    worker: Annotated[MPIWorker, Field(json_schema_extra=_mpi_worker_rule())]
    mca: Annotated[dict[str, Annotated[str, Field(max_length=limits.MAX_TEXT)]],
                   Field(max_length=limits.MAX_MCA)] = Field(
        default_factory=dict, description="--mca key value pairs.")
    ssh: SSHConfig | None = None
    mpi_home: str | None = Field(default=None, alias="mpiHome", pattern=r"^/",
                                 max_length=limits.MAX_TEXT)
    run_policy: MPIRunPolicy | None = None
    scheduler: SchedulerPolicy | None = None
    run_mode: RunMode | None = None


class MPIJob(CustomResource[MPIJobSpec, T9kStatus]):
    api_version: str = T9K_V1BETA1
    kind: str = "MPIJob"


class TFReplicaType(StrEnum):
    CHIEF = "chief"
    WORKER = "worker"
    PS = "ps"
    EVALUATOR = "evaluator"


class TFReplicaSpec(KubeModel):
    type: TFReplicaType
    replicas: int = Field(default=1, ge=1, le=limits.MAX_REPLICAS)
    restart_policy: RestartPolicy | None = Field(default=None, description="Default Never.")
    template: PodTemplateSpec


class TFRunPolicy(KubeModel):
    backoff_limit: int | None = Field(default=None, ge=0, le=limits.MAX_BACKOFF_LIMIT)
    active_deadline_seconds: int | None = Field(default=None, ge=1, le=limits.MAX_SECONDS)
    clean_up_policy: CleanUpPolicy | None = None


LogLocation = Annotated[str, Field(pattern=r"^t9k://pvc/[a-z0-9]([-a-z0-9.]*[a-z0-9])?(/.*)?$",
                                   max_length=limits.MAX_TEXT)]


class TensorBoardSpec(OpenModel):
    image: str = Field(min_length=1, max_length=limits.MAX_TEXT)
    training_log_filesets: list[LogLocation] = Field(
        min_length=1, max_length=limits.MAX_LOG_FILESETS,
        description="Log locations, each t9k://pvc/<claim>/<path>.")


_UNIQUE_TYPES = {
    "x-kubernetes-validations": [
        {
            "rule": "self.all(a, self.exists_one(b, b.type == a.type))",
            "message": "spec.replicaSpecs: each replica type may appear only once",
        },
        {
            "rule": "self.all(r, r.type != 'chief' || !has(r.replicas) || r.replicas == 1)",
            "message": "spec.replicaSpecs: chief must have exactly 1 replica",
        },
        {
            "rule": "self.all(r, r.template.spec.containers.exists(c, c.name == 'tensorflow'))",
            "message": "spec.replicaSpecs[*].template.spec.containers: each replica type needs "
            "a container named 'tensorflow'",
        },
        {
            "rule": "self.map(r, has(r.replicas) ? r.replicas : 1).sum() "
                    f"<= {limits.MAX_JOB_REPLICAS}",
            "message": "spec.replicaSpecs[*].replicas: the job's replicas must add up to at "
                       f"most {limits.MAX_JOB_REPLICAS}",
        },
    ]
}


class TensorFlowTrainingJobSpec(KubeModel):
    model_config = ConfigDict(json_schema_extra=_mode_types_rule(
        "self.replicaSpecs.map(r, r.type)", "the types in spec.replicaSpecs"))

    replica_specs: Annotated[
        list[TFReplicaSpec],
        Field(min_length=1, max_length=4, json_schema_extra=_UNIQUE_TYPES,
              description="chief, worker, ps and evaluator, each at most once."),
    ]
    run_policy: TFRunPolicy | None = None
    scheduler: SchedulerPolicy | None = None
    tensorboard_spec: TensorBoardSpec | None = None
    run_mode: RunMode | None = None


class TensorFlowTrainingJob(CustomResource[TensorFlowTrainingJobSpec, T9kStatus]):
    api_version: str = T9K_V1BETA1
    kind: str = "TensorFlowTrainingJob"
