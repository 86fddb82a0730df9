"""JobSet, ``jobset.x-k8s.io/v1alpha2``: a group of Jobs that run as one workload.

Field names, defaults and status follow the JobSet API (kubernetes-sigs/jobset v0.12.0, the
release Kubeflow Trainer v2.3.0 builds its TrainJobs on), so that manifests written for it apply
unchanged. fleet places a JobSet like any other job (its pods are the gang) and the member's
agent runs it without the JobSet controller: the pods are named and labelled as the JobSet
and Job controllers name and label them (:mod:`member_agent.controllers.jobset`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import ConfigDict, Field, WithJsonSchema
from pydantic.config import JsonDict

from fleet.api import limits
from fleet.api.base import Condition, CustomResource, KubeModel
from fleet.api.kubeflow import QueueInfo
from fleet.api.pods import PodTemplateSpec, TemplateMetadata
from fleet.api.schema import SERVED_DEFAULT

JOBSET_V1ALPHA2 = "jobset.x-k8s.io/v1alpha2"
# spec.managedBy as JobSet reads it: unset or its own name, the JobSet controller (here:
# fleet) runs it; any other value, that controller does (MultiKueue's, on a manager cluster).
JOBSET_MANAGER = "jobset.sigs.k8s.io/jobset-controller"
MAX_REPLICATED_JOBS = 16  # replicated jobs of one JobSet (Trainer v2 uses at most four)
MAX_RULES = 32  # failure policy rules
# A replicated job's name ends up in every pod's hostname, "<jobset>-<rjob>-<job>-<pod>": a
# DNS label of 63 characters. JobSet checks the generated names; the model bounds each part.
MAX_RJOB_NAME = 63

Name = Annotated[str, Field(min_length=1, max_length=MAX_RJOB_NAME,
                            pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]


Kept = Annotated[dict[str, object], WithJsonSchema({
    "type": "object", "x-kubernetes-preserve-unknown-fields": True})]


def _rule(rule: str, message: str) -> JsonDict:
    return {"rule": rule, "message": message}


class CompletionMode(StrEnum):
    NON_INDEXED = "NonIndexed"
    INDEXED = "Indexed"


class JobSpec(KubeModel):
    """A batch/v1 JobSpec, as a replicated Job's template holds it. The policies fleet does
    not read are kept as given; a misspelt field is refused, as JobSet's CRD refuses it."""

    model_config = ConfigDict(json_schema_extra={
        "x-kubernetes-validations": [_rule(
            "!has(self.completions) || self.completions == "
            "(has(self.parallelism) ? self.parallelism : 1)",
            "completions: must equal parallelism (fleet runs every pod of a replicated Job "
            "at once, as one gang)")]})

    parallelism: int | None = Field(default=None, ge=1, le=limits.MAX_REPLICAS,
                                    description="Pods of each Job run at once (default 1).")
    completions: int | None = Field(default=None, ge=1, le=limits.MAX_REPLICAS,
                                    description="Pods that must succeed (default parallelism).")
    completion_mode: CompletionMode | None = None
    backoff_limit: int | None = Field(default=None, ge=0, le=limits.MAX_BACKOFF_LIMIT,
                                      description="Pod failures before the Job fails "
                                      "(default 6).")
    active_deadline_seconds: int | None = Field(default=None, ge=1, le=limits.MAX_SECONDS)
    backoff_limit_per_index: int | None = Field(default=None, ge=0,
                                                le=limits.MAX_BACKOFF_LIMIT)
    max_failed_indexes: int | None = Field(default=None, ge=0, le=limits.MAX_REPLICAS)
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0, le=limits.MAX_SECONDS)
    suspend: bool | None = None
    manual_selector: bool | None = None
    pod_replacement_policy: str | None = Field(default=None, max_length=limits.MAX_LABEL_VALUE)
    managed_by: str | None = Field(default=None, max_length=limits.MAX_LABEL_VALUE)
    pod_failure_policy: Kept | None = None
    success_policy: Kept | None = None
    selector: Kept | None = None
    template: PodTemplateSpec


class JobTemplateSpec(KubeModel):
    metadata: TemplateMetadata | None = None
    spec: JobSpec


class DependsOnStatus(StrEnum):
    READY = "Ready"
    COMPLETE = "Complete"


class DependsOn(KubeModel):
    name: Name
    status: DependsOnStatus


class ReplicatedJob(KubeModel):
    name: Name
    group_name: str | None = Field(default=None, max_length=limits.MAX_LABEL_VALUE,
                                   description='Jobs of a group are indexed together '
                                   '(default "default").')
    template: JobTemplateSpec
    replicas: int = Field(default=1, ge=1, le=limits.MAX_REPLICAS,
                          description="Jobs made from the template (default 1).",
                          json_schema_extra={SERVED_DEFAULT: 1})
    depends_on: list[DependsOn] | None = Field(
        default=None, max_length=5,
        description="The replicated jobs to wait for (Ready or Complete) before this one "
        "starts; each must come earlier in replicatedJobs.")


class Network(KubeModel):
    enable_dns_hostnames: bool | None = Field(
        default=None, description="Pods get hostnames <jobset>-<rjob>-<job>-<pod> in the "
        "JobSet's subdomain (default true).")
    subdomain: str | None = Field(default=None, max_length=limits.MAX_LABEL_VALUE,
                                  pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    publish_not_ready_addresses: bool | None = None


class Operator(StrEnum):
    ALL = "All"
    ANY = "Any"


class SuccessPolicy(KubeModel):
    operator: Operator = Field(default=Operator.ALL,
                               description="All or Any of the target Jobs must complete.")
    target_replicated_jobs: list[Name] | None = Field(
        default=None, max_length=MAX_REPLICATED_JOBS,
        description="The replicated jobs whose Jobs count (default: all).")


class RestartStrategy(StrEnum):
    RECREATE = "Recreate"
    BLOCKING_RECREATE = "BlockingRecreate"
    IN_PLACE_RESTART = "InPlaceRestart"


class FailurePolicyAction(StrEnum):
    FAIL_JOBSET = "FailJobSet"
    RESTART_JOBSET = "RestartJobSet"
    RESTART_JOBSET_AND_IGNORE_MAX_RESTARTS = "RestartJobSetAndIgnoreMaxRestarts"
    RESTART_JOB = "RestartJob"
    RESTART_JOB_AND_IGNORE_MAX_RESTARTS = "RestartJobAndIgnoreMaxRestarts"


class FailurePolicyRule(KubeModel):
    name: Name
    action: FailurePolicyAction
    on_job_failure_reasons: list[Annotated[str, Field(max_length=limits.MAX_LABEL_VALUE)]] \
        | None = Field(default=None, max_length=MAX_RULES)
    on_job_failure_message_patterns: list[Annotated[str, Field(max_length=limits.MAX_TEXT)]] \
        | None = Field(default=None, max_length=MAX_RULES)
    target_replicated_jobs: list[Name] | None = Field(default=None,
                                                      max_length=MAX_REPLICATED_JOBS)


class FailurePolicy(KubeModel):
    max_restarts: int = Field(default=0, ge=0, le=limits.MAX_BACKOFF_LIMIT,
                              description="Times the whole JobSet is restarted when a Job "
                              "fails, before it fails.")
    restart_strategy: RestartStrategy = RestartStrategy.RECREATE
    rules: list[FailurePolicyRule] | None = Field(default=None, max_length=MAX_RULES)


class StartupPolicyOrder(StrEnum):
    ANY_ORDER = "AnyOrder"
    IN_ORDER = "InOrder"


class StartupPolicy(KubeModel):
    startup_policy_order: StartupPolicyOrder = Field(
        description="InOrder: each replicated job starts once the one before is ready.")


class Coordinator(KubeModel):
    replicated_job: Name
    job_index: int = Field(default=0, ge=0, le=limits.MAX_REPLICAS)
    pod_index: int = Field(default=0, ge=0, le=limits.MAX_REPLICAS)


MANAGED_BY_IMMUTABLE: JsonDict = {"x-kubernetes-validations": [
    _rule("self == oldSelf", "spec.managedBy: is immutable")]}


class JobSetSpec(KubeModel):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        _rule("self.replicatedJobs.map(r, (has(r.replicas) ? r.replicas : 1) * "
              "(has(r.template.spec.parallelism) ? r.template.spec.parallelism : 1)).sum() <= "
              + str(limits.MAX_JOB_REPLICAS),
              f"spec.replicatedJobs: more than {limits.MAX_JOB_REPLICAS} pods in the JobSet"),
        _rule("!has(self.successPolicy) || !has(self.successPolicy.targetReplicatedJobs) || "
              "self.successPolicy.targetReplicatedJobs.all(t, "
              "self.replicatedJobs.exists(r, r.name == t))",
              "spec.successPolicy.targetReplicatedJobs: must name replicated jobs"),
        _rule("!has(self.coordinator) || self.replicatedJobs.exists(r, "
              "r.name == self.coordinator.replicatedJob)",
              "spec.coordinator.replicatedJob: must name a replicated job"),
        _rule("self.replicatedJobs.all(r, !has(r.dependsOn) || r.dependsOn.all(d, "
              "self.replicatedJobs.exists(o, o.name == d.name && o.name != r.name)))",
              "spec.replicatedJobs[*].dependsOn: must name another replicated job"),
        _rule("!has(self.replicatedJobs[0].dependsOn)",
              "spec.replicatedJobs[0].dependsOn: the first replicated job depends on none"),
        _rule("!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == "
              "'InOrder' && self.replicatedJobs.exists(r, has(r.dependsOn)))",
              "spec.startupPolicy: InOrder and dependsOn cannot be used together"),
    ]})

    replicated_jobs: list[ReplicatedJob] = Field(
        min_length=1, max_length=MAX_REPLICATED_JOBS,
        json_schema_extra={"x-kubernetes-list-type": "map",
                           "x-kubernetes-list-map-keys": ["name"]})
    network: Network | None = None
    success_policy: SuccessPolicy | None = None
    failure_policy: FailurePolicy | None = None
    startup_policy: StartupPolicy | None = None
    suspend: bool | None = None
    coordinator: Coordinator | None = None
    managed_by: str | None = Field(
        default=None, max_length=limits.MAX_LABEL_VALUE,
        description=f"Who runs the JobSet: {JOBSET_MANAGER} (the default: fleet places and "
        "runs it) or another controller (MultiKueue's: fleet leaves it alone). Immutable.",
        json_schema_extra=MANAGED_BY_IMMUTABLE)
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0, le=limits.MAX_SECONDS)
    volume_claim_policies: list[dict[str, object]] | None = Field(
        default=None, max_length=50, json_schema_extra={"items": {
            "type": "object", "x-kubernetes-preserve-unknown-fields": True}})


class ReplicatedJobStatus(KubeModel):
    name: str
    ready: int = 0
    succeeded: int = 0
    failed: int = 0
    active: int = 0
    suspended: int = 0


class JobSetStatus(KubeModel):
    """JobSet's status: conditions Completed, Failed, Suspended, StartupPolicyInProgress and
    StartupPolicyCompleted; Jobs per replicated job by state; restarts so far. On the hub a
    JobSet waiting for quota or capacity says why in ``queue`` (never as a condition:
    JobSet's clients read its conditions) and the ``clusters`` it runs on."""

    conditions: list[Condition] = Field(default_factory=list)
    restarts: int = 0
    restarts_count_towards_max: int | None = None
    pod_restarts: int | None = Field(default=None, description="Pods re-created so far, "
                                     "counted against the Jobs' backoffLimit (fleet).")
    start_time: str | None = Field(default=None, description="When its pods first started "
                                   "(again after a resume): a TrainJob's deadline counts "
                                   "from it (fleet).")
    terminal_state: str | None = None
    replicated_jobs_status: list[ReplicatedJobStatus] = Field(default_factory=list)
    queue: QueueInfo | None = None
    clusters: list[str] = Field(default_factory=list)


class JobSet(CustomResource[JobSetSpec, JobSetStatus]):
    api_version: str = JOBSET_V1ALPHA2
    kind: str = "JobSet"
