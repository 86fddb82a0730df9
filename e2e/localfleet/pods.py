"""The hub Deployment and the agent DaemonSet from ``deploy/``, run as Pods on real nodes.

The shipped manifests are applied as they are, with a local overlay (the patches below, applied
here rather than in ``deploy/``): the Pods go to the real node (kwok fakes the GPU nodes) and
use the imported image, the agent's ConfigMap names its member and its hub kubeconfig Secret is
created. The hub replicas share the webhook certificate the first of them puts in its Secret;
the API server reaches them through the ``fleet-hub`` Service (aggregator routing).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from e2e.localfleet.realnode import REAL_NODE_LABEL
from fleet.clients import resources as r
from fleet.clients.kube import Kube

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "fleet-system"


def _kustomization(directory: Path) -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for resource in kustomization["resources"]:
        docs.extend(d for d in yaml.safe_load_all((directory / resource).read_text()) if d)
    return docs


def _on_real_node(pod_spec: dict[str, Any]) -> None:
    pod_spec["nodeSelector"] = {REAL_NODE_LABEL: "true"}
    tolerations = pod_spec.setdefault("tolerations", [])
    if not any(t.get("operator") == "Exists" and "key" not in t for t in tolerations):
        tolerations.append({"key": REAL_NODE_LABEL, "operator": "Exists"})
    for container in pod_spec["containers"]:
        container["imagePullPolicy"] = "IfNotPresent"  # imported, never pulled


def _set_env(container: dict[str, Any], name: str, entry: dict[str, Any]) -> None:
    env = [e for e in container.get("env", []) if e["name"] != name]
    container["env"] = [*env, {"name": name, **entry}]


# Tunables the components read from their environment: set in the environment that starts
# the local fleet (as tests do), they reach the Pods as they reach host processes.
TUNABLES = ("FLEET_FIT_MODE", "FLEET_HEARTBEAT_TIMEOUT", "FLEET_HEARTBEAT_INTERVAL",
            "FLEET_CAPACITY_STALE_SECONDS", "FLEET_GANG_SCHEDULER", "FLEET_GANG_PROBE_SECONDS",
            "FLEET_FENCE_SWEEP_SECONDS", "FLEET_AGENT_LEASE_SECONDS", "FLEET_KUBECTL_IMAGE",
            "FLEET_PLACEHOLDER_IMAGE")


def _tune(container: dict[str, Any]) -> None:
    for name in TUNABLES:
        if os.environ.get(name):
            _set_env(container, name, {"value": os.environ[name]})


def hub_manifests(hub_args: Sequence[str] = ()) -> list[dict[str, Any]]:
    docs = _kustomization(REPO / "deploy" / "hub")
    for doc in docs:
        if doc["kind"] == "Deployment":
            spec = doc["spec"]["template"]["spec"]
            _on_real_node(spec)
            container = spec["containers"][0]
            container["args"] = [*container.get("args", []), *hub_args]
            _tune(container)
    return docs


def agent_manifests(cluster: str, hub_kubeconfig: str,
                    agent_args: Sequence[str] = ()) -> list[dict[str, Any]]:
    docs = _kustomization(REPO / "deploy" / "agent")
    for doc in docs:
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "fleet-agent":
            doc["data"]["cluster"] = cluster
        if doc["kind"] == "DaemonSet":
            spec = doc["spec"]["template"]["spec"]
            _on_real_node(spec)
            container = spec["containers"][0]
            container["args"] = [*container.get("args", []), *agent_args]
            _tune(container)
    docs.append({"apiVersion": "v1", "kind": "Secret",
                 "metadata": {"name": "fleet-hub-kubeconfig", "namespace": NAMESPACE},
                 "stringData": {"kubeconfig": hub_kubeconfig}})
    return docs


def apply(kubectl: str, kubeconfig: Path, docs: list[dict[str, Any]]) -> None:
    done = subprocess.run(
        [kubectl, "--kubeconfig", str(kubeconfig), "apply", "--server-side",
         "--force-conflicts", "--field-manager", "fleet-localfleet", "-f", "-"],
        input=yaml.safe_dump_all(docs), text=True, capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"kubectl apply to {kubeconfig.name} failed:\n{done.stderr}")


def wait_node_ready(kube: Kube, name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        node = kube.get_or_none(r.NODES, name)
        conditions = (node or {}).get("status", {}).get("conditions", [])
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            return
        time.sleep(1)
    raise TimeoutError(f"node {name} not Ready after {timeout:.0f}s")


def not_running(kube: Kube, namespace: str) -> list[str]:
    """Pods of ``namespace`` that are not Running with every container ready (or 'none')."""
    items, _ = kube.list(r.PODS, namespace)
    if not items:
        return ["no pods yet"]
    waiting = []
    for pod in items:
        status = pod.get("status", {})
        statuses = status.get("containerStatuses", [])
        if status.get("phase") != "Running" or not all(s.get("ready") for s in statuses):
            reasons = [str(state.get("reason", "")) for s in statuses
                       for state in s.get("state", {}).values()]
            waiting.append(f"{pod['metadata']['name']} {status.get('phase')} "
                           f"{' '.join(x for x in reasons if x)}".strip())
    return waiting


def wait_running(kube: Kube, namespace: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    waiting: list[str] = []
    while time.monotonic() < deadline:
        waiting = not_running(kube, namespace)
        if not waiting:
            return
        time.sleep(1)
    raise TimeoutError(f"pods in {namespace} not Running after {timeout:.0f}s: {waiting}")


def leader_pod(kube: Kube) -> str | None:
    """The hub Pod holding the hub's Lease (its identity starts with the Pod's hostname, which
    is the Pod's name), if one of the Pods does."""
    lease = kube.get_or_none(r.LEASES, "fleet-hub", NAMESPACE)
    holder = str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")
    items, _ = kube.list(r.PODS, NAMESPACE)
    return next((p["metadata"]["name"] for p in items
                 if holder.startswith(p["metadata"]["name"] + "-")), None)


def container_id(pod: dict[str, Any], container: str) -> str:
    """The containerd id of ``container`` in ``pod`` (from the kubelet's status)."""
    for status in pod.get("status", {}).get("containerStatuses", []):
        if status["name"] == container and status.get("containerID"):
            return str(status["containerID"]).split("://", 1)[1]
    raise LookupError(f"{pod['metadata']['name']} has no running container {container}")


def link_logs(pod_logs: Path, logs: Path, prefix: str) -> list[Path]:
    """Hard-link the container logs of fleet's Pods (``<podLogsDir>/fleet-system_<pod>_<uid>
    /<container>/<restart>.log``) into ``logs`` as ``<prefix>-pod-<pod>[-<restart>].log``.

    A link keeps the file when the kubelet removes a deleted Pod's logs, and it is the same
    file the runtime goes on writing to, so one link made while the container runs holds all
    its lines. A log the kubelet rotated away keeps its link; the new file gets one more."""
    made = []
    for pod_dir in sorted(pod_logs.glob(f"{NAMESPACE}_*")):
        pod = pod_dir.name.split("_")[1]
        for log in sorted(pod_dir.glob("*/*.log")):
            restart = log.stem
            name = f"{prefix}-pod-{pod}" + (f"-{restart}" if restart != "0" else "")
            target = logs / f"{name}.log"
            try:
                inode = log.stat().st_ino
                if target.exists():
                    if target.stat().st_ino == inode:
                        continue
                    target = logs / f"{name}-{inode}.log"  # rotated: one link per file
                    if target.exists():
                        continue
                target.hardlink_to(log)
                made.append(target)
            except FileNotFoundError:
                continue  # the kubelet removed it meanwhile
    return made
