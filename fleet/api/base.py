"""Common pieces of every API model: camelCase aliases and the object metadata.

Models parse what the API server returns. Fields the models do not name are ignored when
parsing (the API server already pruned unknown fields against the generated schema), so a
model never has to be written back: controllers forward raw manifests, not re-serialised ones.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field


def to_camel(name: str) -> str:
    """``t9k_scheduler`` -> ``t9kScheduler`` (pydantic's own would give ``t9KScheduler``)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


class KubeModel(BaseModel):
    """Base of all models: camelCase on the wire, snake_case in Python."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=True,
    )


class OwnerReference(KubeModel):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(KubeModel):
    name: str = ""
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)
    owner_references: list[OwnerReference] = Field(default_factory=list)


SpecT = TypeVar("SpecT", bound=KubeModel)
StatusT = TypeVar("StatusT", bound=KubeModel)


class CustomResource(KubeModel, Generic[SpecT, StatusT]):
    """An object of a custom resource as the API server keeps it; subclasses give the
    defaults of ``apiVersion`` and ``kind``."""

    api_version: str
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: SpecT
    status: StatusT | None = None


class Condition(KubeModel):
    """A Kubernetes-style condition (type, status, reason, message, transition time)."""

    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None
    last_update_time: str | None = None
