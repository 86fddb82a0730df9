"""The Kubeflow training SDK (``kubeflow-training`` from PyPI), unchanged, against the hub:
create, wait, conditions, list, pod names, logs (read and followed) and delete, for a job of
each of the six Kubeflow v1 kinds, whose policy asks for mirror pods (``fleet.sh/mirror-pods``).

The SDK runs as a script in a virtualenv of its own (``e2e.kubeflow_sdk``).
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import kubeflow_sdk
from e2e.conftest import eventually
from e2e.jobs import KUBEFLOW_KINDS, delete_jobs, gang_namespace, seed_pytorchjob
from e2e.localfleet import HUB, LocalFleet
from e2e.localfleet.kwok import POD_LOG
from fleet.api.protocol import MIRROR_OF
from fleet.cli.main import main
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e
NAMESPACE = "sdk-e2e"

# Runs in the SDK's virtualenv: argv = kind, namespace, name; prints one JSON line.
SCRIPT = textwrap.dedent('''
    import json, sys, time
    from kubernetes import client as k8s
    from kubeflow.training import TrainingClient, constants, models

    kind, namespace, name = sys.argv[1:4]
    sdk = TrainingClient(namespace=namespace, job_kind=kind)
    container = constants.JOB_PARAMETERS[kind]["container"]

    def spec(replicas):
        return models.KubeflowOrgV1ReplicaSpec(
            replicas=replicas, restart_policy="Never",
            template=k8s.V1PodTemplateSpec(
                metadata=k8s.V1ObjectMeta(annotations={"fleet.sh/sim-duration": "3s"}),
                spec=k8s.V1PodSpec(containers=[k8s.V1Container(
                    name=container, image="busybox",
                    resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}))])))

    meta = k8s.V1ObjectMeta(name=name, namespace=namespace)
    run = models.KubeflowOrgV1RunPolicy(clean_pod_policy="None")
    field, types = {
        "PyTorchJob": ("pytorch_replica_specs", {"Master": 1, "Worker": 1}),
        "TFJob": ("tf_replica_specs", {"Chief": 1, "Worker": 2}),
        "MPIJob": ("mpi_replica_specs", {"Launcher": 1, "Worker": 1}),
        "JAXJob": ("jax_replica_specs", {"Worker": 2}),
        "PaddleJob": ("paddle_replica_specs", {"Master": 1, "Worker": 1}),
        "XGBoostJob": ("xgb_replica_specs", {"Master": 1, "Worker": 1}),
    }[kind]
    model = constants.JOB_PARAMETERS[kind]["model"]
    job = getattr(models, model)(
        api_version="kubeflow.org/v1", kind=kind, metadata=meta,
        spec=getattr(models, f"{model}Spec")(
            run_policy=run, **{field: {t: spec(n) for t, n in types.items()}}))
    replicas = sum(types.values())
    out = {}
    sdk.create_job(job)
    sdk.wait_for_job_conditions(name, timeout=240, polling_interval=1)
    out["succeeded"] = sdk.is_job_succeeded(name)
    out["conditions"] = [c.type for c in sdk.get_job_conditions(name) if c.status == "True"]
    out["listed"] = [j.metadata.name for j in sdk.list_jobs()]
    deadline = time.monotonic() + 60  # the hub mirrors pods as their member reports them
    while True:
        out["pods"] = sorted(sdk.get_job_pod_names(name))
        out["master"] = sdk.get_job_pod_names(name, is_master=True)
        if len(out["pods"]) == replicas or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    while True:
        logs, _ = sdk.get_job_logs(name)
        if logs or time.monotonic() > deadline:
            break
        time.sleep(0.5)  # a mirror shows its pod Pending until the member reports it running
    out["logs"] = logs
    out["followed"], _ = sdk.get_job_logs(name, follow=True)
    out["all_logs"], _ = sdk.get_job_logs(name, is_master=False)
    sdk.delete_job(name)
    print(json.dumps(out))
''')


@pytest.fixture(scope="module")
def sdk_python() -> Path:
    return kubeflow_sdk.sdk_python()


@pytest.fixture(scope="module")
def mirrored(fleet: LocalFleet, hub: Kube) -> Iterator[str]:
    """A namespace whose policy places the six Kubeflow kinds as gangs, with mirror pods (its
    jobs deleted at the end, so that no failed test leaves GPUs taken for the next module)."""
    gang_namespace(hub, NAMESPACE, kinds=KUBEFLOW_KINDS, mirror_pods=True)
    yield NAMESPACE
    delete_jobs(hub, NAMESPACE, wait=True)


def mirror_writes(fleet: LocalFleet) -> dict[str, float]:
    with urllib.request.urlopen(fleet.metrics_url("hub"), timeout=10) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("fleet_mirror_pod_writes_total{"):
            kind = line.split('kind="', 1)[1].split('"', 1)[0]
            out[kind] = float(line.rsplit(" ", 1)[1])
    return out


@pytest.mark.parametrize(("kind", "name", "replicas", "leader"), [
    ("PyTorchJob", "sdk-pytorch", 2, "sdk-pytorch-master-0"),
    ("TFJob", "sdk-tf", 3, "sdk-tf-chief-0"),
    ("MPIJob", "sdk-mpi", 2, "sdk-mpi-launcher"),
    ("JAXJob", "sdk-jax", 2, "sdk-jax-worker-0"),
    ("PaddleJob", "sdk-paddle", 2, "sdk-paddle-master-0"),
    ("XGBoostJob", "sdk-xgb", 2, "sdk-xgb-master-0")])
def test_the_kubeflow_sdk_works_against_the_hub(fleet: LocalFleet, hub: Kube, mirrored: str,
                                                sdk_python: Path, kind: str, name: str,
                                                replicas: int, leader: str) -> None:
    before = mirror_writes(fleet)
    done = subprocess.run(
        [str(sdk_python), "-c", SCRIPT, kind, mirrored, name], capture_output=True, text=True,
        check=False, timeout=360, env={**os.environ, "KUBECONFIG": str(fleet.kubeconfig(HUB))})
    assert done.returncode == 0, done.stderr[-3000:]
    got: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["succeeded"], got
    assert "Succeeded" in got["conditions"], got
    assert name in got["listed"]
    assert len(got["pods"]) == replicas, got["pods"]
    assert leader in got["pods"], got["pods"]
    assert got["master"] == [leader]
    # kwok's file is in the CRI log format; a log shows each line's message
    expected = "".join(f"{line.split(' ', 3)[3]}\n" for line in POD_LOG.read_text().splitlines())
    assert got["logs"] == {leader: expected}  # kwok's log on the member, through the hub
    assert got["followed"] == {leader: expected} or "".join(got["followed"].values()) \
        .replace("\n", "") == expected.replace("\n", "")
    assert set(got["all_logs"]) == set(got["pods"])

    def mirrors_gone() -> bool:
        items, _ = hub.list(r.PODS, mirrored, label_selector=MIRROR_OF)
        return not [p for p in items if p["metadata"]["name"].startswith(f"{name}-")]
    eventually(mirrors_gone, timeout=60, what="the job's mirror pods removed with it")
    writes = {k: v - before.get(k, 0.0) for k, v in mirror_writes(fleet).items()}
    print(f"hub writes for {replicas} mirrored pods of a {kind}: {writes} "
          f"({sum(writes.values()) / replicas:.1f} per pod)")
    assert writes.get("create") == replicas


def test_the_agents_kubelet_endpoint_wants_the_hubs_client_certificate(hub: Kube) -> None:
    """Only the hub's API server (a certificate the hub's CA signed) may read logs there."""
    endpoint = eventually(
        lambda: (hub.get(r.MEMBERCLUSTERS, "member1").get("status") or {}).get("kubeletEndpoint"),
        what="member1's kubelet endpoint reported")
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # its serving certificate is self-signed
    url = f"https://{endpoint['address']}:{endpoint['port']}/containerLogs/kube-system/x/y"
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
        urllib.request.urlopen(url, context=context, timeout=10).read()


def test_kubectl_fleet_logs_reads_a_mirrored_pod_through_the_hub(
        fleet: LocalFleet, hub: Kube, mirrored: str, capsys: pytest.CaptureFixture[str]) -> None:
    """With the hub's kubeconfig only (no member credentials), and the pod still running;
    deleting the job removes its mirrors at once (no kubelet to confirm a graceful delete)."""
    job = seed_pytorchjob("cli-mirror", mirrored, run_for="1h", workers=1)
    hub.create(r.PYTORCHJOBS, job)

    def running() -> bool:
        pod = hub.get_or_none(r.PODS, "cli-mirror-master-0", mirrored)
        return pod is not None and (pod.get("status") or {}).get("phase") == "Running"
    eventually(running, timeout=120, what="the master's mirror Running on the hub")
    capsys.readouterr()
    assert main(["logs", "cli-mirror", "-n", mirrored, "--kubeconfig",
                 str(fleet.kubeconfig(HUB))]) == 0
    assert "fleet: simulated training step 1" in capsys.readouterr().out
    hub.delete(r.PYTORCHJOBS, "cli-mirror", mirrored)
    eventually(lambda: not hub.list(r.PODS, mirrored, label_selector=MIRROR_OF)[0],
               timeout=60, what="the mirrors gone with the job")
