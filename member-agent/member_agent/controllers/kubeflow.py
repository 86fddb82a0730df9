"""Kubeflow v1 kinds on the member: PyTorchJob and TFJob (MPIJob has its own module).

Each kind adds its environment to the pods the core asks for, and turns replica counts into
Kubeflow conditions (Created, Running, Restarting, Succeeded, Failed, Suspended, with
``<Kind><Reason>`` reasons) and ``replicaStatuses``, following the training-operator's rules:
PyTorchJob succeeds with its master (else all workers), TFJob with its chief (else worker 0,
or all workers under ``successPolicy: AllWorkers``); any replica type with a replica that
failed for good fails the job (a PS or an evaluator too). A failed job's unfinished pods are
stopped whatever ``cleanPodPolicy`` says (kubeflow/training-operator#1579).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from fleet.api import protocol
from fleet.kinds import kubeflow as kinds
from fleet.kinds.base import KindAdapter
from member_agent.controllers import core
from member_agent.controllers.conditions import is_true, set_condition
from member_agent.controllers.gang import GangRequest
from member_agent.controllers.kind import Body, JobKind, Observed, RunMode

GROUP_LABEL = "training.kubeflow.org"
JOB_NAME = f"{GROUP_LABEL}/job-name"
REPLICA_TYPE = f"{GROUP_LABEL}/replica-type"
REPLICA_INDEX = f"{GROUP_LABEL}/replica-index"
JOB_ROLE = f"{GROUP_LABEL}/job-role"
OPERATOR = f"{GROUP_LABEL}/operator-name"
CLEAN_POD_POLICY = {"None": core.Cleanup.NONE, "Running": core.Cleanup.UNFINISHED,
                    "All": core.Cleanup.ALL}


class KubeflowKind(JobKind):
    group = "kubeflow.org"
    job_label, type_label, index_label = JOB_NAME, REPLICA_TYPE, REPLICA_INDEX
    stop_unfinished_on_failure = True

    def __init__(self, description: KindAdapter, container: str, port_name: str,
                 default_port: int, default_restart: core.Restart, operator: str) -> None:
        self.description = description
        self.container = container
        self.port_name = port_name
        self.default_port = default_port
        self._default_restart = default_restart
        self.operator = operator

    def default_restart(self, rtype: str) -> core.Restart:
        return self._default_restart

    def run_mode(self, job: Mapping[str, Any]) -> RunMode:
        return RunMode(stop="Suspended" if self.run_policy(job).get("suspend") else "")

    def ttl(self, job: Mapping[str, Any]) -> int | None:
        if protocol.WORK in (job["metadata"].get("annotations") or {}):
            return None  # the hub deletes a federated job, and its Works with it
        return self.description.ttl(job)

    def cleanup(self, job: Mapping[str, Any]) -> core.Cleanup:
        return CLEAN_POD_POLICY.get(self.run_policy(job).get("cleanPodPolicy") or "None",
                                    core.Cleanup.NONE)

    def gang_request(self, job: Mapping[str, Any]) -> GangRequest:
        policy = self.run_policy(job).get("schedulingPolicy") or {}
        timeout = policy.get("scheduleTimeoutSeconds")
        return GangRequest(queue=policy.get("queue") or "",
                           priority_class=policy.get("priorityClass") or "",
                           timeout_seconds=timeout if isinstance(timeout, int) else None)

    def port(self, job: Mapping[str, Any], rtype: str) -> tuple[str, int] | None:
        return self.port_name, self.port_number(job, rtype)

    def port_number(self, job: Mapping[str, Any], rtype: str) -> int:
        """The kind's port on ``rtype``'s training container: as its template names it, else
        the kind's default (a Kubeflow kind always has one)."""
        spec = dict(self.replica_specs(job)).get(rtype) or {}
        for container in ((spec.get("template") or {}).get("spec") or {}).get("containers") or []:
            for port in container.get("ports") or []:
                if port.get("name") == self.port_name:
                    return int(port["containerPort"])
        return self.default_port

    def labels(self, job: Mapping[str, Any], rtype: str, index: int) -> dict[str, str]:
        labels = {**super().labels(job, rtype, index), OPERATOR: self.operator}
        if self.master_role(job, rtype, index):
            labels[JOB_ROLE] = "master"
        return labels

    def master_role(self, job: Mapping[str, Any], rtype: str, index: int) -> bool:
        """Whether the pod is labelled ``job-role: master`` (the SDK's ``is_master``)."""
        return (rtype, index) == self.leader(list(self.world(job)))

    # -- status --------------------------------------------------------------------------
    def restarts_so_far(self, status: Mapping[str, Any]) -> int:
        return int(status.get("restartCount", 0))

    def fail(self, job: Mapping[str, Any], status: Body, reason: str, message: str,
             now: str) -> Body:
        k = self.kind
        text = f"{k} {job['metadata']['name']} has failed because it {message}"
        conditions = set_condition(status["conditions"], "Running", False, f"{k}Failed", text,
                                   now)
        conditions = set_condition(conditions, "Failed", True, f"{k}Failed", text, now)
        return {**status, "conditions": conditions, "completionTime": now}

    def status(self, job: Mapping[str, Any], types: Sequence[core.ReplicaType],
               result: core.Plan, pods: Sequence[core.ObservedPod], mode: RunMode,
               observed: Observed, now: str) -> Body:
        """The job's Kubeflow status after this reconcile (see module doc)."""
        k, name = self.kind, job["metadata"]["name"]
        old: Mapping[str, Any] = job.get("status") or {}
        if self.finished(old):
            return dict(old)  # final: clean-up that follows must not erase the counts
        conditions = list(old.get("conditions") or [])
        start = old.get("startTime") or now
        if not conditions:
            conditions = set_condition(conditions, "Created", True, f"{k}Created",
                                       f"{k} {name} is created.", now)
        counts = result.counts
        if not self.finished(old):
            if mode.stop:
                text = f"{k} {name} is suspended."
                conditions = set_condition(conditions, "Running", False, f"{k}Suspended", text,
                                           now)
                conditions = set_condition(conditions, "Suspended", True, f"{k}Suspended",
                                           text, now)
            else:
                if is_true(conditions, "Suspended"):
                    conditions = set_condition(conditions, "Suspended", False, f"{k}Resumed",
                                               f"{k} {name} is resumed.", now)
                    start = now  # Kubeflow: a resumed job's deadline counts from its resume
                conditions = self._progress(conditions, types, counts, result, name, job, now)
        replica_statuses = {
            t.name: {key: value for key, value in (("active", counts[t.name].active),
                                                   ("succeeded", counts[t.name].succeeded),
                                                   ("failed", counts[t.name].failed)) if value}
            for t in types if t.name in counts
        }
        status: Body = {"conditions": conditions, "replicaStatuses": replica_statuses,
                        "restartCount": self.restarts_so_far(old) + len(result.restarted),
                        "startTime": start}
        if is_true(conditions, "Succeeded"):  # Kubeflow: what still runs counts as succeeded
            for counts_of in replica_statuses.values():
                if counts_of.get("active"):
                    counts_of["succeeded"] = counts_of.get("succeeded", 0) + counts_of.pop("active")
        if self.finished(status):
            status["completionTime"] = old.get("completionTime") or now
        return status

    def _progress(self, conditions: list[Body], types: Sequence[core.ReplicaType],
                  counts: Mapping[str, core.Counts], result: core.Plan, name: str,
                  job: Mapping[str, Any], now: str) -> list[Body]:
        k = self.kind
        if self._succeeded(types, result, job):
            message = f"{k} {name} is successfully completed."
            conditions = set_condition(conditions, "Running", False, f"{k}Succeeded", message,
                                       now)
            return set_condition(conditions, "Succeeded", True, f"{k}Succeeded", message, now)
        failed = [(t.name, counts[t.name]) for t in types if counts[t.name].failed]
        if failed:
            rtype, of_type = failed[0]
            message = f"{k} {name} has failed because {of_type.failed} {rtype} replica(s) failed."
            if result.exhausted:
                message = (f"{k} {name} has failed because it has reached the specified "
                           f"backoff limit ({result.exhausted}).")
            conditions = set_condition(conditions, "Running", False, f"{k}Failed", message, now)
            return set_condition(conditions, "Failed", True, f"{k}Failed", message, now)
        if result.restarted:
            rtype, index = result.restarted[0]
            message = f"{k} {name} is restarting because {rtype} replica {index} failed."
            conditions = set_condition(conditions, "Running", False, f"{k}Restarting", message,
                                       now)
            return set_condition(conditions, "Restarting", True, f"{k}Restarting", message, now)
        if self._running(types, counts):
            message = f"{k} {name} is running."
            conditions = set_condition(conditions, "Restarting", False, f"{k}Running", message,
                                       now)
            return set_condition(conditions, "Running", True, f"{k}Running", message, now)
        return conditions

    def _running(self, types: Sequence[core.ReplicaType],
                 counts: Mapping[str, core.Counts]) -> bool:
        return any(counts[t.name].running for t in types)

    def _succeeded(self, types: Sequence[core.ReplicaType], result: core.Plan,
                   job: Mapping[str, Any]) -> bool:
        counts = result.counts
        leaders = [t for t in types if t.name in self.description.leaders]
        if leaders:
            return counts[leaders[0].name].succeeded == leaders[0].replicas
        workers = [t for t in types if t.name == "Worker"]
        return bool(workers) and all(counts[t.name].succeeded == t.replicas for t in workers)


class PyTorchKind(KubeflowKind):
    def env(self, job: Mapping[str, Any], rtype: str, index: int,
            world: Mapping[str, int]) -> list[Body]:
        total = sum(world.values())
        elastic = job["spec"].get("elasticPolicy")
        nproc = str(job["spec"].get("nprocPerNode")
                    or (elastic or {}).get("nProcPerNode") or "")
        per_node = int(nproc) if nproc.isdigit() else 1
        rank = index if rtype == "Master" or "Master" not in world else index + world["Master"]
        env = [{"name": "PYTHONUNBUFFERED", "value": "1"}]
        if "Master" in world:
            port = str(self.port_number(job, "Master"))
            master = self.peer_host(job, "Master", 0)
            env += [{"name": "MASTER_PORT", "value": port},
                    {"name": "PET_MASTER_PORT", "value": port},
                    {"name": "MASTER_ADDR", "value": master},
                    {"name": "PET_MASTER_ADDR", "value": master},
                    {"name": "WORLD_SIZE", "value": str(total * per_node)},
                    {"name": "RANK", "value": str(rank)},
                    {"name": "PET_NODE_RANK", "value": str(rank)}]
            if elastic is None:
                env.append({"name": "PET_NNODES", "value": str(total)})
        if elastic is not None:
            env += self.elastic_env(job, elastic)
        if nproc:
            env.append({"name": "PET_NPROC_PER_NODE", "value": nproc})
        world_text = protocol.world_text(job["metadata"])
        if world_text:  # split across clusters: every replica learns where its peers are
            env.append({"name": "FLEET_WORLD", "value": world_text})
        return env


    def elastic_env(self, job: Mapping[str, Any], policy: Mapping[str, Any]) -> list[Body]:
        """torchrun's elastic settings, as the training-operator sets them: the rendezvous
        at worker 0 (or ``rdzvHost``/``rdzvPort``), c10d unless ``rdzvBackend`` says, and
        ``PET_NNODES`` "min:max", the same whatever size the hub runs the job at, so pods
        added or removed by a resize leave the others' environment as it was."""
        workers = int(((job["spec"].get("pytorchReplicaSpecs") or {}).get("Worker") or {})
                      .get("replicas", 1))
        low, high = policy.get("minReplicas"), policy.get("maxReplicas")
        low = low if low is not None else high if high is not None else workers
        high = high if high is not None else low
        port = policy.get("rdzvPort") or self.port_number(job, "Worker")
        host = policy.get("rdzvHost") or self.peer_host(job, "Worker", 0)
        env = [{"name": "PET_RDZV_ENDPOINT", "value": f"{host}:{port}"},
               {"name": "PET_RDZV_BACKEND", "value": str(policy.get("rdzvBackend") or "c10d")},
               {"name": "PET_NNODES", "value": f"{low}:{high}"}]
        if policy.get("maxRestarts") is not None:
            env.append({"name": "PET_MAX_RESTARTS", "value": str(policy["maxRestarts"])})
        if policy.get("rdzvId"):
            env.append({"name": "PET_RDZV_ID", "value": str(policy["rdzvId"])})
        conf = ",".join(f"{c.get('key')}={c.get('value', '')}"
                        for c in policy.get("rdzvConf") or [])
        if conf:
            env.append({"name": "PET_RDZV_CONF", "value": conf})
        if policy.get("standalone"):
            env.append({"name": "PET_STANDALONE", "value": ""})
        return env


class TFKind(KubeflowKind):
    def env(self, job: Mapping[str, Any], rtype: str, index: int,
            world: Mapping[str, int]) -> list[Body]:
        return tf_config(self, job, rtype, index, world)

    def _succeeded(self, types: Sequence[core.ReplicaType], result: core.Plan,
                   job: Mapping[str, Any]) -> bool:
        if any(t.name in self.description.leaders for t in types) or (
                job["spec"].get("successPolicy") == "AllWorkers"):
            return super()._succeeded(types, result, job)
        return ("Worker", 0) in result.succeeded_replicas  # the default policy: worker 0


def tf_config(kind: JobKind, job: Mapping[str, Any], rtype: str, index: int,
              world: Mapping[str, int]) -> list[Body]:
    """TF_CONFIG as Kubeflow writes it: every replica type (evaluator included) by its
    Service name and port, this replica's task, ``environment: cloud``; none for a job of
    one replica."""
    if sum(world.values()) == 1:
        return []
    cluster = {}
    for name, count in world.items():
        port = kind.port(job, name)
        number = port[1] if port else 2222
        cluster[name.lower()] = [f"{kind.peer_host(job, name, i, qualified=True)}:{number}"
                                 for i in range(count)]
    config = {"cluster": cluster, "task": {"type": rtype.lower(), "index": index},
              "environment": "cloud"}
    return [{"name": "TF_CONFIG", "value": json.dumps(config, separators=(",", ":"))}]


PYTORCH = PyTorchKind(kinds.PYTORCH, "pytorch", "pytorchjob-port", 23456, core.Restart.ON_FAILURE,
                      "pytorchjob-controller")
TF = TFKind(kinds.TF, "tensorflow", "tfjob-port", 2222, core.Restart.NEVER, "tfjob-controller")
