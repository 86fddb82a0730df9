"""A TrainJob resolved against its runtime into the JobSet Kubeflow Trainer v2.3.0 would make.

The recipe, in Trainer's plugin order (``pkg/runtime/framework/plugins``):

1. the runtime's JobSet template, with the TrainJob's ``runtimePatches`` merged into it
   (replicated jobs, containers, env and volumes by name; maps key by key; other lists
   replaced);
2. each replicated job's pods: its parallelism, and for the trainer's (the one labelled
   ``trainer.kubeflow.org/trainjob-ancestor-step: trainer``) ``trainer.numNodes``, else the
   runtime's ``mlPolicy.numNodes`` (MPI: the ``node`` job, less one when the launcher runs as
   a node);
3. ``trainer.resourcesPerNode`` merged over the ``node`` container's resources;
4. the ML policy's environment on the trainer's ``node`` container: plain (``trainer.env``),
   torch (``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK`` from the completion index,
   ``PET_MASTER_ADDR``/``PORT`` at the first node), JAX (``JAX_NUM_PROCESSES``,
   ``JAX_PROCESS_ID``, ``JAX_COORDINATOR_ADDRESS``), XGBoost (``DMLC_TRACKER_URI``/``PORT`` at
   the first node, ``DMLC_TASK_ID``, ``DMLC_NUM_WORKER``: a worker per GPU, else per node),
   MPI (the SSH key Secret and hostfile ConfigMap mounted, OpenMPI's variables on the
   launcher); flux (:mod:`fleet.kinds.flux`: the installer init container, the scripts
   and certificate mounted, the command wrapped);
5. the trainer's ``image``, ``command`` and ``args``; the initializers' ``storageUri``, ``env``
   and secret;
6. parallelism and completions set to each counted job's pods, ``suspend`` the TrainJob's.

The runtime is the snapshot the hub's webhook took when the TrainJob was created
(``protocol.RUNTIME``), as Trainer's own snapshot ConfigMap keeps it (KEP-2599): editing or
deleting a runtime changes no TrainJob already made from it. Every error names its field
(:class:`InvalidJob`).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from fleet.api import protocol
from fleet.api.quantity import QuantityError, canonical
from fleet.kinds import flux
from fleet.kinds.base import Body, InvalidJob

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_STEP = "trainer"
NODE = "node"  # the trainer's container, and the MPI workers' replicated job
LAUNCHER = "launcher"
INITIALIZERS = ("dataset-initializer", "model-initializer")
PORT = 29500
SSH_VOLUME = "mpi-ssh-auth"
HOSTFILE_VOLUME = "mpi-hostfile"
HOSTFILE_DIR = "/etc/mpi"
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
RESERVED_ENV = {  # per ML policy, as each of Trainer's plugins validates trainer.env
    "torch": {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR",
              "PET_MASTER_PORT"},
    "mpi": {"OMPI_MCA_orte_default_hostfile", "OMPI_MCA_orte_keep_fqdn_hostnames",
            "OMPI_MCA_orte_set_default_slots", "OMPI_MCA_plm_rsh_args"},
    "xgboost": {"DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID", "DMLC_NUM_WORKER"},
}
KEYED_LISTS = {"replicatedJobs", "containers", "initContainers", "env", "volumes",
               "volumeMounts", "ports"}  # merged item by item, by name


def ssh_secret(trainjob: str) -> str:
    return f"{trainjob}-mpi-ssh-auth"


def hostfile_config_map(trainjob: str) -> str:
    return f"{trainjob}-mpi-hostfile"


def snapshot_of(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """The runtime the TrainJob was made from, as the webhook stamped it."""
    text = ((body.get("metadata") or {}).get("annotations") or {}).get(protocol.RUNTIME)
    if not text:
        raise InvalidJob("spec.runtimeRef: the runtime was not recorded when the TrainJob was "
                         "created (the hub's webhook was not in the path); re-create it")
    try:
        runtime: Mapping[str, Any] = json.loads(text)
    except ValueError:
        raise InvalidJob(f"metadata.annotations[{protocol.RUNTIME}]: not JSON") from None
    return runtime


def merge(base: Any, patch: Any) -> Any:
    """A strategic merge of ``patch`` over ``base``: maps key by key, the lists of
    :data:`KEYED_LISTS` item by item by name (new names appended), other values replaced."""
    if isinstance(base, Mapping) and isinstance(patch, Mapping):
        out = dict(base)
        for key, value in patch.items():
            if key in KEYED_LISTS and isinstance(value, list) and isinstance(out.get(key), list):
                out[key] = merge_by_name(out[key], value)
            else:
                out[key] = merge(out.get(key), value) if key in out else copy.deepcopy(value)
        return out
    return copy.deepcopy(patch)


def merge_by_name(base: Sequence[Any], patch: Sequence[Any]) -> list[Any]:
    out = [copy.deepcopy(item) for item in base]
    names = [item.get("name") if isinstance(item, Mapping) else None for item in out]
    for item in patch:
        name = item.get("name") if isinstance(item, Mapping) else None
        if name is not None and name in names:
            index = names.index(name)
            out[index] = merge(out[index], item)
        else:
            out.append(copy.deepcopy(item))
            names.append(name)
    return out


def _upsert_env(container: Body, env: Sequence[Mapping[str, Any]]) -> None:
    container["env"] = merge_by_name(container.get("env") or [], env)


def _containers(rjob: Body) -> list[Body]:
    spec = rjob["template"]["spec"]["template"].setdefault("spec", {})
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def _container(rjob: Body, name: str) -> Body | None:
    return next((c for c in _containers(rjob) if c.get("name") == name), None)


def _ancestor(rjob: Mapping[str, Any]) -> str:
    labels = (((rjob.get("template") or {}).get("metadata") or {}).get("labels") or {})
    return str(labels.get(ANCESTOR) or "")


def _apply_patches(template: Body, patches: Sequence[Mapping[str, Any]]) -> Body:
    names = {j.get("name") for j in template["spec"].get("replicatedJobs") or []}
    for i, patch in enumerate(patches):
        spec = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {})
        for rjob in (spec.get("spec") or {}).get("replicatedJobs") or []:
            if rjob.get("name") not in names:
                raise InvalidJob(f"spec.runtimePatches[{i}].trainingRuntimeSpec.template.spec."
                                 f"replicatedJobs[name={rjob.get('name')}]: the runtime has no "
                                 "such replicated job")
        template = merge(template, spec)
    return template


def _gpus(resources: Mapping[str, Any]) -> int:
    """A node's GPUs as Trainer counts them: the first resource named like a GPU, its request
    if not zero, else its limit."""
    for part in ("requests", "limits"):
        for name, value in (resources.get(part) or {}).items():
            if "gpu" in name.lower() and canonical(name, value) > 0:
                return canonical(name, value)  # whole devices: only cpu counts in millis
    return 0


def _cpus(resources: Mapping[str, Any]) -> int:
    for part in ("requests", "limits"):
        value = (resources.get(part) or {}).get("cpu")
        if value is not None and canonical("cpu", value) > 0:
            return math.ceil(canonical("cpu", value) / 1000)
    return 0


MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError)


def resolve(trainjob: Mapping[str, Any], runtime: Mapping[str, Any]) -> Body:
    """The JobSet of ``trainjob`` made from ``runtime`` (kind, name and spec), by the recipe
    of the module's docstring. A job or runtime that cannot be read (stored under another
    schema) raises InvalidJob naming the part that failed."""
    try:
        return _resolve(trainjob, runtime)
    except InvalidJob:
        raise
    except MALFORMED as exc:  # a runtime passed its schema alone: most likely the patches
        field = "spec.runtimePatches" if (trainjob.get("spec") or {}).get("runtimePatches") \
            else "spec.runtimeRef"
        raise InvalidJob(f"{field}: the TrainJob does not resolve against "
                         f"{runtime.get('kind')} {runtime.get('name')} "
                         f"({type(exc).__name__}: {str(exc)[:200]})") from None


def _resolve(trainjob: Mapping[str, Any], runtime: Mapping[str, Any]) -> Body:
    meta = trainjob["metadata"]
    name, spec = str(meta["name"]), trainjob.get("spec") or {}
    runtime_spec = runtime.get("spec") or {}
    template = copy.deepcopy(dict(runtime_spec.get("template") or {}))
    if not (template.get("spec") or {}).get("replicatedJobs"):
        raise InvalidJob("spec.runtimeRef: the runtime's template has no replicated jobs")
    try:
        template = _apply_patches(template, spec.get("runtimePatches") or [])
    except MALFORMED as exc:
        raise InvalidJob(f"spec.runtimePatches: cannot be merged into the runtime "
                         f"({type(exc).__name__}: {str(exc)[:200]})") from None
    policy = runtime_spec.get("mlPolicy") or {}
    trainer = spec.get("trainer")
    rjobs: list[Body] = template["spec"]["replicatedJobs"]
    trainer_job = next((j for j in rjobs if _ancestor(j) == TRAINER_STEP), None)
    _refuse_reserved(policy, trainer)
    counts = _counts(policy, trainer, rjobs, trainer_job)
    subdomain = str((template["spec"].get("network") or {}).get("subdomain") or name)
    flux_plan = _on_trainer(policy, trainer, trainer_job, rjobs, counts, name, subdomain) \
        if trainer_job is not None else None
    if "mpi" in policy:
        _mpi(policy["mpi"], trainer, rjobs, counts, name, subdomain)
    _initializers(spec.get("initializer") or {}, rjobs)
    for rjob in rjobs:
        job_spec = rjob["template"]["spec"]
        if str(rjob["name"]) in counts:
            job_spec["parallelism"] = job_spec["completions"] = counts[str(rjob["name"])]
    jobset_meta = template.get("metadata") or {}
    jobset_spec = dict(template["spec"])
    jobset_spec["suspend"] = bool(spec.get("suspend"))
    jobset_spec.pop("managedBy", None)
    annotations = dict(jobset_meta.get("annotations") or {})
    if spec.get("activeDeadlineSeconds"):
        annotations[protocol.ACTIVE_DEADLINE] = str(int(spec["activeDeadlineSeconds"]))
    if "mpi" in policy:
        annotations[protocol.MPI_HOSTS] = json.dumps({
            "slots": int((trainer or {}).get("numProcPerNode")
                         or policy["mpi"].get("numProcPerNode") or 1),
            "launcherAsNode": bool(policy["mpi"].get("runLauncherAsNode"))},
            separators=(",", ":"))
    if flux_plan is not None:
        flux.annotate(annotations, flux_plan)
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": meta.get("namespace"),
                         "uid": meta.get("uid"),
                         "labels": dict(jobset_meta.get("labels") or {}),
                         "annotations": annotations},
            "spec": jobset_spec}


def _on_trainer(policy: Mapping[str, Any], trainer: Mapping[str, Any] | None, trainer_job: Body,
                rjobs: Sequence[Body], counts: Mapping[str, int], name: str,
                subdomain: str) -> flux.FluxPlan | None:
    """Steps 3 to 5 on the trainer's ``node`` container (and, for flux, its whole job)."""
    node = _container(trainer_job, NODE)
    if node is None:
        raise InvalidJob(f"spec.runtimeRef: the runtime's trainer job "
                         f"({trainer_job.get('name')}) has no container named {NODE}")
    runtime_resources = node.get("resources") or {}  # (_trainer replaces, never edits)
    runtime_node = {"command": node.get("command"), "env": node.get("env") or []}
    _trainer(node, trainer)
    nodes = counts.get(str(trainer_job["name"]), 1)  # MPI counts its workers' job instead
    if trainer is not None:
        if "torch" in policy:
            _torch(node, trainer, nodes, name, trainer_job, subdomain)
        elif "jax" in policy:
            _jax(node, nodes, name)
        elif "xgboost" in policy:
            _xgboost(node, trainer, nodes, name, runtime_resources)
    if "flux" in policy:
        return _flux(policy["flux"] or {}, trainer, rjobs, nodes, name, runtime_node,
                     runtime_resources)
    return None


def _refuse_reserved(policy: Mapping[str, Any], trainer: Mapping[str, Any] | None) -> None:
    reserved = set().union(*(names for kind, names in RESERVED_ENV.items() if kind in policy))
    for env in (trainer or {}).get("env") or []:
        if env.get("name") in reserved:
            raise InvalidJob(f"spec.trainer.env[name={env.get('name')}]: set by the runtime's "
                             "ML policy; it may not be given")


def _counts(policy: Mapping[str, Any], trainer: Mapping[str, Any] | None,
            rjobs: Sequence[Body], trainer_job: Body | None) -> dict[str, int]:
    """Pods of the replicated jobs whose count the TrainJob sets (step 2)."""
    nodes = (trainer or {}).get("numNodes") or policy.get("numNodes") or 1
    mpi = policy.get("mpi")
    if mpi is not None:
        if not any(j["name"] == NODE for j in rjobs):
            return {}
        if not (trainer or {}).get("numNodes") and not policy.get("numNodes"):
            return {}
        workers = max(1, nodes - 1) if mpi.get("runLauncherAsNode") else nodes
        return {NODE: int(workers)}
    return {str(trainer_job["name"]): int(nodes)} if trainer_job is not None else {}


def _trainer(node: Body, trainer: Mapping[str, Any] | None) -> None:
    """Steps 3 and 5 for the trainer's ``node`` container."""
    if trainer is None:
        return
    resources = trainer.get("resourcesPerNode")
    if resources:
        current = node.get("resources") or {}
        node["resources"] = {
            **current, **{part: {**(current.get(part) or {}), **(resources.get(part) or {})}
                          for part in ("limits", "requests") if resources.get(part)}}
    for field in ("image", "command", "args"):
        if trainer.get(field) is not None:
            node[field] = copy.deepcopy(trainer[field])
    if trainer.get("env"):
        _upsert_env(node, trainer["env"])


def _torch(node: Body, trainer: Mapping[str, Any], nodes: int, name: str, trainer_job: Body,
           subdomain: str) -> None:
    per_node: str
    if trainer.get("numProcPerNode"):
        per_node = str(trainer["numProcPerNode"])
    else:
        resources = node.get("resources") or {}
        try:
            gpus, cpus = _gpus(resources), _cpus(resources)
        except QuantityError as exc:
            raise InvalidJob(f"spec.trainer.resourcesPerNode: {exc}") from None
        per_node = "auto" if gpus else str(max(1, cpus))
    master = f"{name}-{trainer_job['name']}-0-0.{subdomain}"
    _upsert_env(node, [
        {"name": "PET_NNODES", "value": str(nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": per_node},
        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}},
        {"name": "PET_MASTER_ADDR", "value": master},
        {"name": "PET_MASTER_PORT", "value": str(PORT)},
    ])
    _trainer_port(node)


def _trainer_port(node: Body) -> None:
    """The port the policies' first node listens on (Trainer's ``ContainerTrainerPort``)."""
    node["ports"] = merge_by_name(node.get("ports") or [],
                                  [{"name": "trainer", "containerPort": PORT}])


def _jax(node: Body, nodes: int, name: str) -> None:
    """JAX's plugin: a process per node, the coordinator on the first (Trainer names it by the
    TrainJob, not the JobSet's subdomain)."""
    _upsert_env(node, [
        {"name": "JAX_NUM_PROCESSES", "value": str(nodes)},
        {"name": "JAX_PROCESS_ID", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}},
        {"name": "JAX_COORDINATOR_ADDRESS", "value": f"{name}-{NODE}-0-0.{name}:{PORT}"},
    ])
    _trainer_port(node)


def _xgboost(node: Body, trainer: Mapping[str, Any], nodes: int, name: str,
             runtime_resources: Mapping[str, Any]) -> None:
    """XGBoost's plugin: the tracker on the first node, a worker per GPU of a node (the
    TrainJob's ``resourcesPerNode`` if given, whole, else the runtime's), else one per node."""
    resources = trainer.get("resourcesPerNode") or runtime_resources
    try:
        per_node = _gpus(resources) or 1
    except QuantityError as exc:
        raise InvalidJob(f"spec.trainer.resourcesPerNode: {exc}") from None
    _upsert_env(node, [
        {"name": "DMLC_TRACKER_URI", "value": f"{name}-{NODE}-0-0.{name}"},
        {"name": "DMLC_TRACKER_PORT", "value": str(PORT)},
        {"name": "DMLC_TASK_ID", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}},
        {"name": "DMLC_NUM_WORKER", "value": str(nodes * per_node)},
    ])
    _trainer_port(node)


def _flux(policy: Mapping[str, Any], trainer: Mapping[str, Any] | None, rjobs: Sequence[Body],
          nodes: int, name: str, runtime_node: Mapping[str, Any],
          runtime_resources: Mapping[str, Any]) -> flux.FluxPlan:
    """Step 4 for flux (:mod:`fleet.kinds.flux`)."""
    chosen = flux.settings(runtime_node["env"], (trainer or {}).get("env") or [])
    try:
        gpus = _gpus((trainer or {}).get("resourcesPerNode") or runtime_resources)
    except QuantityError as exc:
        raise InvalidJob(f"spec.trainer.resourcesPerNode: {exc}") from None
    plan = flux.FluxPlan(
        nodes=nodes, procs_per_node=int((trainer or {}).get("numProcPerNode")
                                        or policy.get("numProcPerNode") or 1),
        gpus_per_node=gpus, device=chosen["FLUX_NETWORK_DEVICE"],
        queue_policy=chosen["FLUX_QUEUE_POLICY"])
    flux.apply(rjobs, name, flux.original_command(runtime_node["command"], trainer),
               chosen["FLUX_VIEW_IMAGE"])
    return plan


def _mpi(policy: Mapping[str, Any], trainer: Mapping[str, Any] | None, rjobs: Sequence[Body],
         counts: Mapping[str, int], name: str, subdomain: str) -> None:
    """Step 4 for MPI: the SSH key on every ``node`` container, the hostfile and OpenMPI's
    variables on the launcher's (the hostfile itself is written on the member)."""
    slots = (trainer or {}).get("numProcPerNode") or policy.get("numProcPerNode") or 1
    mount = str(policy.get("sshAuthMountPath") or "/root/.ssh")
    ssh = {"name": SSH_VOLUME, "secret": {"secretName": ssh_secret(name), "defaultMode": 0o400,
                                          "items": [
        {"key": "ssh-privatekey", "path": "id_rsa", "mode": 0o640},
        {"key": "ssh-publickey", "path": "id_rsa.pub", "mode": 0o644},
        {"key": "ssh-publickey", "path": "authorized_keys", "mode": 0o644}]}}
    for rjob in rjobs:
        if rjob["name"] not in (NODE, LAUNCHER):
            continue
        pod = rjob["template"]["spec"]["template"].setdefault("spec", {})
        volumes = [ssh]
        container = _container(rjob, NODE)
        if container is None:
            continue
        mounts = [{"name": SSH_VOLUME, "mountPath": mount}]
        if rjob["name"] == LAUNCHER:
            volumes.append({"name": HOSTFILE_VOLUME, "configMap": {
                "name": hostfile_config_map(name), "defaultMode": 0o444,
                "items": [{"key": "hostfile", "path": "hostfile"}]}})
            mounts.append({"name": HOSTFILE_VOLUME, "mountPath": HOSTFILE_DIR})
            _upsert_env(container, [
                {"name": "OMPI_MCA_orte_default_hostfile", "value": f"{HOSTFILE_DIR}/hostfile"},
                {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
                {"name": "OMPI_MCA_orte_set_default_slots", "value": str(slots)},
                {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"}])
        pod["volumes"] = merge_by_name(pod.get("volumes") or [], volumes)
        container["volumeMounts"] = merge_by_name(container.get("volumeMounts") or [], mounts)


def hostfile(jobset: Mapping[str, Any]) -> str | None:
    """The MPI hostfile of a JobSet resolved from an MPI runtime (None for others): one line
    per pod of the ``node`` job (and of the launcher when it runs as a node), in the
    runtime's order: ``<pod>.<subdomain> slots=<n>``."""
    text = ((jobset.get("metadata") or {}).get("annotations") or {}).get(protocol.MPI_HOSTS)
    if not text:
        return None
    hosts = json.loads(text)
    slots, launcher_as_node = int(hosts.get("slots", 1)), bool(hosts.get("launcherAsNode"))
    name = jobset["metadata"]["name"]
    subdomain = str(((jobset.get("spec") or {}).get("network") or {}).get("subdomain") or name)
    lines = []
    for rjob in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        if rjob["name"] == NODE or (rjob["name"] == LAUNCHER and launcher_as_node):
            width = int(rjob["template"]["spec"].get("parallelism") or 1)
            for job_index in range(int(rjob.get("replicas", 1))):
                lines += [f"{name}-{rjob['name']}-{job_index}-{i}.{subdomain} slots={slots}"
                          for i in range(width)]
    return "".join(f"{line}\n" for line in lines)


def _initializers(initializer: Mapping[str, Any], rjobs: Sequence[Body]) -> None:
    for kind, step in (("dataset", INITIALIZERS[0]), ("model", INITIALIZERS[1])):
        given = initializer.get(kind)
        rjob = next((j for j in rjobs if _ancestor(j) == step), None)
        if not given or rjob is None:
            continue
        rjob["replicas"] = 1
        container = _container(rjob, step)
        if container is None:
            continue
        env = [{"name": "STORAGE_URI", "value": given["storageUri"]}] \
            if given.get("storageUri") else []
        _upsert_env(container, [*env, *(given.get("env") or [])])
        secret = (given.get("secretRef") or {}).get("name")
        if secret:
            container["envFrom"] = [*(container.get("envFrom") or []),
                                    {"secretRef": {"name": secret}}]
