"""The structure of a Kubernetes pod template, for the job CRDs' schemas.

Kubeflow's own CRDs spell out the whole PodTemplateSpec, so the API server refuses a misspelt
field (``kubectl apply`` fails "unknown field …containers[0].resource") and prunes what no
schema names. fleet's job CRDs do the same: the pod template's schema is the core API's,
with fleet's own bounds (container names, resources, arguments) laid over it.

``pod-schema.json`` beside this module holds the core types a pod template reaches, as the
pinned kube-apiserver publishes them (``/openapi/v3/api/v1``), reduced to structure: types,
properties, items, maps, required fields and an integer's width (which sets its bound).
Descriptions, defaults, enums, other formats and list-merge hints are left out: the members'
API servers check values when they create the pods, and a member of another minor version
may accept values this one does not.

``python -m fleet.api.podschema --kubeconfig FILE`` rewrites the file from a running API
server (after the pinned Kubernetes version changes); ``make crds`` then regenerates crds/.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

from fleet.api import limits

Schema = dict[str, Any]

DATA = Path(__file__).with_name("pod-schema.json")
ROOT = "PodTemplateSpec"
_PREFIX = "io.k8s.api.core.v1."
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
# What a pod template's metadata keeps (as Kubeflow's CRDs do); the rest is set on the pods.
TEMPLATE_META_FIELDS = ("annotations", "finalizers", "generateName", "labels", "name",
                        "namespace")
_KEPT = ("type", "properties", "items", "additionalProperties", "required")
# An int64's bound is the largest integer a double holds exactly: the API server reads a
# schema's maximum as one, and refuses to compare with 2^63 - 1 (which it rounds past int64).
_INTEGER_MAX = {"int32": 2**31 - 1, "int64": 2**53}


def core_type(name: str) -> Schema:
    """The structural schema of core type ``name`` (e.g. "PodSpec"), every reference inlined."""
    return _inline(stored()[name])


@cache
def stored() -> dict[str, Schema]:
    """The definitions ``pod-schema.json`` holds, by short name."""
    loaded: dict[str, Schema] = json.loads(DATA.read_text())
    return loaded


def _inline(node: Schema) -> Schema:
    """``node`` with references inlined and a bound on every list, map, string and integer
    that has none (the core API bounds few of them itself; the members check the rest)."""
    ref = node.get("$ref")
    if ref is not None:
        return _inline(stored()[ref])
    out = dict(node)
    if "properties" in out:
        out["properties"] = {k: _inline(v) for k, v in out["properties"].items()}
    for key in ("items", "additionalProperties"):
        if key in out:
            out[key] = _inline(out[key])
    kind = out.get("type")
    if kind == "array":
        out.setdefault("maxItems", limits.MAX_POD_LIST)
    elif kind == "object" and "additionalProperties" in out:
        out.setdefault("maxProperties", limits.MAX_METADATA_ENTRIES)
    elif kind == "string":
        out.setdefault("maxLength", limits.MAX_POD_STRING)
    elif kind == "integer":
        out.setdefault("maximum", _INTEGER_MAX[out.pop("format", "int64")])
    return out


# --- regeneration from an API server's OpenAPI document ---------------------------------------


def reduce(document: Schema) -> dict[str, Schema]:
    """The definitions a pod template reaches, by short name, reduced to structure."""
    schemas: dict[str, Schema] = document["components"]["schemas"]
    out: dict[str, Schema] = {}
    seen: dict[str, str] = {}
    pending = [_PREFIX + ROOT]
    while pending:
        full = pending.pop()
        short = _short(full)
        if short in seen:
            if seen[short] != full:
                raise ValueError(f"two types named {short}: {seen[short]}, {full}")
            continue
        seen[short] = full
        out[short] = _reduce(schemas[full], pending)
    return out


def _short(full: str) -> str:
    return full.rsplit(".", 1)[-1]


def _reduce(node: Schema, pending: list[str]) -> Schema:
    if len(node.get("allOf", ())) == 1:  # a reference with a default or description beside it
        node = {**node, **node["allOf"][0]}
    ref = node.get("$ref")
    if ref is not None:
        full = ref.rsplit("/", 1)[-1]
        if full in (QUANTITY, INT_OR_STRING):
            return {"x-kubernetes-int-or-string": True}
        if full == OBJECT_META:
            return {"$ref": "TemplateObjectMeta"}
        pending.append(full)
        return {"$ref": _short(full)}
    out: Schema = {k: node[k] for k in _KEPT if k in node}
    if node.get("type") == "integer" and node.get("format") in _INTEGER_MAX:
        out["format"] = node["format"]
    if "properties" in out:
        out["properties"] = {k: _reduce(v, pending) for k, v in out["properties"].items()}
    for key in ("items", "additionalProperties"):
        if key in out:
            out[key] = _reduce(out[key], pending)
    if "required" in out:
        out["required"] = sorted(out["required"])
    return out


def definitions(document: Schema) -> dict[str, Schema]:
    """What ``pod-schema.json`` holds, from an API server's ``/openapi/v3/api/v1``."""
    return {**reduce(document), "TemplateObjectMeta": template_meta(document)}


def template_meta(document: Schema) -> Schema:
    meta = document["components"]["schemas"][OBJECT_META]
    kept = {k: _reduce(meta["properties"][k], []) for k in TEMPLATE_META_FIELDS}
    return {"type": "object", "properties": kept}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleet.api.podschema",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True, help="of the pinned kube-apiserver")
    parser.add_argument("--kubectl", default="kubectl")
    args = parser.parse_args(argv)
    raw = subprocess.run([args.kubectl, "--kubeconfig", args.kubeconfig, "get", "--raw",
                          "/openapi/v3/api/v1"], check=True, capture_output=True, text=True)
    reduced = definitions(json.loads(raw.stdout))
    DATA.write_text(json.dumps(reduced, indent=1, sort_keys=True) + "\n")
    print(f"wrote {DATA.name}: {len(reduced)} types")
    return 0


if __name__ == "__main__":
    sys.exit(main())
