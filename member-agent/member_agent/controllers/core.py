"""The job-controller core shared by every kind, as pure functions of observed state.

Given a job's replica types, restart policies and run mode, the pods that exist for it, and
the restarts counted so far, :func:`plan` says which pods to create and delete and what each
replica type's counts are. Kinds (``kubeflow``, ``t9k``) add their pods' environment and turn
the counts into their own status; ``reconcile`` puts the two together.

Pods are always created with ``restartPolicy: Never``: the controller, not the kubelet,
re-creates a failed replica when its restart policy allows, and counts that restart, so
restarts and backoff are counted the same way for every kind and every policy (ExitCode
included, which Kubeflow does not count: kubeflow/training-operator#2045) and survive agent
restarts (the count lives in the job's status).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from fleet.api.kubeflow import RestartPolicy

Restart = RestartPolicy  # a replica type's restart policy, as both Kubeflow and T9k spell it


class Cleanup(StrEnum):
    """Which pods go when the job finishes: none, the unfinished ones, or all."""

    NONE = "None"
    UNFINISHED = "Unfinished"
    ALL = "All"


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
class ContainerState:
    name: str
    state: str  # Waiting, Running, Terminated
    exit_code: int | None = None


@dataclass(frozen=True)
class ObservedPod:
    name: str
    role: str  # lower-case replica type
    index: int
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    exit_code: int | None = None
    deleting: bool = False
    ready: bool = False
    uid: str = ""
    containers: tuple[ContainerState, ...] = ()
    variant: str = ""
    attempt: str = ""  # the whole job's attempt it was made for ("" the first)

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


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
    failed_replicas: tuple[tuple[str, int, int | None], ...] = ()  # (type, index, exit code)
    succeeded_replicas: frozenset[tuple[str, int]] = frozenset()  # (type, index)


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
         evict: bool = False, hold: bool = False, variant: str = "", attempt: str = "",
         retryable_codes: frozenset[int] | None = None,
         decisive: frozenset[tuple[str, int]] = frozenset(),
         held: frozenset[str] = frozenset()) -> Plan:
    """What to do next for the replicas of ``job``.

    ``stop`` (finished, suspended, paused) means: create and restart nothing; ``evict``
    (suspended, paused) also deletes every pod, without counting a restart; ``hold`` (the
    gang scheduler has not admitted the job yet) creates nothing new but still counts and
    restarts; replica types in ``held`` (an MPI launcher waiting for its workers) are not
    created yet. A replica that failed is re-created when its policy allows and the job-wide
    ``backoff_limit`` is not reached. Under ``Always`` a replica that succeeded is re-created
    too, unless it is ``decisive`` (its success ends the job). An unfinished pod created as
    another ``variant`` (debug mode switched on or off) is replaced, not counted as a restart.
    A pod of an earlier ``attempt`` (the whole job restarted, as JobSet's failure policy does)
    is deleted, finished or not, and counts for nothing: its replica is made again once it is
    gone.
    """
    by_key = {(p.role, p.index): p for p in pods}
    create: list[tuple[str, int]] = []
    delete: list[str] = []
    restarted: list[tuple[str, int]] = []
    failed_replicas: list[tuple[str, int, int | None]] = []
    succeeded_replicas: set[tuple[str, int]] = set()
    counts: dict[str, Counts] = {}
    restarts = restarts_so_far
    exhausted = ""
    wanted = {(t.label, i) for t in types for i in t.indices()}
    for pod in pods:
        if pod.deleting:
            continue
        if (pod.role, pod.index) not in wanted or evict or pod.attempt != attempt:
            delete.append(pod.name)  # scaled down, a type that is gone, evicted or stale
        elif pod.variant != variant and not pod.finished and not stop:
            delete.append(pod.name)
    gone = set(delete)
    for rtype in types:
        active = running = succeeded = failed = 0
        for index in rtype.indices():
            found = by_key.get((rtype.label, index))
            if found is None:
                if not (stop or hold or rtype.name in held):
                    create.append((rtype.name, index))
                continue
            pod = found
            if pod.deleting or pod.name in gone:
                continue
            again = not stop and (
                (pod.phase == "Failed" and retryable(rtype.restart, pod.exit_code,
                                                     retryable_codes))
                or (pod.phase == "Succeeded" and rtype.restart is Restart.ALWAYS
                    and (rtype.name, index) not in decisive))
            if again and backoff_limit is not None and restarts >= backoff_limit:
                exhausted = f"backoff limit {backoff_limit} reached after {restarts} restarts"
                again = False
            if again:
                restarts += 1
                delete.append(pod.name)
                restarted.append((rtype.name, index))
            elif pod.phase == "Succeeded":
                succeeded += 1
                succeeded_replicas.add((rtype.name, index))
            elif pod.phase == "Failed":
                failed += 1
                failed_replicas.append((rtype.name, index, pod.exit_code))
            else:
                active += 1
                running += pod.phase == "Running"
        counts[rtype.name] = Counts(active, running, succeeded, failed)
    return Plan(tuple(create), tuple(delete), tuple(restarted), counts, exhausted,
                tuple(failed_replicas), frozenset(succeeded_replicas))


def to_clean_up(pods: Sequence[ObservedPod], policy: Cleanup, *,
                stop_unfinished: bool = False) -> list[str]:
    """Pods to delete once the job has finished: per ``policy``, and every unfinished pod
    when ``stop_unfinished`` (a failed job's survivors would run on as zombies)."""
    out = []
    for pod in pods:
        if pod.deleting:
            continue
        unfinished = not pod.finished
        if policy is Cleanup.ALL or (unfinished and (policy is Cleanup.UNFINISHED
                                                     or stop_unfinished)):
            out.append(pod.name)
    return out


def apply_mode(template: Mapping[str, Any], container: str, *,
               command: Sequence[str] | None, args: Sequence[str] | None,
               skip_init: bool) -> dict[str, Any]:
    """The pod spec of ``template`` with the training container's command and args replaced
    (when given) and init containers removed (when ``skip_init``): debug and resume modes."""
    spec = dict(template.get("spec") or {})
    containers = [dict(c) for c in spec.get("containers") or []]
    target = next((c for c in containers if c.get("name") == container),
                  containers[0] if containers else None)
    if target is not None:
        if command is not None:
            target["command"] = list(command)
            target.pop("args", None)
        if args is not None:
            target["args"] = list(args)
    spec["containers"] = containers
    if skip_init:
        spec.pop("initContainers", None)
    return spec
