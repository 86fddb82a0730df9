"""The fleet API on real API servers: the seeds' manifests apply unchanged, pod templates
round-trip, and every bad input is rejected with a message that names its field."""

from __future__ import annotations

import copy
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.conftest import eventually
from e2e.localfleet import HUB, REPO, LocalFleet
from e2e.localfleet.demo import EXAMPLES
from fleet.api import podschema
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e

Body = dict[str, Any]
# The seed documents' own manifests, when FLEET_SEED_EXAMPLES names their folder (CI's does):
# they must apply unchanged. Nothing to check where it is unset.
SEED_EXAMPLES = Path(os.environ["FLEET_SEED_EXAMPLES"]) if os.environ.get(
    "FLEET_SEED_EXAMPLES") else None
EXAMPLE_FILES = sorted(str(p.relative_to(REPO)) for p in EXAMPLES.glob("*.yaml"))
SEED_FILES = sorted(str(p) for p in SEED_EXAMPLES.glob("*.yaml")
                    if not p.name.startswith("hived")) \
    if SEED_EXAMPLES is not None and SEED_EXAMPLES.is_dir() else []


def documents(name: str) -> list[Body]:
    path = Path(name) if Path(name).is_absolute() else REPO / name
    if not path.exists():
        path = EXAMPLES / name
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def apply(kube: Kube, doc: Body, namespace: str = "default") -> Body:
    resource = r.for_kind(doc["apiVersion"], doc["kind"])
    doc = copy.deepcopy(doc)
    if resource.namespaced:
        doc["metadata"].setdefault("namespace", namespace)
        ns = doc["metadata"]["namespace"]
        if kube.get_or_none(r.NAMESPACES, ns) is None:
            kube.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": ns}})
    return kube.apply(resource, doc, field_manager="kubectl", force=False)


def dry_run(kube: Kube, doc: Body) -> Body:
    resource = r.for_kind(doc["apiVersion"], doc["kind"])
    namespace = doc["metadata"].get("namespace", "default") if resource.namespaced else None
    path = resource.path(namespace) + "?dryRun=All"
    return kube.raw("POST", path, doc)


IDENTITY = ("apiVersion", "kind", "metadata", "status")  # what the server fills in or keeps


@pytest.mark.parametrize("cluster", [HUB, "member1"])
@pytest.mark.parametrize("example", EXAMPLE_FILES + SEED_FILES)
def test_every_example_and_seed_manifest_applies_unchanged(fleet: LocalFleet, cluster: str,
                                                           example: str) -> None:
    kube = fleet.client(cluster)
    for doc in documents(example):
        if doc["kind"] == "ElasticQuotaTree" and cluster == HUB:
            applied = dry_run(kube, doc)  # the live tree belongs to the quota tests
        elif cluster != HUB and r.for_kind(doc["apiVersion"], doc["kind"]) in r.JOB_KINDS:
            # the hub may have placed this very job in its namespace here: the agent's copy
            # is fleet's object (marked for the member), not the manifest
            applied = apply(kube, {**doc, "metadata": {**doc["metadata"],
                                                       "namespace": "examples-member"}})
        else:
            applied = apply(kube, doc, namespace="examples")
        assert {k: applied.get(k) for k in doc if k not in IDENTITY} == \
            {k: v for k, v in doc.items() if k not in IDENTITY}


def test_the_seed_tree_is_accepted_with_a_warning_about_root_min(fleet: LocalFleet) -> None:
    hub = fleet.client(HUB)
    eventually(lambda: hub.get_or_none(
        r.Resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
                   namespaced=False), "fleet.sh"), what="the hub's webhook configuration")
    doc = documents("elasticquotatree.yaml")[0]

    def warned() -> bool:  # the webhook may be configured a moment before it serves
        dry_run(hub, doc)
        return any("spec.root.min differs from spec.root.max" in w for w in hub.warnings)

    eventually(warned, what="the root-min warning from the webhook")


def test_pod_templates_round_trip_intact(fleet: LocalFleet) -> None:
    hub = fleet.client(HUB)
    template = {
        "metadata": {"labels": {"app": "x"}, "annotations": {"a": "b"}},
        "spec": {
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "gpu", "operator": "In", "values": ["a100"]}]}]}}},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "securityContext": {"runAsUser": 1000, "fsGroup": 2000},
            "initContainers": [{"name": "init", "image": "busybox", "command": ["true"]}],
            "containers": [{
                "name": "pytorch", "image": "img", "workingDir": "/w",
                "env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
                "resources": {"limits": {"nvidia.com/gpu": 1, "cpu": "500m"},
                              "requests": {"memory": "1Gi"}},
                "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
                "ports": [{"name": "pytorchjob-port", "containerPort": 23456}],
            }],
            "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}],
            "schedulerName": "default-scheduler",
            "priorityClassName": "high",
        },
    }
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "round-trip", "namespace": "examples"},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template}}}}
    stored = dry_run(hub, job)
    assert stored["spec"]["pytorchReplicaSpecs"]["Master"]["template"] == template


# --- bad inputs: each is (id, base manifest, mutation, text the error must contain) -------

def pytorch() -> Body:
    return documents("pytorchjob.yaml")[0]


def tfj() -> Body:
    return documents("t9k-tensorflowtrainingjob.yaml")[1]


def t9k_mpi() -> Body:
    return documents("t9k-mpijob-random-walk.yaml")[0]


def kubeflow_mpi() -> Body:
    return documents("kubeflow-mpijob.yaml")[0]


def policy() -> Body:
    return documents("propagationpolicy-gang.yaml")[0]


def tree() -> Body:
    return documents("elasticquotatree.yaml")[0]


def tfjob() -> Body:
    container = {"name": "tensorflow", "image": "tf"}
    spec = {"replicas": 1, "template": {"spec": {"containers": [container]}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "tf"},
            "spec": {"tfReplicaSpecs": {"Chief": copy.deepcopy(spec),
                                        "Worker": copy.deepcopy(spec)}}}


def member() -> Body:
    return {"apiVersion": "fleet.sh/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": "bad-member"}, "spec": {}}


def work() -> Body:
    return {"apiVersion": "fleet.sh/v1alpha1", "kind": "Work",
            "metadata": {"name": "bad-work", "namespace": "default"},
            "spec": {"job": {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                             "namespace": "default", "name": "j", "uid": "u"},
                     "placement": {"cluster": "member1"}, "manifests": [pytorch()]}}


def at(path: str, value: Any) -> Callable[[Body], None]:
    """Set the dotted ``path`` (list indices as numbers) to ``value``; None deletes it."""
    def mutate(doc: Body) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if value is None:
            del node[int(last) if last.isdigit() else last]
        else:
            node[int(last) if last.isdigit() else last] = value
    return mutate


def both(*mutations: Callable[[Body], None]) -> Callable[[Body], None]:
    def mutate(doc: Body) -> None:
        for one in mutations:
            one(doc)
    return mutate


def add_child(child: Body) -> Callable[[Body], None]:
    def mutate(doc: Body) -> None:
        doc["spec"]["root"]["children"].append(child)
    return mutate


W = "spec.pytorchReplicaSpecs.Worker"
T = "spec.replicaSpecs"
Q = "spec.root.children.0"
BAD: list[tuple[str, Callable[[], Body], Callable[[Body], None], str]] = [
    ("zero-replicas", pytorch, at(f"{W}.replicas", 0), f"{W}.replicas"),
    ("negative-replicas", pytorch, at(f"{W}.replicas", -2), f"{W}.replicas"),
    ("unknown-replica-type", pytorch, at("spec.pytorchReplicaSpecs.Chief",
                                         pytorch()["spec"]["pytorchReplicaSpecs"]["Worker"]),
     "replica type must be one of Master, Worker"),
    ("two-masters", pytorch, at("spec.pytorchReplicaSpecs.Master.replicas", 2),
     "spec.pytorchReplicaSpecs.Master.replicas: must be 1"),
    ("unknown-restart-policy", pytorch, at(f"{W}.restartPolicy", "Sometimes"),
     f"{W}.restartPolicy"),
    ("no-pytorch-container", pytorch, at(f"{W}.template.spec.containers.0.name", "main"),
     "container named 'pytorch'"),
    ("no-containers", pytorch, at(f"{W}.template.spec.containers", []),
     f"{W}.template.spec.containers"),
    ("port-not-a-number", pytorch, at(f"{W}.template.spec.containers.0.ports",
                                      [{"containerPort": "http"}]),
     f"{W}.template.spec.containers[0].ports[0].containerPort"),
    ("toleration-seconds-a-string", t9k_mpi, at("spec.worker.template.spec.tolerations",
                                                [{"key": "k", "tolerationSeconds": "soon"}]),
     "spec.worker.template.spec.tolerations[0].tolerationSeconds"),
    ("env-without-name", tfj, at(f"{T}.0.template.spec.containers.0.env", [{"value": "v"}]),
     f"{T}[0].template.spec.containers[0].env[0].name"),
    ("container-without-name", pytorch, at(f"{W}.template.spec.containers.0.name", None),
     "name"),
    ("malformed-quantity", pytorch,
     at(f"{W}.template.spec.containers.0.resources.limits.cpu", "one"),
     f"{W}.template.spec.containers[0].resources.limits.cpu"),
    ("negative-backoff", pytorch, at("spec.runPolicy", {"backoffLimit": -1}),
     "spec.runPolicy.backoffLimit"),
    ("zero-deadline", pytorch, at("spec.runPolicy", {"activeDeadlineSeconds": 0}),
     "spec.runPolicy.activeDeadlineSeconds"),
    ("unknown-clean-pod-policy", pytorch, at("spec.runPolicy", {"cleanPodPolicy": "Some"}),
     "spec.runPolicy.cleanPodPolicy"),
    ("tf-chief-and-master", tfjob,
     at("spec.tfReplicaSpecs.Master", tfjob()["spec"]["tfReplicaSpecs"]["Chief"]),
     "Chief and Master are one role"),
    ("tf-unknown-type", tfjob, at("spec.tfReplicaSpecs.Boss",
                                  tfjob()["spec"]["tfReplicaSpecs"]["Chief"]),
     "replica type must be one of Chief"),
    ("tf-two-chiefs", tfjob, at("spec.tfReplicaSpecs.Chief.replicas", 2),
     "spec.tfReplicaSpecs.Chief.replicas: must be 1"),
    ("mpi-no-launcher", kubeflow_mpi, at("spec.mpiReplicaSpecs.Launcher", None),
     "spec.mpiReplicaSpecs.Launcher: is required"),
    ("mpi-two-launchers", kubeflow_mpi, at("spec.mpiReplicaSpecs.Launcher.replicas", 2),
     "spec.mpiReplicaSpecs.Launcher.replicas: must be 1"),
    ("mpi-zero-slots", kubeflow_mpi, at("spec.slotsPerWorker", 0), "spec.slotsPerWorker"),
    ("t9k-mpi-without-mpi-worker", t9k_mpi,
     at("spec.worker.template.spec.containers.0.name", "worker"),
     "spec.worker.template.spec.containers: a container named 'mpi-worker' is required"),
    ("t9k-mpi-relative-sshd", t9k_mpi, at("spec.ssh.sshdPath", "sshd"), "spec.ssh.sshdPath"),
    ("t9k-mpi-empty-cmd", t9k_mpi, at("spec.worker.cmd", []), "spec.worker.cmd"),
    ("t9k-priority-above-100", t9k_mpi,
     at("spec.scheduler", {"t9kScheduler": {"queue": "q", "priority": 101}}),
     "spec.scheduler.t9kScheduler.priority"),
    ("t9k-unknown-replica-type", tfj, at(f"{T}.0.type", "master"), f"{T}[0].type"),
    ("t9k-duplicate-type", tfj, at(f"{T}.1.type", "chief"),
     "each replica type may appear only once"),
    ("t9k-unknown-restart-policy", tfj, at(f"{T}.0.restartPolicy", "Forever"),
     f"{T}[0].restartPolicy"),
    ("t9k-unknown-cleanup-policy", tfj, at("spec.runPolicy.cleanUpPolicy", "Some"),
     "spec.runPolicy.cleanUpPolicy"),
    ("t9k-no-tensorflow-container", tfj, at(f"{T}.0.template.spec.containers.0.name", "tf"),
     "container named 'tensorflow'"),
    ("unknown-custom-scheduling-type", policy,
     at("spec.placement.replicaScheduling.customSchedulingType", "Herd"),
     "spec.placement.replicaScheduling.customSchedulingType"),
    ("unknown-replica-scheduling-type", policy,
     at("spec.placement.replicaScheduling.replicaSchedulingType", "Spread"),
     "spec.placement.replicaScheduling.replicaSchedulingType"),
    ("negative-toleration-seconds", policy,
     at("spec.failover.application.decisionConditions.tolerationSeconds", -5),
     "spec.failover.application.decisionConditions.tolerationSeconds"),
    ("unknown-purge-mode", policy, at("spec.failover.application.purgeMode", "Eventually"),
     "spec.failover.application.purgeMode"),
    ("no-resource-selectors", policy, at("spec.resourceSelectors", []),
     "spec.resourceSelectors"),
    ("selector-without-kind", policy, at("spec.resourceSelectors.0.kind", None), "kind"),
    ("spread-min-above-max", policy,
     at("spec.placement.spreadConstraints", [{"spreadByField": "cluster", "minGroups": 3,
                                             "maxGroups": 2}]),
     "minGroups: must not exceed maxGroups"),
    ("bad-label-operator", policy,
     at("spec.placement.clusterAffinity",
        {"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}),
     "spec.placement.clusterAffinity.labelSelector.matchExpressions[0].operator"),
    ("quota-malformed-quantity", tree, at(f"{Q}.max.cpu", "lots"),
     "spec.root.children[0].max.cpu"),
    ("quota-bad-node-name", tree, at(f"{Q}.name", "Child_2"), "spec.root.children[0].name"),
    ("quota-max-below-min", tree, at(f"{Q}.min", {"cpu": 20000}),
     "spec.root.children[0].max[cpu]: 10000000 is below min 20000000"),
    ("quota-children-min-above-parent", tree,
     add_child({"name": "child-3", "min": {"memory": "10Gi"}, "max": {"memory": "20Gi"},
                "children": [
                    {"name": "a", "min": {"memory": "6Gi"}, "namespaces": ["team-a"]},
                    {"name": "b", "min": {"memory": "6Gi"}, "namespaces": ["team-b"]}]}),
     "spec.root.children[1].children[*].min[memory]: the children's mins sum to 12884901888"),
    ("quota-namespace-in-two-leaves", tree,
     add_child({"name": "child-3", "namespaces": ["default"]}),
     "spec.root.children[1].namespaces: 'default' is already in spec.root.children[0]"),
    ("quota-namespaces-on-inner-node", tree,
     at(f"{Q}.children", [{"name": "leaf", "namespaces": ["x"]}]),
     "only leaves (nodes without children) may own namespaces"),
    ("quota-tree-outside-kube-system", tree, at("metadata.namespace", "default"),
     "metadata.namespace: an ElasticQuotaTree takes effect only in kube-system"),
    # Bounds (fleet.api.limits): every number and size a user controls.
    ("huge-replicas", pytorch, at(f"{W}.replicas", 4611686018427387904), f"{W}.replicas"),
    ("replicas-above-bound", pytorch, at(f"{W}.replicas", 10_001), f"{W}.replicas"),
    ("job-replicas-above-bound", pytorch, at(f"{W}.replicas", 10_000),
     "the job's replicas must add up to at most 10000"),
    ("t9k-job-replicas-above-bound", tfj, at(f"{T}.2.replicas", 10_000),
     "the job's replicas must add up to at most 10000"),
    ("huge-quantity", pytorch,
     at(f"{W}.template.spec.containers.0.resources.limits.cpu", "1e30"),
     "must be at most 1E"),
    ("giant-exponent-quantity", pytorch,  # parsing it would tie up the API server
     at(f"{W}.template.spec.containers.0.resources.limits.memory", "1e999999999"),
     f"{W}.template.spec.containers[0].resources.limits.memory"),
    ("mantissa-beyond-bound", pytorch,
     at(f"{W}.template.spec.containers.0.resources.limits.memory", "99999999999999999999Ei"),
     "must be at most 1E"),
    ("negative-quantity", pytorch,
     at(f"{W}.template.spec.containers.0.resources.limits.cpu", "-1"),
     f"{W}.template.spec.containers[0].resources.limits.cpu"),
    ("huge-deadline", pytorch, at("spec.runPolicy", {"activeDeadlineSeconds": 10**12}),
     "spec.runPolicy.activeDeadlineSeconds"),
    ("huge-backoff", t9k_mpi, at("spec.runPolicy", {"backoffLimit": 10**9}),
     "spec.runPolicy.backoffLimit"),
    ("huge-slots", kubeflow_mpi, at("spec.slotsPerWorker", 10**6), "spec.slotsPerWorker"),
    ("mebibyte-argument", t9k_mpi, at("spec.worker.cmd", ["x" * (1 << 20)]),
     "spec.worker.cmd[0]"),
    ("too-many-mpi-args", t9k_mpi, at("spec.worker.extraMPIArgs", ["-x"] * 2000),
     "spec.worker.extraMPIArgs"),
    ("t9k-debug-unknown-type", t9k_mpi,
     at("spec.runMode", {"debug": {"enabled": True, "replicaSpecs": [{"type": "chief"}]}}),
     "spec.runMode.debug.replicaSpecs[*].type: must name a replica type of the job"),
    ("t9k-tf-debug-type-not-in-job", tfj,
     at("spec.runMode", {"debug": {"enabled": True, "replicaSpecs": [{"type": "launcher"}]}}),
     "spec.runMode.debug.replicaSpecs[*].type: must name a replica type of the job"),
    ("t9k-tf-resume-type-not-in-job", tfj, both(
        at(f"{T}.3", None),  # the evaluator goes, a resume spec for it stays
        at("spec.runMode", {"pause": {"enabled": True, "resumeSpecs": [{"type": "evaluator"}]}})),
     "spec.runMode.pause.resumeSpecs[*].type: must name a replica type of the job"),
    ("too-many-cluster-names", policy,
     at("spec.placement.clusterAffinity", {"clusterNames": [f"c{i}" for i in range(1001)]}),
     "spec.placement.clusterAffinity.clusterNames"),
    ("huge-policy-priority", policy, at("spec.priority", 10**15), "spec.priority"),
    ("huge-spread-groups", policy,
     at("spec.placement.spreadConstraints", [{"spreadByField": "cluster", "maxGroups": 10**6}]),
     "spec.placement.spreadConstraints[0].maxGroups"),
    ("quota-negative-min", tree, at(f"{Q}.min", {"cpu": -1}), "spec.root.children[0].min.cpu"),
    ("quota-negative-min-text", tree, at(f"{Q}.min", {"cpu": "-1"}),
     "spec.root.children[0].min.cpu"),
    ("quota-huge-max", tree, at(f"{Q}.max.cpu", "1e30"),
     "spec.root.children[0].max[cpu]: '1e30' is above the bound 1E"),
    ("member-taint-effect", member, at("spec.taints", [{"key": "k", "effect": "Sometimes"}]),
     "spec.taints[0].effect"),
    ("work-without-manifests", work, at("spec.manifests", []), "spec.manifests"),
]


@pytest.mark.parametrize(("case", "base", "mutate", "expected"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_rejected_naming_the_field(
        fleet: LocalFleet, case: str, base: Callable[[], Body],
        mutate: Callable[[Body], None], expected: str) -> None:
    hub = fleet.client(HUB)
    eventually(lambda: hub.get_or_none(
        r.Resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
                   namespaced=False), "fleet.sh"), what="the hub's webhook configuration")
    doc = base()
    doc["metadata"].setdefault("namespace", "default")
    if doc["kind"] in ("MemberCluster",):
        doc["metadata"].pop("namespace")
    mutate(doc)
    with pytest.raises(errors.ApiError) as caught:
        dry_run(hub, doc)
    assert caught.value.status in (400, 422), caught.value
    assert expected in caught.value.message, caught.value.message


def test_a_misspelt_pod_template_field_is_refused_by_kubectl_apply(
        fleet: LocalFleet, tmp_path: Path) -> None:
    """As with Kubeflow's own CRDs: kubectl checks fields strictly, and the job's schema names
    every field of a pod template, so a typo is an error naming it rather than a GPU request
    silently dropped."""
    job = pytorch()
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"][
        "containers"][0]
    container["resource"] = container.pop("resources")
    manifest = tmp_path / "typo.yaml"
    manifest.write_text(yaml.safe_dump(job))
    done = subprocess.run([fleet.binaries()["kubectl"], "--kubeconfig",
                           str(fleet.kubeconfig(HUB)), "apply", "--dry-run=server", "-f",
                           str(manifest)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode != 0, done.stdout
    assert (f'unknown field "{W}.template.spec.containers[0].resource"') in done.stderr, \
        done.stderr


def test_the_stored_pod_template_structure_is_the_pinned_api_servers(fleet: LocalFleet) -> None:
    """The job CRDs' pod templates come from ``fleet/api/pod-schema.json``: it must be what
    this API server publishes (after a Kubernetes bump: ``python -m fleet.api.podschema``,
    then ``make crds``)."""
    document = fleet.client(HUB).raw("GET", "/openapi/v3/api/v1")
    assert podschema.definitions(document) == podschema.stored(), \
        "fleet/api/pod-schema.json is stale: run python -m fleet.api.podschema --kubeconfig …"


def test_resume_specs_cannot_change_after_creation(fleet: LocalFleet, tmp_path: Path) -> None:
    hub = fleet.client(HUB)
    job = documents("t9k-mpijob-debug-pause.yaml")[1]
    apply(hub, job, namespace="immutable")

    def change(mutate: Callable[[Body], None]) -> Body:
        while True:  # the hub may write the job's status in between: re-read on conflict
            current = hub.get(r.T9K_MPIJOBS, "mpi-pause", "immutable")
            mutate(current)
            try:
                return hub.replace(r.T9K_MPIJOBS, current)
            except errors.Invalid:
                raise
            except errors.Conflict:
                continue

    with pytest.raises(errors.Invalid) as caught:
        change(at("spec.runMode.pause.resumeSpecs.0.command", ["/bin/other"]))
    assert "spec.runMode.pause.resumeSpecs cannot be changed after creation" in str(caught.value)
    change(at("spec.runMode.pause.enabled", False))  # pausing and resuming stays allowed


def test_a_metadata_listing_names_every_object_without_its_body(fleet: LocalFleet) -> None:
    """What the hub's start-up listing asks for (``metadata_only``): names and versions
    only, page by page, the kind named as the resource's rather than the server's
    PartialObjectMetadata (the hub keys its caches by it)."""
    hub = fleet.client(HUB)
    namespace = "metadata-listing"
    if hub.get_or_none(r.NAMESPACES, namespace) is None:
        hub.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": namespace}})
    for i in range(5):
        hub.apply(r.CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": f"cm-{i}", "namespace": namespace},
                                 "data": {"big": "x" * 1000}}, field_manager="test")
    # (none at all: the server's metadata list says "items": null)
    assert hub.list(r.PYTORCHJOBS, "no-such-namespace", metadata_only=True)[0] == []
    for resource, where in ((r.CONFIGMAPS, namespace), (r.MEMBERCLUSTERS, None)):
        full, _ = hub.list(resource, where)
        partial, _ = hub.list(resource, where, limit=2, metadata_only=True)
        assert sorted(o["metadata"]["name"] for o in partial) == \
            sorted(o["metadata"]["name"] for o in full)
        assert full, resource.plural
        for item in partial:
            assert set(item) == {"apiVersion", "kind", "metadata"}, item
            assert (item["apiVersion"], item["kind"]) == (resource.api_version, resource.kind)
            assert item["metadata"]["resourceVersion"]
