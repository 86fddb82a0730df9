"""JAXJob, PaddleJob and XGBoostJob on the member: each framework's environment as
training-operator v1.9 writes it (``pkg/controller.v1/{jax,paddlepaddle,xgboost}``), and when
the job has succeeded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from member_agent.controllers.gang import Gang, GangRequest, Scheduler
from member_agent.controllers.kind import JobKind
from member_agent.controllers.kubeflow_frameworks import JAX, PADDLE, XGBOOST
from member_agent.controllers.runtime import KINDS
from tests.unit.test_job_status import container, created, pod, run, true

Body = dict[str, Any]


def job(kind: JobKind, types: Mapping[str, int], restart: str = "Never") -> Body:
    field = kind.description.replicas_field.removeprefix("spec.")
    return {"apiVersion": "kubeflow.org/v1", "kind": kind.kind,
            "metadata": {"name": "job", "namespace": "ns", "uid": "u1"},
            "spec": {field: {name: {"replicas": n, "restartPolicy": restart,
                                    "template": {"spec": {"containers": [
                                        container(kind.container)]}}}
                             for name, n in types.items()}}}


def envs(decision: Any) -> dict[str, dict[str, Any]]:
    """Each created pod's training container environment: name -> value (or valueFrom)."""
    return {p["metadata"]["name"]: {e["name"]: e.get("value", e.get("valueFrom"))
                                    for e in p["spec"]["containers"][0]["env"]}
            for p in decision.create}


def test_the_agent_runs_every_kubeflow_kind() -> None:
    assert {"JAXJob.kubeflow.org", "PaddleJob.kubeflow.org", "XGBoostJob.kubeflow.org"} <= set(
        KINDS)


def test_jax_workers_meet_at_worker_zero() -> None:
    decision, after = run(JAX, job(JAX, {"Worker": 3}), [])
    assert created(decision) == ["job-worker-0", "job-worker-1", "job-worker-2"]
    env = envs(decision)["job-worker-2"]
    assert decision.create[0]["metadata"]["labels"]["training.kubeflow.org/job-role"] == "master"
    assert env == {"PYTHONUNBUFFERED": "1", "COORDINATOR_PORT": "6666",
                   "COORDINATOR_ADDRESS": "job-worker-0", "NUM_PROCESSES": "3",
                   "PROCESS_ID": "2"}
    ports = decision.create[0]["spec"]["containers"][0]["ports"]
    assert {"name": "jaxjob-port", "containerPort": 6666, "protocol": "TCP"} in ports
    assert true(after["status"]) == ["Created"]


def test_a_jaxjob_succeeds_when_every_worker_has() -> None:
    spec = job(JAX, {"Worker": 2})
    _, running = run(JAX, spec, [pod("Worker", 0, "Succeeded"), pod("Worker", 1)])
    assert "Succeeded" not in true(running["status"])
    _, done = run(JAX, spec, [pod("Worker", 0, "Succeeded"), pod("Worker", 1, "Succeeded")])
    assert "Succeeded" in true(done["status"])


def test_paddle_collective_meets_at_worker_zero_by_its_pod_ip() -> None:
    decision, _ = run(PADDLE, job(PADDLE, {"Worker": 2}), [])
    first, second = envs(decision)["job-worker-0"], envs(decision)["job-worker-1"]
    assert first["POD_IP_DUMMY"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert first["PADDLE_MASTER"] == "$(POD_IP_DUMMY):36543"
    assert second["PADDLE_MASTER"] == "job-worker-0:36543"
    assert second["PADDLE_NNODES"] == "2"
    assert second["PADDLE_JOB_ID"] == "job"
    assert "PADDLE_TRAINER_NUM" not in second  # only in parameter-server mode
    assert not [p for p in decision.create  # no master pod in collective mode
                if "training.kubeflow.org/job-role" in p["metadata"]["labels"]]


def test_paddle_parameter_servers_meet_at_master_zero() -> None:
    decision, _ = run(PADDLE, job(PADDLE, {"Master": 2, "Worker": 2}), [])
    env = envs(decision)
    assert env["job-master-0"]["PADDLE_MASTER"] == "$(POD_IP_DUMMY):36543"
    assert env["job-master-1"]["PADDLE_MASTER"] == "job-master-0:36543"
    assert env["job-worker-0"]["PADDLE_MASTER"] == "job-master-0:36543"
    assert env["job-master-1"]["PADDLE_SERVER_NUM"] == "1"
    assert env["job-worker-0"]["PADDLE_TRAINER_NUM"] == "1"
    assert env["job-worker-1"]["PADDLE_NNODES"] == "4"
    assert sorted(p["metadata"]["name"] for p in decision.create
                  if p["metadata"]["labels"].get("training.kubeflow.org/job-role") == "master"
                  ) == ["job-master-0", "job-master-1"]


def test_a_paddlejob_succeeds_with_its_masters_else_its_workers() -> None:
    servers = job(PADDLE, {"Master": 1, "Worker": 2})
    _, done = run(PADDLE, servers, [pod("Master", 0, "Succeeded"), pod("Worker", 0),
                                    pod("Worker", 1)])
    assert "Succeeded" in true(done["status"])
    collective = job(PADDLE, {"Worker": 2})
    _, running = run(PADDLE, collective, [pod("Worker", 0, "Succeeded"), pod("Worker", 1)])
    assert "Succeeded" not in true(running["status"])


def test_xgboost_workers_rank_after_the_master() -> None:
    decision, _ = run(XGBOOST, job(XGBOOST, {"Master": 1, "Worker": 2}), [])
    env = envs(decision)
    assert env["job-master-0"]["RANK"] == "0"
    assert env["job-worker-1"]["RANK"] == "2"
    for pod_env in env.values():
        assert pod_env["MASTER_ADDR"] == "job-master-0"
        assert pod_env["MASTER_PORT"] == "9999"
        assert pod_env["WORLD_SIZE"] == "3"
        assert pod_env["WORKER_PORT"] == "9999"
        assert pod_env["WORKER_ADDRS"] == "job-worker-0,job-worker-1"
    alone, _ = run(XGBOOST, job(XGBOOST, {"Master": 1}), [])
    assert "WORKER_ADDRS" not in envs(alone)["job-master-0"]


def test_an_xgboostjob_succeeds_with_its_master() -> None:
    _, done = run(XGBOOST, job(XGBOOST, {"Master": 1, "Worker": 2}),
                  [pod("Master", 0, "Succeeded"), pod("Worker", 0), pod("Worker", 1)])
    assert "Succeeded" in true(done["status"])


def test_the_scheduling_policy_reaches_the_members_gang_scheduler() -> None:
    """queue, priorityClass and scheduleTimeoutSeconds as the operator passes them to a
    PodGroup (Volcano takes the first two, scheduler-plugins the timeout)."""
    spec = job(JAX, {"Worker": 2})
    spec["spec"]["runPolicy"] = {"schedulingPolicy": {
        "queue": "team-a", "priorityClass": "high", "scheduleTimeoutSeconds": 120}}
    request = JAX.gang_request(spec)
    assert request == GangRequest("team-a", None, "high", 120)
    volcano = Gang(Scheduler.VOLCANO, "job", "ns", 2, queue=request.queue,
                   priority_class=request.priority_class)
    assert volcano.podgroup({"name": "job"})["spec"] == {
        "minMember": 2, "queue": "team-a", "priorityClassName": "high"}
    plugins = Gang(Scheduler.PLUGINS, "job", "ns", 2, timeout_seconds=request.timeout_seconds)
    assert plugins.podgroup({"name": "job"})["spec"] == {"minMember": 2,
                                                         "scheduleTimeoutSeconds": 120}
