"""The identities the local fleet's host processes run with: the ones ``deploy/`` ships.

The hub runs with a token of the ``fleet-system/fleet-hub`` ServiceAccount after the hub
manifests are applied (RBAC, namespaces, Service, PodDisruptionBudget, webhook
configuration; the Deployment too, it finds no node to run on here). Each agent runs with a
token of the member's ``fleet-system/fleet-agent`` ServiceAccount plus the scoped hub identity
``join`` made. No process of the fleet holds cluster-admin.

The API server reaches the hub's webhook through the ``fleet-hub`` Service: an EndpointSlice
per hub process points at a host address the process listens on. Endpoint addresses may not be
loopback, so the fleet gives ``lo`` one more address from the benchmarking range 198.18.0.0/15
(never routed): reachable from this host only, as a loopback address would be.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from fleet import deploy, onboarding
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Body, Kube

FIELD_MANAGER = "fleet-localfleet"
WEBHOOK_ADDRESS = os.environ.get("FLEET_LOCAL_WEBHOOK_ADDRESS", "198.18.254.1")
TOKEN_SECONDS = onboarding.AGENT_TOKEN_SECONDS  # a local fleet may stay up for days
# What the local fleet leaves out of the shipped manifests: the agent's hub credentials are
# the join's, and the workloads themselves run here as host processes (kwok would fake their
# pods' status).
SKIPPED_KINDS = {"Secret", "Deployment", "DaemonSet"}


def apply_all(kube: Kube, manifests: list[Body]) -> None:
    for body in manifests:
        if body["kind"] in SKIPPED_KINDS:
            continue
        kube.apply(r.for_kind(body["apiVersion"], body["kind"]), body,
                   field_manager=FIELD_MANAGER)


def install_hub(hub: Kube, admin_kubeconfig: Path, out: Path) -> None:
    """Apply the hub manifests; write a kubeconfig of the hub's ServiceAccount to ``out``."""
    apply_all(hub, deploy.hub_manifests())
    token = onboarding.service_account_token(hub, deploy.NAMESPACE, deploy.HUB, TOKEN_SECONDS)
    _write(out, onboarding.token_kubeconfig(admin_kubeconfig, deploy.HUB, token))


def install_agent(member: Kube, cluster: str, admin_kubeconfig: Path, out: Path) -> None:
    """Apply the agent manifests to the member; write its ServiceAccount's kubeconfig."""
    apply_all(member, deploy.agent_manifests(cluster=cluster))
    token = onboarding.service_account_token(member, deploy.NAMESPACE, "fleet-agent",
                                             TOKEN_SECONDS)
    _write(out, onboarding.token_kubeconfig(admin_kubeconfig, f"fleet-agent@{cluster}", token))


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    os.chmod(path, 0o600)


# -- the webhook through its Service ------------------------------------------------------
def webhook_address() -> str:
    """A host address the API server may be sent to (not loopback), added to ``lo``."""
    address = ipaddress.ip_address(WEBHOOK_ADDRESS)
    if _bindable(str(address)):
        return str(address)
    command = ["ip", "addr", "add", f"{address}/32", "dev", "lo"]
    if os.geteuid() != 0 and shutil.which("sudo"):
        command = ["sudo", "-n", *command]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if not _bindable(str(address)):
        raise RuntimeError(
            f"cannot add the webhook address {address} to lo ({done.stderr.strip()}); "
            "run as root or with sudo, or set FLEET_LOCAL_WEBHOOK_ADDRESS to an address "
            "of this host that is not loopback")
    return str(address)


def _bindable(address: str) -> bool:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((address, 0))
        return True
    except OSError:
        return False


def free_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        port: int = sock.getsockname()[1]
        return port


def wait_serving(address: str, port: int, alive: Callable[[], bool],
                 timeout: float = 120) -> None:
    """Wait until a hub process accepts connections on its webhook port: the local stand-in
    for a Pod's readiness, which gates its endpoint."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((address, port), timeout=1):
                return
        except OSError:
            if not alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the hub does not serve its webhook on {address}:{port}; "
                                   "see its log") from None
            time.sleep(0.2)


def wait_ca_bundle(hub: Kube, timeout: float = 60) -> None:
    """Wait until the leader has put the webhook certificate into the configuration."""
    deadline = time.monotonic() + timeout
    while True:
        config = hub.get(r.VALIDATINGWEBHOOKCONFIGURATIONS, deploy.WEBHOOK_CONFIGURATION)
        if all(w.get("clientConfig", {}).get("caBundle") for w in config.get("webhooks", [])):
            return
        if time.monotonic() > deadline:
            raise RuntimeError("no hub patched the webhook's caBundle; see the hub's log")
        time.sleep(0.2)


# The smallest PyTorchJob the CRD accepts, for a dry run through the job webhook.
PROBE_JOB: Body = {
    "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
    "metadata": {"name": "webhook-probe", "namespace": "default"},
    "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {
        "containers": [{"name": "pytorch", "image": "busybox"}]}}}}}}


def wait_job_webhook(hub: Kube, timeout: float = 60) -> None:
    """Wait until the API server reaches the hub's job webhook: it fails closed, so a job
    created before then would be refused."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            hub.apply(r.PYTORCHJOBS, PROBE_JOB, field_manager="fleet-e2e", dry_run=True)
            return
        except errors.ApiError as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the hub's job webhook does not answer: {exc}") from None
        time.sleep(0.2)


def slice_name(process: str) -> str:
    return f"{deploy.HUB}-{process}"


def add_webhook_endpoint(hub: Kube, process: str, address: str, port: int) -> None:
    """Point the hub Service's webhook port at ``address:port`` for one hub process."""
    hub.apply(r.ENDPOINTSLICES, {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": slice_name(process), "namespace": deploy.NAMESPACE,
                     "labels": {"kubernetes.io/service-name": deploy.HUB,
                                "endpointslice.kubernetes.io/managed-by": FIELD_MANAGER}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        "ports": [{"name": "webhook", "port": port, "protocol": "TCP"}],
    }, field_manager=FIELD_MANAGER)


def remove_webhook_endpoint(hub: Kube, process: str) -> None:
    try:
        hub.delete(r.ENDPOINTSLICES, slice_name(process), deploy.NAMESPACE)
    except errors.ApiError:
        pass  # the hub's API server may be gone already
