"""Checks of a job against what it was and what else is on the hub, for the job webhook.

Schema and CEL check each field alone; these need the old object or the other kinds' jobs.
Each returns the refusal's message, naming the field, or None.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fleet.kinds import ADAPTERS, adapter_for

MANAGED_BY = "spec.runPolicy.managedBy"
MIN_AVAILABLE = "spec.runPolicy.schedulingPolicy.minAvailable"


def managed_by_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """The training operator's rule: the manager is set at creation, or never (unsetting
    and setting count as changes)."""
    adapter = adapter_for(new["apiVersion"], new["kind"])
    before, after = adapter.managed_by(old), adapter.managed_by(new)
    if before == after:
        return None
    return f"{MANAGED_BY}: Invalid value: {_quoted(after)}: field is immutable " \
           f"(was {_quoted(before)})"


Lookup = Callable[[str, str, str, str], Mapping[str, Any] | None]


def same_name(job: Mapping[str, Any], existing: Lookup) -> list[Mapping[str, Any]]:
    """Jobs of the other kinds with ``job``'s namespace and name, as
    ``existing(api_version, kind, namespace, name)`` reads them from the hub."""
    meta = job.get("metadata") or {}
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    out = []
    for adapter in ADAPTERS:
        res = adapter.resource
        if (res.api_version, res.kind) != (job.get("apiVersion"), job.get("kind")):
            found = existing(res.api_version, res.kind, namespace, name)
            if found is not None:
                out.append(found)
    return out


def name_taken(new: Mapping[str, Any], existing: Lookup) -> str | None:
    """A job of another kind with the same namespace and name: on a member their pods and
    Services would take the same names (``<job>-worker-0``), so the second could never run."""
    rivals = same_name(new, existing)
    return _taken(rivals[0]) if rivals else None


def name_taken_earlier(job: Mapping[str, Any], existing: Lookup) -> str | None:
    """:func:`name_taken` for a job already stored (two created at once, both past the
    webhook): the older one runs, by creation time then kind; the other waits, saying why."""
    def order(body: Mapping[str, Any]) -> tuple[str, str]:
        return str((body.get("metadata") or {}).get("creationTimestamp", "")), body["kind"]
    older = [r for r in same_name(job, existing) if order(r) < order(job)]
    return _taken(older[0]) if older else None


def _taken(rival: Mapping[str, Any]) -> str:
    meta, group = rival["metadata"], rival["apiVersion"].split("/")[0]
    return (f"metadata.name: {rival['kind']} {meta.get('namespace', '')}/{meta.get('name', '')} "
            f"({group}) already has this name; jobs of different kinds in one namespace share "
            f"pod and Service names on the members, so choose another name")


def gang_unsatisfiable(job: Mapping[str, Any]) -> str | None:
    """A gang minimum above the job's replicas: as under a gang scheduler, the job waits
    (the training operator keeps it Created, never Running) until an update lowers it. The
    hub places every replica of a gang at once, so a minimum at or below them asks nothing
    more."""
    adapter = adapter_for(job["apiVersion"], job["kind"])
    minimum = adapter.gang_minimum(job)
    if minimum is None:
        return None
    replicas = sum(role.replicas for role in adapter.roles(job))
    if minimum <= replicas:
        return None
    return (f"{MIN_AVAILABLE}: {minimum} pods must start together but the job has "
            f"{replicas}; it waits until minAvailable is lowered or replicas are added")


def _quoted(value: str | None) -> str:
    return "null" if value is None else f'"{value}"'
