"""PropagationPolicy and ClusterPropagationPolicy, ``policy.one.alibabacloud.com/v1alpha1``.

The ACK One fleet API (itself Karmada's): which jobs a policy selects, where they may go, how
their replicas are divided, whether they wait in a quota queue first, and how they fail over.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import ConfigDict, Field

from fleet.api.base import KubeModel, ObjectMeta


class LabelSelectorRequirement(KubeModel):
    key: str = Field(min_length=1)
    operator: str = Field(pattern=r"^(In|NotIn|Exists|DoesNotExist)$")
    values: list[str] = Field(default_factory=list)


class LabelSelector(KubeModel):
    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)


class ResourceSelector(KubeModel):
    api_version: str = Field(min_length=1)
    kind: str = Field(min_length=1)
    namespace: str | None = None
    name: str | None = None
    label_selector: LabelSelector | None = None


class ClusterAffinity(KubeModel):
    cluster_names: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    label_selector: LabelSelector | None = None


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(KubeModel):
    key: str | None = None
    operator: str | None = Field(default=None, pattern=r"^(Exists|Equal)$")
    value: str | None = None
    effect: TaintEffect | None = None
    toleration_seconds: int | None = None


class SpreadConstraint(KubeModel):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [{
        "rule": "!has(self.minGroups) || !has(self.maxGroups) || self.minGroups <= self.maxGroups",
        "message": "spec.placement.spreadConstraints[*].minGroups: must not exceed maxGroups",
    }]})

    spread_by_field: str | None = Field(default=None, pattern=r"^(cluster|region|zone|provider)$")
    spread_by_label: str | None = None
    max_groups: int | None = Field(default=None, ge=1)
    min_groups: int | None = Field(default=None, ge=1)


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
    weight: int = Field(ge=1)


class DynamicWeightFactor(StrEnum):
    AVAILABLE_REPLICAS = "AvailableReplicas"


class ClusterPreferences(KubeModel):
    static_weight_list: list[StaticClusterWeight] = Field(default_factory=list)
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
    cluster_tolerations: list[Toleration] = Field(default_factory=list)
    spread_constraints: list[SpreadConstraint] = Field(default_factory=list)
    replica_scheduling: ReplicaScheduling | None = None


class PurgeMode(StrEnum):
    IMMEDIATELY = "Immediately"
    GRACIOUSLY = "Graciously"
    NEVER = "Never"


class DecisionConditions(KubeModel):
    toleration_seconds: int | None = Field(default=None, ge=0)


class ApplicationFailover(KubeModel):
    decision_conditions: DecisionConditions | None = None
    purge_mode: PurgeMode | None = Field(default=None, description="Default Graciously.")
    grace_period_seconds: int | None = Field(default=None, ge=0)


class Failover(KubeModel):
    application: ApplicationFailover | None = None


class Suspension(KubeModel):
    scheduling: bool | None = Field(
        default=None, description="true: jobs wait in their quota queue until admitted."
    )


class PropagationPolicySpec(KubeModel):
    resource_selectors: list[ResourceSelector] = Field(min_length=1)
    placement: Placement | None = None
    propagate_deps: bool | None = None
    failover: Failover | None = None
    suspension: Suspension | None = None
    priority: int | None = Field(default=None, description="Higher wins among matching policies.")


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
