"""Manifests that run fleet in clusters: the hub (a Deployment on the hub cluster) and the agent
(a DaemonSet on each member), each with least-privilege RBAC.

``python -m fleet.deploy`` writes them to ``deploy/hub`` and ``deploy/agent`` as kustomize
bases (``--check`` fails when they are stale, as for ``crds/``); ``kubectl fleet join`` applies
the agent's to the member it joins, with the member's name and hub credentials filled in.
The container image is built from the repository's ``Dockerfile``. The Helm charts under
``deploy/helm`` install the same objects: ``tests/test_helm.py`` fails unless their default
values render exactly these bases, so a change here is made there too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from fleet.api import runtimes
from fleet.api.protocol import GROUP, JOB_WEBHOOK, RUNNERS, RUNTIME_WEBHOOK, TRAINJOB_RUNNER
from fleet.api.trainer import TRAINER_GROUP
from fleet.clients.resources import PROPAGATIONPOLICIES, TRAINJOBS
from fleet.kinds import ADAPTERS

Body = dict[str, Any]
NAMESPACE = "fleet-system"
VERSION = "0.1.0"
IMAGE = f"fleet:{VERSION}"
HUB_KUBECONFIG_SECRET = "fleet-hub-kubeconfig"
AGENT_CONFIG = "fleet-agent"
ALL = ["get", "list", "watch", "create", "update", "patch", "delete"]
READ = ["get", "list", "watch"]
JOB_GROUPS: dict[str, list[str]] = {}  # the kinds the hub places
MEMBER_JOB_GROUPS: dict[str, list[str]] = {}  # the kinds agents run (a TrainJob as a JobSet)
for _adapter in ADAPTERS:
    JOB_GROUPS.setdefault(_adapter.resource.group, []).append(_adapter.resource.plural)
    if _adapter.runs_on_members:
        MEMBER_JOB_GROUPS.setdefault(_adapter.resource.group, []).append(
            _adapter.resource.plural)
PODGROUP_GROUPS = ["scheduling.volcano.sh", "scheduling.x-k8s.io", "scheduler.tensorstack.dev"]
REPO = Path(__file__).resolve().parent.parent


def _rule(groups: list[str], resources: list[str], verbs: list[str],
          names: list[str] | None = None) -> Body:
    rule: Body = {"apiGroups": groups, "resources": resources, "verbs": verbs}
    if names:
        rule["resourceNames"] = names
    return rule


def _job_rules(verbs: list[str], groups: dict[str, list[str]] = JOB_GROUPS) -> list[Body]:
    """``verbs`` on the job kinds; their status subresource serves get, patch and update."""
    status = ["get", "patch", "update"]
    return [rule for group, plurals in groups.items()
            for rule in (_rule([group], plurals, verbs),
                         _rule([group], [f"{p}/status" for p in plurals], status))]


def _meta(name: str, namespaced: bool = True) -> Body:
    meta: Body = {"name": name, "labels": {"app.kubernetes.io/name": name,
                                           "app.kubernetes.io/part-of": "fleet"}}
    if namespaced:
        meta["namespace"] = NAMESPACE
    return meta


def _rbac(name: str, cluster_rules: list[Body],
          namespace_rules: dict[str, list[Body]]) -> list[Body]:
    """A ServiceAccount in fleet-system with a ClusterRole and one Role per namespace."""
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]
    api = "rbac.authorization.k8s.io/v1"
    out: list[Body] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name)},
        {"apiVersion": api, "kind": "ClusterRole", "metadata": _meta(name, False),
         "rules": cluster_rules},
        {"apiVersion": api, "kind": "ClusterRoleBinding", "metadata": _meta(name, False),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": name}, "subjects": subject},
    ]
    for namespace, rules in namespace_rules.items():
        meta = {**_meta(name), "namespace": namespace}
        out += [
            {"apiVersion": api, "kind": "Role", "metadata": meta, "rules": rules},
            {"apiVersion": api, "kind": "RoleBinding", "metadata": meta,
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
             "subjects": subject},
        ]
    return out


HUB = "fleet-hub"
WEBHOOK_CONFIGURATION = "fleet.sh"
WEBHOOK_TLS_SECRET = "fleet-hub-webhook-tls"
WEBHOOK_PORT, METRICS_PORT, HEALTH_PORT, DASHBOARD_PORT = 9443, 8080, 8081, 8095
QUEUE_NAMESPACE = "kube-queue"
KUBELET_PORT = 10350
NODE_LEASE_NAMESPACE = "kube-node-lease"
# What every container runs as: no root, nothing written outside its emptyDir, the runtime's
# default seccomp profile, no capabilities.
POD_SECURITY: Body = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                      "seccompProfile": {"type": "RuntimeDefault"}}


def _container(name: str, image: str, module: str, args: list[str], env: list[Body]) -> Body:
    return {
        "name": name, "image": image, "command": ["python", "-m", module], "args": args,
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"},
                {"name": "FLEET_METRICS_ADDR", "value": "0.0.0.0"}, *env],
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT},
                  {"name": "health", "containerPort": HEALTH_PORT}],
        # Liveness: kopf's own probe (its watch loops are alive). Readiness: the process has
        # synced its caches (and the hub serves its webhook), on the metrics port.
        # A Python process under load can take over the default 1 s to answer: 5 s.
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "health"},
                          "initialDelaySeconds": 30, "periodSeconds": 20, "failureThreshold": 3,
                          "timeoutSeconds": 5},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"},
                           "periodSeconds": 5, "failureThreshold": 2, "timeoutSeconds": 5},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                      "limits": {"cpu": "2", "memory": "2Gi"}},
        "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True,
                            "seccompProfile": {"type": "RuntimeDefault"},
                            "capabilities": {"drop": ["ALL"]}},
    }


def hub_rules() -> list[Body]:
    """What the hub may do cluster-wide: watch what it decides on, write jobs' placement and
    Works, publish Queues, read what a Work carries along, and patch only the caBundle of
    its own webhook configuration. The namespaces it writes to come with the install."""
    return [
        *_job_rules(["get", "list", "watch", "patch", "update", "delete"]),
        _rule([GROUP], ["works"], ["get", "list", "watch", "create", "patch", "delete"]),
        _rule([GROUP], ["memberclusters"], READ),
        _rule([GROUP], ["memberclusters/status"], ["patch"]),
        _rule(["policy.one.alibabacloud.com"],
              ["propagationpolicies", "clusterpropagationpolicies"], READ),
        _rule(["scheduling.sigs.k8s.io"], ["elasticquotatrees"], READ),
        _rule(["trainer.kubeflow.org"], ["trainingruntimes", "clustertrainingruntimes"], READ),
        _rule(["scheduling.x-k8s.io"], ["queues"], READ),
        _rule(["scheduling.k8s.io"], ["priorityclasses"], READ),
        _rule([""], ["configmaps", "secrets", "persistentvolumeclaims"], ["get"]),
        # events: its own, and a job's listed on its dashboard page
        _rule([""], ["events"], ["create", "patch", "list"]),
        _rule(["coordination.k8s.io"], ["leases"], READ),  # the agents' heartbeats
        _rule(["admissionregistration.k8s.io"], ["validatingwebhookconfigurations",
                                                  "mutatingwebhookconfigurations"],
              ["get", "patch"], [WEBHOOK_CONFIGURATION]),
        _rule(["apiextensions.k8s.io"], ["customresourcedefinitions"], READ),
        # read-only mirrors of job pods, on nodes that stand for the members (fleet.hub.pod_mirrors)
        _rule([""], ["pods"], ["get", "list", "watch", "create", "delete"]),
        _rule([""], ["pods/status"], ["patch"]),
        _rule([""], ["nodes"], ["get", "list", "create", "patch", "delete"]),
        _rule([""], ["nodes/status"], ["patch"]),
    ]


def hub_namespace_rules() -> dict[str, list[Body]]:
    """Namespace by namespace: the leader's Lease and the webhook's certificate in
    fleet-system; the Queues it publishes (spec and status) in kube-queue."""
    return {
        NAMESPACE: [
            _rule(["coordination.k8s.io"], ["leases"], ["create", "update"]),
            _rule([""], ["secrets"], ["create"]),
            _rule([""], ["secrets"], ["get", "watch", "update"], [WEBHOOK_TLS_SECRET]),
        ],
        QUEUE_NAMESPACE: [
            _rule(["scheduling.x-k8s.io"], ["queues"], ["create", "patch"]),
            _rule(["scheduling.x-k8s.io"], ["queues/status"], ["patch"]),
        ],
        # the Leases of the members' nodes, renewed while their agents' heartbeats are fresh
        NODE_LEASE_NAMESPACE: [_rule(["coordination.k8s.io"], ["leases"], ["create", "patch"])],
    }


def _webhook(name: str, path: str, rules: list[Body], *, mutating: bool = False,
             conditions: list[Body] | None = None) -> Body:
    """One of the hub's webhooks, reached through its Service; it fails closed."""
    return {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "matchPolicy": "Equivalent",
        **({"reinvocationPolicy": "Never"} if mutating else {}),
        "timeoutSeconds": 10,
        "rules": rules,
        **({"matchConditions": conditions} if conditions else {}),
        "clientConfig": {"service": {"namespace": NAMESPACE, "name": HUB,
                                     "path": path, "port": WEBHOOK_PORT}},
    }


def webhook_configuration() -> Body:
    """The hub's validating webhook, reached through its Service; the leader fills in the
    caBundle from the certificate it keeps in a Secret (the hub never creates or deletes
    this object, so a replica that exits leaves it to the others)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": _meta(WEBHOOK_CONFIGURATION, False),
        "webhooks": [_webhook("elasticquotatree.fleet.sh", "/elasticquotatree", [{
            "apiGroups": ["scheduling.sigs.k8s.io"], "apiVersions": ["v1beta1"],
            "resources": ["elasticquotatrees"], "operations": ["CREATE", "UPDATE"],
            "scope": "*"}]), job_webhook()],
    }


def job_webhook() -> Body:
    """The check of users' jobs as a whole (fleet.api.size: nesting and size). It fails
    closed, as Kueue's and Karmada's do: failing open, a job nested so deep that the API
    server cannot even send it for review would be stored, and no client could list its kind
    again. The hub's own writes to its jobs (admission, placement, finalizers) skip it."""
    rules = [{"apiGroups": [group], "apiVersions": [version],
              "resources": [a.resource.plural for a in ADAPTERS
                            if (a.resource.group, a.resource.version) == (group, version)],
              "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}
             for group, version in dict.fromkeys((a.resource.group, a.resource.version)
                                                 for a in ADAPTERS)]
    return _webhook("jobs.fleet.sh", f"/{JOB_WEBHOOK}", rules, conditions=[{
        "name": "not-the-hub",
        "expression": f"request.userInfo.username != 'system:serviceaccount:{NAMESPACE}:{HUB}'"}])


def mutating_webhook_configuration() -> Body:
    """The hub's one mutating webhook: a new TrainJob gets the snapshot of its runtime
    (fleet.hub.trainer_runtimes), or is refused when the runtime is missing or the job does
    not fit it. Fails closed: a TrainJob stored without its snapshot could not be placed."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": _meta(WEBHOOK_CONFIGURATION, False),
        "webhooks": [_webhook("trainjobs.fleet.sh", f"/{RUNTIME_WEBHOOK}", [{
            "apiGroups": [TRAINJOBS.group], "apiVersions": [TRAINJOBS.version],
            "resources": [TRAINJOBS.plural], "operations": ["CREATE"],
            "scope": "Namespaced"}], mutating=True)],
    }


LEADER_TERM_POLICY = "fleet-leader-term"


def leader_term_policy() -> list[Body]:
    """The hub leader's writes that must never happen twice (a job's placement and marks,
    its Works) are refused by the API server itself unless they carry the term the hub's
    Lease holds now (fleet.clients.leases): a replica that lost the lead during a long pass
    cannot land a write it sent too late. Only the hub's own identity is checked; the agents'
    and users' writes pass.

    With no Lease the policy is skipped, for every identity: the API server looks its
    ``paramRef`` up before it evaluates ``matchConditions``, so ``Deny`` there would refuse
    the users' job updates and the agents' Work finalizers too whenever the Lease is missing
    (a fresh install, or someone deleting it). No replica leads without a Lease: the next
    to lead creates one, a new term that refuses the old term's late writes."""
    hub = f"system:serviceaccount:{NAMESPACE}:{HUB}"
    term = f"{GROUP}/term"
    now = "params.metadata.uid + ':' + string(params.spec.leaseTransitions)"  # see leases.py
    rules = [{"apiGroups": [GROUP], "apiVersions": ["*"], "resources": ["works"],
              "operations": ["CREATE", "UPDATE"]}]
    rules += [{"apiGroups": [group], "apiVersions": ["*"], "resources": plurals,
               "operations": ["UPDATE"]} for group, plurals in JOB_GROUPS.items()]
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1",
         "kind": "ValidatingAdmissionPolicy", "metadata": _meta(LEADER_TERM_POLICY, False),
         "spec": {
             "failurePolicy": "Fail",
             "paramKind": {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease"},
             "matchConstraints": {"resourceRules": rules},
             "matchConditions": [{"name": "from-the-hub",
                                  "expression": f"request.userInfo.username == '{hub}'"}],
             "validations": [{
                 "expression": f"has(object.metadata.annotations) && '{term}' in "
                               f"object.metadata.annotations && object.metadata.annotations"
                               f"['{term}'] == {now}",
                 "messageExpression": f"'written under hub leader term ' + "
                                      f"(has(object.metadata.annotations) && '{term}' in "
                                      f"object.metadata.annotations ? object.metadata."
                                      f"annotations['{term}'] : 'none') + ', but the term "
                                      f"is now ' + {now}",
                 "reason": "Forbidden"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1",
         "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": _meta(LEADER_TERM_POLICY, False),
         "spec": {"policyName": LEADER_TERM_POLICY, "validationActions": ["Deny"],
                  "paramRef": {"name": HUB, "namespace": NAMESPACE,
                               "parameterNotFoundAction": "Allow"}}},
    ]


POLICY_ANNOTATIONS = "fleet-policy-annotations"


def policy_annotations_policy() -> list[Body]:
    """A (Cluster)PropagationPolicy's ``fleet.sh/trainjob-runner`` is one of the runners
    (fleet.api.protocol.RUNNERS), refused by the API server otherwise, naming the field."""
    key = TRAINJOB_RUNNER
    values = ", ".join(f"'{v}'" for v in RUNNERS)
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1",
         "kind": "ValidatingAdmissionPolicy", "metadata": _meta(POLICY_ANNOTATIONS, False),
         "spec": {
             "failurePolicy": "Fail",
             "matchConstraints": {"resourceRules": [{
                 "apiGroups": [PROPAGATIONPOLICIES.group], "apiVersions": ["*"],
                 "resources": ["propagationpolicies", "clusterpropagationpolicies"],
                 "operations": ["CREATE", "UPDATE"]}]},
             "validations": [{
                 "expression": f"!has(object.metadata.annotations) || !('{key}' in "
                               f"object.metadata.annotations) || object.metadata.annotations"
                               f"['{key}'] in [{values}]",
                 "message": f"metadata.annotations[{key}]: must be one of "
                            f"{', '.join(RUNNERS)}",
                 "reason": "Invalid"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1",
         "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": _meta(POLICY_ANNOTATIONS, False),
         "spec": {"policyName": POLICY_ANNOTATIONS, "validationActions": ["Deny"]}},
    ]


def hub_manifests(image: str = IMAGE, replicas: int = 2) -> list[Body]:
    """The hub: two replicas (a Lease elects the one that decides; both serve the webhook)."""
    name = HUB
    env: list[Body] = [
        {"name": "FLEET_WEBHOOK_PORT", "value": str(WEBHOOK_PORT)},
        {"name": "FLEET_WEBHOOK_ADDR", "value": "0.0.0.0"},
        {"name": "FLEET_WEBHOOK_HOST", "value": f"{name}.{NAMESPACE}.svc"},
        {"name": "FLEET_METRICS_PORT", "value": str(METRICS_PORT)},
        # the dashboard listens on the Pod's loopback only: kubectl port-forward reaches it
        # (kubectl fleet dashboard), nothing else does
        {"name": "FLEET_DASHBOARD_PORT", "value": str(DASHBOARD_PORT)},
        {"name": "FLEET_DASHBOARD_ADDR", "value": "127.0.0.1"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]
    container = _container("hub", image, "fleet.hub",
                           ["--liveness", f"http://0.0.0.0:{HEALTH_PORT}/healthz"], env)
    container["ports"].append({"name": "webhook", "containerPort": WEBHOOK_PORT})
    container["volumeMounts"] = [{"name": "tmp", "mountPath": "/tmp"}]
    labels = {"app.kubernetes.io/name": name}
    rbac = _rbac(name, hub_rules(), hub_namespace_rules())
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(NAMESPACE, False)},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(QUEUE_NAMESPACE, False)},
        *rbac,
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(name),
         "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                  "strategy": {"type": "RollingUpdate",
                               "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1}},
                  "template": {"metadata": {"labels": labels},
                               "spec": {"serviceAccountName": name,
                                        "securityContext": POD_SECURITY,
                                        "terminationGracePeriodSeconds": 30,
                                        "containers": [container],
                                        "volumes": [{"name": "tmp", "emptyDir": {}}]}}}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(name),
         "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": _meta(name),
         "spec": {"selector": labels,
                  "ports": [{"name": "webhook", "port": WEBHOOK_PORT, "targetPort": "webhook"},
                            {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics"},
                            {"name": "health", "port": HEALTH_PORT, "targetPort": "health"}]}},
        webhook_configuration(),
        mutating_webhook_configuration(),
        *leader_term_policy(),
        *policy_annotations_policy(),
        *runtimes.defaults(),
        *runtimes.public_version(),
    ]


def agent_rules() -> list[Body]:
    """What the agent may do on its member: run the job kinds, their pods and the objects
    their controllers make, apply Works' dependencies (and the PriorityClasses their pods
    name: read, apply, replace one fleet made), read nodes for capacity. It holds
    ``pods/exec`` only because Kubernetes lets it grant an MPI launcher no more than it has."""
    return [
        *_job_rules(ALL, MEMBER_JOB_GROUPS),
        _rule([""], ["pods", "services", "configmaps", "secrets", "serviceaccounts",
                     "persistentvolumeclaims"], ALL),
        _rule([""], ["pods/exec"], ["create"]),
        _rule([""], ["pods/log"], ["get"]),  # served to the hub (member_agent.kubelet_endpoint)
        _rule([""], ["namespaces"], ["get", "list", "watch", "create", "patch"]),
        _rule([""], ["nodes"], READ),
        _rule([""], ["events"], ["create", "patch"]),
        _rule(["apps"], ["deployments"], ALL),
        # a TrainJob for the member's own Trainer, and the runtime it names (its status is
        # Trainer's to write)
        _rule([TRAINER_GROUP], ["trainjobs", "trainingruntimes"], ALL),
        _rule(["rbac.authorization.k8s.io"], ["roles", "rolebindings"], ALL),
        _rule(PODGROUP_GROUPS, ["podgroups"], ALL),
        _rule(["apiextensions.k8s.io"], ["customresourcedefinitions"], READ),
        _rule(["scheduling.k8s.io"], ["priorityclasses"], ["get", "create", "patch", "delete"]),
    ]


def agent_namespace_rules() -> dict[str, list[Body]]:
    """The member's agent Lease (one agent Pod leads, the others stand by)."""
    return {NAMESPACE: [_rule(["coordination.k8s.io"], ["leases"],
                              ["get", "list", "watch", "create", "update"])]}


def chart_rbac() -> dict[str, Body]:
    """Chart directory under deploy/helm -> the rules its RBAC templates read
    (``files/rbac.yaml``), so the charts grant what these bases grant by construction."""
    return {"fleet-hub": {"clusterRules": hub_rules(), "namespaceRules": hub_namespace_rules()},
            "fleet-agent": {"clusterRules": agent_rules(),
                            "namespaceRules": agent_namespace_rules()}}


class _NoAliases(yaml.SafeDumper):
    """Repeated lists written out in full: the chart's files are read by humans too."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def agent_manifests(image: str = IMAGE, cluster: str = "CHANGE-ME",
                    hub_kubeconfig: str | None = None,
                    node_selector: dict[str, str] | None = None) -> list[Body]:
    """The agent DaemonSet and its RBAC; with ``hub_kubeconfig``, also the Secret holding it
    (join writes it; the kustomize base leaves it out, as it holds a credential)."""
    name = "fleet-agent"
    env: list[Body] = [
        {"name": "FLEET_CLUSTER_NAME",
         "valueFrom": {"configMapKeyRef": {"name": AGENT_CONFIG, "key": "cluster"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        # the kubelet endpoint the hub's API server calls for the member's pods' logs
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "FLEET_KUBELET_PORT", "value": str(KUBELET_PORT)}]
    container = _container(
        "agent", image, "member_agent",
        ["--cluster", "$(FLEET_CLUSTER_NAME)", "--hub-kubeconfig",
         "/etc/fleet-hub/kubeconfig", "--metrics-port", "8080",
         "--liveness", "http://0.0.0.0:8081/healthz"], env)
    container["volumeMounts"] = [{"name": "hub", "mountPath": "/etc/fleet-hub",
                                  "readOnly": True}, {"name": "tmp", "mountPath": "/tmp"}]
    labels = {"app.kubernetes.io/name": name}
    pod_spec: Body = {"serviceAccountName": name, "containers": [container],
                      "securityContext": POD_SECURITY,
                      "tolerations": [{"operator": "Exists"}],
                      "volumes": [{"name": "hub", "secret": {
                          "secretName": HUB_KUBECONFIG_SECRET}},
                                  {"name": "tmp", "emptyDir": {}}]}
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    out = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(NAMESPACE, False)},
        *_rbac(name, agent_rules(), agent_namespace_rules()),
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
            if directory / part / file in files:  # the same Role in another namespace
                file = file.replace(".yaml", f"-{body['metadata']['namespace']}.yaml")
            names.append(file)
            files[directory / part / file] = yaml.safe_dump(body, sort_keys=False)
        files[directory / part / "kustomization.yaml"] = yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": names,
            "images": [{"name": "fleet", "newTag": VERSION}],
        }, sort_keys=False)
    for chart, rules in chart_rbac().items():
        files[directory / "helm" / chart / "files" / "rbac.yaml"] = yaml.dump(
            rules, Dumper=_NoAliases, sort_keys=False)
    files[directory / "helm" / "fleet-hub" / "files" / "runtimes.yaml"] = yaml.dump(
        runtimes.defaults(), Dumper=_NoAliases, sort_keys=False)
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
