"""Gang scheduling on the member: a PodGroup per job for the member's gang scheduler.

Which scheduler a member has is found from its CRDs (``runtime``); the agent's
``--gang-scheduler`` (``FLEET_GANG_SCHEDULER``) can force one or ``none``. Per scheduler:

- **Volcano** (``podgroups.scheduling.volcano.sh``): PodGroup ``<job>`` with ``minMember`` =
  every replica of the job on this member, ``queue`` (the job's queue, else ``default``) and
  ``priorityClassName``; pods get ``schedulerName: volcano`` (unless they name one) and the
  annotations ``scheduling.k8s.io/group-name`` and ``volcano.sh/task-spec``. Pods are created
  only once Volcano has moved the PodGroup to ``Inqueue`` (or later), so pods of a job that
  does not fit never hold resources (kubeflow/training-operator#1264).
- **scheduler-plugins coscheduling** (``podgroups.scheduling.x-k8s.io``): PodGroup with
  ``minMember`` and the job's ``scheduleTimeoutSeconds``; pods get ``schedulerName:
  scheduler-plugins-scheduler`` and the label ``scheduling.x-k8s.io/pod-group``; no wait
  (the plugin holds pods at Permit, for that long).
- **T9k scheduler** (``podgroups.scheduler.tensorstack.dev``): PodGroup with ``minMember``, a
  role per replica type, ``queue`` and ``priority``; pods get ``schedulerName: t9k-scheduler``
  and the labels ``scheduler.tensorstack.dev/group-name`` and ``.../role``.

The hub has already placed the whole gang on this member (or split it with every share
bound at once), so the PodGroup's job is only to keep the member's own scheduler from
starting part of the share.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from fleet.clients.resources import Resource

Body = dict[str, Any]


class Scheduler(StrEnum):
    VOLCANO = "volcano"
    PLUGINS = "scheduler-plugins"
    T9K = "t9k"


PODGROUPS = {
    Scheduler.VOLCANO: Resource("scheduling.volcano.sh", "v1beta1", "podgroups",
                                kind="PodGroup"),
    Scheduler.PLUGINS: Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", kind="PodGroup"),
    Scheduler.T9K: Resource("scheduler.tensorstack.dev", "v1beta1", "podgroups",
                            kind="PodGroup"),
}
SCHEDULER_NAMES = {Scheduler.VOLCANO: "volcano",
                   Scheduler.PLUGINS: "scheduler-plugins-scheduler",
                   Scheduler.T9K: "t9k-scheduler"}
ADMITTED_PHASES = ("Inqueue", "Running", "Completed")  # Volcano: pods may be created


@dataclass(frozen=True)
class GangRequest:
    """What a job asks its member's gang scheduler for (Kubeflow's ``schedulingPolicy``,
    T9k's ``scheduler.t9kScheduler``)."""

    queue: str = ""
    priority: int | None = None
    priority_class: str = ""
    timeout_seconds: int | None = None  # scheduler-plugins: how long pods wait at Permit


@dataclass(frozen=True)
class Gang:
    scheduler: Scheduler
    name: str
    namespace: str
    min_member: int
    queue: str = ""
    priority: int | None = None
    priority_class: str = ""
    roles: Mapping[str, int] = field(default_factory=dict)  # lower-case type -> replicas
    timeout_seconds: int | None = None

    @property
    def resource(self) -> Resource:
        return PODGROUPS[self.scheduler]

    def podgroup(self, owner: Body) -> Body:
        spec: Body = {"minMember": self.min_member}
        if self.scheduler is Scheduler.VOLCANO:
            spec["queue"] = self.queue or "default"
            if self.priority_class:
                spec["priorityClassName"] = self.priority_class
        elif self.scheduler is Scheduler.PLUGINS:
            if self.timeout_seconds is not None:
                spec["scheduleTimeoutSeconds"] = self.timeout_seconds
        elif self.scheduler is Scheduler.T9K:
            spec["queue"] = self.queue or "default"
            spec["priority"] = self.priority or 0
            spec["roles"] = [{"name": role, "minMember": n} for role, n in self.roles.items()]
        return {"apiVersion": self.resource.api_version, "kind": "PodGroup",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "ownerReferences": [owner]},
                "spec": spec}

    def admitted(self, podgroup: Mapping[str, Any] | None) -> bool:
        """Whether pods may be created now (only Volcano asks to wait)."""
        if self.scheduler is not Scheduler.VOLCANO:
            return True
        phase = ((podgroup or {}).get("status") or {}).get("phase")
        return phase in ADMITTED_PHASES

    def decorate(self, pod: Body, role: str) -> None:
        spec, meta = pod["spec"], pod["metadata"]
        spec.setdefault("schedulerName", SCHEDULER_NAMES[self.scheduler])
        if self.scheduler is Scheduler.VOLCANO:
            meta["annotations"]["scheduling.k8s.io/group-name"] = self.name
            meta["annotations"]["volcano.sh/task-spec"] = role
        elif self.scheduler is Scheduler.PLUGINS:
            meta["labels"]["scheduling.x-k8s.io/pod-group"] = self.name
        else:
            meta["labels"]["scheduler.tensorstack.dev/group-name"] = self.name
            meta["labels"]["scheduler.tensorstack.dev/role"] = role


def choose(available: tuple[Scheduler, ...], *, asks_t9k: bool) -> Scheduler:
    """The scheduler a job's PodGroup is for: the T9k scheduler for a T9k job that names a
    T9k queue (when the member has it), otherwise the first other one the member has."""
    if asks_t9k and Scheduler.T9K in available:
        return Scheduler.T9K
    return next((s for s in available if s is not Scheduler.T9K), available[0])
