"""Kubernetes-style condition lists, kept in the order they last changed (so the last one is
the job's state, as the Kubeflow printer column reads it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Condition = dict[str, Any]


def set_condition(conditions: Sequence[Mapping[str, Any]], kind: str, status: bool,
                  reason: str, message: str, now: str) -> list[Condition]:
    """Set ``kind``; a change moves it to the end, an unchanged one stays where it is."""
    value = "True" if status else "False"
    out: list[Condition] = [dict(c) for c in conditions]
    for index, old in enumerate(out):
        if old.get("type") == kind:
            if old.get("status") == value and old.get("reason") == reason:
                old["message"] = message
                return out
            del out[index]
            break
    if not status and not any(c.get("type") == kind for c in conditions):
        return out  # never add a condition only to say it is False
    out.append({"type": kind, "status": value, "reason": reason, "message": message,
                "lastUpdateTime": now, "lastTransitionTime": now})
    return out


def is_true(conditions: Sequence[Mapping[str, Any]], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)
