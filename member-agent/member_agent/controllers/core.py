"""The job-controller core shared by every kind, as pure functions of observed state.

Given a job (its replica types, restart policies and run policy), the pods that exist for it
and the time, :func:`plan` says which pods to create and delete and what the job's replica
counts are. Kinds add their environment and decide success and failure from the counts.

Pods are always created with ``restartPolicy: Never``: the controller, not the kubelet,
re-creates a failed replica when its restart policy allows, and counts that restart, so
restarts and backoff are counted the same way for every kind and survive agent restarts
(the count lives in the job's status).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Restart(StrEnum):
    NEVER = "Never"
    ON_FAILURE = "OnFailure"
    ALWAYS = "Always"
    EXIT_CODE = "ExitCode"


@dataclass(frozen=True)
class ReplicaType:
    name: str  # as the spec spells it ("Master", "worker")
    replicas: int
    restart: Restart
    template: Mapping[str, Any]
    offset: int = 0  # index of the first replica here (a job split across clusters)

    @property
    def label(self) -> str:
        return self.name.lower()

    def indices(self) -> range:
        return range(self.offset, self.offset + self.replicas)


@dataclass(frozen=True)
class ObservedPod:
    name: str
    role: str  # lower-case replica type
    index: int
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    exit_code: int | None = None
    deleting: bool = False
    ready: bool = False


@dataclass(frozen=True)
class Counts:
    active: int = 0  # Pending or Running
    running: int = 0
    succeeded: int = 0
    failed: int = 0  # failed and not going to be restarted


@dataclass(frozen=True)
class Plan:
    create: tuple[tuple[str, int], ...] = ()  # (replica type name, index)
    delete: tuple[str, ...] = ()  # pod names
    restarted: tuple[tuple[str, int], ...] = ()  # (replica type name, index) re-created now
    counts: Mapping[str, Counts] = field(default_factory=dict)  # by replica type name
    exhausted: str = ""  # why no more restarts are allowed (backoff reached)


def pod_name(job: str, role: str, index: int) -> str:
    return f"{job}-{role.lower()}-{index}"


def retryable(policy: Restart, exit_code: int | None, retryable_codes: frozenset[int] | None
              ) -> bool:
    """Whether a failed replica may be re-created under ``policy``.

    ExitCode follows the kind: Kubeflow retries codes >= 128 (``retryable_codes`` None), T9k
    only 130, 137, 143 and 138."""
    if policy in (Restart.ALWAYS, Restart.ON_FAILURE):
        return True
    if policy is Restart.EXIT_CODE and exit_code is not None:
        return exit_code in retryable_codes if retryable_codes is not None else exit_code >= 128
    return False


def plan(job: str, types: Sequence[ReplicaType], pods: Sequence[ObservedPod], *,
         restarts_so_far: int, backoff_limit: int | None, stop: bool = False,
         retryable_codes: frozenset[int] | None = None) -> Plan:
    """What to do next for the replicas of ``job``.

    ``stop`` (finished, suspended, paused) means: create nothing. A replica that failed is
    re-created when its policy allows and the job-wide ``backoff_limit`` is not reached.
    """
    by_key = {(p.role, p.index): p for p in pods}
    create: list[tuple[str, int]] = []
    delete: list[str] = []
    restarted: list[tuple[str, int]] = []
    counts: dict[str, Counts] = {}
    restarts = restarts_so_far
    exhausted = ""
    wanted = {(t.label, i) for t in types for i in t.indices()}
    for pod in pods:
        if (pod.role, pod.index) not in wanted and not pod.deleting:
            delete.append(pod.name)  # scaled down, or a type that is gone
    for rtype in types:
        active = running = succeeded = failed = 0
        for index in rtype.indices():
            found = by_key.get((rtype.label, index))
            if found is None:
                if not stop:
                    create.append((rtype.name, index))
                continue
            pod = found
            if pod.deleting:
                continue
            if pod.phase == "Succeeded":
                succeeded += 1
            elif pod.phase == "Failed":
                if not stop and retryable(rtype.restart, pod.exit_code, retryable_codes):
                    if backoff_limit is not None and restarts >= backoff_limit:
                        exhausted = (f"backoff limit {backoff_limit} reached after {restarts} "
                                     f"restarts")
                        failed += 1
                    else:
                        restarts += 1
                        delete.append(pod.name)
                        restarted.append((rtype.name, index))
                else:
                    failed += 1
            else:
                active += 1
                running += pod.phase == "Running"
        counts[rtype.name] = Counts(active, running, succeeded, failed)
    return Plan(tuple(create), tuple(delete), tuple(restarted), counts, exhausted)
