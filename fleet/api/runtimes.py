"""The ClusterTrainingRuntimes the hub ships, as Kubeflow Trainer v2.3.0 ships its defaults
(``manifests/base/runtimes``), so that the ``kubeflow`` SDK's ``train()`` works on a fresh hub:
``torch-distributed`` (torchrun on every node), ``deepspeed-distributed`` (MPI: a launcher
that runs as a node too, and sshd on the others), ``jax-distributed`` and
``xgboost-distributed`` (a process per node, the coordinator or tracker on the first). Written
here, not copied: the same names, labels, policies and shapes, fleet's own text."""

from __future__ import annotations

from typing import Any

from fleet.api.trainer import CLUSTER_RUNTIME, TRAINER_V1ALPHA1

Body = dict[str, Any]
FRAMEWORK = "trainer.kubeflow.org/framework"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
TORCH_IMAGE = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
DEEPSPEED_IMAGE = "ghcr.io/kubeflow/trainer/deepspeed-runtime:v2.3.0"
JAX_IMAGE = "nvcr.io/nvidia/jax:25.10-py3"
XGBOOST_IMAGE = "ghcr.io/kubeflow/trainer/xgboost-runtime"


def _runtime(name: str, framework: str, policy: Body, spec: Body) -> Body:
    return {"apiVersion": TRAINER_V1ALPHA1, "kind": CLUSTER_RUNTIME,
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": name,
                                                  "app.kubernetes.io/part-of": "fleet",
                                                  FRAMEWORK: framework}},
            "spec": {"mlPolicy": policy, "template": {"spec": spec}}}


def _job(name: str, container: Body, *, step: str = "", **extra: Any) -> Body:
    metadata = {"labels": {ANCESTOR: step}} if step else {}
    return {"name": name, **extra, "template": {**({"metadata": metadata} if metadata else {}),
                                                "spec": {"template": {"spec": {
                                                    "containers": [container]}}}}}


def torch_distributed() -> Body:
    return _runtime("torch-distributed", "torch", {"numNodes": 1, "torch": {}}, {
        "replicatedJobs": [_job("node", {"name": "node", "image": TORCH_IMAGE},
                                step="trainer")]})


def deepspeed_distributed() -> Body:
    sshd = {"name": "node", "image": DEEPSPEED_IMAGE,
            "command": ["/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"],
            "readinessProbe": {"tcpSocket": {"port": 2222}, "initialDelaySeconds": 5},
            "securityContext": {"runAsUser": 1000}}
    return _runtime("deepspeed-distributed", "deepspeed", {"numNodes": 1, "mpi": {
        "numProcPerNode": 1, "mpiImplementation": "OpenMPI",
        "sshAuthMountPath": "/home/mpiuser/.ssh", "runLauncherAsNode": True}}, {
        "network": {"publishNotReadyAddresses": True},
        "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
        "replicatedJobs": [
            _job("node", sshd),
            _job("launcher", {"name": "node", "image": DEEPSPEED_IMAGE,
                              "securityContext": {"runAsUser": 1000}}, step="trainer",
                 dependsOn=[{"name": "node", "status": "Ready"}])]})


def jax_distributed() -> Body:
    return _runtime("jax-distributed", "jax", {"numNodes": 1, "jax": {}}, {
        "replicatedJobs": [_job("node", {"name": "node", "image": JAX_IMAGE}, step="trainer")]})


def xgboost_distributed() -> Body:
    return _runtime("xgboost-distributed", "xgboost", {"numNodes": 1, "xgboost": {}}, {
        "replicatedJobs": [_job("node", {"name": "node", "image": XGBOOST_IMAGE},
                                step="trainer")]})


def flux_distributed() -> Body:
    """Trainer's flux example runtime (``examples/flux``; not among its defaults, so not
    shipped): one process per node unless the TrainJob asks for more, the image's OS matched
    by the TrainJob's ``FLUX_VIEW_IMAGE``."""
    return _runtime("flux-distributed", "flux", {"numNodes": 1, "flux": {}}, {
        "replicatedJobs": [_job("node", {"name": "node", "image": "ubuntu:jammy"},
                                step="trainer")]})


def defaults() -> list[Body]:
    return [torch_distributed(), deepspeed_distributed(), jax_distributed(),
            xgboost_distributed()]


TRAINER_NAMESPACE = "kubeflow-system"
TRAINER_VERSION = "2.3.0"  # the Trainer API the hub serves (the kubeflow 0.5.0 SDK's)


def public_version() -> list[Body]:
    """Where the kubeflow SDK reads which Trainer it talks to (``kubeflow-trainer-public``,
    as Trainer's chart installs it); without it every TrainerClient warns."""
    meta = {"labels": {"app.kubernetes.io/name": "kubeflow-trainer-public",
                       "app.kubernetes.io/part-of": "fleet"}}
    return [{"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": TRAINER_NAMESPACE, "labels": {
                 "app.kubernetes.io/name": TRAINER_NAMESPACE,
                 "app.kubernetes.io/part-of": "fleet"}}},
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "kubeflow-trainer-public", "namespace": TRAINER_NAMESPACE,
                          **meta},
             "data": {"kubeflow_trainer_version": TRAINER_VERSION}}]
