"""What every job kind shares: roles, per-replica requests, shares, and status rules."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleet.api.quantity import canonical
from fleet.clients.resources import Resource
from fleet.kinds.deps import t9k_references, template_references
from propagation.resources import Resources
from propagation.views import JobDemand, Role

Body = dict[str, Any]


@dataclass(frozen=True)
class RoleSpec:
    name: str  # as the kind spells it: "Master", "worker"
    replicas: int
    template: Mapping[str, Any]
    leader: bool


def pod_request(template: Mapping[str, Any]) -> Resources:
    """A pod's effective request: the sum over containers (requests, else limits), or the
    largest init container if that is larger, as the Kubernetes scheduler counts it."""
    spec = template.get("spec") or {}

    def container_request(container: Mapping[str, Any]) -> dict[str, int]:
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        requests = {**limits, **(resources.get("requests") or {})}
        return {name: canonical(name, value) for name, value in requests.items()}

    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for name, amount in container_request(container).items():
            total[name] = total.get(name, 0) + amount
    for init in spec.get("initContainers") or []:
        for name, amount in container_request(init).items():
            total[name] = max(total.get(name, 0), amount)
    return Resources.of(total)


class KindAdapter:
    """Base adapter; subclasses say where the roles live in the spec."""

    resource: Resource
    leaders: tuple[str, ...] = ()
    terminal_states: tuple[str, ...] = ("Succeeded", "Failed")

    def roles(self, body: Mapping[str, Any]) -> list[RoleSpec]:
        raise NotImplementedError

    def demand(self, key: str, body: Mapping[str, Any]) -> JobDemand:
        return JobDemand(key, tuple(
            Role(role.name, role.replicas, pod_request(role.template), role.leader)
            for role in self.roles(body)
        ))

    def with_replicas(self, body: Body, counts: Mapping[str, int]) -> Body:
        """A copy of ``body`` keeping only ``counts`` replicas of each role."""
        raise NotImplementedError

    def state(self, status: Mapping[str, Any] | None) -> str:
        """The one-word state printed for the job (the printer column's value)."""
        raise NotImplementedError

    def aggregate(self, body: Mapping[str, Any], works: Sequence[Mapping[str, Any]],
                  now: str) -> Body:
        """The hub job's status from its Works' reported statuses."""
        raise NotImplementedError

    def dependencies(self, body: Mapping[str, Any]) -> set[tuple[str, str]]:
        """(kind, name) of the ConfigMaps, Secrets and PVCs the job's pods reference."""
        found: set[tuple[str, str]] = set()
        for role in self.roles(body):
            found |= template_references(role.template)
        return found | t9k_references(body)

    def ttl(self, body: Mapping[str, Any]) -> int | None:
        """Seconds after finishing when the job is deleted (Kubeflow's TTL), if set."""
        value = ((body.get("spec") or {}).get("runPolicy") or {}).get("ttlSecondsAfterFinished")
        return None if value is None else int(value)

    def is_finished(self, body: Mapping[str, Any]) -> bool:
        return self.state(body.get("status")) in self.terminal_states

    has_phase = False  # T9k jobs show a phase; Kubeflow jobs only conditions

    def waiting_status(self, current: Mapping[str, Any] | None, reason: str, message: str,
                       now: str) -> Body:
        """The hub job's status while it waits: a Queuing condition that says why."""
        status: Body = {"conditions": [condition("Queuing", reason, message, now, current)],
                        "queue": {"reason": reason, "message": message}}
        if self.has_phase:
            status["phase"] = "Pending"
        return status

    def bound_status(self, current: Mapping[str, Any] | None, clusters: Sequence[str],
                     message: str, now: str) -> Body:
        status: Body = {"conditions": [condition("Created", "ScheduleBindingSucceed", message,
                                                 now, current)],
                        "clusters": list(clusters)}
        if self.has_phase:
            status["phase"] = "Pending"
        return status


def condition(kind: str, reason: str, message: str, now: str,
              current: Mapping[str, Any] | None = None) -> Body:
    """A True condition; it keeps its transition time if ``current`` already has it True."""
    since = now
    for old in (current or {}).get("conditions") or []:
        if old.get("type") == kind and old.get("status") == "True":
            since = old.get("lastTransitionTime") or now
    return {"type": kind, "status": "True", "reason": reason, "message": message,
            "lastTransitionTime": since, "lastUpdateTime": now}


def deep_copy(body: Mapping[str, Any]) -> Body:
    return copy.deepcopy(dict(body))
