"""Kubeflow MPIJob ``kubeflow.org/v1`` (seed 001) on the member: the kubectl-exec design.

- Workers ``<job>-worker-<i>`` run their template (``sleep 365d`` when it gives no command)
  and mount the job's ConfigMap, since OpenMPI looks for the rsh agent on every rank.
- ConfigMap ``<job>-config``: ``hostfile`` (``<job>-worker-<i> slots=<slotsPerWorker>``),
  ``kubexec.sh`` (the rsh agent: ``kubectl exec`` into the named worker) and
  ``discover_hosts.sh`` (the workers running now), mounted at ``/etc/mpi``.
- Launcher ``<job>-launcher``, created only once every worker is Ready (so mpirun never races
  worker start-up: kubeflow/mpi-operator#386, #481), with ``OMPI_MCA_plm_rsh_agent`` and
  ``OMPI_MCA_orte_default_hostfile`` (and the Intel MPI equivalents) pointing at them; an init
  container copies kubectl from the image ``FLEET_KUBECTL_IMAGE`` into ``/opt/kube``, so
  nothing is downloaded at run time.
- ServiceAccount, Role and RoleBinding ``<job>-launcher``: the launcher may read pods and
  create ``pods/exec`` only on its own workers (``resourceNames``).
- The launcher decides success and failure; ``cleanPodPolicy`` applies to workers only, so the
  launcher's log stays readable.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from typing import Any

from fleet.clients import resources as r
from fleet.kinds import kubeflow as kinds
from fleet.kinds.naming import derived_name
from member_agent.controllers import core, mpi
from member_agent.controllers.gang import Gang
from member_agent.controllers.kind import Body, owner
from member_agent.controllers.kubeflow import KubeflowKind

LAUNCHER, WORKER = "Launcher", "Worker"
DEFAULT_KUBECTL_IMAGE = "bitnami/kubectl:1.36"


class KubeflowMPIKind(mpi.LauncherAfterWorkers, KubeflowKind):
    launcher, worker = LAUNCHER, WORKER

    def __init__(self) -> None:
        super().__init__(kinds.MPI, "", "", 0, core.Restart.NEVER, "mpijob-controller")
        self.kubectl_image = os.environ.get("FLEET_KUBECTL_IMAGE", DEFAULT_KUBECTL_IMAGE)

    def default_restart(self, rtype: str) -> core.Restart:
        return core.Restart.ON_FAILURE if rtype == LAUNCHER else core.Restart.NEVER

    def cleanup(self, job: Mapping[str, Any]) -> core.Cleanup:
        policy = self.run_policy(job).get("cleanPodPolicy") or job["spec"].get("cleanPodPolicy")
        return {"Running": core.Cleanup.UNFINISHED, "All": core.Cleanup.ALL}.get(
            policy or "None", core.Cleanup.NONE)

    def clean_up(self, job: Mapping[str, Any], pods: Sequence[core.ObservedPod],
                 failed: bool) -> list[str]:
        workers = [p for p in pods if p.role == WORKER.lower()]
        return core.to_clean_up(workers, self.cleanup(job), stop_unfinished=failed)

    def port(self, job: Mapping[str, Any], rtype: str) -> tuple[str, int] | None:
        return None  # workers are reached through the API server, not the network

    def slots(self, job: Mapping[str, Any]) -> int:
        return int(job["spec"].get("slotsPerWorker") or 1)

    def main_container(self, job: Mapping[str, Any]) -> str:
        if job["spec"].get("mainContainer"):
            return str(job["spec"]["mainContainer"])
        spec = dict(self.replica_specs(job)).get(WORKER) or {}
        containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
        return str(containers[0]["name"]) if containers else "mpi"

    def workers(self, job: Mapping[str, Any]) -> list[str]:
        return [self.pod_name(job["metadata"]["name"], WORKER, i)
                for t in self.replica_types(job) if t.name == WORKER for i in t.indices()]

    def master_role(self, job: Mapping[str, Any], rtype: str, index: int) -> bool:
        return rtype == LAUNCHER  # the operator's: the launcher, and no worker

    def _running(self, types: Sequence[core.ReplicaType],
                 counts: Mapping[str, core.Counts]) -> bool:
        return LAUNCHER in counts and counts[LAUNCHER].running > 0

    # -- objects -------------------------------------------------------------------------
    def names(self, job: Mapping[str, Any]) -> tuple[str, str]:
        name = job["metadata"]["name"]
        return derived_name(name, "config"), derived_name(name, "launcher")

    def objects(self, job: Mapping[str, Any], types: Sequence[core.ReplicaType],
                pods: Sequence[core.ObservedPod]) -> list[tuple[r.Resource, Body]]:
        config, launcher = self.names(job)
        meta = job["metadata"]
        namespace = meta["namespace"]
        base = {"namespace": namespace, "ownerReferences": [owner(job)],
                "labels": {self.job_label: self.labels(job, WORKER, 0)[self.job_label]}}
        workers = self.workers(job)
        running = [p.name for p in pods if p.role == WORKER.lower() and p.phase == "Running"
                   and not p.deleting]
        return [
            (r.CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": config, **base},
                            "data": {"hostfile": mpi.hostfile(workers, self.slots(job)),
                                     "kubexec.sh": mpi.kubexec(self.main_container(job)),
                                     "discover_hosts.sh": mpi.discover_hosts(
                                         running, self.slots(job))}}),
            (r.SERVICEACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount",
                                 "metadata": {"name": launcher, **base}}),
            (r.ROLES, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                       "metadata": {"name": launcher, **base},
                       "rules": [{"apiGroups": [""], "resources": ["pods"],
                                  "verbs": ["get", "list", "watch"]},
                                 {"apiGroups": [""], "resources": ["pods/exec"],
                                  "verbs": ["create"], "resourceNames": workers}]}),
            (r.ROLEBINDINGS, {"apiVersion": "rbac.authorization.k8s.io/v1",
                              "kind": "RoleBinding", "metadata": {"name": launcher, **base},
                              "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                          "kind": "Role", "name": launcher},
                              "subjects": [{"kind": "ServiceAccount", "name": launcher,
                                            "namespace": namespace}]}),
        ]

    # -- pods ----------------------------------------------------------------------------
    def pod(self, job: Mapping[str, Any], rtype: core.ReplicaType, index: int, variant: str,
            gang: Gang | None) -> Body:
        body = super().pod(job, rtype, index, variant, gang)
        spec = body["spec"]
        config, launcher = self.names(job)
        volumes = spec.setdefault("volumes", [])
        volumes.append({"name": "mpi-job-config", "configMap": {
            "name": config, "items": [
                {"key": "hostfile", "path": "hostfile", "mode": 0o444},
                {"key": "kubexec.sh", "path": "kubexec.sh", "mode": 0o555},
                {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o555}]}})
        mount = {"name": "mpi-job-config", "mountPath": mpi.CONFIG_MOUNT}
        containers = spec.get("containers") or []
        if rtype.name == WORKER:
            for container in containers:
                container.setdefault("volumeMounts", []).append(dict(mount))
            if containers and not containers[0].get("command") and not containers[0].get("args"):
                containers[0]["command"] = ["sleep", "365d"]
            return body
        spec["serviceAccountName"] = launcher
        volumes.append({"name": "mpi-kubectl", "emptyDir": {}})
        kubectl = {"name": "mpi-kubectl", "mountPath": mpi.KUBECTL_DIR}
        spec["initContainers"] = [*(spec.get("initContainers") or []), {
            "name": "kubectl-delivery", "image": self.kubectl_image,
            "command": ["/bin/sh", "-c",
                        f'cp "$(command -v kubectl)" {mpi.KUBECTL_DIR}/kubectl'],
            "volumeMounts": [copy.deepcopy(kubectl)],
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]
        if containers:
            main = containers[0]
            main.setdefault("volumeMounts", []).extend([dict(mount), kubectl])
            given = {e.get("name") for e in main.get("env") or []}
            main["env"] = [*(main.get("env") or []),
                           *[e for e in launcher_env(main) if e["name"] not in given]]
        return body


def launcher_env(container: Mapping[str, Any]) -> list[Body]:
    env = [("OMPI_MCA_plm_rsh_agent", mpi.KUBEXEC),
           ("OMPI_MCA_orte_default_hostfile", mpi.HOSTFILE),
           ("I_MPI_HYDRA_BOOTSTRAP", "rsh"), ("I_MPI_HYDRA_BOOTSTRAP_EXEC", mpi.KUBEXEC)]
    limits = (container.get("resources") or {}).get("limits") or {}
    if "nvidia.com/gpu" not in limits:  # a launcher without a GPU must not see the node's
        env += [("NVIDIA_VISIBLE_DEVICES", ""), ("NVIDIA_DRIVER_CAPABILITIES", "")]
    return [{"name": k, "value": v} for k, v in env]


KUBEFLOW_MPI = KubeflowMPIKind()
