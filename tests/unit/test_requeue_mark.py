"""A preemption's requeue mark is not lost to a status write: the quota the victim held may
already be given to another job in the same pass, so the mark is tried again on the newer
version while the job is still bound as decided (found at 10 % of Kueue's baseline: the
root of the quota tree 2,000 milli-CPU above its max, and reclaims across cohorts after it)."""

from __future__ import annotations

from typing import Any

from fleet.api import protocol as p
from fleet.clients import errors
from fleet.hub.dispatch import Dispatcher
from fleet.kinds import adapter_for

ADAPTER = adapter_for("kubeflow.org/v1", "PyTorchJob")


def bound(version: str, **marks: str) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "victim", "namespace": "team", "uid": "u1",
                         "resourceVersion": version,
                         "annotations": {p.PLACEMENT: "[]", p.PLACEMENT_GENERATION: "1",
                                         **marks}},
            "spec": {"pytorchReplicaSpecs": {}}}


class Server:
    """The job as the API server has it; a patch guarded by an older version conflicts."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job, self.patches = job, 0

    def patch(self, resource: object, name: str, body: dict[str, Any], namespace: str,
              subresource: str | None = None) -> dict[str, Any]:
        self.patches += 1
        if body["metadata"].get("resourceVersion") != self.job["metadata"]["resourceVersion"]:
            raise errors.Conflict(409, "Conflict", "the object has been modified")
        marks = {**self.job["metadata"]["annotations"], **body["metadata"]["annotations"]}
        self.job = {**self.job, "metadata": {**self.job["metadata"], "annotations": marks}}
        return self.job

    def get_or_none(self, resource: object, name: str, namespace: str) -> dict[str, Any]:
        return self.job


def test_a_status_write_in_between_does_not_lose_the_mark() -> None:
    server = Server({**bound("2"), "status": {"conditions": [{"type": "Running",
                                                                "status": "True"}]}})
    assert Dispatcher(server).mark_requeue(bound("1"), ADAPTER, "preempted") is not None  # type: ignore[arg-type]
    assert server.job["metadata"]["annotations"][p.REQUEUE] == "preempted"
    assert server.patches == 2


def test_a_job_bound_again_or_already_leaving_is_left_alone() -> None:
    for now in (bound("2", **{p.PLACEMENT_GENERATION: "2"}), bound("2", **{p.REQUEUE: "x"})):
        server = Server(now)
        assert Dispatcher(server).mark_requeue(bound("1"), ADAPTER, "preempted") is None  # type: ignore[arg-type]
        assert server.patches == 1


def test_a_job_that_finished_meanwhile_is_left_alone() -> None:
    done = {**bound("2"), "status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}
    server = Server(done)
    assert Dispatcher(server).mark_requeue(bound("1"), ADAPTER, "preempted") is None  # type: ignore[arg-type]
    assert p.REQUEUE not in server.job["metadata"]["annotations"]
