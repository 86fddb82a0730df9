"""Kubeflow Trainer v2, ``trainer.kubeflow.org/v1alpha1``: TrainJob, TrainingRuntime and
ClusterTrainingRuntime.

Field names, defaults, bounds and status follow Kubeflow Trainer v2.3.0 (the release the
``kubeflow`` 0.5.0 SDK's models are generated from), so that what the SDK and Trainer's
examples submit applies unchanged. A runtime's template is a JobSet spec
(:mod:`fleet.api.jobset`). The status is Trainer's: conditions ``Suspended``, ``Complete`` and
``Failed`` only (the SDK reads a TrainJob without conditions as running once its pods run),
and ``jobsStatus``; on the hub a waiting TrainJob says why in ``queue``, never a condition.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from fleet.api import limits
from fleet.api.base import Condition, CustomResource, KubeModel, ObjectMeta
from fleet.api.jobset import JobSetSpec, Kept, ReplicatedJobStatus
from fleet.api.kubeflow import MULTIKUEUE_MANAGER, QueueInfo
from fleet.api.pods import OpenModel, ResourceRequirements, TemplateMetadata, core
from fleet.api.schema import SERVED_DEFAULT

TRAINER_GROUP = "trainer.kubeflow.org"
TRAINER_V1ALPHA1 = f"{TRAINER_GROUP}/v1alpha1"
TRAINJOB_MANAGER = "trainer.kubeflow.org/trainjob-controller"
MANAGERS = (TRAINJOB_MANAGER, MULTIKUEUE_MANAGER)
CLUSTER_RUNTIME = "ClusterTrainingRuntime"
NAMESPACED_RUNTIME = "TrainingRuntime"
MAX_ENV = 128
MAX_COMMAND = 128
MAX_COMMAND_ITEM = 1_048_576  # Trainer's bound: the SDK embeds a function's source in one
MAX_PATCHES = 16


def _rule(rule: str, message: str) -> JsonDict:
    return {"rule": rule, "message": message}


def _immutable(field: str) -> JsonDict:
    return {"x-kubernetes-validations": [_rule("self == oldSelf", f"{field}: is immutable")]}


def _default(value: str | int | bool) -> JsonDict:
    return {SERVED_DEFAULT: value}


class EnvVar(OpenModel):
    model_config = core("EnvVar")

    name: str = Field(min_length=1, max_length=limits.MAX_TEXT)


EnvList = Annotated[list[EnvVar], Field(max_length=MAX_ENV, json_schema_extra={
    "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})]
Command = Annotated[list[Annotated[str, Field(max_length=MAX_COMMAND_ITEM)]],
                    Field(max_length=MAX_COMMAND)]


class RuntimeRef(KubeModel):
    name: str = Field(min_length=1, max_length=limits.MAX_NAME,
                      description="The runtime's name.")
    api_group: str | None = Field(default=None, max_length=limits.MAX_NAME,
                                  json_schema_extra=_default(TRAINER_GROUP))
    kind: str | None = Field(
        default=None, max_length=limits.MAX_NAME, json_schema_extra={
            **_default(CLUSTER_RUNTIME), "x-kubernetes-validations": [_rule(
                f"self in ['{CLUSTER_RUNTIME}', '{NAMESPACED_RUNTIME}']",
                f"spec.runtimeRef.kind: must be {CLUSTER_RUNTIME} or {NAMESPACED_RUNTIME}")]})


class SecretRef(KubeModel):
    name: str = Field(default="", max_length=limits.MAX_NAME)


class StorageInitializer(KubeModel):
    storage_uri: str | None = Field(default=None, max_length=2048, json_schema_extra={
        "x-kubernetes-validations": [_rule(
            "self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')",
            "storageUri: must be a URI with a scheme, such as hf://org/name")]})
    env: EnvList | None = None
    secret_ref: SecretRef | None = None


class Initializer(KubeModel):
    dataset: StorageInitializer | None = None
    model: StorageInitializer | None = None


class Trainer(KubeModel):
    image: str | None = Field(default=None, max_length=500)
    command: Command | None = None
    args: Command | None = None
    env: EnvList | None = None
    num_nodes: int | None = Field(default=None, ge=1, le=limits.MAX_REPLICAS,
                                  description="Nodes (pods) of the trainer.")
    resources_per_node: ResourceRequirements | None = None
    num_proc_per_node: int | None = Field(default=None, ge=1,
                                          le=limits.MAX_SLOTS_PER_WORKER)


class RuntimePatch(KubeModel):
    manager: str = Field(min_length=1, max_length=limits.MAX_NAME,
                         description="Who wrote the patch (the SDK: "
                         "trainer.kubeflow.org/kubeflow-sdk).")
    time: str | None = Field(default=None, max_length=64)
    training_runtime_spec: Kept | None = None


class TrainJobSpec(KubeModel):
    runtime_ref: RuntimeRef = Field(json_schema_extra=_immutable("spec.runtimeRef"))
    initializer: Initializer | None = Field(default=None,
                                            json_schema_extra=_immutable("spec.initializer"))
    trainer: Trainer | None = Field(default=None, json_schema_extra=_immutable("spec.trainer"))
    runtime_patches: list[RuntimePatch] | None = Field(
        default=None, max_length=MAX_PATCHES, json_schema_extra={
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["manager"]})
    suspend: bool | None = Field(default=None, json_schema_extra=_default(False))
    active_deadline_seconds: int | None = Field(
        default=None, ge=1, le=limits.MAX_SECONDS,
        json_schema_extra=_immutable("spec.activeDeadlineSeconds"))
    managed_by: str | None = Field(
        default=None, max_length=limits.MAX_NAME,
        description=f"Who runs the TrainJob: {TRAINJOB_MANAGER} (the default: fleet places and "
        f"runs it) or {MULTIKUEUE_MANAGER} (fleet leaves it alone). Immutable.",
        json_schema_extra={**_default(TRAINJOB_MANAGER), "x-kubernetes-validations": [
            _rule(f"self in {list(MANAGERS)}",
                  f"spec.managedBy: must be {' or '.join(MANAGERS)}"),
            _rule("self == oldSelf", "spec.managedBy: is immutable")]})


class TrainJobStatus(KubeModel):
    conditions: list[Condition] = Field(default_factory=list)
    jobs_status: list[ReplicatedJobStatus] = Field(default_factory=list)  # JobSet's, as is
    queue: QueueInfo | None = None
    clusters: list[str] = Field(default_factory=list)


class TrainJob(CustomResource[TrainJobSpec, TrainJobStatus]):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        _rule("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && "
              "size(self.metadata.name) <= 63",
              "metadata.name: must be a DNS label (RFC 1035) of at most 63 characters"),
    ]})

    api_version: str = TRAINER_V1ALPHA1
    kind: str = "TrainJob"


# -- runtimes ---------------------------------------------------------------------------------

class EnvInjectionTarget(KubeModel):
    job_name: str = Field(min_length=1, max_length=limits.MAX_NAME)
    container_names: list[Annotated[str, Field(max_length=63)]] = Field(min_length=1,
                                                                       max_length=8)


class TorchPolicy(KubeModel):
    env_injection: Annotated[list[EnvInjectionTarget], Field(max_length=16)] | None = None


class MPIImplementation(StrEnum):
    OPEN_MPI = "OpenMPI"
    UNSET = ""


class MPIPolicy(KubeModel):
    num_proc_per_node: int | None = Field(default=None, ge=1, le=limits.MAX_SLOTS_PER_WORKER,
                                          json_schema_extra=_default(1))
    mpi_implementation: MPIImplementation | None = Field(
        default=None, json_schema_extra=_default("OpenMPI"))
    ssh_auth_mount_path: str | None = Field(default=None, max_length=limits.MAX_TEXT,
                                            json_schema_extra=_default("/root/.ssh"))
    run_launcher_as_node: bool | None = Field(default=None, json_schema_extra=_default(False))


class FluxPolicy(KubeModel):
    num_proc_per_node: int | None = Field(default=None, ge=1, le=limits.MAX_SLOTS_PER_WORKER,
                                          json_schema_extra=_default(1))


class Empty(KubeModel):
    """A policy with no fields (``jax: {}``): its presence is what counts."""


class MLPolicy(KubeModel):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [_rule(
        "[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost), "
        "has(self.flux)].filter(x, x).size() <= 1",
        "spec.mlPolicy: only one of torch, mpi, jax, xgboost and flux may be set")]})

    num_nodes: int | None = Field(default=None, ge=1, le=limits.MAX_REPLICAS)
    torch: TorchPolicy | None = None
    mpi: MPIPolicy | None = None
    flux: FluxPolicy | None = None
    jax: Empty | None = None
    xgboost: Empty | None = None


class JobSetTemplateSpec(KubeModel):
    metadata: TemplateMetadata | None = None
    spec: JobSetSpec


class TrainingRuntimeSpec(KubeModel):
    ml_policy: MLPolicy | None = None
    pod_group_policy: Kept | None = None
    template: JobSetTemplateSpec


class TrainingRuntime(KubeModel):
    """A runtime of one namespace (no status)."""

    api_version: str = TRAINER_V1ALPHA1
    kind: str = NAMESPACED_RUNTIME
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: TrainingRuntimeSpec


class ClusterTrainingRuntime(TrainingRuntime):
    """A runtime of every namespace (no status)."""

    kind: str = CLUSTER_RUNTIME
