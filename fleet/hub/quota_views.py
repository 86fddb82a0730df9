"""Building the quota engine's frozen views from ElasticQuotaTree objects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleet.api.quantity import canonical
from fleet.api.quota import QuotaNode as QuotaNodeModel
from quota.tree import QuotaNode


def quota_node(raw: Mapping[str, Any]) -> QuotaNode:
    """The tree under ``raw`` (a ``spec.root``) with quantities in canonical units."""
    model = QuotaNodeModel.model_validate(raw)
    return _convert(model)


def _convert(model: QuotaNodeModel) -> QuotaNode:
    return QuotaNode(
        name=model.name,
        min={k: canonical(k, v) for k, v in model.min.items()},
        max={k: canonical(k, v) for k, v in model.max.items()},
        namespaces=tuple(model.namespaces),
        children=tuple(_convert(c) for c in model.children),
    )
