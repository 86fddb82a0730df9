"""JSON merge patches (RFC 7386) computed from two versions of an object."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def merge_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that turns ``old`` into ``new``: removed keys become null, nested
    objects are diffed, everything else (lists included) is replaced when it differs."""
    patch: dict[str, Any] = {}
    for key in old:
        if key not in new:
            patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            nested = merge_diff(before, value)
            if nested:
                patch[key] = nested
        elif key not in old or before != value:
            patch[key] = value
    return patch
