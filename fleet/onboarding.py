"""Joining a member cluster to the hub, and leaving it.

Joining creates, on the hub, the member's namespace ``fleet-member-<cluster>``, its
MemberCluster, and an agent identity that can reach nothing else: a ServiceAccount whose Role
covers Works, events and leases in that namespace only, and whose ClusterRole names just its own
MemberCluster. On the member it installs the job CRDs the agent runs. The agent's hub
credentials come back as a kubeconfig.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from fleet import deploy
from fleet.api import crds
from fleet.api.protocol import API_VERSION, CLUSTER_LABEL, GROUP, member_namespace
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Body, Kube

log = logging.getLogger(__name__)
AGENT_SA = "fleet-agent"
FIELD_MANAGER = "fleet-join"
AGENT_TOKEN_SECONDS = 365 * 24 * 3600


def crd_manifests() -> list[Body]:
    """Every CRD fleet serves, from the models they are generated from (``crds/`` holds the
    same text; a test keeps it so), so an installed package needs no source tree."""
    return [crd.manifest() for crd in sorted(crds.ALL, key=lambda c: c.name)]


def install_crds(kube: Kube, crds: Iterable[Body], *, timeout: float = 60,
                 keep_foreign: bool = False) -> None:
    """Apply ``crds`` and wait until the API server serves every one of them. With
    ``keep_foreign`` (a member), a CRD that someone else installed stays as it is: a member
    that runs JobSet or Kubeflow Trainer keeps their own (a superset of fleet's fields, and
    fleet's copies name another manager, so their controllers leave them alone)."""
    names = []
    for crd in crds:
        name = crd["metadata"]["name"]
        existing = kube.get_or_none(r.CRDS, name) if keep_foreign else None
        if existing is not None and not installed_by_fleet(existing):
            log.info("keeping %s as installed by %s", name, ", ".join(sorted(
                {m.get("manager", "?") for m in existing["metadata"].get("managedFields")
                 or []})) or "someone else")
            continue
        kube.apply(r.CRDS, crd, field_manager=FIELD_MANAGER)
        names.append(name)
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            crd = kube.get(r.CRDS, name)
            conditions = crd.get("status", {}).get("conditions", [])
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                served = _served(kube, crd)
                if served:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not established after {timeout}s")
            time.sleep(0.2)


def installed_by_fleet(crd: Body) -> bool:
    return any(m.get("manager") == FIELD_MANAGER
               for m in crd["metadata"].get("managedFields") or [])


def _served(kube: Kube, crd: Body) -> bool:
    """An established CRD can still answer 429 while its storage initialises."""
    spec = crd["spec"]
    resource = r.Resource(spec["group"], spec["versions"][0]["name"], spec["names"]["plural"],
                          namespaced=spec["scope"] == "Namespaced")
    try:
        kube.list(resource, limit=1)
    except errors.ApiError:
        return False
    return True


def agent_rbac(cluster: str) -> list[tuple[r.Resource, Body]]:
    ns = member_namespace(cluster)
    cluster_role = f"fleet:agent:{cluster}"
    subject = [{"kind": "ServiceAccount", "name": AGENT_SA, "namespace": ns}]
    return [
        (r.SERVICEACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount",
                             "metadata": {"name": AGENT_SA, "namespace": ns}}),
        (r.ROLES, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": AGENT_SA, "namespace": ns},
            "rules": [
                {"apiGroups": [GROUP], "resources": ["works"],
                 "verbs": ["get", "list", "watch", "patch", "update"]},
                {"apiGroups": [GROUP], "resources": ["works/status"],
                 "verbs": ["get", "patch", "update"]},
                {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                 "verbs": ["get", "list", "watch", "create", "update", "patch"]},
            ],
        }),
        (r.ROLEBINDINGS, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": AGENT_SA, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": AGENT_SA},
            "subjects": subject,
        }),
        (r.CLUSTERROLES, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": cluster_role},
            "rules": [
                {"apiGroups": [GROUP], "resources": ["memberclusters"],
                 "resourceNames": [cluster], "verbs": ["get", "watch"]},
                {"apiGroups": [GROUP], "resources": ["memberclusters/status"],
                 "resourceNames": [cluster], "verbs": ["get", "patch", "update"]},
            ],
        }),
        (r.CLUSTERROLEBINDINGS, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": cluster_role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": cluster_role},
            "subjects": subject,
        }),
    ]


def join(hub: Kube, member: Kube, cluster: str, *, hub_kubeconfig: Path,
         labels: dict[str, str] | None = None) -> str:
    """Register ``cluster`` on the hub; return the agent's hub kubeconfig (YAML text)."""
    ns = member_namespace(cluster)
    hub.apply(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": ns, "labels": {CLUSTER_LABEL: cluster}}},
              field_manager=FIELD_MANAGER)
    hub.apply(r.MEMBERCLUSTERS, {
        "apiVersion": API_VERSION, "kind": "MemberCluster",
        "metadata": {"name": cluster, "labels": {CLUSTER_LABEL: cluster, **(labels or {})}},
        "spec": {},
    }, field_manager=FIELD_MANAGER)
    for resource, body in agent_rbac(cluster):
        hub.apply(resource, body, field_manager=FIELD_MANAGER)
    # Every CRD, not only the job kinds the agent runs: manifests written for the hub (policies,
    # quota trees) then apply unchanged to a member too.
    install_crds(member, crd_manifests(), keep_foreign=True)
    token = service_account_token(hub, ns, AGENT_SA)
    return agent_kubeconfig(hub_kubeconfig, cluster, token)


def install_agent(member: Kube, cluster: str, hub_kubeconfig_text: str, *,
                  image: str = deploy.IMAGE, node_selector: dict[str, str] | None = None
                  ) -> None:
    """Run the agent on the member: its RBAC, its hub credentials and its DaemonSet."""
    for body in deploy.agent_manifests(image, cluster, hub_kubeconfig_text, node_selector):
        member.apply(r.for_kind(body["apiVersion"], body["kind"]), body,
                     field_manager=FIELD_MANAGER)


def uninstall_agent(member: Kube) -> None:
    """Remove what :func:`install_agent` put on the member (its CRDs and jobs stay)."""
    for body in reversed(deploy.agent_manifests(hub_kubeconfig="")):
        if body["kind"] == "Namespace":
            continue  # fleet-system may hold other things (the agents' Lease goes with them)
        meta = body["metadata"]
        member.delete(r.for_kind(body["apiVersion"], body["kind"]), meta["name"],
                      meta.get("namespace"))


def unjoin(hub: Kube, cluster: str) -> None:
    """Remove the member's registration, identity and namespace (its Works go with it)."""
    name = f"fleet:agent:{cluster}"
    hub.delete(r.CLUSTERROLEBINDINGS, name)
    hub.delete(r.CLUSTERROLES, name)
    hub.delete(r.MEMBERCLUSTERS, cluster)
    hub.delete(r.NAMESPACES, member_namespace(cluster))


def with_server(kubeconfig_text: str, server: str) -> str:
    """An agent kubeconfig (as :func:`token_kubeconfig` writes it) pointing at ``server``:
    the hub's address as the member's Pods reach it, when it is not the one this side uses
    (a hub behind another name or a NAT, a local cluster on 127.0.0.1)."""
    config: dict[str, Any] = yaml.safe_load(kubeconfig_text)
    for entry in config["clusters"]:
        entry["cluster"]["server"] = server
    return yaml.safe_dump(config, sort_keys=False)


def agent_kubeconfig(hub_kubeconfig: Path, cluster: str, token: str) -> str:
    """A kubeconfig for the agent: the hub's server and CA, the agent's token, nothing else."""
    return token_kubeconfig(hub_kubeconfig, f"fleet-agent-{cluster}", token)


def service_account_token(kube: Kube, namespace: str, name: str,
                          seconds: int = AGENT_TOKEN_SECONDS) -> str:
    """A token of the ServiceAccount ``namespace/name`` (TokenRequest API)."""
    token: str = kube.create(r.SERVICEACCOUNTS, {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": seconds},
    }, namespace=namespace, name=name, subresource="token")["status"]["token"]
    return token


def token_kubeconfig(kubeconfig: Path, user: str, token: str) -> str:
    """A kubeconfig with the server and CA of ``kubeconfig`` and ``token`` as ``user``."""
    admin: dict[str, Any] = yaml.safe_load(kubeconfig.read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
    server_entry = next(c for c in admin["clusters"] if c["name"] == context["context"]["cluster"])
    server = dict(server_entry["cluster"])
    if "certificate-authority" in server:
        ca_path = Path(server.pop("certificate-authority"))
        if not ca_path.is_absolute():
            ca_path = kubeconfig.parent / ca_path
        server["certificate-authority-data"] = base64.b64encode(ca_path.read_bytes()).decode()
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "hub",
        "clusters": [{"name": "hub", "cluster": server}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "hub", "context": {"cluster": "hub", "user": user}}],
    }, sort_keys=False)


def wait_ready(kube: Kube, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            kube.raw("GET", "/readyz")
            return
        except errors.ApiError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
