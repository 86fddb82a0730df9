"""The parts of a pod template that fleet reads, with fleet's bounds.

Job kinds embed full pod templates. These models name only what fleet reads or bounds
(container names, resources, arguments, labels); their CRD schema is the whole core type's
(:mod:`fleet.api.podschema`) with these laid over it, so the API server refuses a misspelt
field under ``kubectl apply`` and prunes what no schema names, as Kubeflow's own CRDs do.
In Python every other field passes through untouched.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, WithJsonSchema
from pydantic.config import JsonDict

from fleet.api import limits
from fleet.api.base import KubeModel
from fleet.api.quantity import NON_NEGATIVE_QUANTITY_PATTERN
from fleet.api.schema import CORE_TYPE

_QUANTITY_SCHEMA: JsonDict = {
    "x-kubernetes-int-or-string": True,
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": NON_NEGATIVE_QUANTITY_PATTERN,
    "maxLength": limits.MAX_QUANTITY_LENGTH,
    "minimum": 0,
    "maximum": limits.MAX_QUANTITY,
}
# A request or limit: not negative, at most 1E (10^18) in its unit, written in at most 64
# characters. The schema bounds the integer form; CEL compares the string form.
Quantity = Annotated[
    str | int | float,
    WithJsonSchema({**_QUANTITY_SCHEMA, "x-kubernetes-validations": [{
        # The exponent guard keeps CEL from parsing what the pattern refuses ("1e999999999").
        "rule": "type(self) != string || self.matches('[eE][-+]?[0-9]{3}') || "
                "!isQuantity(self) || "
                f"quantity(self).compareTo(quantity('{limits.MAX_QUANTITY_TEXT}')) <= 0",
        "message": f"must be at most {limits.MAX_QUANTITY_TEXT} (10^18)",
    }]}),
]
# The same without CEL, for quota trees: nested eight deep with a hundred children each, a
# rule per amount would exceed the API server's CEL cost budget; the hub's webhook compares
# their string forms with the bound instead.
PlainQuantity = Annotated[str | int | float, WithJsonSchema(_QUANTITY_SCHEMA)]
ResourceMap = Annotated[dict[str, Quantity], Field(max_length=limits.MAX_RESOURCES)]
PlainResourceMap = Annotated[dict[str, PlainQuantity], Field(max_length=limits.MAX_RESOURCES)]
Argument = Annotated[str, Field(max_length=limits.MAX_ARG_LENGTH)]
Arguments = Annotated[list[Argument], Field(max_length=limits.MAX_ARGS)]

PRESERVE: JsonDict = {"x-kubernetes-preserve-unknown-fields": True}
ITEMS_PRESERVED: JsonDict = {"items": {"type": "object", **PRESERVE}}


MAX_CONTAINERS = 32  # bounds the cost of CEL rules that look for a container by name


class OpenModel(KubeModel):
    """A model whose unnamed fields are kept, in Python and in the API server."""

    model_config = ConfigDict(extra="allow", json_schema_extra=PRESERVE)


def core(name: str) -> ConfigDict:
    """The config of a model that mirrors core type ``name``: its schema is the core type's,
    with the model's fields and bounds laid over it (unknown fields pruned)."""
    return ConfigDict(extra="allow", json_schema_extra={**PRESERVE, CORE_TYPE: name})


class ResourceRequirements(OpenModel):
    model_config = core("ResourceRequirements")

    limits: ResourceMap = Field(default_factory=dict)
    requests: ResourceMap = Field(default_factory=dict)


class Container(OpenModel):
    model_config = core("Container")

    name: str = Field(min_length=1, max_length=limits.MAX_LABEL_VALUE)
    image: str | None = Field(default=None, max_length=limits.MAX_TEXT)
    command: Arguments | None = None
    args: Arguments | None = None
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)


class PodSpec(OpenModel):
    model_config = core("PodSpec")

    containers: list[Container] = Field(
        min_length=1, max_length=MAX_CONTAINERS, description="At least one container, as in a Pod."
    )
    init_containers: list[Container] | None = Field(default=None, max_length=MAX_CONTAINERS)
    priority_class_name: str | None = Field(default=None, max_length=limits.MAX_NAME)


class TemplateMetadata(OpenModel):
    """Pods' labels and annotations; the member's API server checks their syntax, these bounds
    keep what the hub stores and copies into every Work within the same limits."""

    model_config = core("TemplateObjectMeta")

    labels: Annotated[dict[str, Annotated[str, Field(max_length=limits.MAX_LABEL_VALUE)]],
                      Field(max_length=limits.MAX_METADATA_ENTRIES)] | None = None
    annotations: Annotated[
        dict[str, Annotated[str, Field(max_length=limits.MAX_ANNOTATIONS_SIZE)]],
        Field(max_length=limits.MAX_METADATA_ENTRIES)] | None = None


class PodTemplateSpec(OpenModel):
    model_config = core("PodTemplateSpec")

    metadata: TemplateMetadata | None = None
    spec: PodSpec
