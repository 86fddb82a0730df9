"""The hub's validating webhook: checks that span objects, which schema and CEL cannot make.

Each handler parses the object, builds the pure package's view, asks it for a verdict, and
turns errors into a rejection and warnings into ``kubectl`` warnings, each naming its field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf
from pydantic import ValidationError

from fleet.api.quantity import QuantityError
from fleet.hub.cache import Cache
from fleet.hub.quota_views import quota_node
from quota.validation import OtherTree, validate_tree


def register(cache: Cache) -> None:
    @kopf.on.validate("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees",
                      operations=["CREATE", "UPDATE"], id="elasticquotatree")
    def check_tree(*, body: kopf.Body, warnings: list[str], **_: Any) -> None:
        meta = body.get("metadata", {})
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        try:
            root = quota_node(body.get("spec", {}).get("root", {}))
        except (ValidationError, QuantityError, KeyError) as exc:
            raise kopf.AdmissionError(f"spec.root: {exc}", code=422) from None
        others = [OtherTree(k[1], k[2], quota_node(tree["spec"]["root"]))
                  for k, tree in _trees(cache).items()]
        verdict = validate_tree(root, namespace=namespace, name=name, others=others)
        warnings.extend(verdict.warnings)
        if verdict.errors:
            raise kopf.AdmissionError("; ".join(verdict.errors), code=422)


def _trees(cache: Cache) -> Mapping[tuple[str, str, str], Mapping[str, Any]]:
    return cache.snapshot().quota_trees
