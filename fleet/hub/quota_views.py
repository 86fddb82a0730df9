"""Building the quota engine's frozen views from ElasticQuotaTree objects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleet.api.quantity import QuantityError, canonical
from fleet.api.quota import QuotaNode as QuotaNodeModel
from quota.tree import QuotaNode


def quota_node(raw: Mapping[str, Any]) -> QuotaNode:
    """The tree under ``raw`` (a ``spec.root``) with quantities in canonical units; a
    quantity that cannot be counted raises :class:`QuantityError` naming its field."""
    model = QuotaNodeModel.model_validate(raw)
    return _convert(model, "spec.root")


def _convert(model: QuotaNodeModel, where: str) -> QuotaNode:
    def amounts(field: str, raw: Mapping[str, str | int | float]) -> dict[str, int]:
        out = {}
        for resource, value in raw.items():
            try:
                out[resource] = canonical(resource, value)
            except QuantityError as exc:
                raise QuantityError(f"{where}.{field}[{resource}]: {exc}") from None
        return out

    return QuotaNode(
        name=model.name,
        min=amounts("min", model.min),
        max=amounts("max", model.max),
        namespaces=tuple(model.namespaces),
        children=tuple(_convert(c, f"{where}.children[{i}]")
                       for i, c in enumerate(model.children)),
    )
