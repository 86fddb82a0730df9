"""ElasticQuotaTree (scheduling.sigs.k8s.io/v1beta1) and Queue (scheduling.x-k8s.io/v1alpha1).

The tree is Kube Queue's hierarchical quota as ACK One documents it (seed 002): every node has
``min`` (guaranteed) and ``max`` (ceiling) per resource, ``kube-queue/max-jobs`` counts jobs,
and leaves own namespaces. The hub makes one Queue per tree node in ``kube-queue``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field
from pydantic.config import JsonDict

from fleet.api import limits
from fleet.api.base import Condition, CustomResource, KubeModel
from fleet.api.pods import PlainResourceMap

_NODE_RULES: JsonDict = {
    "x-kubernetes-validations": [
        {
            "rule": "!has(self.children) || !has(self.namespaces) || size(self.namespaces) == 0",
            "message": "namespaces: only leaves (nodes without children) may own namespaces",
        },
    ]
}


class QuotaNode(KubeModel):
    name: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    min: PlainResourceMap = Field(default_factory=dict, description="Guaranteed amounts.")
    max: PlainResourceMap = Field(default_factory=dict, description="Ceilings.")
    namespaces: Annotated[list[Annotated[str, Field(max_length=limits.MAX_LABEL_VALUE)]],
                          Field(max_length=limits.MAX_QUOTA_NAMESPACES)] = Field(
        default_factory=list)
    # No maxItems here: the API server would multiply the CEL cost of the node rule by 100 per
    # level; the request size bounds the estimate instead, and the webhook counts the nodes
    # (at most fleet.api.limits.MAX_QUOTA_NODES).
    children: list[QuotaNode] = Field(default_factory=list)


QuotaNode.model_config["json_schema_extra"] = _NODE_RULES


class ElasticQuotaTreeSpec(KubeModel):
    root: QuotaNode


class ElasticQuotaTreeStatus(KubeModel):
    conditions: list[Condition] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    queues: int | None = None


class ElasticQuotaTree(CustomResource[ElasticQuotaTreeSpec, ElasticQuotaTreeStatus]):
    api_version: str = "scheduling.sigs.k8s.io/v1beta1"
    kind: str = "ElasticQuotaTree"


class QueuePolicy(StrEnum):
    PRIORITY = "Priority"
    BLOCK = "Block"


class QueueSpec(KubeModel):
    queue_policy: QueuePolicy | None = Field(
        default=None,
        description="Priority: jobs that fit may pass one that does not (bounded); "
        "Block: strict order. Default Priority.",
    )
    priority: int | None = None
    tree: str | None = Field(default=None, description="namespace/name of the ElasticQuotaTree.")
    path: list[str] = Field(default_factory=list, description="Node names from the root.")


class QueueStatus(KubeModel):
    conditions: list[Condition] = Field(default_factory=list)
    pending_jobs: list[str] = Field(
        default_factory=list, description="namespace/name of waiting jobs, in admission order.")
    min: dict[str, str] = Field(default_factory=dict)
    max: dict[str, str] = Field(default_factory=dict)
    used: dict[str, str] = Field(default_factory=dict)
    pending: int | None = None
    admitted: int | None = None
    usage: str | None = Field(default=None, description="One-line summary for kubectl get.")
    cells: dict[str, int] = Field(
        default_factory=dict, description="A leaf queue's cells: per member, how many of its "
        "nodes the leaf's guarantee (its min of nvidia.com/gpu) owns, dealt by the hub. Its "
        "jobs' pods prefer them, and another tenant's job there is a guest its claims take back.")


class Queue(CustomResource[QueueSpec, QueueStatus]):
    api_version: str = "scheduling.x-k8s.io/v1alpha1"
    kind: str = "Queue"
    spec: QueueSpec = Field(default_factory=QueueSpec)



