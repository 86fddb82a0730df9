"""Kubeflow v1 kinds on the member: PyTorchJob and TFJob (MPIJob has its own module).

Each kind adds its environment to the pods the core asks for, and turns replica counts into
Kubeflow conditions (Created, Running, Restarting, Succeeded, Failed, Suspended) and
``replicaStatuses``, following the training-operator's rules.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from member_agent.controllers import core
from member_agent.controllers.conditions import is_true, set_condition

Body = dict[str, Any]
GROUP_LABEL = "training.kubeflow.org"
JOB_NAME = f"{GROUP_LABEL}/job-name"
REPLICA_TYPE = f"{GROUP_LABEL}/replica-type"
REPLICA_INDEX = f"{GROUP_LABEL}/replica-index"
JOB_ROLE = f"{GROUP_LABEL}/job-role"
OPERATOR = f"{GROUP_LABEL}/operator-name"
OFFSETS = "fleet.sh/replica-offsets"
WORLD = "fleet.sh/world"
CLUSTERSET_DOMAIN = "clusterset.local"


@dataclass(frozen=True)
class KubeflowKind:
    kind: str
    field: str  # spec field holding the replica specs
    container: str  # the default container kubeflow configures
    port_name: str
    default_port: int
    default_restart: core.Restart
    leader_types: tuple[str, ...]
    operator: str

    def replica_types(self, job: Mapping[str, Any]) -> list[core.ReplicaType]:
        specs: Mapping[str, Any] = job["spec"].get(self.field) or {}
        offsets: Mapping[str, int] = json.loads(
            (job["metadata"].get("annotations") or {}).get(OFFSETS) or "{}")
        return [
            core.ReplicaType(
                name=name,
                replicas=int(spec.get("replicas", 1)),
                restart=core.Restart(spec.get("restartPolicy") or self.default_restart),
                template=spec.get("template") or {},
                offset=int(offsets.get(name, 0)),
            )
            for name, spec in specs.items()
        ]

    def world(self, job: Mapping[str, Any]) -> dict[str, int]:
        """Replicas per type across every cluster the job runs in."""
        shares = json.loads((job["metadata"].get("annotations") or {}).get(WORLD) or "[]")
        if not shares:
            return {t.name: t.replicas for t in self.replica_types(job)}
        total: dict[str, int] = {}
        for share in shares:
            for name, count in share["replicas"].items():
                total[name] = total.get(name, 0) + count
        return total

    def is_local(self, job: Mapping[str, Any], rtype: str, index: int) -> bool:
        """Whether replica ``index`` of ``rtype`` runs in this cluster (always, unless the
        hub split the job: then this cluster holds only its share's indices)."""
        annotations = job["metadata"].get("annotations") or {}
        if not annotations.get(WORLD):
            return True
        for t in self.replica_types(job):
            if t.name == rtype:
                return index in t.indices()
        return False

    def peer_host(self, job: Mapping[str, Any], rtype: str, index: int,
                  *, qualified: bool = False) -> str:
        """How a replica reaches replica ``index`` of ``rtype``: its Service in this cluster,
        or, across clusters, the Multi-Cluster Services name (KEP-1645) of the Service the
        peer's agent exports, ``<svc>.<ns>.svc.clusterset.local``."""
        meta = job["metadata"]
        name = core.pod_name(meta["name"], rtype, index)
        if not self.is_local(job, rtype, index):
            return f"{name}.{meta['namespace']}.svc.{CLUSTERSET_DOMAIN}"
        return f"{name}.{meta['namespace']}.svc" if qualified else name

    def is_leader(self, rtype: str, index: int, types: Sequence[str]) -> bool:
        if any(t in self.leader_types for t in types):
            return rtype in self.leader_types and index == 0
        return rtype == "Worker" and index == 0

    def pod(self, job: Mapping[str, Any], rtype: core.ReplicaType, index: int) -> Body:
        meta = job["metadata"]
        template = copy.deepcopy(dict(rtype.template))
        pod_meta = template.get("metadata") or {}
        name = core.pod_name(meta["name"], rtype.name, index)
        labels = {**(pod_meta.get("labels") or {}), **self.labels(job, rtype.name, index)}
        spec = template.get("spec") or {}
        spec["restartPolicy"] = "Never"
        world = self.world(job)
        containers = spec.get("containers") or []
        for container in containers:
            if container.get("name") == self.container or len(containers) == 1:
                container["env"] = [*(container.get("env") or []),
                                    *self.env(job, rtype.name, index, world)]
                _ensure_port(container, self.port_name, self.default_port)
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": meta["namespace"], "labels": labels,
                "annotations": pod_meta.get("annotations") or {},
                "ownerReferences": [owner(job)],
            },
            "spec": spec,
        }

    def service(self, job: Mapping[str, Any], rtype: str, index: int) -> Body:
        meta = job["metadata"]
        port = self.port_of(job, rtype)
        return {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": core.pod_name(meta["name"], rtype, index),
                         "namespace": meta["namespace"],
                         "labels": self.labels(job, rtype, index),
                         "ownerReferences": [owner(job)]},
            "spec": {"clusterIP": "None",
                     "selector": {JOB_NAME: meta["name"], REPLICA_TYPE: rtype.lower(),
                                  REPLICA_INDEX: str(index)},
                     "ports": [{"name": self.port_name, "port": port}]},
        }

    def labels(self, job: Mapping[str, Any], rtype: str, index: int) -> dict[str, str]:
        meta = job["metadata"]
        labels = {JOB_NAME: meta["name"], REPLICA_TYPE: rtype.lower(),
                  REPLICA_INDEX: str(index), OPERATOR: self.operator}
        uid = (meta.get("labels") or {}).get("fleet.sh/job-uid")
        if uid:
            labels["fleet.sh/job-uid"] = uid
        if self.is_leader(rtype, index, list(self.world(job))):
            labels[JOB_ROLE] = "master"
        return labels

    def port_of(self, job: Mapping[str, Any], rtype: str) -> int:
        spec = (job["spec"].get(self.field) or {}).get(rtype) or {}
        for container in ((spec.get("template") or {}).get("spec") or {}).get("containers") or []:
            for port in container.get("ports") or []:
                if port.get("name") == self.port_name:
                    return int(port["containerPort"])
        return self.default_port

    def env(self, job: Mapping[str, Any], rtype: str, index: int,
            world: Mapping[str, int]) -> list[Body]:
        raise NotImplementedError

    def status(self, job: Mapping[str, Any], types: Sequence[core.ReplicaType],
               result: core.Plan, now: str) -> Body:
        """The job's Kubeflow status after this reconcile (see module doc)."""
        meta_name = job["metadata"]["name"]
        old: Mapping[str, Any] = job.get("status") or {}
        conditions = list(old.get("conditions") or [])
        reason = self.kind
        if not conditions:
            conditions = set_condition(conditions, "Created", True, f"{reason}Created",
                                       f"{self.kind} {meta_name} is created.", now)
        counts = result.counts
        finished = is_true(conditions, "Succeeded") or is_true(conditions, "Failed")
        if not finished:
            conditions = self._progress(conditions, types, counts, result, meta_name, now)
        replica_statuses = {
            t.name: {k: v for k, v in (("active", counts[t.name].active),
                                       ("succeeded", counts[t.name].succeeded),
                                       ("failed", counts[t.name].failed)) if v}
            for t in types if t.name in counts
        }
        status: Body = {"conditions": conditions, "replicaStatuses": replica_statuses,
                        "restartCount": int(old.get("restartCount", 0)) + len(result.restarted)}
        status["startTime"] = old.get("startTime") or now
        if is_true(conditions, "Succeeded"):  # Kubeflow: what still runs counts as succeeded
            for counts_of in replica_statuses.values():
                if counts_of.get("active"):
                    counts_of["succeeded"] = counts_of.get("succeeded", 0) + counts_of.pop("active")
        ended = is_true(conditions, "Succeeded") or is_true(conditions, "Failed")
        if ended:
            status["completionTime"] = old.get("completionTime") or now
        return status

    def _progress(self, conditions: list[Body], types: Sequence[core.ReplicaType],
                  counts: Mapping[str, core.Counts], result: core.Plan, name: str,
                  now: str) -> list[Body]:
        k = self.kind
        leaders = [t for t in types if t.name in self.leader_types]
        failed = [(t.name, counts[t.name].failed) for t in types if counts[t.name].failed]
        if failed:
            rtype, n = failed[0]
            message = f"{k} {name} has failed because {n} {rtype} replica(s) failed."
            if result.exhausted:
                message = (f"{k} {name} has failed because it has reached the specified "
                           "backoff limit")
            conditions = set_condition(conditions, "Running", False, f"{k}Failed", message, now)
            return set_condition(conditions, "Failed", True, f"{k}Failed", message, now)
        if result.restarted:
            rtype, index = result.restarted[0]
            message = f"{k} {name} is restarting because {rtype} replica {index} failed."
            conditions = set_condition(conditions, "Running", False, f"{k}Restarting", message,
                                       now)
            return set_condition(conditions, "Restarting", True, f"{k}Restarting", message, now)
        if leaders:
            lead = counts[leaders[0].name]
            succeeded = lead.succeeded == leaders[0].replicas
            running = lead.running > 0
        else:
            workers = [t for t in types if t.name == "Worker"] or list(types)
            succeeded = all(counts[t.name].succeeded == t.replicas for t in workers)
            running = any(counts[t.name].running for t in types)
        if succeeded:
            message = f"{k} {name} is successfully completed."
            conditions = set_condition(conditions, "Running", False, f"{k}Succeeded", message, now)
            return set_condition(conditions, "Succeeded", True, f"{k}Succeeded", message, now)
        if running:
            message = f"{k} {name} is running."
            conditions = set_condition(conditions, "Restarting", False, f"{k}Running", message,
                                       now)
            return set_condition(conditions, "Running", True, f"{k}Running", message, now)
        return conditions


class PyTorchKind(KubeflowKind):
    def env(self, job: Mapping[str, Any], rtype: str, index: int,
            world: Mapping[str, int]) -> list[Body]:
        total = sum(world.values())
        nproc = str(job["spec"].get("nprocPerNode") or "")
        per_node = int(nproc) if nproc.isdigit() else 1
        rank = index if rtype == "Master" or "Master" not in world else index + world["Master"]
        env = [{"name": "PYTHONUNBUFFERED", "value": "1"}]
        if "Master" in world:
            port = str(self.port_of(job, "Master"))
            master = self.peer_host(job, "Master", 0)
            env += [{"name": "MASTER_PORT", "value": port},
                    {"name": "PET_MASTER_PORT", "value": port},
                    {"name": "MASTER_ADDR", "value": master},
                    {"name": "PET_MASTER_ADDR", "value": master},
                    {"name": "WORLD_SIZE", "value": str(total * per_node)},
                    {"name": "RANK", "value": str(rank)},
                    {"name": "PET_NODE_RANK", "value": str(rank)},
                    {"name": "PET_NNODES", "value": str(total)}]
        if nproc:
            env.append({"name": "PET_NPROC_PER_NODE", "value": nproc})
        world_text = (job["metadata"].get("annotations") or {}).get(WORLD)
        if world_text:  # split across clusters: every replica learns where its peers are
            env.append({"name": "FLEET_WORLD", "value": world_text})
        return env


class TFKind(KubeflowKind):
    def env(self, job: Mapping[str, Any], rtype: str, index: int,
            world: Mapping[str, int]) -> list[Body]:
        if sum(world.values()) == 1:
            return []  # Kubeflow leaves TF_CONFIG out for a single replica
        cluster = {
            t.lower(): [f"{self.peer_host(job, t, i, qualified=True)}:{self.port_of(job, t)}"
                        for i in range(count)]
            for t, count in world.items()
        }
        config = {"cluster": cluster, "task": {"type": rtype.lower(), "index": index},
                  "environment": "cloud"}
        return [{"name": "TF_CONFIG", "value": json.dumps(config, separators=(",", ":"))}]


def owner(job: Mapping[str, Any]) -> Body:
    meta = job["metadata"]
    return {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}


def _ensure_port(container: Body, name: str, port: int) -> None:
    ports = container.setdefault("ports", [])
    if not any(p.get("name") == name for p in ports):
        ports.append({"name": name, "containerPort": port, "protocol": "TCP"})


PYTORCH = PyTorchKind("PyTorchJob", "pytorchReplicaSpecs", "pytorch", "pytorchjob-port", 23456,
                      core.Restart.ON_FAILURE, ("Master",), "pytorchjob-controller")
TF = TFKind("TFJob", "tfReplicaSpecs", "tensorflow", "tfjob-port", 2222, core.Restart.NEVER,
            ("Chief", "Master"), "tfjob-controller")
