"""fleet's own API, ``fleet.sh/v1alpha1``: MemberCluster and Work.

A MemberCluster is a member's registration on the hub. An admin (``kubectl fleet join``)
creates it with the member's namespace and credentials; from then on only the member's agent
writes its status: heartbeat, capacity and conditions.

A Work is one job's share for one cluster, in namespace ``fleet-member-<cluster>``. The hub
writes its spec; the agent applies it and writes its status. Resource amounts in capacity
reports are integers in canonical units (cpu in millicores, memory in bytes, devices as counts).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field
from pydantic.config import JsonDict

from fleet.api import limits
from fleet.api.base import Condition, CustomResource, KubeModel
from fleet.api.pods import ITEMS_PRESERVED, MAX_CONTAINERS, PRESERVE
from fleet.api.policy import TaintEffect
from fleet.api.protocol import (
    AGENT_FINALIZER,
    AGENT_HEARTBEAT,
    API_VERSION,
    HEALTHY,
    HEARTBEAT_LEASE,
    LABEL_VALUE_PATTERN,
    MAX_SHARE_CELLS,
    MAX_SHARE_DOMAINS,
    MAX_TOPOLOGY_LEVELS,
    MEMBER_FAILURE_REASONS,
    PLACEMENT_GENERATION,
    REPLICA_FAILURE,
    member_namespace,
    placement_generation,
)

# Kept importable from here for the modules that name them through this one.
__all__ = ["AGENT_FINALIZER", "AGENT_HEARTBEAT", "HEALTHY", "HEARTBEAT_LEASE",
           "MEMBER_FAILURE_REASONS", "PLACEMENT_GENERATION", "REPLICA_FAILURE",
           "member_namespace", "placement_generation"]


class Taint(KubeModel):
    key: str = Field(min_length=1)
    value: str | None = None
    effect: TaintEffect


class MemberClusterSpec(KubeModel):
    taints: list[Taint] = Field(default_factory=list)
    reservation: bool | None = Field(
        default=None,
        description="Reserve the nodes a decision names until the job's pods land there.",
    )


class NodeGroup(KubeModel):
    """Nodes of one shape: the same free and allocatable amounts and the same labels."""

    count: int = Field(ge=1)
    allocatable: dict[str, int] = Field(default_factory=dict)
    free: dict[str, int] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    label_set: int | None = Field(
        default=None, ge=0,
        description="Its labels, as an index into the report's labelSets (a report names each "
                    "set of labels once: many groups share one rack's).")
    nodes: list[str] = Field(default_factory=list, description="Names of the nodes in the group.")

    def all_labels(self, label_sets: list[dict[str, str]]) -> dict[str, str]:
        """Its labels, with those of its label set."""
        shared = label_sets[self.label_set] if self.label_set is not None and \
            self.label_set < len(label_sets) else {}
        return {**shared, **self.labels}


class ClusterCapacity(KubeModel):
    observed_time: str | None = Field(
        default=None, description="When the agent read the nodes and pods this report sums."
    )
    node_groups: list[NodeGroup] = Field(default_factory=list)
    label_sets: list[dict[str, str]] = Field(
        default_factory=list,
        description="The distinct labels of the node groups, each once (groups name theirs by "
                    "index, labelSet).")
    allocatable: dict[str, int] = Field(default_factory=dict)
    free: dict[str, int] = Field(default_factory=dict)
    reserved: dict[str, int] = Field(
        default_factory=dict, description="Held for Works whose pods are not bound yet.")
    reserved_for: list[str] = Field(
        default_factory=list, description="The Works holding nodes (counted as not free).")
    topology_levels: list[str] = Field(
        default_factory=list, max_length=MAX_TOPOLOGY_LEVELS,
        description="The node labels of the member's topology levels, top level first "
                    "(kubernetes.io/hostname, the node itself, last): node groups carry "
                    "their values, but for the hostname's.")


class KubeletEndpoint(KubeModel):
    address: str = Field(min_length=1, max_length=limits.MAX_NAME)
    port: int = Field(ge=1, le=65535)


CONDITIONS_BY_TYPE: JsonDict = {"x-kubernetes-list-type": "map",
                                "x-kubernetes-list-map-keys": ["type"]}


# The agent writes Ready, heartbeat and capacity; the hub writes CapacityStale. Both apply
# server-side, each owning its own conditions (a list keyed by type).
class MemberClusterStatus(KubeModel):
    conditions: list[Condition] = Field(default_factory=list,
                                        json_schema_extra=CONDITIONS_BY_TYPE)
    last_heartbeat_time: str | None = None
    kubernetes_version: str | None = None
    capacity: ClusterCapacity | None = None
    ready_nodes: int | None = None
    free_gpus: int | None = None
    kubelet_endpoint: KubeletEndpoint | None = Field(
        default=None,
        description="Where the agent serves its pods' logs to the hub's API server, as a "
                    "kubelet does (the address and port of the member's node on the hub).")


class MemberCluster(CustomResource[MemberClusterSpec, MemberClusterStatus]):
    api_version: str = API_VERSION
    kind: str = "MemberCluster"
    spec: MemberClusterSpec = Field(default_factory=MemberClusterSpec)


class JobReference(KubeModel):
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str


class WorkPlacement(KubeModel):
    """Which replicas of the job run in this cluster."""

    cluster: str = Field(min_length=1)
    replicas: dict[str, int] = Field(
        default_factory=dict, description="Replica count per role in this cluster."
    )
    offsets: dict[str, int] = Field(
        default_factory=dict,
        description="Index of this cluster's first replica per role, when a job is split.",
    )
    nodes: list[str] = Field(default_factory=list, description="Nodes reserved for this share.")
    domains: list[dict[str, str]] = Field(
        default_factory=list, max_length=MAX_SHARE_DOMAINS,
        description="The topology domains the share keeps to (each the node labels of one "
                    "domain, top level first): the agent pins the share's pods to them.")
    role_domains: dict[str, Annotated[list[dict[str, str]], Field(
        max_length=MAX_SHARE_DOMAINS)]] = Field(
        default_factory=dict,
        description="Per role whose pod template asks for a topology of its own: the "
                    "domains that role's pods keep to (the agent pins its template to them).")
    tenant: str = Field(
        default="", max_length=63, pattern=f"^({LABEL_VALUE_PATTERN})?$",
        description="Whose nodes the share's pods keep to (the quota leaf that admitted the "
                    "job, or opportunistic), as a label value: the agent labels the pods "
                    "fleet.sh/tenant with it and has them prefer nodes without other "
                    "tenants' pods.")
    cells: list[Annotated[str, Field(max_length=253)]] = Field(
        default_factory=list, max_length=MAX_SHARE_CELLS,
        description="The nodes of this member the tenant's guarantee owns (its cells, dealt by "
                    "the hub in proportion to each quota leaf's min of GPUs): the agent has "
                    "the share's pods prefer them. Another tenant's pod there is a guest, "
                    "which the owner takes back when its guarantee needs the node.")
    generation: int = Field(
        default=0, ge=0,
        description="The job's placement generation (fencing): the agent runs the member job "
                    "only while a Work of its generation exists, and removes older copies.",
    )
    phase: Literal["", "Reserve", "Commit"] = Field(
        default="",
        description="Reservation mode's two phases: Reserve (the agent holds the share's nodes "
                    "with placeholder pods and reports the Reserved condition, no job pods "
                    "yet), then Commit (the job's pods replace the placeholders). Empty: no "
                    "reservation.",
    )


class WorkSpec(KubeModel):
    job: JobReference
    placement: WorkPlacement
    manifests: list[dict[str, Any]] = Field(
        min_length=1,
        json_schema_extra=ITEMS_PRESERVED,
        description="The job as the member must run it, then its dependencies.",
    )


class PodSummary(KubeModel):
    name: str
    labels: dict[str, str] | None = Field(
        default=None, max_length=limits.MAX_METADATA_ENTRIES,
        description="The member pod's labels: the hub's mirror of the pod carries them.")
    containers: list[str] | None = Field(
        default=None, max_length=MAX_CONTAINERS, description="Names of its containers.")
    role: str | None = None
    phase: str | None = None
    ready: bool | None = None
    restarts: int | None = None
    node: str | None = None
    exit_code: int | None = None
    start_time: str | None = None


class WorkStatus(KubeModel):
    conditions: list[Condition] = Field(default_factory=list)
    applied: bool | None = None
    state: str | None = None
    job_status: dict[str, Any] | None = Field(default=None, json_schema_extra=PRESERVE)
    pods: list[PodSummary] = Field(default_factory=list)
    bound_time: str | None = Field(
        default=None, description="When the agent saw every pod of this share bound to a node."
    )
    observed_generation: int | None = None


class Work(CustomResource[WorkSpec, WorkStatus]):
    api_version: str = API_VERSION
    kind: str = "Work"
