"""The member job controllers, driven through the hub on real API servers with kwok pods.

Every job is applied to the hub, dispatched to a member, run there by the agent's controller
(pods whose life the kwok stages play from their annotations), and its status is read back
on the hub. The jobs are submitted together at the start and each test checks one story:
success, restarts until backoffLimit, ExitCode rules, activeDeadlineSeconds, each clean-up
policy, TTL, suspend and resume, pause and resume, debug mode, the evaluator and PS rules,
TensorBoard, and the status fields seed 003 shows.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

import pytest

from e2e.conftest import eventually
from e2e.jobs import (
    KUBEFLOW_JOB,
    condition,
    delete_jobs,
    events,
    gang_namespace,
    hub_job,
    hub_state,
    member,
    member_job,
    pods,
    pods_named,
)
from e2e.localfleet import LocalFleet
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e
Body = dict[str, Any]
NS = "ctl"


def template(container: str, run_for: str = "1h", exit_code: int = 0) -> Body:
    return {"metadata": {"annotations": {"fleet.sh/sim-duration": run_for,
                                         "fleet.sh/sim-exit-code": str(exit_code)}},
            "spec": {"containers": [{"name": container, "image": "train:1",
                                     "command": ["python", "train.py"],
                                     "resources": {"requests": {"cpu": "1"}}}]}}


def pytorchjob(name: str, *, master: Body, worker: Body, restart: str = "OnFailure",
               workers: int = 1, **run_policy: Any) -> Body:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"runPolicy": run_policy, "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": restart, "template": master},
                "Worker": {"replicas": workers, "restartPolicy": restart, "template": worker}}}}


def tfjob(name: str, specs: Mapping[str, tuple[int, str, Body]], **run_policy: Any) -> Body:
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"runPolicy": run_policy, "tfReplicaSpecs": {
                rtype: {"replicas": n, "restartPolicy": restart, "template": tmpl}
                for rtype, (n, restart, tmpl) in specs.items()}}}


def t9kjob(name: str, specs: Mapping[str, tuple[int, str, Body]], **spec: Any) -> Body:
    return {"apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicaSpecs": [{"type": rtype, "replicas": n, "restartPolicy": restart,
                                       "template": tmpl}
                                      for rtype, (n, restart, tmpl) in specs.items()], **spec}}


def scenarios() -> list[Body]:
    pt, tf = "pytorch", "tensorflow"
    with_init = copy.deepcopy(template(tf))
    with_init["spec"]["initContainers"] = [{"name": "fetch", "image": "fetch:1"}]
    return [
        pytorchjob("pt-retry", master=template(pt), worker=template(pt, "1s", 137),
                   restart="ExitCode", backoffLimit=2),
        pytorchjob("pt-exit1", master=template(pt), worker=template(pt, "1s", 1),
                   restart="ExitCode", backoffLimit=5),
        pytorchjob("pt-deadline", master=template(pt), worker=template(pt),
                   activeDeadlineSeconds=6),
        pytorchjob("pt-clean", master=template(pt, "3s"), worker=template(pt), workers=2,
                   cleanPodPolicy="Running"),
        pytorchjob("pt-ttl", master=template(pt, "2s"), worker=template(pt, "2s"),
                   ttlSecondsAfterFinished=3),
        pytorchjob("pt-suspend", master=template(pt), worker=template(pt)),
        tfjob("tf-chief", {"Chief": (1, "Never", template(tf, "4s")),
                           "PS": (1, "Always", template(tf)),
                           "Worker": (2, "Never", template(tf)),
                           "Evaluator": (1, "Never", template(tf))}),
        tfjob("tf-evaluator", {"Chief": (1, "Never", template(tf)),
                               "Evaluator": (1, "Never", template(tf, "1s", 1))}),
        t9kjob("t9k-ok", {"chief": (1, "ExitCode", template(tf, "4s")),
                          "ps": (1, "Always", template(tf)),
                          "worker": (2, "ExitCode", template(tf)),
                          "evaluator": (1, "Never", template(tf))},
               runPolicy={"cleanUpPolicy": "Unfinished"}),
        t9kjob("t9k-backoff", {"chief": (1, "ExitCode", template(tf, "1s", 137)),
                               "worker": (1, "ExitCode", template(tf))},
               runPolicy={"backoffLimit": 2, "cleanUpPolicy": "None"}),
        t9kjob("t9k-deadline", {"chief": (1, "Never", template(tf)),
                                "evaluator": (1, "Never", template(tf, "1s", 1))},
               runPolicy={"activeDeadlineSeconds": 8, "cleanUpPolicy": "All"}),
        t9kjob("t9k-pause", {"chief": (1, "OnFailure", template(tf)),
                             "worker": (1, "OnFailure", with_init)},
               runMode={"pause": {"enabled": False, "resumeSpecs": [
                   {"type": "worker", "skipInitContainer": True,
                    "command": ["python", "resume.py"]}]}}),
        t9kjob("t9k-debug", {"chief": (1, "Never", template(tf)),
                             "worker": (1, "Never", with_init)},
               runMode={"debug": {"enabled": True, "replicaSpecs": [
                   {"type": "worker", "skipInitContainer": True,
                    "command": ["/usr/bin/sshd", "-D"]}]}},
               scheduler={"t9kScheduler": {"queue": "team-a", "priority": 50}},
               tensorboardSpec={"image": "tensorboard:2.11",
                                "trainingLogFilesets": ["t9k://pvc/tb-logs/run1"]}),
    ]


def log_volumes(fleet: LocalFleet, hub: Kube) -> None:
    """The TensorBoard's log claim on the hub (propagated with the job), and on each member
    a volume reserved for it, so the claim binds wherever the job lands."""
    hub.create(r.PVCS, {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                        "metadata": {"name": "tb-logs", "namespace": NS},
                        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                                 "resources": {"requests": {"storage": "1Gi"}}}})
    for cluster in ("member1", "member2"):
        fleet.client(cluster).create(r.Resource("", "v1", "persistentvolumes", False,
                                               "PersistentVolume"), {
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": "tb-logs"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "storageClassName": "", "hostPath": {"path": "/var/log/tb"},
                     "claimRef": {"namespace": NS, "name": "tb-logs"}}})


@pytest.fixture(scope="module")
def jobs(fleet: LocalFleet, hub: Kube) -> Iterator[dict[str, Body]]:
    gang_namespace(hub, NS, propagate_deps=True, kinds=(
        ("kubeflow.org/v1", "PyTorchJob"), ("kubeflow.org/v1", "TFJob"),
        ("batch.tensorstack.dev/v1beta1", "TensorFlowTrainingJob")))
    log_volumes(fleet, hub)
    created = {}
    for body in scenarios():
        resource = r.for_kind(body["apiVersion"], body["kind"])
        created[body["metadata"]["name"]] = hub.create(resource, body)
    yield created
    delete_jobs(hub, NS)  # some run for an hour


# -- Kubeflow PyTorchJob ------------------------------------------------------------------

def test_exit_code_137_is_retried_until_backoff_limit(fleet: LocalFleet, hub: Kube,
                                                      jobs: dict[str, Body]) -> None:
    job = jobs["pt-retry"]
    kube = member(fleet, hub, job)
    done = hub_state(hub, job, "Failed")
    message = condition(done["status"], "Failed")["message"]
    assert "backoff limit" in message, message
    on_member = member_job(kube, job)
    assert on_member is not None
    assert on_member["status"]["restartCount"] == 2
    eventually(lambda: len(events(kube, job, "Restarting")) == 2,  # events are sent async
               what="two Restarting events")
    # A failed job's survivors are stopped: the master does not run on as a zombie.
    eventually(lambda: not [p for p in pods(kube, job).values()
                            if p["status"].get("phase") == "Running"],
               what="no pod of pt-retry left running")


def test_exit_code_1_fails_at_once(fleet: LocalFleet, hub: Kube,
                                   jobs: dict[str, Body]) -> None:
    job = jobs["pt-exit1"]
    kube = member(fleet, hub, job)
    done = hub_state(hub, job, "Failed")
    assert "1 Worker replica(s) failed" in condition(done["status"], "Failed")["message"]
    assert (member_job(kube, job) or {})["status"]["restartCount"] == 0
    assert done["status"]["replicaStatuses"]["Worker"] == {"failed": 1}


def test_active_deadline(fleet: LocalFleet, hub: Kube, jobs: dict[str, Body]) -> None:
    job = jobs["pt-deadline"]
    kube = member(fleet, hub, job)
    done = hub_state(hub, job, "Failed")
    assert "activeDeadlineSeconds (6 s)" in condition(done["status"], "Failed")["message"]
    eventually(lambda: not pods(kube, job), what="pt-deadline pods deleted")


def test_clean_pod_policy_running(fleet: LocalFleet, hub: Kube,
                                  jobs: dict[str, Body]) -> None:
    job = jobs["pt-clean"]
    kube = member(fleet, hub, job)
    done = hub_state(hub, job, "Succeeded")
    assert done["status"]["replicaStatuses"]["Worker"] == {"succeeded": 2}
    assert done["status"]["completionTime"]
    left = pods_named(kube, job, {"pt-clean-master-0"})
    assert left["pt-clean-master-0"]["status"]["phase"] == "Succeeded"


def test_ttl_deletes_the_job_on_the_hub_and_the_member(fleet: LocalFleet, hub: Kube,
                                                       jobs: dict[str, Body]) -> None:
    job = jobs["pt-ttl"]
    eventually(lambda: hub.get_or_none(r.PYTORCHJOBS, "pt-ttl", NS) is None, timeout=90,
               what="pt-ttl deleted from the hub")
    def gone() -> bool:
        return all(member_job(k, job) is None and not pods(k, job)
                   for k in (fleet.client("member1"), fleet.client("member2")))

    eventually(gone, what="pt-ttl and its pods gone from the members")


def test_suspend_and_resume_from_the_hub(fleet: LocalFleet, hub: Kube,
                                         jobs: dict[str, Body]) -> None:
    job = jobs["pt-suspend"]
    kube = member(fleet, hub, job)
    hub_state(hub, job, "Running")
    started = (member_job(kube, job) or {})["status"]["startTime"]
    hub.patch(r.PYTORCHJOBS, "pt-suspend", {"spec": {"runPolicy": {"suspend": True}}}, NS)
    hub_state(hub, job, "Suspended")
    eventually(lambda: not pods(kube, job), what="suspended job's pods deleted")
    hub.patch(r.PYTORCHJOBS, "pt-suspend", {"spec": {"runPolicy": {"suspend": False}}}, NS)
    resumed = hub_state(hub, job, "Running")
    assert condition(resumed["status"], "Suspended")["reason"] == "PyTorchJobResumed"
    assert len(pods(kube, job)) == 2
    assert (member_job(kube, job) or {})["status"]["startTime"] >= started


# -- Kubeflow TFJob -----------------------------------------------------------------------

def test_tfjob_chief_decides_and_every_type_is_in_tf_config(fleet: LocalFleet, hub: Kube,
                                                            jobs: dict[str, Body]) -> None:
    job = jobs["tf-chief"]
    kube = member(fleet, hub, job)
    running = pods_named(kube, job, 5)
    worker = running["tf-chief-worker-1"]["spec"]["containers"][0]
    config = json.loads(next(e["value"] for e in worker["env"] if e["name"] == "TF_CONFIG"))
    assert config["task"] == {"type": "worker", "index": 1}
    assert config["cluster"]["evaluator"] == [f"tf-chief-evaluator-0.{NS}.svc:2222"]
    assert config["cluster"]["ps"] == [f"tf-chief-ps-0.{NS}.svc:2222"]
    services, _ = kube.list(r.SERVICES, NS, label_selector=f"{KUBEFLOW_JOB}=tf-chief")
    assert len(services) == 5
    assert all(s["spec"]["clusterIP"] == "None" for s in services)
    done = hub_state(hub, job, "Succeeded")  # the evaluator still runs: it does not decide
    assert done["status"]["replicaStatuses"]["Chief"] == {"succeeded": 1}


def test_tfjob_evaluator_failure_fails_the_job(fleet: LocalFleet, hub: Kube,
                                               jobs: dict[str, Body]) -> None:
    job = jobs["tf-evaluator"]
    done = hub_state(hub, job, "Failed")
    assert "1 Evaluator replica(s) failed" in condition(done["status"], "Failed")["message"]


# -- T9k TensorFlowTrainingJob -------------------------------------------------------------

def test_t9k_success_status_reads_like_the_seed(fleet: LocalFleet, hub: Kube,
                                                jobs: dict[str, Body]) -> None:
    job = jobs["t9k-ok"]
    kube = member(fleet, hub, job)
    done = hub_state(hub, job, "Succeeded")
    status = done["status"]
    assert [c["type"] for c in status["conditions"]] == [
        "Initialized", "Running", "ReplicaFailure", "Completed", "Failed"]
    assert {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]} == {
        "Initialized": ("True", "-"), "Running": ("False", "Succeeded"),
        "ReplicaFailure": ("False", "-"), "Completed": ("True", "Succeeded"),
        "Failed": ("False", "Succeeded")}
    assert condition(status, "Completed")["message"] == "The job has finished successfully."
    chief = next(t for t in status["tasks"] if t["type"] == "chief")
    replica = chief["replicas"][0]
    assert replica["name"] == "t9k-ok-chief-0"
    assert replica["phase"] == "Succeeded"
    assert replica["uid"]
    assert replica["containers"] == [{"name": "tensorflow", "state": "Terminated",
                                      "exitCode": 0}]
    assert set(status["aggregate"]) == {"creating", "pending", "running", "succeeded",
                                        "failed", "unknown", "deleted"}
    # cleanUpPolicy Unfinished: the chief stays, the PS, workers and evaluator go.
    pods_named(kube, job, {"t9k-ok-chief-0"})


def test_t9k_backoff_limit_is_shared_then_the_chief_fails(fleet: LocalFleet, hub: Kube,
                                                          jobs: dict[str, Body]) -> None:
    job = jobs["t9k-backoff"]
    kube = member(fleet, hub, job)
    done = hub_state(hub, job, "Failed")
    failed = condition(done["status"], "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert failed["message"].startswith("The job exited with an error code")
    assert done["status"]["backoffCount"] == 2
    chief = next(t for t in done["status"]["tasks"] if t["type"] == "chief")
    assert chief["restartCount"] == 2
    # cleanUpPolicy None: the failed chief and the running worker are both kept.
    assert set(pods(kube, job)) == {"t9k-backoff-chief-0", "t9k-backoff-worker-0"}


def test_t9k_replica_failure_then_deadline(fleet: LocalFleet, hub: Kube,
                                           jobs: dict[str, Body]) -> None:
    job = jobs["t9k-deadline"]
    kube = member(fleet, hub, job)
    done = hub_state(hub, job, "Failed")
    # The evaluator failed at once; the job went on (ReplicaFailure) until its deadline.
    status = done["status"]
    assert condition(status, "Failed")["reason"] == "DeadlineExceeded"
    failure = condition(status, "ReplicaFailure")
    assert failure["status"] == "True"
    assert "evaluator 0 failed with exit code 1" in failure["message"]
    started = datetime.fromisoformat(status["startTime"].replace("Z", "+00:00"))
    ended = datetime.fromisoformat(status["completionTime"].replace("Z", "+00:00"))
    assert (ended - started).total_seconds() >= 8
    eventually(lambda: not pods(kube, job), what="cleanUpPolicy All removes every pod")


def test_t9k_pause_and_resume(fleet: LocalFleet, hub: Kube, jobs: dict[str, Body]) -> None:
    job = jobs["t9k-pause"]
    kube = member(fleet, hub, job)
    hub_state(hub, job, "Running")
    first = pods(kube, job)["t9k-pause-worker-0"]["spec"]
    assert first["initContainers"][0]["name"] == "fetch"
    hub.patch(r.TENSORFLOWTRAININGJOBS, "t9k-pause",
              {"spec": {"runMode": {"pause": {"enabled": True}}}}, NS)
    paused = hub_state(hub, job, "Paused")
    assert condition(paused["status"], "Paused")["status"] == "True"
    eventually(lambda: not pods(kube, job), what="paused job's pods deleted")
    hub.patch(r.TENSORFLOWTRAININGJOBS, "t9k-pause",
              {"spec": {"runMode": {"pause": {"enabled": False}}}}, NS)
    resumed = hub_state(hub, job, "Running")
    assert condition(resumed["status"], "Paused")["status"] == "False"
    assert condition(resumed["status"], "Paused")["reason"] == "Resumed"
    worker = pods(kube, job)["t9k-pause-worker-0"]["spec"]
    assert worker["containers"][0]["command"] == ["python", "resume.py"]
    assert "initContainers" not in worker
    chief = pods(kube, job)["t9k-pause-chief-0"]["spec"]
    assert chief["containers"][0]["command"] == ["python", "train.py"]


def test_t9k_debug_mode_scheduler_and_tensorboard(fleet: LocalFleet, hub: Kube,
                                                  jobs: dict[str, Body]) -> None:
    job = jobs["t9k-debug"]
    kube = member(fleet, hub, job)
    found = pods_named(kube, job, 2)
    chief, worker = found["t9k-debug-chief-0"], found["t9k-debug-worker-0"]
    assert chief["spec"]["containers"][0]["command"] == ["sleep", "inf"]
    assert worker["spec"]["containers"][0]["command"] == ["/usr/bin/sshd", "-D"]
    assert "initContainers" not in worker["spec"]
    assert worker["metadata"]["labels"]["scheduler.tensorstack.dev/queue"] == "team-a"
    assert worker["metadata"]["labels"]["scheduler.tensorstack.dev/role"] == "worker"
    assert worker["metadata"]["annotations"]["scheduler.tensorstack.dev/priority"] == "50"

    def board_ready() -> Body | None:
        status = hub_job(hub, job).get("status") or {}
        board = status.get("tensorboard") or {}
        return board if board.get("ready") else None

    board = eventually(board_ready, timeout=90, what="TensorBoard ready")
    assert board["reason"] == "DependentReady"
    assert board["dependent"]["kind"] == "Deployment"
    assert board["note"] == "TensorBoard [t9k-debug-tensorboard] is ready"
    deployment = kube.get(r.DEPLOYMENTS, "t9k-debug-tensorboard", NS)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:2] == ["--logdir", "/t9k/pvc/tb-logs/run1"]
    assert kube.get(r.SERVICES, "t9k-debug-tensorboard", NS)["spec"]["ports"][0]["port"] == 6006
