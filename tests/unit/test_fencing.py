"""Fencing decisions (member_agent.fencing): which member jobs run, which are removed."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from e2e.localfleet.demo import EXAMPLES
from fleet.api.cluster import Work
from fleet.api.protocol import PLACEMENT_GENERATION, placement_generation
from fleet.hub.works import work_body
from fleet.kinds import adapter_for
from member_agent.fencing import Action, Fence, fence_of, judge, may_run, member_job, sweep
from propagation.jobkey import JobKey

NS = "fleet-member-m1"
KEY = JobKey("PyTorchJob.kubeflow.org/team/train")


def job(generation: int | None = 2, *, work: str = "w1", uid: str = "hub-uid",
        purge: str | None = None, owner: str = NS, deleting: bool = False) -> dict[str, Any]:
    annotations = {"fleet.sh/work": f"{owner}/{work}"}
    if generation is not None:
        annotations[PLACEMENT_GENERATION] = str(generation)
    if purge:
        annotations["fleet.sh/purge-mode"] = purge
    meta: dict[str, Any] = {"name": "train", "namespace": "team", "uid": "member-uid",
                            "labels": {"fleet.sh/job-uid": uid}, "annotations": annotations}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


@pytest.mark.parametrize(("fence", "generation", "purge", "action"), [
    (Fence("hub-uid", 2), 2, None, Action.RUN),
    (None, 2, None, Action.REMOVE),  # the Work is gone: a failover moved the gang
    (None, 2, "Never", Action.KEEP),  # ... but the user asked to keep old copies
    (Fence("hub-uid", 3), 2, None, Action.REMOVE),  # placed again: the old copy goes
    (Fence("hub-uid", 3), 2, "Never", Action.REMOVE),  # ... even under Never: a fresh one here
    (Fence("hub-uid", 1), 2, None, Action.HOLD),  # the agent's view lags the hub
    (Fence("other-uid", 2), 2, None, Action.REMOVE),  # a re-created hub job of the same name
    (Fence("hub-uid", 0), None, None, Action.RUN),  # placed before fencing existed
])
def test_a_member_job_runs_only_beside_a_work_of_its_generation(
        fence: Fence | None, generation: int | None, purge: str | None,
        action: Action) -> None:
    view = member_job(KEY, job(generation, purge=purge), NS)
    assert view is not None
    verdict = judge(view, fence, synced=True)
    assert verdict.action is action, verdict.reason


def test_nothing_is_decided_before_the_works_are_listed() -> None:
    view = member_job(KEY, job(), NS)
    assert view is not None
    assert judge(view, None, synced=False).action is Action.HOLD
    assert sweep([(KEY, job())], NS, {}, synced=False) == []


def test_jobs_fleet_does_not_manage_are_left_alone() -> None:
    local = {"metadata": {"name": "mine", "namespace": "team", "uid": "u"}}
    assert member_job(KEY, local, NS) is None
    assert may_run(local, KEY, NS, {}, synced=True) is None
    assert member_job(KEY, job(owner="fleet-member-m2"), NS) is None
    assert sweep([(KEY, local)], NS, {}, synced=True) == []


def test_the_sweep_names_stale_copies_in_order_and_skips_going_ones() -> None:
    other = JobKey("PyTorchJob.kubeflow.org/team/a-first")
    jobs = [(KEY, job(work="w1")), (other, job(work="w2")),
            (JobKey("TFJob.kubeflow.org/team/going"), job(work="w3", deleting=True)),
            (JobKey("TFJob.kubeflow.org/team/runs"), job(work="w4"))]
    verdicts = sweep(jobs, NS, {"w4": Fence("hub-uid", 2)}, synced=True)
    assert [(v.job.key, v.action) for v in verdicts] == [
        (other, Action.REMOVE), (KEY, Action.REMOVE)]
    assert "w2 is gone" in verdicts[0].reason


def test_a_fence_is_read_from_the_work() -> None:
    work = {"metadata": {"name": "w1", "annotations": {"fleet.sh/purge-mode": "Never"}},
            "spec": {"job": {"uid": "hub-uid"}, "placement": {"cluster": "m1", "generation": 4}}}
    assert fence_of(work) == Fence("hub-uid", 4, "Never")
    assert fence_of({"metadata": {}, "spec": {"job": {"uid": "x"}, "placement": {}}}) == \
        Fence("x", 0)


@pytest.mark.parametrize(("text", "expected"), [
    ("3", 3), (None, 0), ("x", 0), ("-2", 0)])
def test_placement_generation_reads_bad_annotations_as_zero(text: str | None,
                                                            expected: int) -> None:
    meta = {"annotations": {PLACEMENT_GENERATION: text}} if text is not None else {}
    assert placement_generation(meta) == expected


def test_every_work_and_member_copy_carries_the_jobs_placement_generation() -> None:
    hub_job = yaml.safe_load((EXAMPLES / "pytorchjob.yaml").read_text())
    hub_job["metadata"].update(namespace="team", uid="0123456789",
                               annotations={PLACEMENT_GENERATION: "7"})
    adapter = adapter_for(hub_job["apiVersion"], hub_job["kind"])
    share = {"cluster": "m1", "replicas": {"master": 1, "worker": 2}, "offsets": {}}
    body = work_body(hub_job, adapter, share, [share])
    assert Work.model_validate(body).spec.placement.generation == 7
    assert placement_generation(body["spec"]["manifests"][0]["metadata"]) == 7
    view = member_job(KEY, body["spec"]["manifests"][0], NS)
    assert view is not None
    assert judge(view, fence_of(body), synced=True).action is Action.RUN
