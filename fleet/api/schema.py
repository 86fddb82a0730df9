"""Turn a pydantic model's JSON Schema into a Kubernetes structural OpenAPI v3 schema.

Kubernetes accepts a subset of JSON Schema: no ``$ref``, no nullable unions, no titles, maps as
``additionalProperties``, ``exclusiveMinimum`` as a boolean, and every node typed unless it
preserves unknown fields or is int-or-string. This module rewrites pydantic's output into that
subset, keeping descriptions, bounds, patterns, enums and the CEL rules models attach with
``json_schema_extra``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from fleet.api.podschema import core_type

Schema = dict[str, Any]

_DROPPED = {"title", "default", "examples", "$defs", "discriminator"}
_MERGEABLE = {"description", "x-kubernetes-validations", "minProperties", "maxProperties",
              "minItems", "maxItems", "x-kubernetes-preserve-unknown-fields"}


def structural_schema(model: type[BaseModel]) -> Schema:
    """The openAPIV3Schema for a top-level Kubernetes object modelled by ``model``."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    schema = _convert(raw, raw.get("$defs", {}))
    properties = schema.setdefault("properties", {})
    properties["apiVersion"] = {"type": "string"}
    properties["kind"] = {"type": "string"}
    properties["metadata"] = {"type": "object"}
    schema["required"] = [r for r in schema.get("required", []) if r not in ("apiVersion", "kind")]
    if not schema["required"]:
        del schema["required"]
    return schema


MAX_NESTING = 8
# A model that names a core Kubernetes type (json_schema_extra) takes that type's whole
# structure, its own fields and bounds laid over it.
CORE_TYPE = "x-fleet-core-type"
# The value the API server fills in when the field is unset (pydantic's own default is the
# Python model's, dropped from the schema: most of fleet's defaults are applied by readers).
SERVED_DEFAULT = "x-fleet-default"


def _convert(node: Schema, defs: dict[str, Schema], stack: tuple[str, ...] = ()) -> Schema:
    ref = node.get("$ref") or (node.get("allOf") or [{}])[0].get("$ref")
    if ref:
        name = ref.rsplit("/", 1)[-1]
        if stack.count(name) >= MAX_NESTING:
            # Structural schemas cannot recurse: cut self-similar types (quota trees) at a depth.
            return {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "x-kubernetes-validations": [
                    {"rule": "false", "message": f"nesting deeper than {MAX_NESTING} levels"}
                ],
            }
        stack = (*stack, name)
    node = _resolve(node, defs)
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        return _collapse_union(node, defs, stack)
    out: Schema = {}
    for key, value in node.items():
        if key in _DROPPED or key == "$ref":
            continue
        if key == "properties":
            out["properties"] = {name: _convert(sub, defs, stack) for name, sub in value.items()}
        elif key == "additionalProperties":
            if value is True or value == {}:
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif value is not False:
                out["additionalProperties"] = _convert(value, defs, stack)
        elif key == "items":
            out["items"] = _convert(value, defs, stack)
        elif key == "exclusiveMinimum":
            out["minimum"] = value
            out["exclusiveMinimum"] = True
        elif key == "exclusiveMaximum":
            out["maximum"] = value
            out["exclusiveMaximum"] = True
        elif key == "const":
            out["enum"] = [value]
        elif key == "anyOf":  # int-or-string keeps its anyOf as Kubernetes spells it
            out["anyOf"] = value
        elif key == SERVED_DEFAULT:
            out["default"] = value
        else:
            out[key] = value
    core = out.pop(CORE_TYPE, None)
    if core is not None:
        out = _overlay(core_type(core), out)
    if out.get("x-kubernetes-preserve-unknown-fields") and "properties" in out:
        out.setdefault("type", "object")
    untyped_object = "properties" not in out and "additionalProperties" not in out
    if out.get("type") == "object" and untyped_object:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if not out.get("type") and not out.get("x-kubernetes-int-or-string"):
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _resolve(node: Schema, defs: dict[str, Schema]) -> Schema:
    """Inline a ``$ref`` (and pydantic's ``allOf: [$ref]`` wrapping), keeping sibling keys."""
    if "allOf" in node and len(node["allOf"]) == 1:
        node = {**{k: v for k, v in node.items() if k != "allOf"}, **node["allOf"][0]}
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        node = {**target, **siblings}
        if "$ref" in node:
            return _resolve(node, defs)
    return node


def _collapse_union(node: Schema, defs: dict[str, Schema], stack: tuple[str, ...]) -> Schema:
    """``X | None`` becomes X; the union's own keys (description, CEL) move onto X."""
    options = [o for o in node["anyOf"] if o.get("type") != "null"]
    if len(options) != 1:
        raise ValueError(f"unions other than 'X | None' have no structural form: {node}")
    inner = _convert(options[0], defs, stack)
    for key, value in node.items():
        if key == "x-kubernetes-validations":
            inner[key] = [*inner.get(key, []), *value]
        elif key == SERVED_DEFAULT:
            inner["default"] = value
        elif key in _MERGEABLE and key not in inner:
            inner[key] = value
    return inner


def _overlay(core: Schema, ours: Schema) -> Schema:
    """``core`` with ``ours`` laid over it: fields of both merge, ours win on every other key.
    A model that keeps unknown fields stops doing so once the core type names them all."""
    out = dict(core)
    for key, value in ours.items():
        if key == "properties":
            merged = dict(core.get("properties", {}))
            for name, sub in value.items():
                merged[name] = _overlay(merged[name], sub) if name in merged else sub
            out["properties"] = merged
        elif key == "required":
            out["required"] = sorted({*core.get("required", ()), *value})
        elif key == "x-kubernetes-preserve-unknown-fields" and "properties" in core:
            continue
        else:
            out[key] = value
    return out
