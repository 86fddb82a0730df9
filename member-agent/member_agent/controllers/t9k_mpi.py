"""T9k MPIJob (``batch.tensorstack.dev/v1beta1``, seed 000) on the member: the sshd design.

- Workers ``<job>-worker-<i>`` (hostname ``<pod>``, subdomain ``<job>``, behind a headless
  Service ``<job>``) run sshd from ``ssh.sshdPath`` in their ``mpi-worker`` container; the
  template's command and args are ignored, as the seed says.
- A per-job SSH key (ECDSA P-521) lives in the Secret ``<job>-ssh`` and is mounted at
  ``ssh.sshAuthMountPath`` (default ``/root/.ssh``) in the launcher and every worker; see
  :func:`mpi.ssh_volume` for root and non-root images.
- The launcher ``<job>-launcher``, which the controller writes (the user never does), is made
  once every worker is Ready. It runs the ``mpi-worker`` image without its resource requests:
  ``<mpiHome>/bin/mpirun --hostfile /etc/mpi/hostfile --prefix <mpiHome> --mca k v ...
  <extraMPIArgs> <cmd>``; the hostfile (ConfigMap ``<job>-config``) lists each worker's DNS
  name with as many slots as ``-N`` asks for. A job split over members names a worker on
  another member as Multi-Cluster Services name a pod behind a headless ServiceImport
  (``<pod>.<member>.<job>.<ns>.svc.clusterset.local``), and every member mounts the one
  key the hub made for the gang (see :func:`fleet.hub.binder.split_keys`).
- The launcher decides: mpirun exiting 0 completes the job, anything else fails it.
  ``runPolicy.cleanUpWorkers`` then deletes the workers (the launcher stays for its log).
- Debug mode: launcher ``sleep inf``, workers ``/usr/bin/sshd -D`` unless the replica spec says
  otherwise. Pause mode and resumeSpecs as for every T9k job.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from fleet.api.protocol import replica_offsets
from fleet.clients import resources as r
from fleet.kinds import t9k as kinds
from fleet.kinds.naming import derived_name, label_value
from member_agent.controllers import core, mpi
from member_agent.controllers.kind import CLUSTERSET_DOMAIN, Body, owner
from member_agent.controllers.t9k import T9kKind

LAUNCHER, WORKER = "launcher", "worker"
DEFAULT_SSHD = "/usr/sbin/sshd"


class T9kMPIKind(mpi.LauncherAfterWorkers, T9kKind):
    launcher, worker = LAUNCHER, WORKER
    description = kinds.T9K_MPI
    container = "mpi-worker"
    task_replicas_key = "status"  # seed 000 lists an MPIJob's pods under tasks[].status

    def replica_specs(self, job: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
        specs = self.description.replica_specs(job)  # the workers
        if int(replica_offsets(job["metadata"]).get(WORKER, 0)) == 0:
            # the share holding worker 0 runs the launcher, in the workers' image
            template = dict(specs).get(WORKER, {}).get("template") or {}
            specs = [(LAUNCHER, {"replicas": 1, "template": template}), *specs]
        return specs

    def leader(self, types: Sequence[str]) -> tuple[str, int]:
        return LAUNCHER, 0

    def cleanup(self, job: Mapping[str, Any]) -> core.Cleanup:
        policy = self.run_policy(job).get("cleanUpWorkers")
        return core.Cleanup.ALL if policy else core.Cleanup.NONE

    def clean_up(self, job: Mapping[str, Any], pods: Sequence[core.ObservedPod],
                 failed: bool) -> list[str]:
        workers = [p for p in pods if p.role == WORKER]
        return core.to_clean_up(workers, self.cleanup(job))

    # -- settings ------------------------------------------------------------------------
    def ssh_mount(self, job: Mapping[str, Any]) -> str:
        return str((job["spec"].get("ssh") or {}).get("sshAuthMountPath") or mpi.ROOT_SSH)

    def service_name(self, job: Mapping[str, Any]) -> str:
        return label_value(job["metadata"]["name"])

    def ssh_key_secret(self, job: Mapping[str, Any]) -> str:
        return derived_name(job["metadata"]["name"], "ssh")

    def hosts(self, job: Mapping[str, Any]) -> list[str]:
        meta = job["metadata"]
        workers = job["spec"]["worker"].get("replicas", 1)
        world = self.world(job).get(WORKER, workers)
        service, namespace = self.service_name(job), meta["namespace"]
        hosts = []
        for i in range(world):  # a worker another member holds: by KEP-1645's pod name
            pod, holder = self.pod_name(meta["name"], WORKER, i), self.holder(job, WORKER, i)
            hosts.append(f"{pod}.{holder}.{service}.{namespace}.svc.{CLUSTERSET_DOMAIN}"
                         if holder is not None and not self.is_local(job, WORKER, i)
                         else f"{pod}.{service}.{namespace}.svc")
        return hosts

    def launch_command(self, job: Mapping[str, Any]) -> list[str]:
        worker = job["spec"]["worker"]
        return mpi.mpirun_command(mpi_home=job["spec"].get("mpiHome"),
                                  mca=job["spec"].get("mca") or {},
                                  extra_args=worker.get("extraMPIArgs") or [],
                                  cmd=worker["cmd"])

    def launcher_env(self, job: Mapping[str, Any]) -> list[Body]:
        return [{"name": "OMPI_MCA_plm_rsh_args", "value": mpi.ssh_args(self.ssh_mount(job))},
                {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
                {"name": "OMPI_MCA_orte_default_hostfile", "value": mpi.HOSTFILE}]

    # -- objects -------------------------------------------------------------------------
    def objects(self, job: Mapping[str, Any], types: Sequence[core.ReplicaType],
                pods: Sequence[core.ObservedPod]) -> list[tuple[r.Resource, Body]]:
        meta = job["metadata"]
        base = {"namespace": meta["namespace"], "ownerReferences": [owner(job)]}
        slots = mpi.slots_from(job["spec"]["worker"].get("extraMPIArgs") or [])
        selector = {self.job_label: label_value(meta["name"]), self.type_label: WORKER}
        return [
            (r.CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": derived_name(meta["name"], "config"), **base},
                            "data": {"hostfile": mpi.hostfile(self.hosts(job), slots)}}),
            (r.SERVICES, {"apiVersion": "v1", "kind": "Service",
                          "metadata": {"name": self.service_name(job), **base},
                          "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                                   "selector": selector,
                                   "ports": [{"name": "ssh",
                                              "port": mpi.ssh_port(self.ssh_mount(job))}]}}),
        ]

    # -- pods ----------------------------------------------------------------------------
    def pod_spec(self, job: Mapping[str, Any], rtype: core.ReplicaType, variant: str) -> Body:
        mount = self.ssh_mount(job)
        mode = self.mode_spec(job, rtype.name, variant)
        if rtype.name == WORKER:
            sshd = (job["spec"].get("ssh") or {}).get("sshdPath") or DEFAULT_SSHD
            default = mpi.sshd_command(sshd, mount) if variant != "debug" else [
                "/usr/bin/sshd", "-D"]
        else:
            default = self.launch_command(job) if variant != "debug" else ["sleep", "inf"]
        spec = core.apply_mode(rtype.template, self.container,
                               command=mode.get("command") or default,
                               args=mode.get("args") or [],
                               skip_init=bool(mode.get("skipInitContainer")))
        spec = copy.deepcopy(spec)
        volume, volume_mount = mpi.ssh_volume(self.ssh_key_secret(job), mount)
        spec["volumes"] = [*(spec.get("volumes") or []), volume]
        containers = spec.get("containers") or []
        main = next((c for c in containers if c.get("name") == self.container), None)
        if main is not None:
            main["volumeMounts"] = [*(main.get("volumeMounts") or []), volume_mount]
            if not main["args"]:
                main.pop("args")
        if rtype.name == LAUNCHER and main is not None:
            main["name"] = "mpi-launcher"
            main.pop("resources", None)  # the launcher only starts mpirun (hub counts none)
            main.pop("ports", None)
            main["env"] = [*(main.get("env") or []), *self.launcher_env(job)]
            main["volumeMounts"].append({"name": "mpi-job-config",
                                         "mountPath": mpi.CONFIG_MOUNT})
            spec["containers"] = [main]
            spec["volumes"].append({"name": "mpi-job-config", "configMap": {
                "name": derived_name(job["metadata"]["name"], "config"),
                "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444}]}})
        else:
            spec["subdomain"] = self.service_name(job)
        return spec


T9K_MPI = T9kMPIKind()
