"""Manifests that run fleet in clusters: the hub (a Deployment on the hub cluster) and the agent
(a DaemonSet on each member), each with least-privilege RBAC.

``python -m fleet.deploy`` writes them to ``deploy/hub`` and ``deploy/agent`` as kustomize
bases (``--check`` fails when they are stale, as for ``crds/``); ``kubectl fleet join`` applies
the agent's to the member it joins, with the member's name and hub credentials filled in.
The container image is built from the repository's ``Dockerfile``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

Body = dict[str, Any]
NAMESPACE = "fleet-system"
VERSION = "0.1.0"
IMAGE = f"fleet:{VERSION}"
HUB_KUBECONFIG_SECRET = "fleet-hub-kubeconfig"
AGENT_CONFIG = "fleet-agent"
ALL = ["get", "list", "watch", "create", "update", "patch", "delete"]
READ = ["get", "list", "watch"]
JOB_GROUPS = {"kubeflow.org": ["pytorchjobs", "tfjobs", "mpijobs"],
              "batch.tensorstack.dev": ["mpijobs", "tensorflowtrainingjobs"]}
PODGROUP_GROUPS = ["scheduling.volcano.sh", "scheduling.x-k8s.io", "scheduler.tensorstack.dev"]
REPO = Path(__file__).resolve().parent.parent


def _rule(groups: list[str], resources: list[str], verbs: list[str],
          names: list[str] | None = None) -> Body:
    rule: Body = {"apiGroups": groups, "resources": resources, "verbs": verbs}
    if names:
        rule["resourceNames"] = names
    return rule


def _job_rules(verbs: list[str]) -> list[Body]:
    return [_rule([group], [*plurals, *(f"{p}/status" for p in plurals)], verbs)
            for group, plurals in JOB_GROUPS.items()]


def _meta(name: str, namespaced: bool = True) -> Body:
    meta: Body = {"name": name, "labels": {"app.kubernetes.io/name": name,
                                           "app.kubernetes.io/part-of": "fleet"}}
    if namespaced:
        meta["namespace"] = NAMESPACE
    return meta


def _rbac(name: str, cluster_rules: list[Body], namespace_rules: list[Body]) -> list[Body]:
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]
    api = "rbac.authorization.k8s.io/v1"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name)},
        {"apiVersion": api, "kind": "ClusterRole", "metadata": _meta(name, False),
         "rules": cluster_rules},
        {"apiVersion": api, "kind": "ClusterRoleBinding", "metadata": _meta(name, False),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": name}, "subjects": subject},
        {"apiVersion": api, "kind": "Role", "metadata": _meta(name), "rules": namespace_rules},
        {"apiVersion": api, "kind": "RoleBinding", "metadata": _meta(name),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": subject},
    ]


def _container(name: str, image: str, module: str, args: list[str], env: list[Body]) -> Body:
    return {
        "name": name, "image": image, "command": ["python", "-m", module], "args": args,
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}, *env],
        "ports": [{"name": "metrics", "containerPort": 8080}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8081},
                          "initialDelaySeconds": 30, "periodSeconds": 20},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                      "limits": {"memory": "2Gi"}},
        "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
    }


def hub_manifests(image: str = IMAGE, replicas: int = 2) -> list[Body]:
    """The hub: two replicas (a Lease elects the one that decides; both serve the webhook)."""
    name = "fleet-hub"
    rules = [
        *_job_rules(ALL),
        _rule(["fleet.sh"], ["works", "works/status"], ALL),
        _rule(["fleet.sh"], ["memberclusters", "memberclusters/status"], [*READ, "patch"]),
        _rule(["policy.one.alibabacloud.com"],
              ["propagationpolicies", "clusterpropagationpolicies"], READ),
        _rule(["scheduling.sigs.k8s.io"], ["elasticquotatrees"], READ),
        _rule(["scheduling.x-k8s.io"], ["queues", "queues/status"], ALL),
        _rule([""], ["configmaps", "secrets", "persistentvolumeclaims"], READ),
        _rule([""], ["namespaces"], READ),
        _rule([""], ["events"], ["create", "patch"]),
        _rule(["coordination.k8s.io"], ["leases"], READ),  # the agents' heartbeats
        _rule(["admissionregistration.k8s.io"], ["validatingwebhookconfigurations"],
              ["get", "list", "watch", "create", "update", "patch"]),
        _rule(["apiextensions.k8s.io"], ["customresourcedefinitions"], READ),
    ]
    leases = [_rule(["coordination.k8s.io"], ["leases"], ALL)]
    env = [{"name": "FLEET_WEBHOOK_PORT", "value": "9443"},
           {"name": "FLEET_WEBHOOK_ADDR", "value": "0.0.0.0"},
           {"name": "FLEET_WEBHOOK_HOST", "value": f"{name}.{NAMESPACE}.svc"},
           {"name": "FLEET_METRICS_PORT", "value": "8080"}]
    container = _container("hub", image, "fleet.hub", ["--liveness", "http://0.0.0.0:8081/healthz"],
                           env)
    container["ports"].append({"name": "webhook", "containerPort": 9443})
    container["volumeMounts"] = [{"name": "tmp", "mountPath": "/tmp"}]
    labels = {"app.kubernetes.io/name": name}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(NAMESPACE, False)},
        *_rbac(name, rules, leases),
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(name),
         "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels},
                               "spec": {"serviceAccountName": name,
                                        "containers": [container],
                                        "volumes": [{"name": "tmp", "emptyDir": {}}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": _meta(name),
         "spec": {"selector": labels,
                  "ports": [{"name": "webhook", "port": 9443, "targetPort": 9443},
                            {"name": "metrics", "port": 8080, "targetPort": 8080}]}},
    ]


def agent_rules() -> list[Body]:
    """What the agent may do on its member: run the job kinds, their pods and the objects
    their controllers make, apply Works' dependencies, read nodes for capacity. It holds
    ``pods/exec`` only because Kubernetes lets it grant an MPI launcher no more than it has."""
    return [
        *_job_rules(ALL),
        _rule([""], ["pods", "services", "configmaps", "secrets", "serviceaccounts",
                     "persistentvolumeclaims"], ALL),
        _rule([""], ["pods/exec"], ["create"]),
        _rule([""], ["namespaces"], ["get", "list", "watch", "create", "patch"]),
        _rule([""], ["nodes"], READ),
        _rule([""], ["events"], ["create", "patch"]),
        _rule(["apps"], ["deployments"], ALL),
        _rule(["rbac.authorization.k8s.io"], ["roles", "rolebindings"], ALL),
        _rule(PODGROUP_GROUPS, ["podgroups"], ALL),
        _rule(["apiextensions.k8s.io"], ["customresourcedefinitions"], READ),
    ]


def agent_manifests(image: str = IMAGE, cluster: str = "CHANGE-ME",
                    hub_kubeconfig: str | None = None,
                    node_selector: dict[str, str] | None = None) -> list[Body]:
    """The agent DaemonSet and its RBAC; with ``hub_kubeconfig``, also the Secret holding it
    (join writes it; the kustomize base leaves it out, as it holds a credential)."""
    name = "fleet-agent"
    env = [{"name": "FLEET_CLUSTER_NAME",
            "valueFrom": {"configMapKeyRef": {"name": AGENT_CONFIG, "key": "cluster"}}},
           {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    container = _container(
        "agent", image, "member_agent",
        ["--cluster", "$(FLEET_CLUSTER_NAME)", "--hub-kubeconfig",
         "/etc/fleet-hub/kubeconfig", "--metrics-port", "8080",
         "--liveness", "http://0.0.0.0:8081/healthz"], env)
    container["volumeMounts"] = [{"name": "hub", "mountPath": "/etc/fleet-hub",
                                  "readOnly": True}, {"name": "tmp", "mountPath": "/tmp"}]
    labels = {"app.kubernetes.io/name": name}
    pod_spec: Body = {"serviceAccountName": name, "containers": [container],
                      "tolerations": [{"operator": "Exists"}],
                      "volumes": [{"name": "hub", "secret": {
                          "secretName": HUB_KUBECONFIG_SECRET}},
                                  {"name": "tmp", "emptyDir": {}}]}
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    leases = [_rule(["coordination.k8s.io"], ["leases"], ALL)]
    out = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(NAMESPACE, False)},
        *_rbac(name, agent_rules(), leases),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(AGENT_CONFIG),
         "data": {"cluster": cluster}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": _meta(name),
         "spec": {"selector": {"matchLabels": labels},
                  "updateStrategy": {"type": "RollingUpdate",
                                     "rollingUpdate": {"maxUnavailable": 1}},
                  "template": {"metadata": {"labels": labels}, "spec": pod_spec}}},
    ]
    if hub_kubeconfig is not None:
        out.append({"apiVersion": "v1", "kind": "Secret", "metadata": _meta(HUB_KUBECONFIG_SECRET),
                    "type": "Opaque", "stringData": {"kubeconfig": hub_kubeconfig}})
    return out


def render(directory: Path) -> dict[Path, str]:
    """File path -> content of the kustomize bases under ``directory``."""
    files: dict[Path, str] = {}
    for part, manifests in (("hub", hub_manifests()), ("agent", agent_manifests())):
        names = []
        for body in manifests:
            file = f"{body['kind'].lower()}-{body['metadata']['name']}.yaml"
            names.append(file)
            files[directory / part / file] = yaml.safe_dump(body, sort_keys=False)
        files[directory / part / "kustomization.yaml"] = yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": names,
            "images": [{"name": "fleet", "newTag": VERSION}],
        }, sort_keys=False)
    return {path: "# Generated by `python -m fleet.deploy`; do not edit.\n" + text
            for path, text in files.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleet.deploy", description=__doc__)
    parser.add_argument("--out", type=Path, default=REPO / "deploy")
    parser.add_argument("--check", action="store_true", help="fail if the files are stale")
    args = parser.parse_args(argv)
    files = render(args.out)
    if args.check:
        stale = [str(p) for p, text in files.items()
                 if not p.exists() or p.read_text() != text]
        if stale:
            print("stale deploy manifests (run `python -m fleet.deploy`):", *stale,
                  sep="\n  ", file=sys.stderr)
            return 1
        return 0
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    print(f"wrote {len(files)} files under {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
