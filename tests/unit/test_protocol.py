"""The hub↔agent protocol end to end, without a server: what the hub writes (a bound job's
placement, its Works and their member copies) is what the agent reads back, and both programs
read every kind through the same description."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from e2e.jobs import seed_pytorchjob
from fleet.api import protocol
from fleet.api.cluster import Work
from fleet.hub.works import work_body
from fleet.kinds import ADAPTERS, adapter_for
from member_agent.controllers.runtime import KINDS
from member_agent.fencing import Action, fence_of, judge, member_job
from propagation.division import ClusterShare
from propagation.jobkey import JobKey

Body = dict[str, Any]


def bound_job(generation: int = 4) -> tuple[Body, list[dict[str, Any]]]:
    """Seed 002's PyTorchJob bound as a gang split over two members (master and a worker on
    m1, the other worker on m2)."""
    job = seed_pytorchjob("train", "team")
    job["metadata"].update(uid="0123456789", generation=1)
    shares = (ClusterShare("m1", (("Master", 1), ("Worker", 1)), (("Master", 0), ("Worker", 0))),
              ClusterShare("m2", (("Worker", 1),), (("Worker", 1),)))
    job["metadata"]["annotations"] = {
        protocol.PLACEMENT: protocol.encode_placement(shares),
        protocol.PLACEMENT_GENERATION: str(generation), protocol.ADMITTED_AT: "now"}
    return job, protocol.decode_placement(job)


def test_the_placement_text_round_trips() -> None:
    _, placement = bound_job()
    assert placement == [
        {"cluster": "m1", "replicas": {"Master": 1, "Worker": 1},
         "offsets": {"Master": 0, "Worker": 0}, "nodes": []},
        {"cluster": "m2", "replicas": {"Worker": 1}, "offsets": {"Worker": 1}, "nodes": []}]


def test_what_the_hub_writes_on_a_split_copy_is_what_the_agent_reads() -> None:
    job, placement = bound_job(generation=4)
    adapter = adapter_for(job["apiVersion"], job["kind"])
    work = work_body(job, adapter, placement[1], placement)
    Work.model_validate(work)  # the Work is what its CRD says
    manifest = work["spec"]["manifests"][0]
    meta = manifest["metadata"]
    # the hub's bookkeeping stays on the hub
    assert protocol.PLACEMENT not in meta["annotations"]
    assert protocol.ADMITTED_AT not in meta["annotations"]
    # the agent finds its Work, its fence, its share and the whole gang
    assert protocol.copy_work(meta) == (protocol.member_namespace("m2"), work["metadata"]["name"])
    assert protocol.placement_generation(meta) == protocol.work_generation(work) == 4
    assert protocol.replica_offsets(meta) == {"Worker": 1}
    assert protocol.world(meta) == placement
    kind = KINDS["PyTorchJob.kubeflow.org"]
    assert [(t.name, t.replicas, t.offset) for t in kind.replica_types(manifest)] == [
        ("Worker", 1, 1)]
    assert kind.world(manifest) == {"Master": 1, "Worker": 2}
    assert not kind.is_local(manifest, "Master", 0)
    # and runs it, since a Work of its generation exists
    key = JobKey("PyTorchJob.kubeflow.org/team/train")
    copy_ = member_job(key, {**manifest, "metadata": {**meta, "uid": "member-uid"}},
                       protocol.member_namespace("m2"))
    assert copy_ is not None
    assert copy_.job_uid == "0123456789"
    assert judge(copy_, fence_of(work), synced=True).action is Action.RUN


def test_a_whole_copy_carries_no_split_marks() -> None:
    job, _ = bound_job()
    whole = [{"cluster": "m1", "replicas": {"Master": 1, "Worker": 2},
              "offsets": {"Master": 0, "Worker": 0}, "nodes": []}]
    meta = work_body(job, adapter_for(job["apiVersion"], job["kind"]), whole[0],
                     whole)["spec"]["manifests"][0]["metadata"]
    assert protocol.replica_offsets(meta) == {}
    assert protocol.world(meta) == []
    assert protocol.world_text(meta) == ""


def test_purge_mode_of_the_work_wins_over_the_copys() -> None:
    job, placement = bound_job()
    job["metadata"]["annotations"][protocol.PURGE_MODE] = protocol.PURGE_NEVER
    work = work_body(job, adapter_for(job["apiVersion"], job["kind"]), placement[0], placement)
    assert protocol.work_purge_mode(work) == protocol.PURGE_NEVER
    work["metadata"]["annotations"][protocol.PURGE_MODE] = protocol.PURGE_IMMEDIATELY
    assert protocol.work_purge_mode(work) == protocol.PURGE_IMMEDIATELY


def test_the_reported_status_reads_back() -> None:
    status = protocol.work_status(applied=True, state="Running", job_status={"phase": "Running"},
                                  pods=[{"name": "p"}], conditions=[], bound_time="t")
    work = {"status": status}
    assert protocol.is_applied(work)
    assert protocol.work_state(work) == "Running"
    assert protocol.reported_job_status(work) == {"phase": "Running"}
    assert protocol.reported_pods(work) == [{"name": "p"}]
    assert protocol.bound_time(work) == "t"
    empty = protocol.work_status(applied=False, state="Pending", job_status={}, pods=[],
                                 conditions=[], bound_time=None)
    assert empty["jobStatus"] is None
    assert "boundTime" not in empty
    assert protocol.reported_job_status({"status": empty}) is None


def test_every_kind_has_one_description_both_programs_read() -> None:
    # a TrainJob runs on members as the JobSet its runtime makes of it
    assert {kind.description for kind in KINDS.values()} == {
        a for a in ADAPTERS if a.runs_on_members}
    for kind in KINDS.values():
        assert kind.description is adapter_for(kind.resource.api_version, kind.kind)


@pytest.mark.parametrize("status", [
    {"conditions": [{"type": "Created", "status": "True"},
                    {"type": "Succeeded", "status": "True"}]},
    {"conditions": [{"type": "Running", "status": "True"}]},
    {"conditions": [{"type": "Failed", "status": "True"}]},
    {"phase": "Succeeded"}, {"phase": "Failed"}, {"phase": "Running"}, {},
])
def test_hub_and_agent_read_a_status_alike(status: Body) -> None:
    for kind in KINDS.values():
        adapter = adapter_for(kind.resource.api_version, kind.kind)
        job = {"status": copy.deepcopy(status)}
        assert kind.finished(status) == adapter.is_finished(job)
        assert kind.failed(status) == (adapter.state(status) == "Failed")
