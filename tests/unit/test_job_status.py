"""The pure reconcile of every kind: tables of pod states in, pods to create or delete and the
job's status out (Kubeflow PyTorchJob and TFJob, T9k TensorFlowTrainingJob)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fleet.api.protocol import RUN_VARIANT
from fleet.kinds.naming import replica_name
from member_agent.controllers.core import ContainerState, ObservedPod
from member_agent.controllers.gang import Gang, Scheduler, choose
from member_agent.controllers.kind import JobKind, Observed
from member_agent.controllers.kubeflow import PYTORCH, TF
from member_agent.controllers.reconcile import Decision, decide
from member_agent.controllers.t9k import CONDITION_ORDER, TENSORFLOW

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
Body = dict[str, Any]


def container(name: str = "pytorch") -> Body:
    return {"name": name, "image": "img", "command": ["python", "train.py"]}


def pytorchjob(workers: int = 2, restart: str = "OnFailure", **run_policy: Any) -> Body:
    def spec(replicas: int) -> Body:
        return {"replicas": replicas, "restartPolicy": restart,
                "template": {"spec": {"containers": [container()]}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "job", "namespace": "ns", "uid": "u1"},
            "spec": {"pytorchReplicaSpecs": {"Master": spec(1), "Worker": spec(workers)},
                     "runPolicy": run_policy}}


def tfjob(types: Mapping[str, int], restart: str = "Never", **spec: Any) -> Body:
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": "job", "namespace": "ns", "uid": "u1"},
            "spec": {"tfReplicaSpecs": {
                name: {"replicas": n, "restartPolicy": restart,
                       "template": {"spec": {"containers": [container("tensorflow")]}}}
                for name, n in types.items()}, **spec}}


def t9kjob(types: Mapping[str, tuple[int, str]], **spec: Any) -> Body:
    return {"apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
            "metadata": {"name": "job", "namespace": "ns", "uid": "u1"},
            "spec": {"replicaSpecs": [
                {"type": name, "replicas": n, "restartPolicy": restart,
                 "template": {"spec": {"initContainers": [container("init")],
                                       "containers": [container("tensorflow")]}}}
                for name, (n, restart) in types.items()], **spec}}


def pod(role: str, index: int, phase: str = "Running", code: int | None = None, *,
        variant: str = "", deleting: bool = False) -> ObservedPod:
    state = "Terminated" if phase in ("Succeeded", "Failed") else "Running"
    exit_code = code if code is not None else (0 if phase == "Succeeded" else None)
    return ObservedPod(replica_name("job", role, index), role.lower(), index, phase,
                       exit_code, deleting, phase == "Running", uid=f"uid-{role}-{index}",
                       containers=(ContainerState("main", state, exit_code),),
                       variant=variant)


def run(kind: JobKind, job: Body, pods: Sequence[ObservedPod], *, now: datetime = NOW,
        admitted: bool = True, gang: Gang | None = None,
        extras: Mapping[str, Any] | None = None) -> tuple[Decision, Body]:
    """One reconcile; returns the decision and the job as it would be after it."""
    decision = decide(kind, job, pods, Observed(now=now, gang=gang, gang_admitted=admitted,
                                                extras=extras or {}))
    after = copy.deepcopy(job)
    if decision.status is not None:
        after["status"] = decision.status
    return decision, after


def true(status: Mapping[str, Any]) -> list[str]:
    return [c["type"] for c in status.get("conditions") or [] if c["status"] == "True"]


def created(decision: Decision) -> list[str]:
    return [p["metadata"]["name"] for p in decision.create]


# -- Kubeflow PyTorchJob -------------------------------------------------------------------

def test_a_new_pytorchjob_creates_every_replica_and_its_service() -> None:
    decision, job = run(PYTORCH, pytorchjob(), [])
    assert created(decision) == ["job-master-0", "job-worker-0", "job-worker-1"]
    assert [s["metadata"]["name"] for s in decision.services] == created(decision)
    assert true(job["status"]) == ["Created"]
    master = decision.create[0]
    env = {e["name"]: e["value"] for e in master["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == "job-master-0"
    assert env["MASTER_PORT"] == "23456"
    assert env["WORLD_SIZE"] == "3"
    assert env["RANK"] == "0"
    assert master["spec"]["restartPolicy"] == "Never"
    labels = master["metadata"]["labels"]
    assert labels["training.kubeflow.org/job-role"] == "master"
    assert master["metadata"]["ownerReferences"][0]["controller"] is True


def test_running_then_master_success_completes_the_job() -> None:
    _, job = run(PYTORCH, pytorchjob(), [pod("Master", 0), pod("Worker", 0), pod("Worker", 1)])
    assert job["status"]["conditions"][-1]["type"] == "Running"
    assert job["status"]["conditions"][-1]["reason"] == "PyTorchJobRunning"
    decision, done = run(PYTORCH, job, [pod("Master", 0, "Succeeded"), pod("Worker", 0),
                                        pod("Worker", 1)])
    assert "Succeeded" in true(done["status"])
    assert done["status"]["replicaStatuses"]["Worker"] == {"succeeded": 2}
    assert done["status"]["completionTime"]
    assert decision.delete == ()  # cleanPodPolicy None keeps pods for their logs
    assert ("Normal", "Succeeded") in [(t, r) for t, r, _ in decision.events]


@pytest.mark.parametrize(("policy", "deleted"), [
    ("None", ()), ("Running", ("job-worker-0",)),
    ("All", ("job-master-0", "job-worker-0", "job-worker-1")),
])
def test_clean_pod_policy(policy: str, deleted: tuple[str, ...]) -> None:
    job = pytorchjob(cleanPodPolicy=policy)
    decision, _ = run(PYTORCH, job, [pod("Master", 0, "Succeeded"), pod("Worker", 0),
                                     pod("Worker", 1, "Succeeded")])
    assert sorted(decision.delete) == sorted(deleted)


def test_a_retryable_failure_restarts_the_replica_and_is_counted() -> None:
    decision, job = run(PYTORCH, pytorchjob(restart="OnFailure"),
                        [pod("Master", 0), pod("Worker", 0, "Failed", 1), pod("Worker", 1)])
    assert decision.delete == ("job-worker-0",)
    assert job["status"]["restartCount"] == 1
    assert job["status"]["conditions"][-1]["type"] == "Restarting"
    assert any(reason == "Restarting" for _, reason, _ in decision.events)


@pytest.mark.parametrize(("code", "state"), [(1, "Failed"), (127, "Failed"), (137, "Restarting"),
                                             (255, "Restarting")])
def test_kubeflow_exit_code_policy(code: int, state: str) -> None:
    _, job = run(PYTORCH, pytorchjob(restart="ExitCode"),
                 [pod("Master", 0), pod("Worker", 0, "Failed", code), pod("Worker", 1)])
    assert state in true(job["status"])


def test_a_failed_job_stops_its_survivors_whatever_the_clean_pod_policy() -> None:
    decision, job = run(PYTORCH, pytorchjob(restart="Never"),
                        [pod("Master", 0), pod("Worker", 0, "Failed", 1), pod("Worker", 1)])
    assert "Failed" in true(job["status"])
    assert "1 Worker replica(s) failed" in job["status"]["conditions"][-1]["message"]
    assert sorted(decision.delete) == ["job-master-0", "job-worker-1"]


def test_backoff_limit_is_shared_and_then_fails_the_job() -> None:
    job = pytorchjob(backoffLimit=2)
    job["status"] = {"restartCount": 2, "conditions": [], "startTime": "2026-11-21T11:00:00Z"}
    decision, after = run(PYTORCH, job, [pod("Master", 0), pod("Worker", 0, "Failed", 1),
                                         pod("Worker", 1)])
    assert "Failed" in true(after["status"])
    assert "backoff limit" in after["status"]["conditions"][-1]["message"]
    assert not decision.create


def test_active_deadline_fails_the_job_and_stops_pods() -> None:
    job = pytorchjob(activeDeadlineSeconds=60)
    job["status"] = {"startTime": "2026-11-21T11:58:00Z", "conditions": []}
    decision, after = run(PYTORCH, job, [pod("Master", 0), pod("Worker", 0), pod("Worker", 1)])
    assert "Failed" in true(after["status"])
    assert "activeDeadlineSeconds (60 s)" in after["status"]["conditions"][-1]["message"]
    assert len(decision.delete) == 3
    early = copy.deepcopy(job)
    early["status"]["startTime"] = "2026-11-21T11:59:30Z"
    decision, _ = run(PYTORCH, early, [pod("Master", 0), pod("Worker", 0), pod("Worker", 1)])
    assert decision.requeue_after == pytest.approx(30.1)


def test_suspend_deletes_pods_and_resume_restarts_the_clock() -> None:
    job = pytorchjob(suspend=True)
    job["status"] = {"startTime": "2026-11-21T10:00:00Z", "conditions": []}
    decision, suspended = run(PYTORCH, job, [pod("Master", 0), pod("Worker", 0)])
    assert sorted(decision.delete) == ["job-master-0", "job-worker-0"]
    assert not decision.create
    assert "Suspended" in true(suspended["status"])
    suspended["spec"]["runPolicy"]["suspend"] = False
    decision, resumed = run(PYTORCH, suspended, [])
    assert len(decision.create) == 3
    assert "Suspended" not in true(resumed["status"])
    assert resumed["status"]["startTime"] == "2026-11-21T12:00:00Z"


def test_ttl_deletes_the_finished_job() -> None:
    job = pytorchjob(ttlSecondsAfterFinished=10)
    _, done = run(PYTORCH, job, [pod("Master", 0, "Succeeded")])
    later = run(PYTORCH, done, [], now=NOW + timedelta(seconds=11))[0]
    assert later.delete_job
    soon = run(PYTORCH, done, [], now=NOW + timedelta(seconds=4))[0]
    assert not soon.delete_job
    assert soon.requeue_after == pytest.approx(6.1)


# -- Kubeflow TFJob --------------------------------------------------------------------------

def test_tf_config_lists_every_type_including_the_evaluator() -> None:
    decision, _ = run(TF, tfjob({"Chief": 1, "PS": 1, "Worker": 2, "Evaluator": 1}), [])
    config = json.loads(next(e["value"] for e in decision.create[2]["spec"]["containers"][0]["env"]
                             if e["name"] == "TF_CONFIG"))
    assert config == {"cluster": {"chief": ["job-chief-0.ns.svc:2222"],
                                  "ps": ["job-ps-0.ns.svc:2222"],
                                  "worker": ["job-worker-0.ns.svc:2222",
                                             "job-worker-1.ns.svc:2222"],
                                  "evaluator": ["job-evaluator-0.ns.svc:2222"]},
                      "task": {"type": "worker", "index": 0}, "environment": "cloud"}


def test_no_tf_config_for_a_single_replica() -> None:
    decision, _ = run(TF, tfjob({"Worker": 1}), [])
    assert not [e for e in decision.create[0]["spec"]["containers"][0].get("env", [])
                if e["name"] == "TF_CONFIG"]


def test_tf_success_on_the_chief_ignores_a_running_evaluator() -> None:
    _, job = run(TF, tfjob({"Chief": 1, "Worker": 1, "Evaluator": 1}),
                 [pod("Chief", 0, "Succeeded"), pod("Worker", 0), pod("Evaluator", 0)])
    assert "Succeeded" in true(job["status"])


@pytest.mark.parametrize("failing", ["Evaluator", "PS"])
def test_tf_evaluator_or_ps_failure_fails_the_job(failing: str) -> None:
    _, job = run(TF, tfjob({"Chief": 1, failing: 1}),
                 [pod("Chief", 0), pod(failing, 0, "Failed", 1)])
    assert "Failed" in true(job["status"])
    assert f"1 {failing} replica(s) failed" in job["status"]["conditions"][-1]["message"]


@pytest.mark.parametrize(("policy", "done"), [(None, True), ("AllWorkers", False)])
def test_tf_worker_zero_decides_unless_all_workers(policy: str | None, done: bool) -> None:
    spec = {"successPolicy": policy} if policy else {}
    _, job = run(TF, tfjob({"Worker": 2}, **spec),
                 [pod("Worker", 0, "Succeeded"), pod("Worker", 1)])
    assert ("Succeeded" in true(job["status"])) is done


def test_always_restarts_a_ps_that_exits_but_not_the_chief() -> None:
    decision, job = run(TF, tfjob({"Chief": 1, "PS": 1}, restart="Always"),
                        [pod("Chief", 0), pod("PS", 0, "Succeeded")])
    assert decision.delete == ("job-ps-0",)
    decision, job = run(TF, tfjob({"Chief": 1, "PS": 1}, restart="Always"),
                        [pod("Chief", 0, "Succeeded"), pod("PS", 0)])
    assert "Succeeded" in true(job["status"])
    assert not decision.delete


# -- T9k TensorFlowTrainingJob ---------------------------------------------------------------

FULL = {"chief": (1, "ExitCode"), "ps": (1, "Always"), "worker": (2, "ExitCode"),
        "evaluator": (1, "Never")}


def every(phase: str = "Running") -> list[ObservedPod]:
    return [pod("chief", 0, phase), pod("ps", 0, phase), pod("worker", 0, phase),
            pod("worker", 1, phase), pod("evaluator", 0, phase)]


def test_t9k_pending_then_running_with_conditions_in_seed_order() -> None:
    decision, job = run(TENSORFLOW, t9kjob(FULL), [])
    assert created(decision) == ["job-chief-0", "job-ps-0", "job-worker-0", "job-worker-1",
                                 "job-evaluator-0"]
    assert job["status"]["phase"] == "Pending"
    assert job["status"]["aggregate"]["creating"] == 5
    _, job = run(TENSORFLOW, job, every())
    status = job["status"]
    assert status["phase"] == "Running"
    assert [c["type"] for c in status["conditions"]] == list(CONDITION_ORDER[:5])
    assert true(status) == ["Initialized", "Running"]
    assert status["aggregate"] == {"creating": 0, "pending": 0, "running": 5, "succeeded": 0,
                                   "failed": 0, "unknown": 0, "deleted": 0}
    chief = status["tasks"][0]
    assert chief["type"] == "chief"
    assert chief["restartCount"] == 0
    assert chief["replicas"][0] == {"name": "job-chief-0", "uid": "uid-chief-0",
                                    "phase": "Running",
                                    "containers": [{"name": "main", "state": "Running"}]}


def test_t9k_chief_success_reads_like_the_seed() -> None:
    job = t9kjob(FULL)
    _, job = run(TENSORFLOW, job, every())
    pods = [pod("chief", 0, "Succeeded"), *every()[1:]]
    decision, job = run(TENSORFLOW, job, pods)
    status = job["status"]
    assert status["phase"] == "Succeeded"
    by_type = {c["type"]: c for c in status["conditions"]}
    assert by_type["Completed"] | {"lastTransitionTime": ""} == {
        "type": "Completed", "status": "True", "reason": "Succeeded",
        "message": "The job has finished successfully.", "lastTransitionTime": ""}
    assert by_type["Running"]["status"] == "False"
    assert by_type["Running"]["reason"] == "Succeeded"
    assert by_type["Failed"]["status"] == "False"
    assert by_type["ReplicaFailure"]["message"] == "All pods are running normally."
    assert status["tasks"][0]["replicas"][0]["containers"] == [
        {"name": "main", "state": "Terminated", "exitCode": 0}]
    assert decision.delete == ()  # cleanUpPolicy defaults to None


@pytest.mark.parametrize(("policy", "deleted"), [
    ("None", set()), ("Unfinished", {"job-ps-0", "job-worker-1", "job-evaluator-0"}),
    ("All", {"job-chief-0", "job-ps-0", "job-worker-0", "job-worker-1", "job-evaluator-0"}),
])
def test_t9k_clean_up_policy(policy: str, deleted: set[str]) -> None:
    job = t9kjob(FULL, runPolicy={"cleanUpPolicy": policy})
    pods = [pod("chief", 0, "Succeeded"), pod("ps", 0), pod("worker", 0, "Succeeded"),
            pod("worker", 1), pod("evaluator", 0)]
    decision, _ = run(TENSORFLOW, job, pods)
    assert set(decision.delete) == deleted


@pytest.mark.parametrize(("code", "restarted"), [(130, True), (137, True), (143, True),
                                                 (138, True), (139, False), (1, False)])
def test_t9k_exit_code_restarts_only_its_four_codes(code: int, restarted: bool) -> None:
    pods = [pod("chief", 0), pod("ps", 0), pod("worker", 0), pod("worker", 1, "Failed", code),
            pod("evaluator", 0)]
    decision, job = run(TENSORFLOW, t9kjob(FULL), pods)
    status = job["status"]
    assert ("job-worker-1" in decision.delete) is restarted
    assert status["backoffCount"] == int(restarted)
    assert status["tasks"][2]["restartCount"] == int(restarted)
    assert status["phase"] == "Running" or status["phase"] == "Pending"
    assert "ReplicaFailure" in true(status)  # a worker failing for good does not end the job


def test_t9k_backoff_is_shared_then_a_chief_failure_fails_the_job() -> None:
    job = t9kjob(FULL, runPolicy={"backoffLimit": 1})
    job["status"] = {"backoffCount": 1, "phase": "Running", "conditions": []}
    pods = [pod("chief", 0, "Failed", 137), *every()[1:]]
    decision, after = run(TENSORFLOW, job, pods)
    status = after["status"]
    assert status["phase"] == "Failed"
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["status"] == "True"
    assert failed["reason"] == "BackoffLimitExceeded"
    assert failed["message"].startswith("The job exited with an error code")
    assert not decision.create
    assert "job-chief-0" not in decision.delete


def test_t9k_evaluator_failure_is_only_a_replica_failure() -> None:
    pods = [*every()[:4], pod("evaluator", 0, "Failed", 1)]
    decision, job = run(TENSORFLOW, t9kjob(FULL), pods)
    assert job["status"]["phase"] in ("Running", "Pending")
    failure = next(c for c in job["status"]["conditions"] if c["type"] == "ReplicaFailure")
    assert failure["status"] == "True"
    assert "evaluator 0" in failure["message"]
    assert not decision.create


def test_t9k_deadline() -> None:
    job = t9kjob(FULL, runPolicy={"activeDeadlineSeconds": 30})
    job["status"] = {"startTime": "2026-11-21T11:59:00Z", "phase": "Running", "conditions": []}
    _, after = run(TENSORFLOW, job, every())
    failed = next(c for c in after["status"]["conditions"] if c["type"] == "Failed")
    assert after["status"]["phase"] == "Failed"
    assert failed["reason"] == "DeadlineExceeded"


def test_t9k_pause_then_resume_with_resume_specs() -> None:
    job = t9kjob(FULL, runMode={"pause": {"enabled": True, "resumeSpecs": [
        {"type": "worker", "skipInitContainer": True, "command": ["/usr/bin/sshd"]}]}})
    _, job = run(TENSORFLOW, job, every())  # running already
    decision, paused = run(TENSORFLOW, job, every())
    assert len(decision.delete) == 5
    assert not decision.create
    assert paused["status"]["phase"] == "Paused"
    assert "Paused" in true(paused["status"])
    paused["spec"]["runMode"]["pause"]["enabled"] = False
    decision, resuming = run(TENSORFLOW, paused, [])
    assert resuming["status"]["phase"] == "Resuming"
    assert "Paused" not in true(resuming["status"])
    workers = [p for p in decision.create if p["metadata"]["name"] == "job-worker-0"]
    assert workers[0]["spec"]["containers"][0]["command"] == ["/usr/bin/sshd"]
    assert "initContainers" not in workers[0]["spec"]
    assert workers[0]["metadata"]["annotations"][RUN_VARIANT] == "resume"
    chief = decision.create[0]
    assert chief["spec"]["containers"][0]["command"] == ["python", "train.py"]
    back = [pod(p.role, p.index, variant="resume") for p in every()]
    _, running = run(TENSORFLOW, resuming, back)
    assert running["status"]["phase"] == "Running"


def test_t9k_debug_mode_runs_the_debug_command() -> None:
    job = t9kjob(FULL, runMode={"debug": {"enabled": True, "replicaSpecs": [
        {"type": "worker", "skipInitContainer": True, "command": ["/usr/bin/sshd", "-D"]}]}})
    decision, _ = run(TENSORFLOW, job, [])
    by_name = {p["metadata"]["name"]: p["spec"] for p in decision.create}
    assert by_name["job-worker-0"]["containers"][0]["command"] == ["/usr/bin/sshd", "-D"]
    assert "initContainers" not in by_name["job-worker-0"]
    assert by_name["job-chief-0"]["containers"][0]["command"] == ["sleep", "inf"]
    assert "initContainers" in by_name["job-chief-0"]
    # Switching debug off replaces the debug pods with training ones (no restart counted).
    job["spec"]["runMode"]["debug"]["enabled"] = False
    decision, after = run(TENSORFLOW, job, [pod(p.role, p.index, variant="debug")
                                            for p in every()])
    assert len(decision.delete) == 5
    assert after["status"]["backoffCount"] == 0


def test_t9k_scheduler_queue_and_priority_reach_the_pods() -> None:
    job = t9kjob({"worker": (2, "Never")},
                 scheduler={"t9kScheduler": {"queue": "team-a", "priority": 50}})
    decision, _ = run(TENSORFLOW, job, [])
    meta = decision.create[0]["metadata"]
    assert meta["labels"]["scheduler.tensorstack.dev/queue"] == "team-a"
    assert meta["labels"]["scheduler.tensorstack.dev/role"] == "worker"
    assert meta["annotations"]["scheduler.tensorstack.dev/priority"] == "50"
    gang = Gang(Scheduler.T9K, "job", "ns", 2, queue="team-a", priority=50,
                roles={"worker": 2})
    decision, _ = run(TENSORFLOW, job, [], gang=gang)
    meta = decision.create[0]["metadata"]
    assert meta["labels"]["scheduler.tensorstack.dev/group-name"] == "job"
    assert "scheduler.tensorstack.dev/queue" not in meta["labels"]
    assert decision.create[0]["spec"]["schedulerName"] == "t9k-scheduler"
    group = gang.podgroup({"name": "job"})
    assert group["spec"] == {"minMember": 2, "queue": "team-a", "priority": 50,
                             "roles": [{"name": "worker", "minMember": 2}]}


def test_volcano_gang_holds_pods_until_the_podgroup_is_inqueue() -> None:
    gang = Gang(Scheduler.VOLCANO, "job", "ns", 3, queue="q")
    decision, job = run(PYTORCH, pytorchjob(), [], gang=gang,
                        admitted=gang.admitted({"status": {"phase": "Pending"}}))
    assert not decision.create
    assert decision.requeue_after == 2.0
    assert gang.admitted({"status": {"phase": "Inqueue"}})
    decision, _ = run(PYTORCH, job, [], gang=gang, admitted=True)
    annotations = decision.create[0]["metadata"]["annotations"]
    assert annotations["scheduling.k8s.io/group-name"] == "job"
    assert annotations["volcano.sh/task-spec"] == "master"
    assert decision.create[0]["spec"]["schedulerName"] == "volcano"


def test_tensorboard_status() -> None:
    job = t9kjob({"worker": (1, "Never")}, tensorboardSpec={
        "image": "tb", "trainingLogFilesets": ["t9k://pvc/logs/run1"]})
    _, creating = run(TENSORFLOW, job, [])
    assert creating["status"]["tensorboard"]["reason"] == "DependentCreating"
    deployment = {"metadata": {"name": "job-tensorboard", "namespace": "ns", "uid": "d1"},
                  "status": {"availableReplicas": 1}}
    _, ready = run(TENSORFLOW, job, [], extras={"tensorboard": deployment})
    assert ready["status"]["tensorboard"] == {
        "action": "NOP", "dependent": {"apiVersion": "apps/v1", "kind": "Deployment",
                                       "name": "job-tensorboard", "namespace": "ns",
                                       "uid": "d1"},
        "note": "TensorBoard [job-tensorboard] is ready", "ready": True,
        "reason": "DependentReady", "type": "Normal"}


def test_long_job_names_give_valid_names_and_labels() -> None:
    job = pytorchjob()
    job["metadata"]["name"] = "a-very-long-training-job-name-" * 5 + "end"
    decision, _ = run(PYTORCH, job, [])
    names = created(decision)
    assert all(len(n) <= 63 for n in names)
    assert len(set(names)) == 3
    assert names[1].endswith("-worker-0")
    assert all(len(v) <= 63 for p in decision.create for v in p["metadata"]["labels"].values())
    assert replica_name(job["metadata"]["name"], "Worker", 0) == names[1]


def test_a_t9k_queue_picks_the_t9k_scheduler_when_the_member_has_it() -> None:
    both = (Scheduler.VOLCANO, Scheduler.T9K)
    assert choose(both, asks_t9k=True) is Scheduler.T9K
    assert choose(both, asks_t9k=False) is Scheduler.VOLCANO
    assert choose((Scheduler.VOLCANO,), asks_t9k=True) is Scheduler.VOLCANO
    assert choose((Scheduler.T9K,), asks_t9k=False) is Scheduler.T9K
