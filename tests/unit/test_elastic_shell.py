"""Elastic PyTorchJobs outside the planner: how the hub reads the range and the size it
runs, the Resized condition, resized shares counted as assumed, and the member's torchrun
environment and replica changes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fleet.api import protocol as p
from fleet.hub import elastic as el
from fleet.hub.assumed import unreported_works
from fleet.hub.cache import Cache
from fleet.kinds.base import InvalidJob
from member_agent.controllers.kubeflow import PYTORCH
from planner.view import Elastic
from propagation.resources import Resources
from propagation.views import JobDemand, Role
from tests.unit.test_assumed import member, work
from tests.unit.test_job_status import pod, pytorchjob, run

Body = dict[str, Any]


def elastic_job(policy: Body | None, workers: int = 2, master: bool = False) -> Body:
    job = pytorchjob(workers)
    if not master:
        del job["spec"]["pytorchReplicaSpecs"]["Master"]
    if policy is not None:
        job["spec"]["elasticPolicy"] = policy
    return job


def test_the_range_defaults_as_the_training_operator_does() -> None:
    assert el.elastic_of(elastic_job({"minReplicas": 1, "maxReplicas": 4})) == \
        Elastic("Worker", 1, 4)
    assert el.elastic_of(elastic_job({"maxReplicas": 3})) == Elastic("Worker", 3, 3)
    assert el.elastic_of(elastic_job({"minReplicas": 2})) == Elastic("Worker", 2, 2)
    assert el.elastic_of(elastic_job({}, workers=5)) == Elastic("Worker", 5, 5)
    assert el.elastic_of(elastic_job(None)) is None
    with pytest.raises(InvalidJob, match=r"spec.elasticPolicy.minReplicas: 5 .* \(2\)"):
        el.elastic_of(elastic_job({"minReplicas": 5, "maxReplicas": 2}))


def test_a_bound_elastic_job_holds_what_its_placement_runs() -> None:
    job = elastic_job({"minReplicas": 1, "maxReplicas": 8})
    demand = JobDemand("k", (Role("Worker", 8, Resources.of({"nvidia.com/gpu": 2})),))
    assert el.placed_demand(job, demand) == demand  # not bound: its spec
    job["metadata"]["annotations"] = {p.PLACEMENT: json.dumps([
        {"cluster": "a", "replicas": {"Worker": 2}, "offsets": {"Worker": 0}},
        {"cluster": "b", "replicas": {"Worker": 1}, "offsets": {"Worker": 2}}])}
    assert el.placed_demand(job, demand).total["nvidia.com/gpu"] == 6


def test_the_resized_condition_comes_first_so_the_state_stays_running() -> None:
    job = elastic_job({"minReplicas": 1, "maxReplicas": 4})
    job["metadata"]["annotations"] = {p.RESIZED: el.resized_mark("Grown", "grown 1→4", "t")}
    status = el.with_resized({"conditions": [{"type": "Running", "status": "True"}]}, job)
    assert [c["type"] for c in status["conditions"]] == ["Resized", "Running"]
    assert status["conditions"][0]["reason"] == "Grown"
    job["metadata"]["annotations"][p.RESIZED] = "{not json"
    assert el.with_resized({"conditions": []}, job) == {"conditions": []}  # never crashes


def test_a_resized_share_counts_as_assumed_until_bound_again() -> None:
    cache = Cache()
    cache.upsert("clusters", member("a"))
    body = work(1, "a", 2, 4, bound="2026-11-21T11:59:00.000000Z")
    cache.upsert("works", body)
    assert not unreported_works(cache.snapshot())  # reported before the resize
    body["metadata"]["annotations"] = {p.RESIZED_AT: "2026-11-21T11:59:30.000000Z"}
    body["metadata"]["resourceVersion"] = "2"
    cache.upsert("works", body)
    assert [w["metadata"]["name"] for w in unreported_works(cache.snapshot())["a"]] == ["w1"]


def env_of(created: Body) -> dict[str, str]:
    return {e["name"]: e["value"] for e in created["spec"]["containers"][0]["env"]}


def test_the_member_sets_torchruns_elastic_rendezvous() -> None:
    job = elastic_job({"minReplicas": 1, "maxReplicas": 4, "rdzvId": "r1", "maxRestarts": 3,
                       "rdzvConf": [{"key": "timeout", "value": "900"}], "standalone": True})
    decision, _ = run(PYTORCH, job, [])
    env = env_of(decision.create[0])
    assert env["PET_NNODES"] == "1:4"
    assert env["PET_RDZV_ENDPOINT"] == "job-worker-0:23456"
    assert env["PET_RDZV_BACKEND"] == "c10d"
    assert (env["PET_RDZV_ID"], env["PET_MAX_RESTARTS"]) == ("r1", "3")
    assert env["PET_RDZV_CONF"] == "timeout=900"
    assert "PET_STANDALONE" in env
    assert "WORLD_SIZE" not in env
    custom = elastic_job({"minReplicas": 2, "maxReplicas": 2, "rdzvHost": "etcd",
                          "rdzvPort": 2379, "rdzvBackend": "etcd-v2"}, master=True)
    env = env_of(run(PYTORCH, custom, [])[0].create[0])
    assert (env["PET_RDZV_ENDPOINT"], env["PET_RDZV_BACKEND"]) == ("etcd:2379", "etcd-v2")
    assert env["PET_NNODES"] == "2:2"  # not the world's size
    assert env["MASTER_ADDR"] == "job-master-0"


def test_the_member_adds_and_removes_only_the_highest_workers_on_a_resize() -> None:
    job = elastic_job({"minReplicas": 1, "maxReplicas": 4}, workers=4)
    running = [pod("Worker", i) for i in range(2)]
    grown, _ = run(PYTORCH, job, running)
    assert [c["metadata"]["name"] for c in grown.create] == ["job-worker-2", "job-worker-3"]
    assert not grown.delete
    shrunk, _ = run(PYTORCH, elastic_job({"minReplicas": 1, "maxReplicas": 4}, workers=1),
                    [*running, pod("Worker", 2), pod("Worker", 3)])
    assert sorted(shrunk.delete) == ["job-worker-1", "job-worker-2", "job-worker-3"]
    assert not shrunk.create
