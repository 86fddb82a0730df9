"""Kubeflow Trainer v2 on the fleet: TrainJobs on the hub, made from the ClusterTrainingRuntimes
the hub ships, placed as gangs and run on members as the JobSets Trainer v2.3.0 would make
(no Trainer, JobSet or Job controller anywhere), their status Trainer's; and the ``kubeflow``
SDK (0.5.0, from PyPI, unchanged) driving them against the hub."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import kopf
import pytest

from e2e import kubeflow_sdk
from e2e.conftest import eventually
from e2e.jobs import delete_jobs, gang_namespace, hub_job, member
from e2e.localfleet import HUB, LocalFleet
from e2e.test_priority import GPU, events, idle_fleet, job_of, priority_classes
from fleet.api import runtimes
from fleet.api.protocol import RUNTIME_WEBHOOK
from fleet.api.trainer import CLUSTER_RUNTIME
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube
from fleet.hub import handlers
from fleet.hub.cache import RUNTIMES
from fleet.hub.trainer_runtimes import RuntimeRef

pytestmark = pytest.mark.e2e
Body = dict[str, Any]
NS = "trainjobs"
SDK_NS = "trainer-sdk"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
TRAINJOB = ("trainer.kubeflow.org/v1alpha1", "TrainJob")
RUNTIME_KEY = RuntimeRef(CLUSTER_RUNTIME, "", "torch-distributed").key


def namespace(hub: Kube, name: str, *, split: int = 1, mirror_pods: bool = False) -> None:
    if hub.get_or_none(r.NAMESPACES, name) is None:
        hub.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": name}})
    placement: Body = {"replicaScheduling": {"replicaSchedulingType": "Divided",
                                             "customSchedulingType": "Gang"}}
    if split > 1:
        placement["spreadConstraints"] = [{"spreadByField": "cluster", "maxGroups": split}]
    hub.apply(r.PROPAGATIONPOLICIES, {
        "apiVersion": "policy.one.alibabacloud.com/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "gang", "namespace": name, **(
            {"annotations": {"fleet.sh/mirror-pods": "true"}} if mirror_pods else {})},
        "spec": {"resourceSelectors": [{"apiVersion": TRAINJOB[0], "kind": TRAINJOB[1]}],
                 "placement": placement}}, field_manager="test")


def sim(rjob: str, run_for: str) -> Body:
    """A runtime patch that sets how long ``rjob``'s kwok pods run."""
    return {"manager": "e2e.fleet.sh", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": rjob, "template": {"spec": {"template": {
            "metadata": {"annotations": {"fleet.sh/sim-duration": run_for}}}}}}]}}}}


def trainjob(name: str, runtime: str, *, patches: list[Body] | None = None,
             **trainer: Any) -> Body:
    spec: Body = {"runtimeRef": {"name": runtime}, "trainer": trainer}
    if patches:
        spec["runtimePatches"] = patches
    return {"apiVersion": TRAINJOB[0], "kind": TRAINJOB[1],
            "metadata": {"name": name, "namespace": NS}, "spec": spec}


def conditions(job: Body) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (job.get("status") or {}).get("conditions") or []}


def until(hub: Kube, job: Body, kind: str, status: str = "True", timeout: float = 120) -> Body:
    def check() -> Body | None:
        current = hub_job(hub, job)
        return current if conditions(current).get(kind) == status else None
    return eventually(check, timeout=timeout,
                      what=f"{job['metadata']['name']} {kind}={status} on the hub")


def pods_of(kube: Kube, name: str, namespace: str = NS) -> dict[str, Body]:
    items, _ = kube.list(r.PODS, namespace, label_selector=f"{JOBSET_NAME}={name}")
    return {p["metadata"]["name"]: p for p in items}


def env_of(pod: Body) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom"))
            for e in pod["spec"]["containers"][0].get("env") or []}


@pytest.fixture(scope="module")
def jobs(hub: Kube) -> Iterator[dict[str, Body]]:
    namespace(hub, NS, split=2)
    bodies = [
        # 5 nodes of 8 GPUs: more than one member's 32, so the policy's split places it
        trainjob("torch-split", "torch-distributed", numNodes=5,
                 resourcesPerNode={"limits": {"nvidia.com/gpu": 8}},
                 command=["torchrun", "train.py"], patches=[sim("node", "6s")]),
        trainjob("paused", "torch-distributed", numNodes=1, patches=[sim("node", "1h")]),
    ]
    yield {b["metadata"]["name"]: hub.create(r.TRAINJOBS, b) for b in bodies}
    delete_jobs(hub, NS, wait=True)


def test_the_hub_ships_trainers_default_runtimes(hub: Kube) -> None:
    names = {rt["metadata"]["name"]: rt for rt in hub.list(r.CLUSTERTRAININGRUNTIMES)[0]}
    assert {"torch-distributed", "deepspeed-distributed"} <= set(names)
    assert names["torch-distributed"]["metadata"]["labels"][
        "trainer.kubeflow.org/framework"] == "torch"


def test_a_runtime_the_hubs_cache_has_not_seen_yet_is_read_from_the_api_server(
        hub: Kube, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A runtime created a moment before its TrainJob (both in one ``kubectl apply``) may
    not have reached the hub's watch yet: the webhook reads it from the API server rather
    than refuse a valid job. (The preemption test below was refused so once.) The hub's own
    webhook handler runs here, in this process, with its cache empty, as it is before its
    watch brings the runtime: once the hub serves the webhook, it finds the runtime."""
    webhooks = kopf.get_default_registry()._webhooks.get_all_handlers()
    (snapshot,) = [cast(Callable[..., None], h.fn) for h in webhooks if h.id == RUNTIME_WEBHOOK]

    def admit(runtime: str) -> str:
        patch: Body = {}
        snapshot(body=trainjob("x", runtime), patch=patch)
        return str(patch["metadata"]["annotations"]["fleet.sh/runtime"])

    assert handlers.CACHE.item(RUNTIMES, RUNTIME_KEY) is None
    with pytest.raises(kopf.AdmissionError, match="not found"):
        admit("torch-distributed")  # the cache's word alone, before the webhook is served
    for name in ("FLEET_WEBHOOK_CERT", "FLEET_WEBHOOK_KEY"):
        monkeypatch.setenv(name, str(tmp_path / name))  # (the server is made, never started)
    monkeypatch.setenv("FLEET_WEBHOOK_PORT", "1")
    handlers._serve_webhook(kopf.OperatorSettings(), hub, lambda: False)
    assert json.loads(admit("torch-distributed"))["name"] == "torch-distributed"
    with pytest.raises(kopf.AdmissionError, match='"no-such-runtime" not found'):
        admit("no-such-runtime")


def test_a_torch_trainjob_splits_over_two_members_as_one_indexed_job(
        fleet: LocalFleet, hub: Kube, jobs: dict[str, Body]) -> None:
    job = jobs["torch-split"]
    placed = eventually(lambda: (hub_job(hub, job)["metadata"].get("annotations") or {}).get(
        "fleet.sh/clusters"), what="torch-split placed")
    assert sorted(placed.split(",")) == ["member1", "member2"]
    stored = hub_job(hub, job)
    assert stored["spec"]["runtimeRef"] == {"name": "torch-distributed",
                                            "apiGroup": "trainer.kubeflow.org",
                                            "kind": "ClusterTrainingRuntime"}
    assert json.loads(stored["metadata"]["annotations"]["fleet.sh/runtime"])["name"] == \
        "torch-distributed"
    def all_five() -> dict[str, tuple[str, Body]] | None:
        found = {name: (cluster, pod) for cluster in ("member1", "member2")
                 for name, pod in pods_of(fleet.client(cluster), "torch-split").items()}
        return found if len(found) == 5 else None

    pods = eventually(all_five, what="torch-split's five pods over both members")
    assert set(pods) == {f"torch-split-node-0-{i}" for i in range(5)}
    first = pods["torch-split-node-0-0"][0]
    for cluster, pod in pods.values():
        env = env_of(pod)
        assert env["PET_NNODES"] == "5"
        assert env["PET_NPROC_PER_NODE"] == "auto"
        # node 0 by its subdomain on its own member, by Multi-Cluster Services' name elsewhere
        assert env["PET_MASTER_ADDR"] == ("torch-split-node-0-0.torch-split" if cluster == first
                                          else f"torch-split-node-0-0.{first}.torch-split."
                                          f"{NS}.svc.clusterset.local")
    pods_by_name = {name: pod for name, (_, pod) in pods.items()}
    assert pods_by_name["torch-split-node-0-3"]["metadata"]["labels"][
        "batch.kubernetes.io/job-completion-index"] == "3"
    # no member has Trainer's CRDs' objects: the Works carry the resolved JobSet
    assert fleet.client("member1").get_or_none(r.TRAINJOBS, "torch-split", NS) is None
    done = until(hub, job, "Complete")
    assert conditions(done) == {"Complete": "True"}
    complete = next(c for c in done["status"]["conditions"] if c["type"] == "Complete")
    assert complete["reason"] == "AllJobsCompleted"
    assert done["status"]["jobsStatus"] == [{"name": "node", "ready": 0, "succeeded": 1,
                                             "failed": 0, "active": 0, "suspended": 0}]


def test_an_mpi_trainjob_has_its_hostfile_and_keys_and_a_launcher_after_its_nodes(
        fleet: LocalFleet, hub: Kube, jobs: dict[str, Body]) -> None:
    job = hub.create(r.TRAINJOBS, trainjob("mpi", "deepspeed-distributed", numNodes=2,
                                           command=["mpirun", "python", "train.py"],
                                           patches=[sim("launcher", "4s"), sim("node", "1h")]))
    kube = member(fleet, hub, job)
    hostfile = eventually(lambda: kube.get_or_none(r.CONFIGMAPS, "mpi-mpi-hostfile", NS),
                          what="the MPI hostfile")
    assert hostfile["data"]["hostfile"] == ("mpi-node-0-0.mpi slots=1\n"
                                            "mpi-launcher-0-0.mpi slots=1\n")
    secret = kube.get(r.SECRETS, "mpi-mpi-ssh-auth", NS)
    assert secret["type"] == "kubernetes.io/ssh-auth"
    def both() -> dict[str, Body] | None:
        found = pods_of(kube, "mpi")
        return found if len(found) == 2 else None

    pods = eventually(both, what="mpi's node and launcher")
    launcher, node = pods["mpi-launcher-0-0"], pods["mpi-node-0-0"]
    assert env_of(launcher)["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert launcher["spec"]["containers"][0]["command"] == ["mpirun", "python", "train.py"]
    # the launcher waits for its node to be Ready (dependsOn), as JobSet starts it
    ready = next(c["lastTransitionTime"] for c in node["status"]["conditions"]
                 if c["type"] == "Ready")
    assert launcher["metadata"]["creationTimestamp"] >= ready
    done = until(hub, job, "Complete")
    assert {s["name"]: s["succeeded"] for s in done["status"]["jobsStatus"]}["launcher"] == 1


def test_a_flux_trainjob_runs_its_command_under_flux_with_its_scripts_and_certificate(
        fleet: LocalFleet, hub: Kube, jobs: dict[str, Body]) -> None:
    hub.apply(r.CLUSTERTRAININGRUNTIMES, runtimes.flux_distributed(), field_manager="test")
    job = hub.create(r.TRAINJOBS, trainjob("lammps", "flux-distributed", numNodes=2,
                                           numProcPerNode=2, command=["lmp", "-in", "in.hns"],
                                           patches=[sim("node", "4s")]))
    kube = member(fleet, hub, job)
    scripts = eventually(lambda: kube.get_or_none(r.CONFIGMAPS, "lammps-flux-entrypoint", NS),
                         what="the Flux scripts")
    assert 'flux run -N 2 -n 4 bash -c "$1"' in scripts["data"]["entrypoint.sh"]
    curve = kube.get(r.SECRETS, "lammps-flux-curve", NS)
    assert set(curve["data"]) == {"curve.cert"}
    def both() -> dict[str, Body] | None:
        found = pods_of(kube, "lammps")
        return found if len(found) == 2 else None

    pod = eventually(both, what="lammps's two node pods")["lammps-node-0-1"]
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["flux-installer"]
    assert pod["spec"]["containers"][0]["command"] == [
        "/bin/bash", "/etc/flux-config/entrypoint.sh", "lmp -in in.hns"]
    done = until(hub, job, "Complete")
    assert done["status"]["jobsStatus"][0]["succeeded"] == 1


def test_a_split_mpi_trainjobs_launcher_waits_for_the_nodes_of_every_member(
        fleet: LocalFleet, hub: Kube, jobs: dict[str, Body]) -> None:
    """Five node pods of 8 GPUs are more than a member holds: split, the launcher's member
    sees only its own node pods. A member ResourceQuota holds back the GPU pods of the other
    member: the launcher waits for the hub's word that the node pods of every member are
    Ready (fleet.sh/peers-reached on its copy), not only for its own."""
    until(hub, jobs["torch-split"], "Complete")  # its 40 GPUs free, its pods made
    runtime = runtimes.deepspeed_distributed()  # its node pods on 8 GPUs each
    runtime["kind"], runtime["metadata"] = "TrainingRuntime", {"name": "mpi-gpus",
                                                               "namespace": NS}
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    node["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {GPU: 8}}
    hub.apply(r.TRAININGRUNTIMES, runtime, field_manager="test")
    members = ("member1", "member2")
    for cluster in members:  # no GPU pod starts on either member yet
        kube = fleet.client(cluster)
        kube.apply(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": NS}}, field_manager="test")
        kube.apply(r.RESOURCEQUOTAS, {
            "apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "no-gpus", "namespace": NS},
            "spec": {"hard": {"requests.nvidia.com/gpu": "0"}}}, field_manager="test")
    body = trainjob("mpi-split", "mpi-gpus", numNodes=6, command=["mpirun", "train.py"],
                    patches=[sim("launcher", "4s"), sim("node", "1h")])
    body["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    job = hub.create(r.TRAINJOBS, body)
    try:
        placement = eventually(lambda: (hub_job(hub, job)["metadata"].get(
            "annotations") or {}).get("fleet.sh/placement"), timeout=120,
            what="mpi-split placed")
        shares = {s["cluster"]: s["replicas"] for s in json.loads(placement)}
        assert sorted(shares) == list(members)
        first = next(c for c, replicas in shares.items() if replicas.get("launcher"))
        other = next(c for c in members if c != first)
        fleet.client(first).delete(r.RESOURCEQUOTAS, "no-gpus", NS)
        local = shares[first].get("node", 0)
        eventually(lambda: len([p for n, p in pods_of(fleet.client(first), "mpi-split").items()
                                if "-node-" in n and p["status"].get("phase") == "Running"])
                   == local or None, timeout=120, what="the launcher member's node pods")
        time.sleep(8)  # its own nodes Ready: a launcher judged by them alone would start now
        assert "mpi-split-launcher-0-0" not in pods_of(fleet.client(first), "mpi-split")
        fleet.client(other).delete(r.RESOURCEQUOTAS, "no-gpus", NS)
        launcher = eventually(lambda: pods_of(fleet.client(first), "mpi-split").get(
            "mpi-split-launcher-0-0"), timeout=120, what="mpi-split's launcher")
        # the other member's node pods are in the hostfile by Multi-Cluster Services' name
        hosts = fleet.client(first).get(r.CONFIGMAPS, "mpi-split-mpi-hostfile", NS)[
            "data"]["hostfile"]
        assert {line.split()[0] for line in hosts.splitlines() if "clusterset" in line} == {
            f"{name}.{other}.mpi-split.{NS}.svc.clusterset.local"
            for name in pods_of(fleet.client(other), "mpi-split")}
        # and both members hold the one SSH key the hub made for the split gang
        keys = {fleet.client(c).get(r.SECRETS, "mpi-split-mpi-ssh-auth", NS)["data"][
            "ssh-publickey"] for c in members}
        assert len(keys) == 1
        copy = fleet.client(first).get(r.JOBSETS, "mpi-split", NS)
        assert json.loads(copy["metadata"]["annotations"]["fleet.sh/peers-reached"])[
            "node"] in ("Ready", "Complete")
        for name, pod in pods_of(fleet.client(other), "mpi-split").items():
            ready = next(c["lastTransitionTime"] for c in pod["status"]["conditions"]
                         if c["type"] == "Ready")
            assert launcher["metadata"]["creationTimestamp"] >= ready, name
        done = until(hub, job, "Complete")
        assert {s["name"]: s["succeeded"] for s in done["status"]["jobsStatus"]}[
            "launcher"] == 1
    finally:
        for cluster in members:
            with contextlib.suppress(errors.NotFound):
                fleet.client(cluster).delete(r.RESOURCEQUOTAS, "no-gpus", NS)
        hub.delete(r.TRAINJOBS, "mpi-split", NS)


def test_a_suspended_trainjob_loses_its_pods_and_resumes(
        fleet: LocalFleet, hub: Kube, jobs: dict[str, Body]) -> None:
    job = jobs["paused"]
    kube = member(fleet, hub, job)
    eventually(lambda: pods_of(kube, "paused") or None, what="paused's pod")
    hub.patch(r.TRAINJOBS, "paused", {"spec": {"suspend": True}}, NS)
    suspended = until(hub, job, "Suspended")
    assert next(c for c in suspended["status"]["conditions"] if c["type"] == "Suspended")[
        "reason"] == "Suspended"
    eventually(lambda: not pods_of(kube, "paused"), what="paused's pods gone")
    hub.patch(r.TRAINJOBS, "paused", {"spec": {"suspend": False}}, NS)
    resumed = until(hub, job, "Suspended", "False")
    assert next(c for c in resumed["status"]["conditions"] if c["type"] == "Suspended")[
        "reason"] == "Resumed"
    eventually(lambda: pods_of(kube, "paused") or None, what="paused's pod again")


def test_a_trainjob_is_preempted_and_resumes(fleet: LocalFleet, hub: Kube,
                                            jobs: dict[str, Body]) -> None:
    """An opportunistic TrainJob on every GPU of the fleet (a namespaced runtime names the
    class, as Trainer's runtimes carry pod settings) gives way to a prod PyTorchJob, waits
    saying so in an event and its queue (no condition: the SDK reads conditions), and runs
    again once the prod job is gone."""
    delete_jobs(hub, NS, wait=True)  # the module's jobs: this one takes every GPU
    priority_classes(hub)
    idle_fleet(hub)
    runtime = runtimes.torch_distributed()
    runtime["kind"], runtime["metadata"] = "TrainingRuntime", {"name": "oppo", "namespace": NS}
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"]["priorityClassName"] = "fleet-e2e-oppo"
    hub.apply(r.TRAININGRUNTIMES, runtime, field_manager="test")
    body = trainjob("oppo", "oppo", numNodes=8, resourcesPerNode={"limits": {GPU: 8}},
                    patches=[sim("node", "1h")])
    body["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    victim = hub.create(r.TRAINJOBS, body)
    eventually(lambda: (hub_job(hub, victim).get("status") or {}).get("jobsStatus") and
               hub_job(hub, victim)["status"]["jobsStatus"][0]["active"], timeout=90,
               what="the opportunistic TrainJob running")
    gang_namespace(hub, "trainer-prod")
    hub.create(r.PYTORCHJOBS, job_of("prod", "trainer-prod", "fleet-e2e-prod", nodes=1))
    try:
        said = eventually(lambda: events(hub, victim, "Preempted"), timeout=60,
                          what="the TrainJob preempted")
        assert "PyTorchJob trainer-prod/prod" in said[0]["message"]
        waiting = eventually(lambda: (hub_job(hub, victim).get("status") or {}).get("queue"),
                             timeout=60, what="the TrainJob waiting")
        assert waiting["reason"] in ("Preempted", "Unschedulable")
        assert "Preempted" not in conditions(hub_job(hub, victim))
        eventually(lambda: events(hub, victim, "Waiting"), timeout=30,
                   what="a Waiting event on the TrainJob")  # events are written in the background
    finally:
        delete_jobs(hub, "trainer-prod", wait=True)
    eventually(lambda: "fleet.sh/clusters" in (hub_job(hub, victim)["metadata"].get(
        "annotations") or {}), timeout=120, what="the TrainJob placed again")
    hub.delete(r.TRAINJOBS, "oppo", NS)


@pytest.mark.parametrize(("spec", "field"), [
    ({"runtimeRef": {"name": "nope"}}, 'spec.runtimeRef.name: ClusterTrainingRuntime "nope"'),
    ({"runtimeRef": {"name": "torch-distributed"},
      "trainer": {"env": [{"name": "PET_NNODES", "value": "3"}]}},
     "spec.trainer.env[name=PET_NNODES]"),
    ({"runtimeRef": {"name": "torch-distributed"}, "runtimePatches": [
        {"manager": "me", "trainingRuntimeSpec": {"template": {"spec": {
            "replicatedJobs": [{"name": "launcher"}]}}}}]},
     "spec.runtimePatches[0]"),
    ({"runtimeRef": {"name": "torch-distributed"}, "managedBy": "someone/else"},
     "spec.managedBy"),
])
def test_a_trainjob_that_cannot_run_is_refused_naming_the_field(
        hub: Kube, jobs: dict[str, Body], spec: Body, field: str) -> None:
    with pytest.raises(errors.ApiError) as refused:
        hub.create(r.TRAINJOBS, {"apiVersion": TRAINJOB[0], "kind": TRAINJOB[1],
                                 "metadata": {"name": "bad", "namespace": NS}, "spec": spec})
    assert field in str(refused.value)


# -- the kubeflow SDK, unchanged ---------------------------------------------------------------

SCRIPT = textwrap.dedent('''
    import json, sys, time
    from kubeflow.trainer import TrainerClient, CustomTrainer
    from kubeflow.common.types import KubernetesBackendConfig

    namespace = sys.argv[1]
    client = TrainerClient(KubernetesBackendConfig(namespace=namespace))

    def train():
        print("hello from a fleet member")

    out = {"runtimes": sorted(r.name for r in client.list_runtimes())}
    runtime = client.get_runtime("torch-distributed")
    out["framework"] = runtime.trainer.framework
    name = client.train(runtime=runtime, trainer=CustomTrainer(
        func=train, num_nodes=2, resources_per_node={"cpu": 2, "memory": "4Gi"}))
    out["name"] = name
    client.wait_for_job_status(name, status={"Running"}, timeout=180, polling_interval=1)
    out["running"] = True
    job = client.wait_for_job_status(name, status={"Complete"}, timeout=180,
                                     polling_interval=1)
    out["status"] = job.status
    deadline = time.monotonic() + 30  # mirror pods follow their members' reports
    while any(s.status != "Succeeded" for s in job.steps) and time.monotonic() < deadline:
        time.sleep(0.5)
        job = client.get_job(name)
    out["steps"] = sorted([s.name, s.status] for s in job.steps)
    out["listed"] = [j.name for j in client.list_jobs()]
    out["logs"] = list(client.get_job_logs(name))
    client.delete_job(name)
    print(json.dumps(out))
''')


def test_the_kubeflow_sdk_trains_on_the_hub(fleet: LocalFleet, hub: Kube,
                                           tmp_path: Path) -> None:
    namespace(hub, SDK_NS, mirror_pods=True)
    python = kubeflow_sdk.sdk_python(sdk=kubeflow_sdk.TRAINER_SDK)
    script = tmp_path / "train.py"  # a file: the SDK sends the function's source
    script.write_text(SCRIPT)
    try:
        done = subprocess.run(
            [str(python), str(script), SDK_NS], capture_output=True, text=True, check=False,
            timeout=420, env={**os.environ, "KUBECONFIG": str(fleet.kubeconfig(HUB))})
        assert done.returncode == 0, done.stderr[-3000:]
        got: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        delete_jobs(hub, SDK_NS, wait=True)
    assert {"torch-distributed", "deepspeed-distributed", "jax-distributed",
            "xgboost-distributed"} <= set(got["runtimes"])
    assert got["framework"] == "torch"
    assert got["running"]
    assert got["status"] == "Complete"
    assert got["steps"] == [["node-0", "Succeeded"], ["node-1", "Succeeded"]]
    assert got["name"] in got["listed"]
    assert got["logs"], got
    assert eventually(lambda: hub.get_or_none(r.TRAINJOBS, got["name"], SDK_NS) is None,
                      what="the SDK's job deleted")
