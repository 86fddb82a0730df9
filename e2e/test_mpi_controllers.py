"""The MPI job controllers on the local fleet: Kubeflow MPIJob (kubectl exec) and T9k MPIJob
(sshd), applied to the hub and run on a member by the agent.

Checked here: the launcher is created only after every worker is Ready; the generated
hostfile and discover_hosts.sh; the launcher's RBAC, asked of the member's real API server
(exec into its own workers allowed, into any other pod denied); success and failure decided
by the launcher; clean-up; pause and resume; debug mode; the SSH key Secret. That mpirun
accepts what is generated is checked with a real mpirun in ``tests/mpirun``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import yaml

from e2e.jobs import (
    condition,
    delete_jobs,
    gang_namespace,
    hub_job,
    hub_state,
    member,
    pods,
    pods_named,
)
from e2e.localfleet import LocalFleet
from e2e.localfleet.demo import EXAMPLES
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e
Body = dict[str, Any]
NS = "mpi"
ACCESS_REVIEWS = r.Resource("authorization.k8s.io", "v1", "subjectaccessreviews", False,
                            "SubjectAccessReview")


def sim(template: Body, run_for: str = "1h", exit_code: int = 0) -> Body:
    out = copy.deepcopy(template)
    out.setdefault("metadata", {})["annotations"] = {"fleet.sh/sim-duration": run_for,
                                                     "fleet.sh/sim-exit-code": str(exit_code)}
    return out


def example(file: str, name: str, index: int = 0) -> Body:
    docs = [d for d in yaml.safe_load_all((EXAMPLES / file).read_text()) if d]
    job: Body = copy.deepcopy(docs[index])
    job["metadata"] = {"name": name, "namespace": NS}
    return job


def kubeflow(name: str, *, launcher: str, exit_code: int = 0, restart: str = "OnFailure",
             clean: str = "Running") -> Body:
    job = example("kubeflow-mpijob.yaml", name)
    job["spec"]["runPolicy"]["cleanPodPolicy"] = clean
    job["spec"]["slotsPerWorker"] = 2
    specs = job["spec"]["mpiReplicaSpecs"]
    specs["Launcher"]["template"] = sim(specs["Launcher"]["template"], launcher, exit_code)
    specs["Launcher"]["restartPolicy"] = restart
    specs["Worker"]["template"] = sim(specs["Worker"]["template"])
    return job


def t9k(name: str, file: str = "t9k-mpijob-random-walk.yaml", index: int = 0, *,
        run_for: str = "1h", exit_code: int = 0) -> Body:
    job = example(file, name, index)
    job["spec"]["worker"]["template"] = sim(job["spec"]["worker"]["template"], run_for,
                                            exit_code)
    job["spec"]["worker"]["replicas"] = 2
    return job


def scenarios() -> list[Body]:
    kept = t9k("t9k-mpi-fail", run_for="4s", exit_code=1)
    kept["spec"]["runPolicy"]["cleanUpWorkers"] = False
    return [
        kubeflow("kf-mpi-run", launcher="1h"),
        kubeflow("kf-mpi-ok", launcher="3s"),
        kubeflow("kf-mpi-fail", launcher="2s", exit_code=1, restart="Never"),
        t9k("t9k-mpi-ok", run_for="5s"),
        kept,
        t9k("t9k-mpi-debug", "t9k-mpijob-debug-pause.yaml", 0),
        t9k("t9k-mpi-pause", "t9k-mpijob-debug-pause.yaml", 1),
    ]


@pytest.fixture(scope="module")
def jobs(hub: Kube) -> Iterator[dict[str, Body]]:
    gang_namespace(hub, NS, kinds=(("kubeflow.org/v1", "MPIJob"),
                                   ("batch.tensorstack.dev/v1beta1", "MPIJob")))
    yield {body["metadata"]["name"]: hub.create(r.for_kind(body["apiVersion"], body["kind"]),
                                                body)
           for body in scenarios()}
    delete_jobs(hub, NS)  # some run on after their tests


def ready_since(pod: Body) -> datetime:
    stamp = next(c["lastTransitionTime"] for c in pod["status"]["conditions"]
                 if c["type"] == "Ready")
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def created_at(pod: Body) -> datetime:
    return datetime.fromisoformat(pod["metadata"]["creationTimestamp"].replace("Z", "+00:00"))


def may(kube: Kube, account: str, verb: str, resource: str, name: str = "",
        subresource: str = "") -> bool:
    review = kube.create(ACCESS_REVIEWS, {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": f"system:serviceaccount:{NS}:{account}",
                 "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NS}"],
                 "resourceAttributes": {"namespace": NS, "verb": verb, "resource": resource,
                                        "name": name, "subresource": subresource}}})
    return bool(review["status"].get("allowed"))


# -- Kubeflow MPIJob ---------------------------------------------------------------------

def test_kubeflow_launcher_waits_and_gets_exec_on_its_workers_only(
        fleet: LocalFleet, hub: Kube, jobs: dict[str, Body]) -> None:
    job = jobs["kf-mpi-run"]
    kube = member(fleet, hub, job)
    found = pods_named(kube, job, {"kf-mpi-run-launcher", "kf-mpi-run-worker-0",
                                   "kf-mpi-run-worker-1"})
    launcher = found.pop("kf-mpi-run-launcher")
    assert all(created_at(launcher) >= ready_since(w) for w in found.values()), \
        "the launcher was created before every worker was Ready"
    config = kube.get(r.CONFIGMAPS, "kf-mpi-run-config", NS)["data"]
    assert config["hostfile"] == "kf-mpi-run-worker-0 slots=2\nkf-mpi-run-worker-1 slots=2\n"
    assert config["discover_hosts.sh"] == ("#!/bin/sh\necho kf-mpi-run-worker-0:2\n"
                                           "echo kf-mpi-run-worker-1:2\n")
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert f"--container {worker['name']}" in config["kubexec.sh"]  # exec lands in the worker
    env = {e["name"]: e.get("value", "") for e in launcher["spec"]["containers"][0]["env"]}
    assert env["OMPI_MCA_plm_rsh_agent"] == "/etc/mpi/kubexec.sh"
    assert launcher["spec"]["serviceAccountName"] == "kf-mpi-run-launcher"

    account = "kf-mpi-run-launcher"
    assert may(kube, account, "create", "pods", "kf-mpi-run-worker-0", "exec")
    assert may(kube, account, "create", "pods", "kf-mpi-run-worker-1", "exec")
    assert may(kube, account, "list", "pods")
    assert not may(kube, account, "create", "pods", "kf-mpi-ok-worker-0", "exec")
    assert not may(kube, account, "create", "pods", "kf-mpi-run-launcher", "exec")
    assert not may(kube, account, "delete", "pods", "kf-mpi-run-worker-0")
    assert not may(kube, account, "get", "secrets")
    assert hub_state(hub, job, "Running")


def test_kubeflow_success_from_the_launcher_cleans_running_workers(
        fleet: LocalFleet, hub: Kube, jobs: dict[str, Body]) -> None:
    job = jobs["kf-mpi-ok"]
    kube = member(fleet, hub, job)
    done = hub_state(hub, job, "Succeeded")
    assert condition(done["status"], "Succeeded")["reason"] == "MPIJobSucceeded"
    left = pods_named(kube, job, {"kf-mpi-ok-launcher"})  # cleanPodPolicy Running
    assert left["kf-mpi-ok-launcher"]["status"]["phase"] == "Succeeded"


def test_kubeflow_failure_from_the_launcher(fleet: LocalFleet, hub: Kube,
                                            jobs: dict[str, Body]) -> None:
    job = jobs["kf-mpi-fail"]
    kube = member(fleet, hub, job)
    done = hub_state(hub, job, "Failed")
    assert "1 Launcher replica(s) failed" in condition(done["status"], "Failed")["message"]
    pods_named(kube, job, {"kf-mpi-fail-launcher"})  # the workers do not run on


# -- T9k MPIJob --------------------------------------------------------------------------

def test_t9k_mpijob_succeeds_and_cleans_up_workers(fleet: LocalFleet, hub: Kube,
                                                   jobs: dict[str, Body]) -> None:
    job = jobs["t9k-mpi-ok"]
    kube = member(fleet, hub, job)
    done = hub_state(hub, job, "Succeeded")
    status = done["status"]
    assert condition(status, "Completed")["status"] == "True"
    assert [t["type"] for t in status["tasks"]] == ["launcher", "worker"]
    assert status["tasks"][0]["status"][0]["name"] == "t9k-mpi-ok-launcher"
    pods_named(kube, job, {"t9k-mpi-ok-launcher"})  # cleanUpWorkers: true
    secret = kube.get(r.SECRETS, "t9k-mpi-ok-ssh", NS)
    assert secret["type"] == "kubernetes.io/ssh-auth"
    assert set(secret["data"]) == {"ssh-privatekey", "ssh-publickey"}
    hostfile = kube.get(r.CONFIGMAPS, "t9k-mpi-ok-config", NS)["data"]["hostfile"]
    assert hostfile == ("t9k-mpi-ok-worker-0.t9k-mpi-ok.mpi.svc slots=3\n"
                        "t9k-mpi-ok-worker-1.t9k-mpi-ok.mpi.svc slots=3\n")


def test_t9k_mpijob_failure_keeps_workers_without_clean_up(
        fleet: LocalFleet, hub: Kube, jobs: dict[str, Body]) -> None:
    job = jobs["t9k-mpi-fail"]
    kube = member(fleet, hub, job)
    done = hub_state(hub, job, "Failed")
    failed = condition(done["status"], "Failed")
    assert failed["message"].startswith("The job exited with an error code")
    assert condition(done["status"], "Completed")["status"] == "False"
    assert set(pods(kube, job)) == {"t9k-mpi-fail-launcher", "t9k-mpi-fail-worker-0",
                                    "t9k-mpi-fail-worker-1"}


def test_t9k_mpijob_debug_mode(fleet: LocalFleet, hub: Kube, jobs: dict[str, Body]) -> None:
    job = jobs["t9k-mpi-debug"]
    kube = member(fleet, hub, job)
    found = pods_named(kube, job, 3)
    assert found["t9k-mpi-debug-worker-0"]["spec"]["containers"][0]["command"] == [
        "sleep", "inf"]  # the example's debug command for workers
    assert found["t9k-mpi-debug-launcher"]["spec"]["containers"][0]["command"] == [
        "sleep", "inf"]  # the launcher's default
    assert hub_state(hub, job, "Running")


def test_t9k_mpijob_pause_then_resume(fleet: LocalFleet, hub: Kube,
                                      jobs: dict[str, Body]) -> None:
    job = jobs["t9k-mpi-pause"]  # the example starts paused
    kube = member(fleet, hub, job)
    paused = hub_state(hub, job, "Paused")
    assert condition(paused["status"], "Paused")["status"] == "True"
    assert not pods(kube, job)
    hub.patch(r.T9K_MPIJOBS, "t9k-mpi-pause", {"spec": {"runMode": {"pause": {
        "enabled": False}}}}, NS)
    found = pods_named(kube, job, 3)
    worker = found["t9k-mpi-pause-worker-0"]["spec"]
    assert worker["containers"][0]["command"] == ["/usr/bin/sshd"]  # the resume spec
    launcher = found["t9k-mpi-pause-launcher"]["spec"]["containers"][0]
    assert launcher["command"][:3] == ["mpirun", "--hostfile", "/etc/mpi/hostfile"]
    resumed = hub_state(hub, job, "Running")
    assert condition(resumed["status"], "Paused")["status"] == "False"
    assert hub_job(hub, job)["status"]["tasks"][1]["type"] == "worker"
