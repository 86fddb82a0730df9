"""T9k TensorFlowTrainingJob (``batch.tensorstack.dev/v1beta1``, seed 003) on the member.

- Replica types chief, worker, ps, evaluator, each with TF_CONFIG as for a Kubeflow TFJob.
- Restart policies Never, OnFailure, Always and ExitCode, where only exit codes 130, 137, 143
  and 138 are retryable; ``runPolicy.backoffLimit`` is shared by every replica.
- The chief decides (worker 0 when there is no chief): the job succeeds when it succeeds and
  fails when it fails for good (its restarts used up or not allowed), or when
  ``activeDeadlineSeconds`` passes. Another replica failing for good only sets
  ``ReplicaFailure``, as the seed describes. ``cleanUpPolicy`` None, All or Unfinished then
  applies exactly.
- Debug mode: every replica runs its debug command (default ``sleep inf``), optionally without
  its init containers. Pause mode deletes every replica (phase Paused); turning it off brings
  them back with ``resumeSpecs`` (phase Resuming, then Running).
- ``scheduler.t9kScheduler`` queue and priority go to the pods' labels and annotations, and to
  the T9k PodGroup when the member runs the T9k scheduler.
- Status as the seed shows it: conditions Initialized, Running, ReplicaFailure, Completed,
  Failed (and Paused once paused), phase, tasks with restart counts and per-pod name, uid,
  phase and containers, aggregate counts, ``backoffCount`` and ``tensorboard``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from fleet.kinds import t9k as kinds
from member_agent.controllers import core, tensorboard
from member_agent.controllers.gang import Gang, GangRequest
from member_agent.controllers.kind import Body, JobKind, Observed, RunMode
from member_agent.controllers.kubeflow import tf_config

T9K_GROUP = GROUP_LABEL = "batch.tensorstack.dev"
RETRYABLE = frozenset({130, 137, 143, 138})
QUEUE_LABEL = "scheduler.tensorstack.dev/queue"
ROLE_LABEL = "scheduler.tensorstack.dev/role"
PRIORITY_ANNOTATION = "scheduler.tensorstack.dev/priority"
CLEAN_UP = {"None": core.Cleanup.NONE, "Unfinished": core.Cleanup.UNFINISHED,
            "All": core.Cleanup.ALL}
CONDITION_ORDER = ("Initialized", "Running", "ReplicaFailure", "Completed", "Failed", "Paused")
DONE_OK = "The job has finished successfully."
NORMAL = "All pods are running normally."


class T9kKind(JobKind):
    """What T9k jobs share: run modes, scheduler, cleanUpPolicy and the T9k status."""

    group = T9K_GROUP
    job_label = f"{GROUP_LABEL}/job-name"
    type_label = f"{GROUP_LABEL}/replica-type"
    index_label = f"{GROUP_LABEL}/replica-index"
    retryable_codes = RETRYABLE
    debug_command: tuple[str, ...] = ("sleep", "inf")
    task_replicas_key = "replicas"  # where a task lists its pods (seed 000 says "status")

    def default_restart(self, rtype: str) -> core.Restart:
        return core.Restart.NEVER

    def run_mode(self, job: Mapping[str, Any]) -> RunMode:
        modes = job["spec"].get("runMode") or {}
        status = job.get("status") or {}
        stop = "Paused" if (modes.get("pause") or {}).get("enabled") else ""
        if (modes.get("debug") or {}).get("enabled"):
            return RunMode(stop, "debug")
        was_paused = any(c.get("type") == "Paused" for c in status.get("conditions") or [])
        return RunMode(stop, "resume" if was_paused else "")

    def cleanup(self, job: Mapping[str, Any]) -> core.Cleanup:
        return CLEAN_UP.get(self.run_policy(job).get("cleanUpPolicy") or "None",
                            core.Cleanup.NONE)

    def gang_request(self, job: Mapping[str, Any]) -> GangRequest:
        t9k = (job["spec"].get("scheduler") or {}).get("t9kScheduler") or {}
        priority = t9k.get("priority")
        return GangRequest(queue=t9k.get("queue") or "",
                           priority=None if priority is None else int(priority))

    def mode_spec(self, job: Mapping[str, Any], rtype: str, variant: str) -> Mapping[str, Any]:
        modes = job["spec"].get("runMode") or {}
        if variant == "debug":
            specs = (modes.get("debug") or {}).get("replicaSpecs") or []
        elif variant == "resume":
            specs = (modes.get("pause") or {}).get("resumeSpecs") or []
        else:
            return {}
        return next((s for s in specs if s.get("type") == rtype), {})

    def pod_spec(self, job: Mapping[str, Any], rtype: core.ReplicaType, variant: str) -> Body:
        if not variant:
            return copy.deepcopy(dict(rtype.template.get("spec") or {}))
        spec = self.mode_spec(job, rtype.name, variant)
        command = spec.get("command")
        if variant == "debug" and not command:
            command = list(self.debug_command)
        return copy.deepcopy(core.apply_mode(
            rtype.template, self.container, command=command, args=spec.get("args"),
            skip_init=bool(spec.get("skipInitContainer"))))

    def pod(self, job: Mapping[str, Any], rtype: core.ReplicaType, index: int, variant: str,
            gang: Gang | None) -> Body:
        body = super().pod(job, rtype, index, variant, gang)
        request = self.gang_request(job)
        queue, priority = request.queue, request.priority
        if queue:
            labels = body["metadata"]["labels"]
            labels[ROLE_LABEL] = rtype.label
            if gang is None:  # with a PodGroup the pod joins the group, not the queue
                labels[QUEUE_LABEL] = queue
            body["metadata"]["annotations"][PRIORITY_ANNOTATION] = str(priority or 0)
        return body

    # -- status --------------------------------------------------------------------------
    def restarts_so_far(self, status: Mapping[str, Any]) -> int:
        return int(status.get("backoffCount", 0))

    def fail(self, job: Mapping[str, Any], status: Body, reason: str, message: str,
             now: str) -> Body:
        text = f"The job failed: it {message}."
        conditions = _put(status["conditions"], now, Running=("False", reason, text),
                          Completed=("False", reason, text), Failed=("True", reason, text))
        return {**status, "conditions": conditions, "phase": "Failed", "completionTime": now}

    def status(self, job: Mapping[str, Any], types: Sequence[core.ReplicaType],
               result: core.Plan, pods: Sequence[core.ObservedPod], mode: RunMode,
               observed: Observed, now: str) -> Body:
        old: Mapping[str, Any] = job.get("status") or {}
        tasks, aggregate = self._tasks(job, types, result, pods, old)
        phase = str(old.get("phase") or "Pending")
        updates: dict[str, tuple[str, str, str]] = {}
        if not self.finished(old):
            leader = self.leader([t.name for t in types])
            phase, updates = self._progress(old, phase, aggregate, result, leader, mode)
            updates.update(self._steady(result, leader, observed))
        status: Body = {
            "conditions": _put(old.get("conditions") or [], now, **updates), "phase": phase,
            "tasks": tasks, "aggregate": aggregate,
            "backoffCount": self.restarts_so_far(old) + len(result.restarted),
            "startTime": old.get("startTime") or now,
        }
        if phase in self.description.terminal_states:
            status["completionTime"] = old.get("completionTime") or now
        board = tensorboard.status(job, observed.extras.get("tensorboard"))
        if board is not None:
            status["tensorboard"] = board
        return status

    @staticmethod
    def _progress(old: Mapping[str, Any], phase: str, aggregate: Mapping[str, int],
                  result: core.Plan, leader: tuple[str, int], mode: RunMode
                  ) -> tuple[str, dict[str, tuple[str, str, str]]]:
        """The phase and the life-cycle conditions (Running, Completed, Failed, Paused)."""
        leader_failed = [f for f in result.failed_replicas if (f[0], f[1]) == leader]
        if leader in result.succeeded_replicas:
            return "Succeeded", {"Running": ("False", "Succeeded", DONE_OK),
                                 "Failed": ("False", "Succeeded", DONE_OK),
                                 "Completed": ("True", "Succeeded", DONE_OK)}
        if leader_failed:
            _, index, code = leader_failed[0]
            text = (f"The job exited with an error code: {leader[0]} replica {index} exited with "
                    f"code {code}")
            reason = "Failed"
            if result.exhausted:
                text += f" and may not restart ({result.exhausted})"
                reason = "BackoffLimitExceeded"
            return "Failed", {"Running": ("False", reason, text + "."),
                              "Completed": ("False", reason, text + "."),
                              "Failed": ("True", reason, text + ".")}
        if mode.stop:
            text = "The job is paused: all replicas are deleted or being deleted."
            return "Paused", {"Paused": ("True", "Paused", text),
                              "Running": ("False", "Paused", text)}
        updates: dict[str, tuple[str, str, str]] = {}
        if any(c.get("type") == "Paused" and c.get("status") == "True"
               for c in old.get("conditions") or []):
            updates["Paused"] = ("False", "Resumed", "The job is resumed.")
            phase = "Resuming"
        waiting = aggregate["creating"] + aggregate["pending"] + aggregate["deleted"]
        if aggregate["unknown"]:
            phase = "Unknown"
        elif not waiting and phase in ("Pending", "Resuming", "Unknown"):
            phase = "Running"
        elif phase == "Unknown":
            phase = "Pending"
        if phase == "Running":
            updates["Running"] = ("True", "Running", "All replicas are running or done.")
        else:
            updates["Running"] = ("False", phase, "Waiting for replicas to start.")
        updates["Completed"] = ("False", "-", "The job has not finished.")
        updates["Failed"] = ("False", "-", "The job has not failed.")
        return phase, updates

    @staticmethod
    def _steady(result: core.Plan, leader: tuple[str, int], observed: Observed
                ) -> dict[str, tuple[str, str, str]]:
        """Initialized and ReplicaFailure, which hold whatever the phase."""
        updates: dict[str, tuple[str, str, str]] = {}
        if observed.gang_admitted:
            updates["Initialized"] = ("True", "-", "The job has been initialized successfully.")
        else:
            updates["Initialized"] = ("False", "WaitingForPodGroup",
                                      "The job waits for its PodGroup to be admitted.")
        failures = [f for f in result.failed_replicas if (f[0], f[1]) != leader]
        if failures:
            rtype, index, code = failures[0]
            updates["ReplicaFailure"] = ("True", "ReplicaFailed",
                                         f"replica {rtype} {index} failed with exit code {code}.")
        elif result.restarted:
            rtype, index = result.restarted[0]
            updates["ReplicaFailure"] = ("True", "ReplicaRestarting",
                                         f"replica {rtype} {index} failed; it is being "
                                         "re-created.")
        else:
            updates["ReplicaFailure"] = ("False", "-", NORMAL)
        return updates

    def _tasks(self, job: Mapping[str, Any], types: Sequence[core.ReplicaType],
               result: core.Plan, pods: Sequence[core.ObservedPod], old: Mapping[str, Any]
               ) -> tuple[list[Body], dict[str, int]]:
        by_key = {(p.role, p.index): p for p in pods}
        creating = set(result.create)
        deleting = set(result.delete)
        old_restarts = {t.get("type"): int(t.get("restartCount", 0))
                        for t in old.get("tasks") or []}
        aggregate = dict.fromkeys(("creating", "pending", "running", "succeeded", "failed",
                                   "unknown", "deleted"), 0)
        tasks = []
        for rtype in types:
            replicas = []
            for index in rtype.indices():
                pod = by_key.get((rtype.label, index))
                name = self.pod_name(job["metadata"]["name"], rtype.name, index)
                if pod is None:
                    if (rtype.name, index) in creating:
                        replicas.append({"name": name, "phase": "Creating"})
                        aggregate["creating"] += 1
                    continue
                phase = "Deleted" if pod.deleting or pod.name in deleting else pod.phase
                aggregate[phase.lower()] = aggregate.get(phase.lower(), 0) + 1
                replica: Body = {
                    "name": pod.name, "uid": pod.uid, "phase": phase,
                    "containers": [{k: v for k, v in (("name", c.name), ("state", c.state),
                                                      ("exitCode", c.exit_code))
                                    if v is not None} for c in pod.containers],
                }
                replicas.append(replica)
            restarts = old_restarts.get(rtype.name, 0) + sum(
                1 for name, _ in result.restarted if name == rtype.name)
            tasks.append({"type": rtype.name, "restartCount": restarts,
                          self.task_replicas_key: replicas})
        return tasks, aggregate


class TensorFlowTrainingJobKind(T9kKind):
    description = kinds.T9K_TF
    container = "tensorflow"

    def port(self, job: Mapping[str, Any], rtype: str) -> tuple[str, int] | None:
        for name, spec in self.replica_specs(job):
            if name != rtype:
                continue
            for container in ((spec.get("template") or {}).get("spec") or {}).get(
                    "containers") or []:
                for port in container.get("ports") or []:
                    if container.get("name") == self.container and port.get("containerPort"):
                        return port.get("name") or "tfjob-port", int(port["containerPort"])
        return "tfjob-port", 2222

    def env(self, job: Mapping[str, Any], rtype: str, index: int,
            world: Mapping[str, int]) -> list[Body]:
        return tf_config(self, job, rtype, index, world)


def _put(conditions: Sequence[Mapping[str, Any]], now: str, **updates: tuple[str, str, str]
         ) -> list[Body]:
    """Conditions in T9k's order, each (status, reason, message) from ``updates`` or as it
    was; a condition's transition time moves only when its status changes."""
    current = {c["type"]: dict(c) for c in conditions}
    for kind, (value, reason, message) in updates.items():
        old = current.get(kind)
        since = old["lastTransitionTime"] if old and old.get("status") == value else now
        current[kind] = {"type": kind, "status": value, "reason": reason, "message": message,
                         "lastTransitionTime": since}
    return [current[k] for k in CONDITION_ORDER if k in current]


TENSORFLOW = TensorFlowTrainingJobKind()
