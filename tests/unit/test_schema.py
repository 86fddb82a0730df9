"""The generated CRD schemas are structural, as Kubernetes requires."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.api.crds import ALL, CRD


def nodes(schema: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, schema)]
    for name, sub in (schema.get("properties") or {}).items():
        out += nodes(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        out += nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        out += nodes(schema["additionalProperties"], f"{path}{{}}")
    return out


@pytest.mark.parametrize("crd", ALL, ids=[c.name for c in ALL])
def test_schema_is_structural(crd: CRD) -> None:
    schema = crd.manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in nodes(schema):
        assert "$ref" not in node, path
        assert "title" not in node, path
        assert "default" not in node, path
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string"), path
        typed = node.get("type") or node.get("x-kubernetes-int-or-string") or node.get(
            "x-kubernetes-preserve-unknown-fields")
        assert typed, f"{crd.name}{path} has no type"
        if "properties" in node:
            assert "additionalProperties" not in node, path


def test_camel_case_aliases_keep_digits_lower_case() -> None:
    t9k = next(c for c in ALL if c.kind == "MPIJob" and c.group == "batch.tensorstack.dev")
    spec = t9k.manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert "t9kScheduler" in spec["properties"]["scheduler"]["properties"]
    assert "extraMPIArgs" in spec["properties"]["worker"]["properties"]
    assert "mpiHome" in spec["properties"]
