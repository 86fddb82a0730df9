"""The parts of a pod template that fleet reads; everything else passes through untouched.

Job kinds embed full pod templates. Their schema names only what fleet needs to validate
(container names, resources) and keeps every other field (``x-kubernetes-preserve-unknown-fields``),
so templates round-trip intact and CEL rules can still reach container names.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, WithJsonSchema
from pydantic.config import JsonDict

from fleet.api.base import KubeModel
from fleet.api.quantity import QUANTITY_PATTERN

Quantity = Annotated[
    str | int | float,
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
        }
    ),
]

PRESERVE: JsonDict = {"x-kubernetes-preserve-unknown-fields": True}
ITEMS_PRESERVED: JsonDict = {"items": {"type": "object", **PRESERVE}}


MAX_CONTAINERS = 32  # bounds the cost of CEL rules that look for a container by name


class OpenModel(KubeModel):
    """A model whose unnamed fields are kept, in Python and in the API server."""

    model_config = ConfigDict(extra="allow", json_schema_extra=PRESERVE)


class ResourceRequirements(OpenModel):
    limits: dict[str, Quantity] = Field(default_factory=dict)
    requests: dict[str, Quantity] = Field(default_factory=dict)


class Container(OpenModel):
    name: str = Field(min_length=1)
    image: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)


class PodSpec(OpenModel):
    containers: list[Container] = Field(
        min_length=1, max_length=MAX_CONTAINERS, description="At least one container, as in a Pod."
    )
    init_containers: list[Container] | None = Field(default=None, max_length=MAX_CONTAINERS)
    priority_class_name: str | None = None


class TemplateMetadata(OpenModel):
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class PodTemplateSpec(OpenModel):
    metadata: TemplateMetadata | None = None
    spec: PodSpec
