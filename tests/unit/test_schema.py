"""The generated CRD schemas are structural, as Kubernetes requires."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.api import limits, podschema
from fleet.api.crds import ALL, CRD
from fleet.api.pods import MAX_CONTAINERS


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
        # a default the API server fills in is stated, never pydantic's own
        assert "default" not in node or crd.group in ("trainer.kubeflow.org",
                                                      "jobset.x-k8s.io"), path
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


def _templates(crd: CRD) -> list[tuple[str, dict[str, Any]]]:
    schema = crd.manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return [(p, n) for p, n in nodes(schema) if p.endswith(".template")
            and "containers" in n["properties"]["spec"].get("properties", {})]


JOBS = [c for c in ALL if _templates(c)]


@pytest.mark.parametrize("crd", JOBS, ids=[c.name for c in JOBS])
def test_pod_templates_name_every_core_field_with_fleets_bounds_over_them(crd: CRD) -> None:
    assert len(JOBS) == 11  # nine job kinds and Trainer's two runtimes
    for path, template in _templates(crd):
        inner = nodes(template, path)
        assert not [p for p, n in inner if n.get("x-kubernetes-preserve-unknown-fields")]
        assert not [p for p, n in inner if "x-fleet-core-type" in n]
        spec = template["properties"]["spec"]["properties"]
        container = spec["containers"]["items"]
        assert {"env", "volumeMounts", "securityContext", "ports"} <= set(container["properties"])
        assert container["properties"]["name"]["maxLength"] == limits.MAX_LABEL_VALUE  # fleet's
        assert container["required"] == ["name"]
        gpus = container["properties"]["resources"]["properties"]["limits"]
        assert gpus["additionalProperties"]["x-kubernetes-validations"]  # fleet's 1E bound
        assert "claims" in container["properties"]["resources"]["properties"]  # the core's
        assert spec["containers"]["maxItems"] == MAX_CONTAINERS
        assert spec["volumes"]["maxItems"] == limits.MAX_POD_LIST
        probe_port = container["properties"]["livenessProbe"]["properties"]["httpGet"][
            "properties"]["port"]
        assert probe_port == {"x-kubernetes-int-or-string": True}
        grace = spec["terminationGracePeriodSeconds"]
        assert grace == {"type": "integer", "maximum": 2**53}
        meta = template["properties"]["metadata"]["properties"]
        assert set(meta) == set(podschema.TEMPLATE_META_FIELDS)


def test_the_core_structure_is_reduced_from_an_openapi_document() -> None:
    core = "#/components/schemas/io.k8s.api.core.v1."
    document = {"components": {"schemas": {
        "io.k8s.api.core.v1.PodTemplateSpec": {"description": "d", "type": "object",
                                               "properties": {
            "metadata": {"default": {}, "allOf": [
                {"$ref": "#/components/schemas/" + podschema.OBJECT_META}]},
            "spec": {"allOf": [{"$ref": core + "PodSpec"}]}}},
        "io.k8s.api.core.v1.PodSpec": {"type": "object", "required": ["containers"],
                                       "properties": {
            "restartPolicy": {"type": "string", "enum": ["Always"], "default": "Always"},
            "priority": {"type": "integer", "format": "int32"},
            "overhead": {"type": "object", "additionalProperties": {
                "$ref": "#/components/schemas/" + podschema.QUANTITY}},
            "containers": {"type": "array", "items": {"$ref": core + "PodSpec"}}}},
    }}}
    reduced = podschema.reduce(document)
    assert reduced == {
        "PodSpec": {"type": "object", "required": ["containers"], "properties": {
            "containers": {"type": "array", "items": {"$ref": "PodSpec"}},
            "overhead": {"type": "object",
                         "additionalProperties": {"x-kubernetes-int-or-string": True}},
            "priority": {"type": "integer", "format": "int32"},
            "restartPolicy": {"type": "string"}}},
        "PodTemplateSpec": {"type": "object", "properties": {
            "metadata": {"$ref": "TemplateObjectMeta"}, "spec": {"$ref": "PodSpec"}}},
    }


def test_every_reference_in_the_stored_core_structure_resolves() -> None:
    assert "$ref" not in str(podschema.core_type(podschema.ROOT))
