"""Job manifests for the e2e suite, built from the seeds' examples."""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from typing import Any

import yaml

from e2e.chaos.fuzz import nested_value
from e2e.conftest import eventually
from e2e.localfleet import LocalFleet
from e2e.localfleet.demo import EXAMPLES
from fleet.api.limits import MAX_POD_STRING
from fleet.api.protocol import MIRROR_PODS
from fleet.clients import resources as r
from fleet.clients.kube import Kube

Body = dict[str, Any]
KUBEFLOW_JOB = "training.kubeflow.org/job-name"
T9K_JOB = "batch.tensorstack.dev/job-name"


@functools.cache
def _example(name: str) -> Body:
    """A seed example, parsed once (the scale bench builds ten thousand jobs from it)."""
    return dict(yaml.safe_load((EXAMPLES / name).read_text()))


def seed_pytorchjob(name: str, namespace: str = "default", *, run_for: str = "3s",
                    exit_code: int = 0, gpus: int | None = None, workers: int | None = None,
                    master: bool = True) -> Body:
    """Seed 002's PyTorchJob (1 master, 2 workers, 1 GPU each), renamed, with the kwok
    annotations that make its pods run for ``run_for`` and exit with ``exit_code``."""
    job: Body = copy.deepcopy(_example("pytorchjob.yaml"))
    job["metadata"] = {"name": name, "namespace": namespace}
    specs = job["spec"]["pytorchReplicaSpecs"]
    if not master:
        del specs["Master"]
    if workers is not None:
        if workers == 0:
            del specs["Worker"]
        else:
            specs["Worker"]["replicas"] = workers
    for spec in specs.values():
        template = spec["template"]
        template.setdefault("metadata", {})["annotations"] = {
            "fleet.sh/sim-duration": run_for, "fleet.sh/sim-exit-code": str(exit_code)}
        if gpus is not None:
            template["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = gpus
    return job


def padded(job: Body, size: int, parts: int | None = None) -> Body:
    """The PyTorchJob with ``size`` bytes of environment in its workers' container, in
    ``parts`` variables (by default as many as keep each within the schema's bound on one
    string: only the job's whole size is then past a bound)."""
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"][
        "containers"][0]
    parts = parts or max(2, -(-size // (MAX_POD_STRING // 2)))
    container["env"] = [{"name": f"PAD{i}", "value": "x" * (size // parts)}
                        for i in range(parts)]
    return job


def nested(job: Body, levels: int) -> Body:
    """The job with a value nested ``levels`` deep (the job as deep as a PyTorchJob with it in
    a pod spec): in a TensorFlowTrainingJob's TensorBoard spec, the one open field of a job's
    spec that the CRD keeps as it is; in other kinds, in the workers' (or first replica's) pod
    spec, where the API server prunes it (no schema names it)."""
    spec = job["spec"]
    if job["kind"] == "TensorFlowTrainingJob":
        spec.setdefault("tensorboardSpec", {})["nested"] = nested_value(levels + 2, {})
    else:
        replicas = next(v for k, v in spec.items() if k.endswith("ReplicaSpecs"))
        replica = replicas.get("Worker") or next(iter(replicas.values()))
        replica["template"]["spec"]["nested"] = nested_value(levels - 1, {})
    return job


def seed_tensorflowtrainingjob(name: str, namespace: str = "default") -> Body:
    """The seeds' full TensorFlowTrainingJob (the one with a TensorBoard), renamed."""
    job: Body = next(d for d in yaml.safe_load_all(
        (EXAMPLES / "t9k-tensorflowtrainingjob.yaml").read_text()) if d["spec"].get(
        "tensorboardSpec"))
    job["metadata"] = {"name": name, "namespace": namespace}
    return job


def state(job: Body) -> str:
    """STATE as kubectl prints it for a Kubeflow job: the last True condition."""
    conditions = [c["type"] for c in (job.get("status") or {}).get("conditions") or []
                  if c.get("status") == "True"]
    for terminal in ("Failed", "Succeeded"):
        if terminal in conditions:
            return terminal
    return conditions[-1] if conditions else ""


# -- following a job from the hub to its member -------------------------------------

def hub_job(hub: Kube, job: Body) -> Body:
    meta = job["metadata"]
    return hub.get(r.for_kind(job["apiVersion"], job["kind"]), meta["name"], meta["namespace"])


def member(fleet: LocalFleet, hub: Kube, job: Body) -> Kube:
    def cluster() -> str | None:
        annotations = hub_job(hub, job)["metadata"].get("annotations") or {}
        return annotations.get("fleet.sh/clusters")
    return fleet.client(eventually(cluster, what=f"{job['metadata']['name']} placed"))


def member_job(kube: Kube, job: Body) -> Body | None:
    return kube.get_or_none(r.for_kind(job["apiVersion"], job["kind"]),
                            job["metadata"]["name"], job["metadata"]["namespace"])


def pods(kube: Kube, job: Body) -> dict[str, Body]:
    label = T9K_JOB if job["apiVersion"].startswith("batch.") else KUBEFLOW_JOB
    meta = job["metadata"]
    items, _ = kube.list(r.PODS, meta["namespace"], label_selector=f"{label}={meta['name']}")
    return {p["metadata"]["name"]: p for p in items}


def pods_named(kube: Kube, job: Body, names: set[str] | int) -> dict[str, Body]:
    """Wait until the job's pods are exactly ``names`` (or that many); return them."""
    def check() -> dict[str, Body] | None:
        found = pods(kube, job)
        return found if (len(found) if isinstance(names, int) else set(found)) == names \
            else None
    return eventually(check, what=f"{job['metadata']['name']} pods {names}")


def hub_state(hub: Kube, job: Body, wanted: str, timeout: float = 90) -> Body:
    """Wait until the hub shows ``wanted`` (Kubeflow STATE or T9k phase); return the job."""
    def check() -> Body | None:
        current = hub_job(hub, job)
        status = current.get("status") or {}
        seen = status.get("phase") if "phase" in status else state(current)
        return current if seen == wanted else None
    return eventually(check, timeout=timeout,
                      what=f"{job['metadata']['name']} {wanted} on the hub")


def events(kube: Kube, job: Body, reason: str) -> list[Body]:
    items, _ = kube.list(r.EVENTS, job["metadata"]["namespace"],
                         field_selector=f"involvedObject.name={job['metadata']['name']}")
    return [e for e in items if e.get("reason") == reason]


def condition(status: Mapping[str, Any], kind: str) -> Body:
    return next(c for c in status.get("conditions") or [] if c["type"] == kind)


PYTORCH_ONLY = (("kubeflow.org/v1", "PyTorchJob"),)


KUBEFLOW_KINDS = tuple(("kubeflow.org/v1", kind) for kind in (
    "PyTorchJob", "TFJob", "MPIJob", "JAXJob", "PaddleJob", "XGBoostJob"))


def gang_namespace(hub: Kube, namespace: str, *, kinds: tuple[tuple[str, str], ...] = PYTORCH_ONLY,
                   cluster: str | None = None, propagate_deps: bool = False,
                   mirror_pods: bool = False) -> None:
    """Create ``namespace`` on the hub with a PropagationPolicy that gang-places ``kinds``
    (on ``cluster`` only, when given; with ``mirror_pods``, their pods mirrored on the hub)."""
    if hub.get_or_none(r.NAMESPACES, namespace) is None:
        hub.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": namespace}})
    placement: Body = {"replicaScheduling": {"replicaSchedulingType": "Divided",
                                             "customSchedulingType": "Gang"}}
    if cluster:
        placement["clusterAffinity"] = {"clusterNames": [cluster]}
    hub.apply(r.PROPAGATIONPOLICIES, {
        "apiVersion": "policy.one.alibabacloud.com/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "gang", "namespace": namespace,
                     **({"annotations": {MIRROR_PODS: "true"}} if mirror_pods else {})},
        "spec": {"propagateDeps": propagate_deps,
                 "resourceSelectors": [{"apiVersion": a, "kind": k} for a, k in kinds],
                 "placement": placement}}, field_manager="test")


def delete_jobs(hub: Kube, namespace: str, *, wait: bool = False) -> None:
    """Delete every job of every kind in ``namespace`` on the hub (a module leaves the suite's
    fleet as it found it); with ``wait``, until the hub has none left."""
    for resource in r.JOB_KINDS:
        for left in hub.list(resource, namespace)[0]:
            hub.delete(resource, left["metadata"]["name"], namespace)
    if wait:
        eventually(lambda: not any(hub.list(resource, namespace)[0] for resource in r.JOB_KINDS),
                   timeout=90, what=f"jobs of {namespace} gone")
