"""JobSet (``jobset.x-k8s.io/v1alpha2``) on the fleet, with no JobSet controller anywhere:
applied to the hub, placed as one gang, run on a member by the agent (pods named, labelled
and served as JobSet's Jobs make them, kwok playing their lives), its status read back on
the hub in JobSet's own terms."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e.conftest import eventually
from e2e.jobs import delete_jobs, gang_namespace, hub_job, member
from e2e.localfleet import LocalFleet
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e
Body = dict[str, Any]
NS = "jobsets"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"


def rjob(name: str, *, replicas: int = 1, parallelism: int = 1, run_for: str = "1h",
         exit_code: int = 0, backoff: int = 0, **extra: Any) -> Body:
    pod = {"metadata": {"annotations": {"fleet.sh/sim-duration": run_for,
                                        "fleet.sh/sim-exit-code": str(exit_code)}},
           "spec": {"containers": [{"name": "main", "image": "train:1",
                                    "resources": {"requests": {"cpu": "100m"}}}]}}
    return {"name": name, "replicas": replicas,
            "template": {"spec": {"parallelism": parallelism, "completions": parallelism,
                                  "backoffLimit": backoff, "template": pod}}, **extra}


def jobset(name: str, *rjobs: Body, **spec: Any) -> Body:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicatedJobs": list(rjobs), **spec}}


def member_pods(kube: Kube, name: str) -> dict[str, Body]:
    items, _ = kube.list(r.PODS, NS, label_selector=f"{JOBSET_NAME}={name}")
    return {p["metadata"]["name"]: p for p in items}


def true_conditions(job: Body) -> set[str]:
    return {c["type"] for c in (job.get("status") or {}).get("conditions") or []
            if c.get("status") == "True"}


def finished(hub: Kube, job: Body, wanted: str) -> Body:
    def check() -> Body | None:
        current = hub_job(hub, job)
        return current if wanted in true_conditions(current) else None
    return eventually(check, timeout=90, what=f"{job['metadata']['name']} {wanted} on the hub")


@pytest.fixture(scope="module")
def jobs(hub: Kube) -> Iterator[dict[str, Body]]:
    gang_namespace(hub, NS, kinds=(("jobset.x-k8s.io/v1alpha2", "JobSet"),))
    bodies = [
        jobset("driven", rjob("driver", run_for="4s"), rjob("workers", replicas=2, parallelism=2),
               successPolicy={"operator": "All", "targetReplicatedJobs": ["driver"]}),
        jobset("ordered", rjob("init", run_for="3s"),
               rjob("node", replicas=2, dependsOn=[{"name": "init", "status": "Complete"}],
                    run_for="2s")),
        jobset("failing", rjob("a", run_for="1s", exit_code=3)),
        jobset("retried", rjob("a", run_for="1s", exit_code=3, backoff=2)),
        jobset("restarted", rjob("a", replicas=2, run_for="1s", exit_code=3),
               failurePolicy={"maxRestarts": 2}),
    ]
    yield {b["metadata"]["name"]: hub.create(r.JOBSETS, b) for b in bodies}
    delete_jobs(hub, NS)


def test_a_jobset_runs_as_jobsets_jobs_would_and_completes_by_its_policy(
        fleet: LocalFleet, hub: Kube, jobs: dict[str, Body]) -> None:
    job = jobs["driven"]
    kube = member(fleet, hub, job)
    def five() -> dict[str, Body] | None:
        found = member_pods(kube, "driven")
        return found if len(found) == 5 else None

    pods = eventually(five, what="the five pods of driven")
    assert set(pods) == {"driven-driver-0-0", "driven-workers-0-0", "driven-workers-0-1",
                         "driven-workers-1-0", "driven-workers-1-1"}
    worker = pods["driven-workers-1-1"]
    assert worker["spec"]["hostname"] == "driven-workers-1-1"
    assert worker["spec"]["subdomain"] == "driven"
    labels = worker["metadata"]["labels"]
    assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "workers"
    assert labels["jobset.sigs.k8s.io/job-index"] == "1"
    assert labels["batch.kubernetes.io/job-completion-index"] == "1"
    service = kube.get(r.SERVICES, "driven", NS)
    assert service["spec"]["clusterIP"] == "None"
    done = finished(hub, job, "Completed")
    assert done["status"]["terminalState"] == "Completed"
    statuses = {s["name"]: s for s in done["status"]["replicatedJobsStatus"]}
    assert statuses["driver"]["succeeded"] == 1
    # JobSet deletes the Jobs still active once it completed: the workers' pods go.
    eventually(lambda: not [p for p in member_pods(kube, "driven").values()
                            if p["status"].get("phase") == "Running"],
               what="driven's workers stopped")


def test_a_replicated_job_starts_after_the_one_it_depends_on_completed(
        fleet: LocalFleet, hub: Kube, jobs: dict[str, Body]) -> None:
    job = jobs["ordered"]
    kube = member(fleet, hub, job)
    done = finished(hub, job, "Completed")
    pods = member_pods(kube, "ordered")
    init_done = pods["ordered-init-0-0"]["status"]["containerStatuses"][0]["state"][
        "terminated"]["finishedAt"]
    for node in ("ordered-node-0-0", "ordered-node-1-0"):
        assert pods[node]["metadata"]["creationTimestamp"] >= init_done
    assert {s["name"]: s["succeeded"] for s in done["status"]["replicatedJobsStatus"]} == {
        "init": 1, "node": 2}


def test_a_failed_job_fails_the_jobset(fleet: LocalFleet, hub: Kube,
                                       jobs: dict[str, Body]) -> None:
    done = finished(hub, jobs["failing"], "Failed")
    assert done["status"]["terminalState"] == "Failed"
    failed = next(c for c in done["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "FailedJobs"
    assert "failing-a-0" in failed["message"]


def test_a_failed_pod_is_retried_until_its_jobs_backoff_limit(
        fleet: LocalFleet, hub: Kube, jobs: dict[str, Body]) -> None:
    job = jobs["retried"]
    kube = member(fleet, hub, job)
    finished(hub, job, "Failed")
    copy = kube.get(r.JOBSETS, "retried", NS)
    assert copy["status"]["podRestarts"] == 2


def test_a_failure_policy_restarts_the_whole_jobset_until_its_max(
        fleet: LocalFleet, hub: Kube, jobs: dict[str, Body]) -> None:
    """As JobSet's controller: each failure restarts every Job (pods made again, labelled
    with the new attempt) until maxRestarts, then the JobSet fails with ReachedMaxRestarts."""
    job = jobs["restarted"]
    kube = member(fleet, hub, job)
    done = finished(hub, job, "Failed")
    assert done["status"]["restarts"] == 2
    reasons = {c["type"]: c["reason"] for c in done["status"]["conditions"]}
    assert reasons["Failed"] == "ReachedMaxRestarts"
    assert reasons["Restarting"] == "JobSetFailed"
    attempts = {p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"]
                for p in member_pods(kube, "restarted").values()}
    assert attempts <= {"2"}  # (its pods of attempts 0 and 1 deleted as each restart began)


@pytest.mark.parametrize(("change", "field"), [
    (lambda spec: spec["replicatedJobs"][0]["template"]["spec"].update(completions=3),
     "completions"),
    (lambda spec: spec.update(successPolicy={"targetReplicatedJobs": ["nope"]}),
     "spec.successPolicy.targetReplicatedJobs"),
    (lambda spec: spec["replicatedJobs"][0].update(
        dependsOn=[{"name": "b", "status": "Ready"}]), "spec.replicatedJobs[0].dependsOn"),
])
def test_an_invalid_jobset_is_refused_naming_the_field(hub: Kube, jobs: dict[str, Body],
                                                       change: Any, field: str) -> None:
    body = jobset("bad", rjob("a"), rjob("b"))
    change(body["spec"])
    with pytest.raises(errors.ApiError) as refused:
        hub.create(r.JOBSETS, body)
    assert field in str(refused.value)
