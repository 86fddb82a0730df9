"""fleet's own API, ``fleet.sh/v1alpha1``: MemberCluster and Work.

A MemberCluster is a member's registration on the hub. An admin (``kubectl fleet join``)
creates it with the member's namespace and credentials; from then on only the member's agent
writes its status: heartbeat, capacity and conditions.

A Work is one job's share for one cluster, in namespace ``fleet-member-<cluster>``. The hub
writes its spec; the agent applies it and writes its status. Resource amounts in capacity
reports are integers in canonical units (cpu in millicores, memory in bytes, devices as counts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field
from pydantic.config import JsonDict

from fleet.api import limits
from fleet.api.base import Condition, KubeModel, ObjectMeta
from fleet.api.pods import ITEMS_PRESERVED, MAX_CONTAINERS, PRESERVE
from fleet.api.policy import TaintEffect

MEMBER_NAMESPACE_PREFIX = "fleet-member-"
AGENT_HEARTBEAT = "fleet.sh/agent-heartbeat"  # label of the Lease each agent renews
HEARTBEAT_LEASE = "fleet-agent"  # its name, in the member's hub namespace
# On every Work from its creation: the member's agent removes it once it has taken the Work's
# objects off the member (the hub drops it itself for a member it has lost).
AGENT_FINALIZER = "fleet.sh/agent"
# Mirror pods on the hub (fleet.hub.mirrors): the annotation a policy or job turns them on
# with ("true"), and the label each mirror carries, naming the member that runs its pod.
MIRROR_PODS = "fleet.sh/mirror-pods"
MIRROR_OF = "fleet.sh/mirror-of"

# Fencing (DESIGN §5.6). Every bind of a job raises its placement generation by one. The hub
# keeps it on the job (this annotation, written by the bind, which is guarded by the job's
# resourceVersion, so it only ever grows); each Work carries it (``spec.placement.generation``)
# and the member job the agent applies carries it (this annotation). An agent runs a member job
# only while a Work of its generation exists in its hub namespace, and removes it otherwise.
PLACEMENT_GENERATION = "fleet.sh/placement-generation"

# A Work's health, written by the agent: ``Healthy`` False counts toward application failover.
# Its reason says why; these reasons are member-side failures the hub also shows on the job as
# a ``ReplicaFailure`` condition and an event naming the member.
HEALTHY = "Healthy"
REPLICA_FAILURE = "ReplicaFailure"
MEMBER_FAILURE_REASONS = frozenset({
    "PriorityClassNotFound",  # the pod names a PriorityClass the member does not have
    "MemberQuotaExceeded",  # a ResourceQuota on the member refuses the pod
    "AdmissionDenied",  # an admission webhook or policy on the member refuses it
    "Forbidden",  # any other 403 on pod creation
    "Invalid",  # the member's API server finds the pod invalid (422, 400)
    "PodCreateRefused",  # another permanent refusal of the pod
    "ImagePullFailed",  # the member's nodes cannot pull the image
    "ContainerConfigInvalid",  # e.g. a missing ConfigMap or Secret the container needs
    "CrashLooping",  # a container keeps exiting and the kubelet backs off restarting it
})


def placement_generation(meta: Mapping[str, Any]) -> int:
    """The placement generation in an object's annotations; 0 for objects placed before
    fencing existed (a Work without one carries 0 too, so they still match)."""
    text = (meta.get("annotations") or {}).get(PLACEMENT_GENERATION)
    try:
        return max(0, int(text)) if text is not None else 0
    except (TypeError, ValueError):
        return 0


def member_namespace(cluster: str) -> str:
    return f"{MEMBER_NAMESPACE_PREFIX}{cluster}"


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
    nodes: list[str] = Field(default_factory=list, description="Names of the nodes in the group.")


class ClusterCapacity(KubeModel):
    observed_time: str | None = Field(
        default=None, description="When the agent read the nodes and pods this report sums."
    )
    node_groups: list[NodeGroup] = Field(default_factory=list)
    allocatable: dict[str, int] = Field(default_factory=dict)
    free: dict[str, int] = Field(default_factory=dict)
    reserved: dict[str, int] = Field(
        default_factory=dict, description="Held for Works whose pods are not bound yet.")
    reserved_for: list[str] = Field(
        default_factory=list, description="The Works holding nodes (counted as not free).")


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


class MemberCluster(KubeModel):
    api_version: str = "fleet.sh/v1alpha1"
    kind: str = "MemberCluster"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: MemberClusterSpec = Field(default_factory=MemberClusterSpec)
    status: MemberClusterStatus | None = None


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
    generation: int = Field(
        default=0, ge=0,
        description="The job's placement generation (fencing): the agent runs the member job "
                    "only while a Work of its generation exists, and removes older copies.",
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


class Work(KubeModel):
    api_version: str = "fleet.sh/v1alpha1"
    kind: str = "Work"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: WorkSpec
    status: WorkStatus | None = None
