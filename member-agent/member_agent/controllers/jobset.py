"""JobSet on the member, without the JobSet or Job controllers: their pods, made directly.

Each replicated job's pods are named and labelled as JobSet v0.12 and the Job controller name
and label an Indexed Job's pods: ``<jobset>-<rjob>-<jobIndex>-<completionIndex>`` (also the
hostname, in the JobSet's subdomain, which a headless Service of that name serves), labels and
annotations ``jobset.sigs.k8s.io/*`` and ``batch.kubernetes.io/job-completion-index``, and
``JOB_COMPLETION_INDEX`` in every container. The status is JobSet's: Jobs per replicated job
(a Job is ready when its pods are ready or done, succeeded when all succeeded, failed when a
pod failed past the Job's backoff limit), ``Completed`` when the success policy holds
(``All``: every Job of the target replicated jobs, ``Any``: one), ``Failed`` when a Job fails,
``Suspended`` while ``spec.suspend``. A replicated job that ``dependsOn`` another (or follows
it under ``startupPolicy: InOrder``) waits until that one is Ready (or Complete).

A failed Job (its pods' retries past its backoff limit: reason ``BackoffLimitExceeded``) is
judged by the ``failurePolicy`` as JobSet v0.12 judges it: no policy fails the JobSet
(``FailedJobs``); else the first rule matching the failed Job's reason, message and replicated
job acts, and with none ``RestartJobSet``: ``FailJobSet`` fails it, ``RestartJobSet`` restarts
the whole JobSet until ``restartsCountTowardsMax`` reaches ``maxRestarts`` (then
``ReachedMaxRestarts``), ``RestartJobSetAndIgnoreMaxRestarts`` restarts it uncounted. A restart
raises ``status.restarts``, sets ``Restarting`` (False again, ``JobsReady``, once every Job is
ready), and every pod of the attempt before is deleted and made again, labelled with the new
``restart-attempt``; its pods' retries count from zero.

Differs from JobSet on purpose: pods have no random suffix (one pod per completion index at a
time), a pod's retries count against the smallest backoff limit of the JobSet's Jobs, the
``RestartJob`` actions (behind JobSet's alpha feature gate) fail the JobSet saying so, and a
JobSet split across members fails instead of restarting (a restart is the whole JobSet's, and
each member's agent sees only its share).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleet.api import protocol
from fleet.api.jobset import FailurePolicyAction as Action
from fleet.clients import resources as r
from fleet.clients.resources import Resource
from fleet.kinds import flux
from fleet.kinds import jobset as kinds
from fleet.kinds.naming import label_value, shorten
from fleet.kinds.trainer_runtime import hostfile, hostfile_config_map, ssh_secret
from member_agent.controllers import core
from member_agent.controllers.conditions import is_true, set_condition
from member_agent.controllers.kind import CLUSTERSET_DOMAIN, Body, JobKind, Observed, RunMode, owner

PREFIX = "jobset.sigs.k8s.io"
JOBSET_NAME = f"{PREFIX}/jobset-name"
JOBSET_UID = f"{PREFIX}/jobset-uid"
RJOB_NAME = f"{PREFIX}/replicatedjob-name"
RJOB_REPLICAS = f"{PREFIX}/replicatedjob-replicas"
GLOBAL_REPLICAS = f"{PREFIX}/global-replicas"
JOB_INDEX = f"{PREFIX}/job-index"
JOB_GLOBAL_INDEX = f"{PREFIX}/job-global-index"
JOB_KEY = f"{PREFIX}/job-key"
RESTART_ATTEMPT = f"{PREFIX}/restart-attempt"
GROUP_NAME = f"{PREFIX}/group-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_NAME = "batch.kubernetes.io/job-name"
REPLICA_INDEX = f"{protocol.GROUP}/replica-index"  # the pod's index in its replicated job
DEFAULT_BACKOFF = 6  # a Job's backoffLimit when it sets none


def _rjobs(job: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return kinds.replicated_jobs(job)


def _rjob(job: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    return next(j for j in _rjobs(job) if j["name"] == name)


def job_name(jobset: str, rjob: str, job_index: int) -> str:
    tail = f"-{rjob}-{job_index}"
    return shorten(f"{jobset}{tail}", keep_tail=tail)


class JobSetKind(JobKind):
    description = kinds.JOBSET
    container = ""
    job_label, type_label, index_label = JOBSET_NAME, RJOB_NAME, REPLICA_INDEX

    def default_restart(self, rtype: str) -> core.Restart:
        return core.Restart.ON_FAILURE

    def run_mode(self, job: Mapping[str, Any]) -> RunMode:
        restarts = int((job.get("status") or {}).get("restarts") or 0)
        return RunMode(stop="Suspended" if (job.get("spec") or {}).get("suspend") else "",
                       attempt=str(restarts) if restarts else "")

    def backoff_limit(self, job: Mapping[str, Any]) -> int | None:
        limits = [((j.get("template") or {}).get("spec") or {}).get("backoffLimit")
                  for j in _rjobs(job)]
        return min(DEFAULT_BACKOFF if v is None else int(v) for v in limits)

    def deadline(self, job: Mapping[str, Any]) -> int | None:
        """A TrainJob's ``activeDeadlineSeconds``, which its JobSet carries."""
        value = (job["metadata"].get("annotations") or {}).get(protocol.ACTIVE_DEADLINE)
        return None if value is None else int(value)

    def ttl(self, job: Mapping[str, Any]) -> int | None:
        if protocol.WORK in (job["metadata"].get("annotations") or {}):
            return None  # the hub deletes a federated JobSet, and its Works with it
        return self.description.ttl(job)

    def cleanup(self, job: Mapping[str, Any]) -> core.Cleanup:
        return core.Cleanup.UNFINISHED  # JobSet deletes its active Jobs once it finished

    stop_unfinished_on_failure = True

    def restarts_so_far(self, status: Mapping[str, Any]) -> int:
        return int(status.get("podRestarts", 0))

    # -- pods ----------------------------------------------------------------------------
    def place(self, job: Mapping[str, Any], rtype: str, index: int) -> tuple[int, int]:
        """(Job index, completion index) of pod ``index`` of replicated job ``rtype``."""
        width = kinds.parallelism(_rjob(job, rtype))
        return index // width, index % width

    def pod_name(self, job_name_: str, rtype: str, index: int) -> str:
        raise NotImplementedError("JobSet pods are named from the JobSet: see pod_of")

    def pod_of(self, job: Mapping[str, Any], rtype: str, index: int) -> str:
        job_index, completion = self.place(job, rtype, index)
        tail = f"-{rtype}-{job_index}-{completion}"
        return shorten(f"{job['metadata']['name']}{tail}", keep_tail=tail)

    def subdomain(self, job: Mapping[str, Any]) -> str:
        network = (job.get("spec") or {}).get("network") or {}
        return str(network.get("subdomain") or job["metadata"]["name"])

    def dns_hostnames(self, job: Mapping[str, Any]) -> bool:
        network = (job.get("spec") or {}).get("network") or {}
        return network.get("enableDNSHostnames") is not False

    def peer_host(self, job: Mapping[str, Any], rtype: str, index: int,
                  *, qualified: bool = False) -> str:
        """``<pod>.<subdomain>``, as JobSet's pods reach each other; a pod another member
        holds (the JobSet split), as :meth:`remote_hosts` names it."""
        host = f"{self.pod_of(job, rtype, index)}.{self.subdomain(job)}"
        remote = self.remote_hosts(job).get(host)
        if remote is not None:
            return remote
        return f"{host}.{job['metadata']['namespace']}.svc" if qualified else host

    def remote_hosts(self, job: Mapping[str, Any]) -> dict[str, str]:
        """For a split JobSet, each pod another member holds: its name in the JobSet's
        subdomain (as the resolved TrainJob's variables and hostfile spell it) to the name
        Multi-Cluster Services (KEP-1645) give a pod behind a headless ServiceImport,
        ``<pod>.<member>.<subdomain>.<ns>.svc.clusterset.local``, the members' names as their
        cluster IDs ({} for a JobSet on one member)."""
        world = protocol.world(job["metadata"])
        if not world:
            return {}
        subdomain, namespace = self.subdomain(job), job["metadata"]["namespace"]
        local = {t.name: t.indices() for t in self.replica_types(job)}
        out: dict[str, str] = {}
        for share in world:
            for name in share.get("replicas") or {}:
                for index in protocol.share_indices(share, name):
                    if index in local.get(name, range(0)):
                        continue
                    pod = self.pod_of(job, name, index)
                    out[f"{pod}.{subdomain}"] = (f"{pod}.{share['cluster']}.{subdomain}."
                                                 f"{namespace}.svc.{CLUSTERSET_DOMAIN}")
        return out

    def labels(self, job: Mapping[str, Any], rtype: str, index: int) -> dict[str, str]:
        meta = job["metadata"]
        rjob = _rjob(job, rtype)
        job_index, completion = self.place(job, rtype, index)
        name = job_name(meta["name"], rtype, job_index)
        before = sum(kinds.job_count(j) for j in _rjobs(job)[
            :[j["name"] for j in _rjobs(job)].index(rtype)])
        marks = {
            JOBSET_NAME: label_value(meta["name"]), JOBSET_UID: str(meta.get("uid", "")),
            RJOB_NAME: rtype, RJOB_REPLICAS: str(rjob.get("replicas", 1)),
            GLOBAL_REPLICAS: str(sum(kinds.job_count(j) for j in _rjobs(job))),
            JOB_INDEX: str(job_index), JOB_GLOBAL_INDEX: str(before + job_index),
            JOB_KEY: hashlib.sha1(f"{meta['namespace']}/{name}".encode()).hexdigest(),
            RESTART_ATTEMPT: str(int((job.get("status") or {}).get("restarts", 0))),
            GROUP_NAME: str(rjob.get("groupName") or "default"),
            COMPLETION_INDEX: str(completion), JOB_NAME: label_value(name),
            "job-name": label_value(name), REPLICA_INDEX: str(index),
        }
        uid = (meta.get("labels") or {}).get(protocol.JOB_UID)
        if uid:
            marks[protocol.JOB_UID] = uid
        return marks

    def pod(self, job: Mapping[str, Any], rtype: core.ReplicaType, index: int, variant: str,
            gang: Any) -> Body:
        meta = job["metadata"]
        template_meta = rtype.template.get("metadata") or {}
        spec = copy.deepcopy(dict(rtype.template.get("spec") or {}))
        spec["restartPolicy"] = "Never"  # the controller restarts replicas (see core)
        _, completion = self.place(job, rtype.name, index)
        remote = self.remote_hosts(job)
        for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
            container["env"] = [*(_rehosted(e, remote) for e in container.get("env") or []),
                                {"name": "JOB_COMPLETION_INDEX", "value": str(completion)}]
        name = self.pod_of(job, rtype.name, index)
        if self.dns_hostnames(job):
            spec["hostname"] = name
            spec["subdomain"] = self.subdomain(job)
        labels = self.labels(job, rtype.name, index)
        pod: Body = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": meta["namespace"],
                "labels": {**(template_meta.get("labels") or {}), **labels},
                "annotations": {**(template_meta.get("annotations") or {}),
                                **{k: v for k, v in labels.items() if k.startswith(PREFIX)},
                                COMPLETION_INDEX: str(completion)},
                "ownerReferences": [owner(job)],
            },
            "spec": spec,
        }
        if variant:
            pod["metadata"]["annotations"][protocol.RUN_VARIANT] = variant
        attempt = self.run_mode(job).attempt
        if attempt:
            pod["metadata"]["annotations"][protocol.RUN_ATTEMPT] = attempt
        if gang is not None:
            gang.decorate(pod, rtype.label)
        return pod

    def service(self, job: Mapping[str, Any], rtype: str, index: int) -> Body | None:
        return None  # one headless Service for the whole JobSet (objects)

    def ssh_key_secret(self, job: Mapping[str, Any]) -> str | None:
        """A JobSet made from a Trainer MPI runtime mounts its SSH key from this Secret."""
        return ssh_secret(job["metadata"]["name"]) if hostfile(job) is not None else None

    def curve_secret(self, job: Mapping[str, Any]) -> str | None:
        """A JobSet made from a Trainer flux runtime mounts its brokers' certificate."""
        return flux.curve_secret(job["metadata"]["name"]) if flux.plan_of(job) else None

    def objects(self, job: Mapping[str, Any], types: Sequence[core.ReplicaType],
                pods: Sequence[core.ObservedPod]) -> list[tuple[Resource, Body]]:
        meta = job["metadata"]
        out: list[tuple[Resource, Body]] = []
        scripts = flux.scripts(job)
        if scripts is not None:  # Trainer's flux plugin: the installer's and nodes' scripts
            out.append((r.CONFIGMAPS, {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": flux.config_map(meta["name"]),
                             "namespace": meta["namespace"], "ownerReferences": [owner(job)]},
                "data": scripts}))
        hosts = hostfile(job)
        if hosts is not None:  # Trainer's MPI plugin: the launcher's hostfile
            remote = self.remote_hosts(job)
            hosts = "".join(f"{remote.get(host, host)}{space}{slots}\n" for host, space, slots
                            in (line.partition(" ") for line in hosts.splitlines()))
            out.append((r.CONFIGMAPS, {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": hostfile_config_map(meta["name"]),
                             "namespace": meta["namespace"], "ownerReferences": [owner(job)]},
                "data": {"hostfile": hosts}}))
        if not self.dns_hostnames(job):
            return out
        network = (job.get("spec") or {}).get("network") or {}
        return [*out, (r.SERVICES, {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": self.subdomain(job), "namespace": meta["namespace"],
                         "labels": {JOBSET_NAME: label_value(meta["name"])},
                         "ownerReferences": [owner(job)]},
            "spec": {"clusterIP": "None",
                     "publishNotReadyAddresses": network.get("publishNotReadyAddresses")
                     is not False,
                     "selector": {JOBSET_NAME: label_value(meta["name"])}},
        })]

    def held_types(self, job: Mapping[str, Any], types: Sequence[core.ReplicaType],
                   pods: Sequence[core.ObservedPod]) -> frozenset[str]:
        """Replicated jobs waiting for the ones they depend on (``dependsOn``, or the one
        before under ``startupPolicy: InOrder``, which waits for Ready): judged by this
        member's pods, or, split across members, by the hub's word over every share
        (``PEERS_REACHED``)."""
        spec = job.get("spec") or {}
        peers: dict[str, str] | None = None
        if kinds.is_split(job):
            peers = json.loads((job["metadata"].get("annotations") or {}).get(
                protocol.PEERS_REACHED) or "{}")
        in_order = (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
        local = {t.name: t for t in types}
        held: set[str] = set()
        names = [str(j["name"]) for j in _rjobs(job)]
        for position, rjob in enumerate(_rjobs(job)):
            needs = [(str(d["name"]), str(d["status"])) for d in rjob.get("dependsOn") or []]
            if in_order and position:
                needs.append((names[position - 1], "Ready"))
            for name, status in needs:
                if peers is not None:
                    met = peers.get(name) == "Complete" or peers.get(name) == status
                else:
                    met = name not in local or _reached(local[name], pods, status)
                if name in held or not met:
                    held.add(str(rjob["name"]))
        return frozenset(held)

    # -- status --------------------------------------------------------------------------
    def status(self, job: Mapping[str, Any], types: Sequence[core.ReplicaType],
               result: core.Plan, pods: Sequence[core.ObservedPod], mode: RunMode,
               observed: Observed, now: str) -> Body:
        old: Mapping[str, Any] = job.get("status") or {}
        if self.finished(old):
            return dict(old)
        name = job["metadata"]["name"]
        conditions = list(old.get("conditions") or [])
        jobs = self.jobs_status(job, types, result, pods, suspended=bool(mode.stop))
        if mode.stop:
            conditions = set_condition(conditions, "Suspended", True, "SuspendedJobs",
                                       "jobset is suspended", now)
            conditions = _restarting_over(conditions, "JobSetSuspended", "jobset is suspended",
                                          now)
        elif is_true(conditions, "Suspended"):
            conditions = set_condition(conditions, "Suspended", False, "ResumeJobs",
                                       "jobset is resumed", now)
        failed = [t for t in types if result.counts[t.name].failed]
        restarts = int(old.get("restarts", 0))
        counted = int(old.get("restartsCountTowardsMax") or 0)
        if failed and not mode.stop:
            verdict = judge_failure(
                (job.get("spec") or {}).get("failurePolicy"),
                [(t.name, job_name(name, t.name, self._failed_job(job, t, result)))
                 for t in failed], counted, split=kinds.is_split(job))
            if verdict.restart:
                restarts += 1
                counted += verdict.counted
                conditions = set_condition(conditions, "Restarting", True, verdict.reason,
                                           verdict.message, now)
            else:
                conditions = set_condition(conditions, "Failed", True, verdict.reason,
                                           verdict.message, now)
                conditions = _restarting_over(conditions, "JobSetFailed", "jobset failed", now)
        elif is_true(conditions, "Restarting") and all(
                j["ready"] + j["succeeded"] >= kinds.job_count(_rjob(job, j["name"]))
                for j in jobs):
            conditions = _restarting_over(conditions, "JobsReady", "all jobs are ready", now)
        if not failed and not mode.stop and self._completed(job, types, result):
            conditions = set_condition(conditions, "Completed", True, "AllJobsCompleted",
                                       "jobset completed successfully", now)
            conditions = _restarting_over(conditions, "JobSetCompleted",
                                          "jobset completed successfully", now)
        start = old.get("startTime")
        if mode.stop:
            start = None
        elif start is None or is_true(old.get("conditions") or [], "Suspended"):
            start = now  # Trainer counts a deadline from the (last) resume
        status: Body = {"conditions": conditions, "replicatedJobsStatus": jobs,
                        "restarts": restarts,
                        "podRestarts": 0 if restarts > int(old.get("restarts", 0))
                        else self.restarts_so_far(old) + len(result.restarted),
                        "startTime": start}
        if counted:
            status["restartsCountTowardsMax"] = counted
        if is_true(conditions, "Failed"):
            status["terminalState"] = "Failed"
        elif is_true(conditions, "Completed"):
            status["terminalState"] = "Completed"
        return status

    def _failed_job(self, job: Mapping[str, Any], rtype: core.ReplicaType,
                    result: core.Plan) -> int:
        indices = sorted(i for t, i, _ in result.failed_replicas if t == rtype.name)
        return self.place(job, rtype.name, indices[0])[0] if indices else 0

    def jobs_status(self, job: Mapping[str, Any], types: Sequence[core.ReplicaType],
                    result: core.Plan, pods: Sequence[core.ObservedPod], *,
                    suspended: bool) -> list[Body]:
        """Jobs per replicated job, as JobSet counts them (of this share's pods)."""
        by_slot = {(p.role, p.index): p for p in pods if not p.deleting}
        failed = {(t, i) for t, i, _ in result.failed_replicas}
        out = []
        for rtype in types:
            counts = {"ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
            jobs: dict[int, list[int]] = {}
            for index in rtype.indices():
                jobs.setdefault(self.place(job, rtype.name, index)[0], []).append(index)
            for indices in jobs.values():
                mine = [by_slot.get((rtype.label, i)) for i in indices]
                if suspended:
                    counts["suspended"] += 1
                elif any((rtype.name, i) in failed for i in indices):
                    counts["failed"] += 1
                elif all((rtype.name, i) in result.succeeded_replicas for i in indices):
                    counts["succeeded"] += 1
                else:
                    if any(p is not None and not p.finished for p in mine):
                        counts["active"] += 1
                    if all(p is not None and (p.ready or p.phase == "Succeeded")
                           for p in mine):
                        counts["ready"] += 1
            out.append({"name": rtype.name, **counts})
        return out

    def _completed(self, job: Mapping[str, Any], types: Sequence[core.ReplicaType],
                   result: core.Plan) -> bool:
        policy = (job.get("spec") or {}).get("successPolicy") or {}
        targets = set(policy.get("targetReplicatedJobs") or [t.name for t in types])
        jobs: dict[tuple[str, int], bool] = {}
        for rtype in types:
            if rtype.name not in targets:
                continue
            for index in rtype.indices():
                slot = (rtype.name, self.place(job, rtype.name, index)[0])
                done = (rtype.name, index) in result.succeeded_replicas
                jobs[slot] = jobs.get(slot, True) and done
        if not jobs:
            return False
        return any(jobs.values()) if policy.get("operator") == "Any" else all(jobs.values())

    def fail(self, job: Mapping[str, Any], status: Body, reason: str, message: str,
             now: str) -> Body:
        text = f"jobset {job['metadata']['name']} {message}"
        return {**status, "conditions": set_condition(status.get("conditions") or [],
                                                      "Failed", True, reason, text, now),
                "terminalState": "Failed"}


BACKOFF_EXCEEDED = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")


@dataclass(frozen=True)
class FailureVerdict:
    """What a Job's failure does to its JobSet: restart it (``counted``: towards
    ``maxRestarts``) or fail it, with the condition's reason and message."""

    restart: bool
    reason: str
    message: str
    counted: int = 0


def _rehosted(env: Mapping[str, Any], remote: Mapping[str, str]) -> Mapping[str, Any]:
    """``env`` with a peer's host (alone, or ``host:port``) named as ``remote`` says."""
    value = env.get("value")
    if not remote or not isinstance(value, str):
        return env
    host, colon, port = value.partition(":")
    if host not in remote or (colon and not port.isdigit()):
        return env
    return {**env, "value": f"{remote[host]}{colon}{port}"}


def judge_failure(policy: Mapping[str, Any] | None, failed: Sequence[tuple[str, str]],
                  counted: int, *, split: bool = False) -> FailureVerdict:
    """JobSet v0.12's failure policy over the failed Jobs (``(replicated job, Job name)``,
    in order; each failed past its backoff limit), ``counted`` restarts towards the max so
    far."""
    first = failed[0][1]

    def said(text: str, job: str = first) -> str:
        return f"{text} (first failed job: {job})"

    if policy is None:
        return FailureVerdict(False, "FailedJobs",
                              said("jobset failed due to one or more job failures"))
    reason, message = BACKOFF_EXCEEDED
    rule = next((rule for rule in policy.get("rules") or [] if (
        not rule.get("onJobFailureReasons") or reason in rule["onJobFailureReasons"]) and (
        not rule.get("onJobFailureMessagePatterns") or any(
            _matches(p, message) for p in rule["onJobFailureMessagePatterns"]))
        and any(not rule.get("targetReplicatedJobs") or rjob in rule["targetReplicatedJobs"]
                for rjob, _ in failed)), None)
    action = Action(rule["action"]) if rule else Action.RESTART_JOBSET
    job = first if rule is None or not rule.get("targetReplicatedJobs") else next(
        name for rjob, name in failed if rjob in rule["targetReplicatedJobs"])
    if action is Action.FAIL_JOBSET:
        return FailureVerdict(False, "FailJobSetFailurePolicyAction",
                              said("applying FailJobSet failure policy action", job))
    if action in (Action.RESTART_JOB, Action.RESTART_JOB_AND_IGNORE_MAX_RESTARTS):
        return FailureVerdict(False, "FailedJobs", said(
            f"jobset failed due to one or more job failures: {action} needs JobSet's "
            "RestartJob feature gate, which fleet does not carry", job))
    if split:
        return FailureVerdict(False, "FailedJobs", said(
            "jobset failed due to one or more job failures: a JobSet split across members "
            "is not restarted", job))
    if action is Action.RESTART_JOBSET and counted >= int(policy.get("maxRestarts") or 0):
        return FailureVerdict(False, "ReachedMaxRestarts",
                              said("jobset failed due to reaching max number of restarts", job))
    return FailureVerdict(True, f"FailurePolicy_{rule['name']}" if rule
                          else "DefaultFailurePolicy",
                          said(f"applying {action} failure policy action", job),
                          counted=int(action is Action.RESTART_JOBSET))


def _restarting_over(conditions: list[Body], reason: str, message: str, now: str
                     ) -> list[Body]:
    """``Restarting`` False saying why, as JobSet sets it when a restart is over, the JobSet
    ends or is suspended (never added only to say so)."""
    return set_condition(conditions, "Restarting", False, reason, message, now)


def _matches(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error:  # (JobSet logs and skips a pattern that does not compile)
        return False


def _reached(rtype: core.ReplicaType, pods: Sequence[core.ObservedPod], status: str) -> bool:
    """Whether every local pod of ``rtype`` is ready or done (``Ready``), or succeeded."""
    mine = {p.index: p for p in pods if p.role == rtype.label and not p.deleting}
    for index in rtype.indices():
        pod = mine.get(index)
        if pod is None:
            return False
        if status == "Complete" and pod.phase != "Succeeded":
            return False
        if status != "Complete" and not (pod.ready or pod.finished):
            return False
    return True


JOBSET = JobSetKind()
