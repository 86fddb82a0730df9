"""A member that runs Kubeflow Trainer v2 and JobSet itself: a policy asks for them
(``fleet.sh/trainjob-runner: member-trainer``), and the Work carries the TrainJob and the
runtime the hub snapshotted, not the JobSet the hub resolved; the member's Trainer makes the
JobSet, JobSet its Jobs, the Job controller their pods, and the hub reads Trainer's status.

Trainer's controller manager (v2.3.0) and JobSet's controller (v0.12.0) are built from the Go
modules pinned in ``e2e/toolchain/trainer`` and run here as host processes against member2's
API server, with their CRDs and JobSet's defaulting webhook read from the module cache; the
member's own Job controller runs the Jobs on its kwok nodes. After the module, member2 gets
fleet's CRDs back, as it had them."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from e2e.conftest import eventually
from e2e.jobs import delete_jobs
from e2e.localfleet import LocalFleet
from e2e.test_trainjob import TRAINJOB, sim, until
from fleet import onboarding
from fleet.api import protocol
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e
Body = dict[str, Any]
MEMBER = "member2"
NS, AGENT_NS = "member-trainer", "agent-runner"
REPO = Path(__file__).resolve().parent.parent
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
MUTATING_JOBSET = "fleet-e2e-jobset-defaults"
BATCH_JOBS = r.Resource("batch", "v1", "jobs", kind="Job")


def built() -> Path:
    out = subprocess.run(["bash", str(REPO / "e2e" / "toolchain" / "build-trainer.sh")],
                         check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def serving_certificate(directory: Path) -> bytes:
    """A self-signed certificate for 127.0.0.1, where controller-runtime's webhook server
    reads it (``$TMPDIR/k8s-webhook-server/serving-certs``); its PEM, the caBundle."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .sign(key, hashes.SHA256()))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (directory / "tls.crt").write_bytes(pem)
    (directory / "tls.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return pem


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def upstream_crds(bins: Path) -> list[Body]:
    trainer = Path((bins / "trainer-module-dir").read_text().strip())
    jobset = Path((bins / "jobset-module-dir").read_text().strip())
    paths = [*sorted((trainer / "manifests/base/crds").glob("trainer.kubeflow.org_*.yaml")),
             jobset / "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"]
    return [yaml.safe_load(path.read_text()) for path in paths]


def replace_crd(kube: Kube, body: Body) -> None:
    """``body`` in place of the CRD of its name: a replace, so that no field of the one
    before stays, and its field managers reset (``[{}]``), as on a member where someone else
    installed it."""
    current = kube.get(r.CRDS, body["metadata"]["name"])
    kube.replace(r.CRDS, {**body, "metadata": {
        "name": body["metadata"]["name"], "labels": body["metadata"].get("labels") or {},
        "annotations": body["metadata"].get("annotations") or {}, "managedFields": [{}],
        "resourceVersion": current["metadata"]["resourceVersion"]}})


def jobset_defaulting(bins: Path, port: int, ca: bytes) -> Body:
    """JobSet's defaulting webhook (its own manifest's), served by the JobSet controller on
    this host."""
    module = Path((bins / "jobset-module-dir").read_text().strip())
    docs = yaml.safe_load_all((module / "config/components/webhook/manifests.yaml").read_text())
    mutating = next(d for d in docs if d and d["kind"] == "MutatingWebhookConfiguration")
    hook = next(w for w in mutating["webhooks"] if w["name"] == "mjobset.kb.io")
    path = hook["clientConfig"]["service"]["path"]
    hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}",
                            "caBundle": base64.b64encode(ca).decode()}
    return {"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": MUTATING_JOBSET}, "webhooks": [hook]}


@pytest.fixture(scope="module")
def member_trainer(fleet: LocalFleet, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[Kube]:
    """member2 running Trainer and JobSet beside fleet's agent."""
    if fleet.backend == "kind":
        pytest.skip("the member's API server runs in a container and cannot reach "
                    "JobSet's webhook on this host")
    bins, kube = built(), fleet.client(MEMBER)
    work = tmp_path_factory.mktemp("member-trainer")
    for crd in upstream_crds(bins):
        replace_crd(kube, crd)
    kubeconfig = str(fleet.kubeconfig(MEMBER))
    settings = {
        "trainer": {"apiVersion": "config.trainer.kubeflow.org/v1alpha1",
                    "kind": "Configuration", "certManagement": {"enable": False},
                    "health": {"healthProbeBindAddress": "127.0.0.1:0"},
                    "metrics": {"bindAddress": "0"},
                    "webhook": {"port": 19443, "host": "127.0.0.1"},
                    "leaderElection": {"leaderElect": False}},
        "jobset": {"apiVersion": "config.jobset.x-k8s.io/v1alpha1",
                   "kind": "Configuration", "internalCertManagement": {"enable": False},
                   "health": {"healthProbeBindAddress": "127.0.0.1:0"},
                   "metrics": {"bindAddress": "0"},
                   "webhook": {"port": 19444, "host": "127.0.0.1"},
                   "leaderElection": {"leaderElect": False}}}
    processes, certificates = [], {}
    logs = fleet.workdir / "logs"
    for name, config in settings.items():
        certificates[name] = serving_certificate(
            work / name / "k8s-webhook-server" / "serving-certs")
        (work / f"{name}.yaml").write_text(yaml.safe_dump(config))
        with open(logs / f"member-{name}.log", "w") as log:
            processes.append(subprocess.Popen(
                [str(bins / name), f"--config={work / name}.yaml", f"--kubeconfig={kubeconfig}"],
                stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "TMPDIR": str(work / name), "KUBECONFIG": kubeconfig}))
    try:
        # its webhook server listening before the API server is told to call it
        eventually(lambda: listening(19444), what="JobSet's webhook server on 127.0.0.1")
        kube.apply(r.MUTATINGWEBHOOKCONFIGURATIONS,
                   jobset_defaulting(bins, 19444, certificates["jobset"]),
                   field_manager="e2e")
        yield kube
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)
        kube.delete(r.MUTATINGWEBHOOKCONFIGURATIONS, MUTATING_JOBSET)
        replaced = {crd["metadata"]["name"] for crd in upstream_crds(bins)}
        for crd in onboarding.crd_manifests():  # fleet's own again, as join installed them
            if crd["metadata"]["name"] in replaced:
                replace_crd(kube, crd)
        onboarding.install_crds(kube, onboarding.crd_manifests())


def policy(hub: Kube, namespace: str, runner: str | None) -> None:
    if hub.get_or_none(r.NAMESPACES, namespace) is None:
        hub.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": namespace}})
    hub.apply(r.PROPAGATIONPOLICIES, {
        "apiVersion": "policy.one.alibabacloud.com/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "on-member2", "namespace": namespace,
                     **({"annotations": {protocol.TRAINJOB_RUNNER: runner}} if runner else {})},
        "spec": {"resourceSelectors": [{"apiVersion": TRAINJOB[0], "kind": TRAINJOB[1]}],
                 "placement": {"clusterAffinity": {"clusterNames": [MEMBER]},
                               "replicaScheduling": {"replicaSchedulingType": "Divided",
                                                     "customSchedulingType": "Gang"}}}},
        field_manager="test")


def trainjob(name: str, namespace: str) -> Body:
    return {"apiVersion": TRAINJOB[0], "kind": TRAINJOB[1],
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "runtimePatches": [sim("node", "4s")],
                     "trainer": {"numNodes": 2, "command": ["torchrun", "train.py"]}}}


def test_a_policy_hands_trainjobs_to_the_members_own_trainer(
        fleet: LocalFleet, hub: Kube, member_trainer: Kube) -> None:
    kube = member_trainer
    policy(hub, NS, "member-trainer")
    job = hub.create(r.TRAINJOBS, trainjob("by-trainer", NS))
    try:
        # the Work carries the TrainJob, naming the runtime it carries beside it
        copy = eventually(lambda: kube.get_or_none(r.TRAINJOBS, "by-trainer", NS),
                          what="the TrainJob on member2")
        assert copy["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org",
                                              "kind": "TrainingRuntime",
                                              "name": "by-trainer-runtime"}
        runtime = kube.get(r.TRAININGRUNTIMES, "by-trainer-runtime", NS)
        assert runtime["spec"]["mlPolicy"] == {"numNodes": 1, "torch": {}}
        # the member's Trainer made the JobSet, JobSet the Jobs, the Jobs the pods
        jobset = eventually(lambda: kube.get_or_none(r.JOBSETS, "by-trainer", NS),
                            what="Trainer's JobSet")
        assert [o["kind"] for o in jobset["metadata"]["ownerReferences"]] == ["TrainJob"]
        pods = eventually(lambda: kube.list(r.PODS, NS, label_selector=(
            f"{JOBSET_LABEL}=by-trainer"))[0] or None, what="the Jobs' pods")
        assert {o["kind"] for p in pods for o in p["metadata"]["ownerReferences"]} == {"Job"}
        done = until(hub, job, "Complete")
        assert done["status"]["jobsStatus"][0]["name"] == "node"
        # the agent told the hub of the pods the member's Jobs ran
        [work] = [w for w in hub.list(r.WORKS, protocol.member_namespace(MEMBER))[0]
                  if w["spec"]["job"]["name"] == "by-trainer"]
        assert len(work["status"]["pods"]) == 2
        assert work["spec"]["manifests"][0]["kind"] == "TrainJob"
    finally:
        hub.delete(r.TRAINJOBS, job["metadata"]["name"], NS)
    eventually(lambda: kube.get_or_none(r.TRAINJOBS, "by-trainer", NS) is None or None,
               what="the member's TrainJob gone with the hub's")


def test_the_agents_own_jobsets_stay_out_of_the_members_jobset_controller(
        fleet: LocalFleet, hub: Kube, member_trainer: Kube) -> None:
    """Under the default runner the agent runs the resolved JobSet itself: its copy names
    another manager, which the member's JobSet controller leaves alone (no Jobs)."""
    kube = member_trainer
    policy(hub, AGENT_NS, None)
    job = hub.create(r.TRAINJOBS, trainjob("by-agent", AGENT_NS))
    try:
        copy = eventually(lambda: kube.get_or_none(r.JOBSETS, "by-agent", AGENT_NS),
                          what="the agent's JobSet on member2")
        assert copy["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"
        done = until(hub, job, "Complete")
        assert done["status"]["conditions"][0]["type"] == "Complete"
        jobs, _ = kube.list(BATCH_JOBS, AGENT_NS)
        assert jobs == []  # the member's JobSet controller made none
    finally:
        delete_jobs(hub, AGENT_NS, wait=True)


def test_an_unknown_runner_is_refused_naming_the_annotation(hub: Kube) -> None:
    with pytest.raises(errors.ApiError, match=r"fleet\.sh/trainjob-runner"):
        policy(hub, NS, "someone-else")
