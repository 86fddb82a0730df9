"""PriorityClasses that Works carry: applied on the member before the job, so its pods are
admitted ("no PriorityClass with name … was found" otherwise), and kept in step with the hub.

A class the member already has and fleet did not make (no ``fleet.sh/propagated`` label) is
left as it is, whatever its value: the member's administrator decides, and the job's pods run
with the member's value as they would anyway. A class fleet made is replaced when the hub's
changes (a PriorityClass's value cannot be updated in place). Classes are never removed with
a Work: they are cluster-wide, and other pods on the member may use them by then.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fleet.api.protocol import PROPAGATED_LABEL
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube
from fleet.kinds.deps import PRIORITYCLASS

log = logging.getLogger(__name__)
COMPARED = ("value", "preemptionPolicy", "description")
DEFAULTS = {"preemptionPolicy": "PreemptLowerPriority"}  # what the API server fills in


def is_priority_class(manifest: Mapping[str, Any]) -> bool:
    return manifest.get("kind") == PRIORITYCLASS


def apply_priority_class(member: Kube, manifest: Mapping[str, Any], field_manager: str) -> None:
    """Make the member's class match ``manifest`` where it is fleet's to change."""
    name = manifest["metadata"]["name"]
    current = member.get_or_none(r.PRIORITYCLASSES, name)
    if current is not None:
        if not _ours(current):
            if not _same(current, manifest):
                log.warning("PriorityClass %s on the member differs from the hub's and is "
                            "not fleet's: keeping the member's", name)
            return
        if _same(current, manifest):
            return  # in step already: no write
    try:
        member.apply(r.PRIORITYCLASSES, manifest, field_manager=field_manager)
    except errors.Forbidden as exc:  # an agent deployed without the rule: run the job anyway
        log.warning("PriorityClass %s not applied on the member: %s", name, exc)
    except errors.Invalid:  # its value or preemption policy changed on the hub: immutable
        log.info("replacing PriorityClass %s on the member: the hub's changed", name)
        member.delete(r.PRIORITYCLASSES, name,
                      uid=(current or {}).get("metadata", {}).get("uid"))
        member.apply(r.PRIORITYCLASSES, manifest, field_manager=field_manager)


def _ours(body: Mapping[str, Any]) -> bool:
    return (body["metadata"].get("labels") or {}).get(PROPAGATED_LABEL) == "true"


def _same(current: Mapping[str, Any], manifest: Mapping[str, Any]) -> bool:
    return all(current.get(k, DEFAULTS.get(k)) == manifest.get(k, DEFAULTS.get(k))
               for k in COMPARED)
