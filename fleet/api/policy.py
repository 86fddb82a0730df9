"""PropagationPolicy and ClusterPropagationPolicy, ``policy.one.alibabacloud.com/v1alpha1``.

The ACK One fleet API (itself Karmada's): which jobs a policy selects, where they may go, how
their replicas are divided, whether they wait in a quota queue first, and how they fail over.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import ConfigDict, Field

from fleet.api import limits
from fleet.api.base import KubeModel, ObjectMeta

Name = Annotated[str, Field(max_length=limits.MAX_NAME)]
Names = Annotated[list[Name], Field(max_length=limits.MAX_CLUSTER_NAMES)]
LabelMap = Annotated[dict[str, Annotated[str, Field(max_length=limits.MAX_LABEL_VALUE)]],
                     Field(max_length=limits.MAX_LABEL_TERMS)]


class LabelSelectorRequirement(KubeModel):
    key: str = Field(min_length=1, max_length=limits.MAX_KEY)
    operator: str = Field(pattern=r"^(In|NotIn|Exists|DoesNotExist)$")
    values: Annotated[list[Annotated[str, Field(max_length=limits.MAX_LABEL_VALUE)]],
                      Field(max_length=limits.MAX_LABEL_VALUES)] = Field(default_factory=list)


class LabelSelector(KubeModel):
    match_labels: LabelMap = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, max_length=limits.MAX_LABEL_TERMS)


class ResourceSelector(KubeModel):
    api_version: str = Field(min_length=1, max_length=limits.MAX_NAME)
    kind: str = Field(min_length=1, max_length=limits.MAX_NAME)
    namespace: str | None = Field(default=None, max_length=limits.MAX_LABEL_VALUE)
    name: str | None = Field(default=None, max_length=limits.MAX_NAME)
    label_selector: LabelSelector | None = None


class ClusterAffinity(KubeModel):
    cluster_names: Names = Field(default_factory=list)
    exclude: Names = Field(default_factory=list)
    label_selector: LabelSelector | None = None


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(KubeModel):
    key: str | None = Field(default=None, max_length=limits.MAX_KEY)
    operator: str | None = Field(default=None, pattern=r"^(Exists|Equal)$")
    value: str | None = Field(default=None, max_length=limits.MAX_LABEL_VALUE)
    effect: TaintEffect | None = None
    toleration_seconds: int | None = Field(default=None, ge=0, le=limits.MAX_SECONDS)


class SpreadConstraint(KubeModel):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [{
        "rule": "!has(self.minGroups) || !has(self.maxGroups) || self.minGroups <= self.maxGroups",
        "message": "spec.placement.spreadConstraints[*].minGroups: must not exceed maxGroups",
    }]})

    spread_by_field: str | None = Field(default=None, pattern=r"^(cluster|region|zone|provider)$")
    spread_by_label: str | None = Field(default=None, max_length=limits.MAX_KEY)
    max_groups: int | None = Field(default=None, ge=1, le=limits.MAX_GROUPS)
    min_groups: int | None = Field(default=None, ge=1, le=limits.MAX_GROUPS)


class ReplicaSchedulingType(StrEnum):
    DUPLICATED = "Duplicated"
    DIVIDED = "Divided"


class ReplicaDivisionPreference(StrEnum):
    AGGREGATED = "Aggregated"
    WEIGHTED = "Weighted"


class CustomSchedulingType(StrEnum):
    GANG = "Gang"


class StaticClusterWeight(KubeModel):
    target_cluster: ClusterAffinity
    weight: int = Field(ge=1, le=limits.MAX_WEIGHT)


class DynamicWeightFactor(StrEnum):
    AVAILABLE_REPLICAS = "AvailableReplicas"


class ClusterPreferences(KubeModel):
    static_weight_list: list[StaticClusterWeight] = Field(default_factory=list,
                                                          max_length=limits.MAX_WEIGHTS)
    dynamic_weight: DynamicWeightFactor | None = None


class ReplicaScheduling(KubeModel):
    replica_scheduling_type: ReplicaSchedulingType | None = Field(
        default=None, description="Duplicated or Divided (default Divided)."
    )
    replica_division_preference: ReplicaDivisionPreference | None = None
    weight_preference: ClusterPreferences | None = None
    custom_scheduling_type: CustomSchedulingType | None = Field(
        default=None, description="Gang: every replica of the job starts, or none does."
    )


class Placement(KubeModel):
    cluster_affinity: ClusterAffinity | None = None
    cluster_tolerations: list[Toleration] = Field(default_factory=list,
                                                  max_length=limits.MAX_TOLERATIONS)
    spread_constraints: list[SpreadConstraint] = Field(
        default_factory=list, max_length=limits.MAX_SPREAD_CONSTRAINTS)
    replica_scheduling: ReplicaScheduling | None = None


class PurgeMode(StrEnum):
    IMMEDIATELY = "Immediately"
    GRACIOUSLY = "Graciously"
    NEVER = "Never"


class DecisionConditions(KubeModel):
    toleration_seconds: int | None = Field(default=None, ge=0, le=limits.MAX_SECONDS)


class ApplicationFailover(KubeModel):
    decision_conditions: DecisionConditions | None = None
    purge_mode: PurgeMode | None = Field(default=None, description="Default Graciously.")
    grace_period_seconds: int | None = Field(default=None, ge=0, le=limits.MAX_SECONDS)


class Failover(KubeModel):
    application: ApplicationFailover | None = None


class Suspension(KubeModel):
    scheduling: bool | None = Field(
        default=None, description="true: jobs wait in their quota queue until admitted."
    )


class PropagationPolicySpec(KubeModel):
    resource_selectors: list[ResourceSelector] = Field(min_length=1,
                                                       max_length=limits.MAX_SELECTORS)
    placement: Placement | None = None
    propagate_deps: bool | None = None
    failover: Failover | None = None
    suspension: Suspension | None = None
    priority: int | None = Field(default=None, ge=-limits.MAX_PRIORITY, le=limits.MAX_PRIORITY,
                                 description="Higher wins among matching policies.")


class PropagationPolicy(KubeModel):
    api_version: str = "policy.one.alibabacloud.com/v1alpha1"
    kind: str = "PropagationPolicy"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PropagationPolicySpec


class ClusterPropagationPolicy(KubeModel):
    api_version: str = "policy.one.alibabacloud.com/v1alpha1"
    kind: str = "ClusterPropagationPolicy"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PropagationPolicySpec
