"""Printing as kubectl does: aligned tables, ages, and ``-o json|yaml|name``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import yaml

FORMATS = ("wide", "json", "yaml", "name")


def age(stamp: str | None, now: datetime) -> str:
    """kubectl's coarse age: seconds, then minutes, hours, days."""
    if not stamp:
        return "<unknown>"
    try:
        then = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size, below in (("s", 1, 120), ("m", 60, 7200), ("h", 3600, 172800)):
        if seconds < below:
            return f"{seconds // size}{unit}"
    return f"{seconds // 86400}d"


def seconds(value: float) -> str:
    """A duration as an age: 3s, 5m, 2h."""
    value = max(0, int(value))
    for unit, size, below in (("s", 1, 120), ("m", 60, 7200), ("h", 3600, 172800)):
        if value < below:
            return f"{value // size}{unit}"
    return f"{value // 86400}d"


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell, three spaces apart, as ``kubectl get`` prints;
    kubectl's ``No resources found`` when there are no rows."""
    if not rows:
        return "No resources found."
    cells = [list(header), *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in cells)


def as_list(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """kubectl's ``-o json`` of a list: a v1 List."""
    return {"apiVersion": "v1", "kind": "List", "items": list(items),
            "metadata": {"resourceVersion": ""}}


def dump(document: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(document, indent=4, sort_keys=False)
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False).rstrip("\n")


def name_of(obj: Mapping[str, Any]) -> str:
    """``-o name``: ``kind.group/name`` (``pod/name`` for the core group)."""
    api_version = str(obj.get("apiVersion", ""))
    group = api_version.split("/", maxsplit=1)[0] if "/" in api_version else ""
    kind = str(obj.get("kind", "")).lower()
    return f"{kind}.{group}/{obj['metadata']['name']}" if group else \
        f"{kind}/{obj['metadata']['name']}"


def objects(items: Sequence[Mapping[str, Any]], fmt: str, single: bool = False) -> str:
    """``items`` in a machine format: one object when a NAME was asked for, else a List."""
    if fmt == "name":
        return "\n".join(name_of(o) for o in items)
    document: Any = items[0] if single and len(items) == 1 else as_list(items)
    return dump(document, fmt)


def one_line(text: str) -> str:
    """Messages on one line: an error never spills over several."""
    return " ".join(str(text).split())
