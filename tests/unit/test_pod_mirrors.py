"""Mirror pods on the hub (fleet.hub.pod_mirrors) and the agent's kubelet log options."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.api.protocol import MIRROR_OF, MIRROR_PODS
from fleet.hub import pod_mirrors as m
from member_agent.kubelet_endpoint import MAX_LOG_BYTES, log_query

JOB = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
       "metadata": {"name": "mnist", "namespace": "team-a", "uid": "u-1"}}


def work(pods: list[dict[str, Any]], cluster: str = "member1") -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "torch:2"}]}}
    return {
        "metadata": {"name": "pytorchjob-team-a-mnist-u-1", "namespace": f"fleet-member-{cluster}"},
        "spec": {"job": {"uid": "u-1"}, "placement": {"cluster": cluster},
                 "manifests": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                "spec": {"pytorchReplicaSpecs": {
                                    "Master": {"replicas": 1, "template": template}}}}]},
        "status": {"pods": pods},
    }


RUNNING = {"name": "mnist-master-0", "phase": "Running", "ready": True, "restarts": 0,
           "startTime": "2026-01-01T00:00:00Z", "containers": ["pytorch"],
           "labels": {"training.kubeflow.org/job-name": "mnist",
                      "training.kubeflow.org/job-role": "master"}}


def test_a_mirror_carries_the_member_pods_labels_containers_and_state() -> None:
    [mirror] = m.mirrors_of(work([RUNNING]), JOB)
    assert mirror.key == ("team-a", "mnist-master-0")
    meta, spec = mirror.body["metadata"], mirror.body["spec"]
    assert meta["labels"]["training.kubeflow.org/job-role"] == "master"
    assert meta["labels"][MIRROR_OF] == "member1"
    assert meta["ownerReferences"][0]["uid"] == "u-1"  # goes with the hub job
    assert spec["nodeName"] == "fleet-member-member1"
    assert spec["containers"] == [{"name": "pytorch", "image": "torch:2"}]
    assert spec["terminationGracePeriodSeconds"] == 0  # no kubelet confirms a delete
    assert mirror.status["phase"] == "Running"
    assert mirror.status["containerStatuses"][0]["state"] == {
        "running": {"startedAt": "2026-01-01T00:00:00Z"}}


def test_a_finished_pod_shows_its_exit_code() -> None:
    pod = {**RUNNING, "phase": "Failed", "ready": False, "exitCode": 3}
    [mirror] = m.mirrors_of(work([pod]), JOB)
    assert mirror.status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3


def existing(mirror: m.Mirror) -> dict[str, Any]:
    return {"metadata": mirror.body["metadata"], "status": mirror.status}


def test_plan_creates_then_writes_only_changes_and_deletes_what_is_gone() -> None:
    [mirror] = m.mirrors_of(work([RUNNING]), JOB)
    assert m.plan([mirror], {}).create == [mirror]
    assert m.plan([mirror], {mirror.key: existing(mirror)}) == m.Plan()
    [done] = m.mirrors_of(work([{**RUNNING, "phase": "Succeeded", "ready": False}]), JOB)
    assert m.plan([done], {mirror.key: existing(mirror)}).update_status == [done]
    gone = m.plan([], {mirror.key: existing(mirror)})
    assert [b["metadata"]["name"] for b in gone.delete] == ["mnist-master-0"]


def test_a_pod_that_moved_to_another_member_is_mirrored_anew() -> None:
    [old] = m.mirrors_of(work([RUNNING], "member1"), JOB)
    [new] = m.mirrors_of(work([RUNNING], "member2"), JOB)
    plan = m.plan([new], {old.key: existing(old)})
    assert plan.create == []
    assert len(plan.delete) == 1


def test_mirrors_are_bounded() -> None:
    pods = [{**RUNNING, "name": f"mnist-worker-{i}"} for i in range(5)]
    plan = m.plan(m.mirrors_of(work(pods), JOB), {}, limit=3)
    assert len(plan.create) == 3
    assert plan.over_limit == 2


@pytest.mark.parametrize(("job", "policy", "wanted"), [
    ({}, {}, False),
    ({}, {"metadata": {"annotations": {MIRROR_PODS: "true"}}}, True),
    ({"metadata": {"annotations": {MIRROR_PODS: "false"}}},
     {"metadata": {"annotations": {MIRROR_PODS: "true"}}}, False),
    ({"metadata": {"annotations": {MIRROR_PODS: "True"}}}, None, True),
])
def test_mirroring_is_the_policys_or_the_jobs_choice(
        job: dict[str, Any], policy: dict[str, Any] | None, wanted: bool) -> None:
    assert m.wants_mirrors(job, policy) is wanted


def test_log_options_are_checked_and_bounded() -> None:
    assert log_query("follow=true&tailLines=10") == {
        "follow": "true", "tailLines": "10", "limitBytes": str(MAX_LOG_BYTES)}
    assert log_query(f"limitBytes={MAX_LOG_BYTES * 4}")["limitBytes"] == str(MAX_LOG_BYTES)
    assert "exec" not in log_query("exec=rm")
    with pytest.raises(ValueError, match="tailLines"):
        log_query("tailLines=-1")
    with pytest.raises(ValueError, match="follow"):
        log_query("follow=maybe")
