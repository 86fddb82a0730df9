"""PriorityClasses that Works carry: applied on the member before the job, so its pods are
admitted ("no PriorityClass with name … was found" otherwise), and kept in step with the hub.

A class the member already has with another value or preemption policy, made by someone
else, is left as it is (the member's administrator decides; the hub's job runs with the
member's value, as its pods would anyway). A class fleet made is replaced when the hub's
changes: a PriorityClass's value cannot be updated in place. Classes are never removed with a
Work: they are cluster-wide and other pods on the member may use them by then.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube
from fleet.kinds.deps import PRIORITYCLASS, PROPAGATED_LABEL

log = logging.getLogger(__name__)


def is_priority_class(manifest: Mapping[str, Any]) -> bool:
    return manifest.get("kind") == PRIORITYCLASS


def apply_priority_class(member: Kube, manifest: Mapping[str, Any], field_manager: str) -> None:
    """Make the member's class match ``manifest`` where it is fleet's to change; never
    raises for a class the member keeps its own way."""
    name = manifest["metadata"]["name"]
    try:
        member.apply(r.PRIORITYCLASSES, manifest, field_manager=field_manager, force=False)
        return
    except errors.Conflict as exc:  # another manager owns it with other values
        current = member.get_or_none(r.PRIORITYCLASSES, name)
        if not _ours(current):
            log.warning("PriorityClass %s on the member differs from the hub's and is not "
                        "fleet's; keeping the member's: %s", name, exc)
            return
    except errors.Invalid:  # the value (immutable) changed on the hub
        current = member.get_or_none(r.PRIORITYCLASSES, name)
        if not _ours(current):
            log.warning("PriorityClass %s on the member cannot take the hub's value; keeping "
                        "the member's", name)
            return
    log.info("replacing PriorityClass %s on the member: the hub's changed", name)
    member.delete(r.PRIORITYCLASSES, name, uid=(current or {}).get("metadata", {}).get("uid"))
    member.apply(r.PRIORITYCLASSES, manifest, field_manager=field_manager, force=False)


def _ours(body: Mapping[str, Any] | None) -> bool:
    return body is not None and \
        (body["metadata"].get("labels") or {}).get(PROPAGATED_LABEL) == "true"
