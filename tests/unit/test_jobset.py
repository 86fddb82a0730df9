"""JobSet (``jobset.x-k8s.io/v1alpha2``): the hub's view of its gang and status, and the agent
running it without the JobSet controller, its pods named and labelled as JobSet v0.12 and the
Job controller name them (kubernetes-sigs/jobset ``pkg/controllers``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from fleet.api import protocol
from fleet.api.jobset import JobSet
from fleet.hub.hub_writes import RewriteWork
from fleet.hub.status_mirror import peer_progress
from fleet.kinds import adapter_for, managed_elsewhere
from fleet.kinds.jobset import JOBSET, completed_across, pods_per_role, reached_across
from member_agent.controllers.core import ContainerState, ObservedPod
from member_agent.controllers.jobset import JOBSET as KIND
from member_agent.controllers.jobset import judge_failure
from member_agent.controllers.runtime import KINDS
from tests.unit.test_job_status import created, run, true

Body = dict[str, Any]


def rjob(name: str, replicas: int = 1, parallelism: int = 1, **extra: Any) -> Body:
    spec: Body = {"parallelism": parallelism, "completions": parallelism,
                  "template": {"spec": {"containers": [
                      {"name": "main", "image": "img",
                       "resources": {"requests": {"cpu": "1"}}}]}}}
    return {"name": name, "replicas": replicas, "template": {"spec": spec}, **extra}


def jobset(*rjobs: Body, **spec: Any) -> Body:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js", "namespace": "ns", "uid": "u1"},
            "spec": {"replicatedJobs": list(rjobs), **spec}}


def pod(body: Body, role: str, index: int, phase: str = "Running",
        ready: bool | None = None) -> ObservedPod:
    code = 0 if phase == "Succeeded" else 1 if phase == "Failed" else None
    return ObservedPod(KIND.pod_of(body, role, index), role, index, phase, code,
                       ready=phase == "Running" if ready is None else ready,
                       containers=(ContainerState("main", "Running", code),))


def test_a_jobsets_gang_is_every_pod_of_its_jobs() -> None:
    body = jobset(rjob("driver"), rjob("workers", replicas=2, parallelism=3))
    demand = JOBSET.demand("k", body)
    assert [(role.name, role.replicas, role.leader) for role in demand.roles] == [
        ("driver", 1, True), ("workers", 6, False)]
    assert adapter_for("jobset.x-k8s.io/v1alpha2", "JobSet") is JOBSET


def test_a_share_keeps_the_jobsets_shape_and_counts_its_own_pods() -> None:
    body = jobset(rjob("driver"), rjob("workers", replicas=2, parallelism=3))
    share = JOBSET.with_replicas(body, {"workers": 4})
    assert share["spec"] == body["spec"]  # names and ranks come from the whole shape
    assert json.loads(share["metadata"]["annotations"][protocol.SHARE_REPLICAS]) == {
        "driver": 0, "workers": 4}
    assert [(name, spec["replicas"]) for name, spec in JOBSET.replica_specs(share)] == [
        ("workers", 4)]


def test_managed_by_another_controller_leaves_the_jobset_to_it() -> None:
    assert managed_elsewhere(jobset(rjob("a"))) is None
    assert managed_elsewhere(jobset(rjob("a"), managedBy="jobset.sigs.k8s.io/jobset-controller")
                             ) is None
    assert managed_elsewhere(jobset(rjob("a"), managedBy="kueue.x-k8s.io/multikueue")) == \
        "kueue.x-k8s.io/multikueue"


def test_the_model_parses_a_jobset_as_jobset_writes_it() -> None:
    parsed = JobSet.model_validate(jobset(rjob("a", parallelism=2),
                                          successPolicy={"operator": "Any"}))
    assert parsed.spec.replicated_jobs[0].template.spec.parallelism == 2
    with pytest.raises(ValidationError):
        JobSet.model_validate(jobset())  # at least one replicated job


def test_pods_are_named_and_labelled_as_jobsets_jobs_make_them() -> None:
    body = jobset(rjob("driver"), rjob("workers", replicas=2, parallelism=2))
    decision, after = run(KIND, body, [])
    assert created(decision) == ["js-driver-0-0", "js-workers-0-0", "js-workers-0-1",
                                 "js-workers-1-0", "js-workers-1-1"]
    last = decision.create[-1]
    labels = last["metadata"]["labels"]
    assert labels["jobset.sigs.k8s.io/jobset-name"] == "js"
    assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "workers"
    assert labels["jobset.sigs.k8s.io/job-index"] == "1"
    assert labels["jobset.sigs.k8s.io/job-global-index"] == "2"  # after the driver's one Job
    assert labels["batch.kubernetes.io/job-completion-index"] == "1"
    assert labels["batch.kubernetes.io/job-name"] == "js-workers-1"
    assert last["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "1"
    assert last["spec"]["hostname"] == "js-workers-1-1"
    assert last["spec"]["subdomain"] == "js"
    env = {e["name"]: e["value"] for e in last["spec"]["containers"][0]["env"]}
    assert env["JOB_COMPLETION_INDEX"] == "1"
    [(_, service)] = decision.objects
    assert service["metadata"]["name"] == "js"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"jobset.sigs.k8s.io/jobset-name": "js"}
    assert true(after["status"]) == []
    assert after["status"]["replicatedJobsStatus"][1] == {
        "name": "workers", "ready": 0, "succeeded": 0, "failed": 0, "active": 0,
        "suspended": 0}


def test_a_jobset_completes_when_its_success_policy_holds() -> None:
    body = jobset(rjob("driver"), rjob("workers", replicas=2),
                  successPolicy={"operator": "All", "targetReplicatedJobs": ["driver"]})
    pods = [pod(body, "driver", 0), pod(body, "workers", 0), pod(body, "workers", 1)]
    _, running = run(KIND, body, pods)
    assert running["status"]["replicatedJobsStatus"][1]["ready"] == 2
    assert KIND.description.state(running["status"]) == "Running"
    pods[0] = pod(body, "driver", 0, "Succeeded")
    decision, done = run(KIND, body, pods)
    assert true(done["status"]) == ["Completed"]
    assert done["status"]["terminalState"] == "Completed"
    assert sorted(decision.delete) == ["js-workers-0-0", "js-workers-1-0"]  # active Jobs go
    assert KIND.description.state(done["status"]) == "Succeeded"


def test_a_failed_job_fails_the_jobset_once_its_retries_are_spent() -> None:
    spec = rjob("workers", replicas=2)
    spec["template"]["spec"]["backoffLimit"] = 0
    body = jobset(spec)
    decision, failed = run(KIND, body, [pod(body, "workers", 0, "Failed"),
                                        pod(body, "workers", 1)])
    assert true(failed["status"]) == ["Failed"]
    assert "first failed job: js-workers-0" in failed["status"]["conditions"][0]["message"]
    assert decision.delete == ("js-workers-1-0",)


def test_a_failure_policy_restarts_the_whole_jobset_until_its_max() -> None:
    spec = rjob("workers", replicas=2)
    spec["template"]["spec"]["backoffLimit"] = 0
    body = jobset(spec, failurePolicy={"maxRestarts": 1})
    _, restarted = run(KIND, body, [pod(body, "workers", 0, "Failed"), pod(body, "workers", 1)])
    status = restarted["status"]
    assert "Failed" not in true(status)
    assert status["restarts"] == 1
    assert status["restartsCountTowardsMax"] == 1
    assert [c["reason"] for c in status["conditions"] if c["type"] == "Restarting"] == [
        "DefaultFailurePolicy"]
    # the attempt before is stale, finished or not: deleted, then made again as attempt 1
    decision, _ = run(KIND, restarted, [pod(restarted, "workers", 0, "Failed"),
                                        pod(restarted, "workers", 1)])
    assert sorted(decision.delete) == ["js-workers-0-0", "js-workers-1-0"]
    decision, ready = run(KIND, restarted, [])
    made = [p for p in decision.create if p["kind"] == "Pod"]
    assert {p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] for p in made} == {"1"}
    assert {p["metadata"]["annotations"][protocol.RUN_ATTEMPT] for p in made} == {"1"}
    current = [ObservedPod(p.name, p.role, p.index, p.phase, p.exit_code, ready=p.ready,
                           containers=p.containers, attempt="1")
               for p in (pod(restarted, "workers", 0, "Failed"), pod(restarted, "workers", 1))]
    _, failed = run(KIND, ready, current)
    assert true(failed["status"]) == ["Failed"]
    reasons = {c["type"]: c["reason"] for c in failed["status"]["conditions"]}
    assert reasons["Failed"] == "ReachedMaxRestarts"
    assert reasons["Restarting"] == "JobSetFailed"


@pytest.mark.parametrize(("rules", "restart", "reason"), [
    ([{"name": "fail", "action": "FailJobSet"}], False, "FailJobSetFailurePolicyAction"),
    ([{"name": "other", "action": "FailJobSet", "targetReplicatedJobs": ["driver"]}], True,
     "DefaultFailurePolicy"),
    ([{"name": "deadline", "action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]}],
     True, "DefaultFailurePolicy"),
    ([{"name": "again", "action": "RestartJobSetAndIgnoreMaxRestarts",
       "onJobFailureMessagePatterns": ["backoff limit"]}], True, "FailurePolicy_again"),
    ([{"name": "job", "action": "RestartJob"}], False, "FailedJobs"),
])
def test_the_first_matching_rule_acts_as_jobsets_failure_policy_says(
        rules: list[Body], restart: bool, reason: str) -> None:
    verdict = judge_failure({"maxRestarts": 3, "rules": rules}, [("workers", "js-workers-0")],
                            counted=0)
    assert (verdict.restart, verdict.reason) == (restart, reason)
    assert verdict.counted == int(reason == "DefaultFailurePolicy")
    assert verdict.message.endswith("(first failed job: js-workers-0)")


def test_no_policy_or_a_split_jobset_fails_without_restarting() -> None:
    assert judge_failure(None, [("w", "js-w-0")], 0).reason == "FailedJobs"
    split = judge_failure({"maxRestarts": 3}, [("w", "js-w-0")], 0, split=True)
    assert not split.restart
    assert "split across members" in split.message


def test_a_replicated_job_waits_for_the_one_it_depends_on() -> None:
    body = jobset(rjob("init"), rjob("node", replicas=2,
                                     dependsOn=[{"name": "init", "status": "Complete"}]))
    decision, _ = run(KIND, body, [])
    assert created(decision) == ["js-init-0-0"]
    decision, _ = run(KIND, body, [pod(body, "init", 0, "Succeeded")])
    assert created(decision) == ["js-node-0-0", "js-node-1-0"]


def test_a_suspended_jobset_has_no_pods() -> None:
    body = jobset(rjob("a"), suspend=True)
    decision, after = run(KIND, body, [pod(body, "a", 0)])
    assert decision.delete == ("js-a-0-0",)
    assert true(after["status"]) == ["Suspended"]
    assert after["status"]["replicatedJobsStatus"][0]["suspended"] == 1


def test_a_split_share_runs_only_its_pods_and_the_hub_judges_success_over_shares() -> None:
    body = jobset(rjob("node", replicas=1, parallelism=4))
    share = JOBSET.with_replicas(body, {"node": 2})
    share["metadata"]["annotations"][protocol.OFFSETS] = json.dumps({"node": 2})
    decision, _ = run(KIND, share, [])
    assert created(decision) == ["js-node-0-2", "js-node-0-3"]

    def work(cluster: str, completed: bool) -> Body:
        conditions = [{"type": "Completed", "status": "True"}] if completed else []
        return {"metadata": {"name": f"w-{cluster}"},
                "spec": {"placement": {"cluster": cluster, "replicas": {"node": 2}}},
                "status": {"jobStatus": {"conditions": conditions}}}

    assert not completed_across(body, [work("a", True), work("b", False)])
    assert completed_across(body, [work("a", True), work("b", True)])


def split_works(body: Body, shares: dict[str, dict[str, int]],
                reported: dict[str, list[Body]]) -> list[Body]:
    """The Works of ``body`` split as ``shares`` (cluster -> pods per replicated job, in
    order), each reporting ``reported`` [cluster] as its replicated jobs' counts."""
    out, offsets = [], dict.fromkeys(pods_per_role(body), 0)
    for cluster, share in shares.items():
        manifest = JOBSET.with_replicas(body, share)
        out.append({"metadata": {"name": f"w-{cluster}", "annotations": {
            "fleet.sh/job-generation": "1"}},
                    "spec": {"placement": {"cluster": cluster, "replicas": share,
                                           "offsets": dict(offsets)},
                             "manifests": [manifest]},
                    "status": {"jobStatus": {"replicatedJobsStatus": reported[cluster]}}})
        for name, count in share.items():
            offsets[name] += count
    return out


def test_a_split_jobsets_dependency_is_judged_over_every_share_by_the_hub() -> None:
    body = jobset(rjob("node", replicas=2), rjob("launcher",
                                                 dependsOn=[{"name": "node", "status": "Ready"}]))
    shares = {"a": {"node": 1, "launcher": 1}, "b": {"node": 1}}
    one_ready = {"a": [{"name": "node", "ready": 1}], "b": [{"name": "node", "ready": 0}]}
    assert reached_across(split_works(body, shares, one_ready)) == {}
    works = split_works(body, shares, {**one_ready, "b": [{"name": "node", "ready": 1}]})
    assert reached_across(works) == {"node": "Ready"}
    writes = peer_progress(works)
    assert [type(w) for w in writes] == [RewriteWork, RewriteWork]
    marked = writes[0].manifest  # type: ignore[attr-defined]
    assert json.loads(marked["metadata"]["annotations"][protocol.PEERS_REACHED]) == {
        "node": "Ready"}
    # told once: a Work that carries it is not rewritten again
    works[0]["spec"]["manifests"][0] = marked
    assert len(peer_progress(works)) == 1
    # the member's share: its launcher waits for the hub's word, not for its own node pod
    share = {**marked, "metadata": {**marked["metadata"], "annotations": {
        **marked["metadata"]["annotations"], protocol.PEERS_REACHED: "{}"}}}
    share["metadata"]["annotations"][protocol.OFFSETS] = json.dumps({"node": 0, "launcher": 0})
    decision, _ = run(KIND, share, [pod(share, "node", 0, ready=True)])
    assert created(decision) == []
    decision, _ = run(KIND, marked, [pod(marked, "node", 0, ready=True)])
    assert created(decision) == ["js-launcher-0-0"]


def test_an_unsplit_or_independent_jobset_carries_no_word_of_its_peers() -> None:
    body = jobset(rjob("node", replicas=2))
    shares = {"a": {"node": 1}, "b": {"node": 1}}
    works = split_works(body, shares, {"a": [], "b": []})
    assert reached_across(works) is None
    assert peer_progress(works) == []
    assert reached_across(works[:1]) is None


def test_the_agent_runs_jobsets() -> None:
    assert "JobSet.jobset.x-k8s.io" in KINDS


def test_a_pods_retries_count_against_the_backoff_limit_across_reconciles() -> None:
    from fleet.api.jobset import JobSetStatus
    body = jobset(rjob("a"))
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] = 1
    decision, after = run(KIND, body, [pod(body, "a", 0, "Failed")])
    assert decision.delete == ("js-a-0-0",)  # retried once
    assert after["status"]["podRestarts"] == 1
    # the count survives the API server's pruning: the CRD's schema names it
    assert JobSetStatus.model_validate(after["status"]).pod_restarts == 1
    _, failed = run(KIND, after, [pod(after, "a", 0, "Failed")])
    assert true(failed["status"]) == ["Failed"]


def test_a_trainjobs_deadline_fails_its_jobset_once_its_pods_ran_that_long() -> None:
    from datetime import timedelta

    from tests.unit.test_job_status import NOW
    body = jobset(rjob("node"))
    body["metadata"]["annotations"] = {protocol.ACTIVE_DEADLINE: "60"}
    _, started = run(KIND, body, [pod(body, "node", 0)])
    assert started["status"]["startTime"]
    decision, late = run(KIND, started, [pod(started, "node", 0)],
                         now=NOW + timedelta(seconds=61))
    failed = [c for c in late["status"]["conditions"] if c["type"] == "Failed"]
    assert failed[0]["reason"] == "DeadlineExceeded"
    assert decision.delete == ("js-node-0-0",)
