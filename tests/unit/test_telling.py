"""Job status writes counted by what they say (fleet.hub.telling), so that a bench can count
the statuses that say why a job waits apart from those every job costs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import REGISTRY

from fleet.hub.cache import Cache
from fleet.hub.telling import Telling
from fleet.kinds import adapter_for

JOB: dict[str, Any] = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
       "metadata": {"name": "a", "namespace": "ns", "uid": "u", "resourceVersion": "5"},
       "spec": {}, "status": {"conditions": []}}


class Dispatcher:
    """Answers as the real one: the job at a new version when a status changed, the job as
    it was when nothing did, None on a conflict."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def write_status(self, job: Mapping[str, Any], adapter: object,
                     status: Mapping[str, Any]) -> dict[str, Any] | None:
        if self.answer == "conflict":
            return None
        if self.answer == "unchanged":
            return dict(job)
        return {**job, "metadata": {**job["metadata"], "resourceVersion": "6"},
                "status": dict(status)}


def written(why: str) -> float:
    return REGISTRY.get_sample_value("fleet_job_status_writes_total", {"why": why}) or 0.0


def test_a_status_written_is_counted_by_why_and_one_unchanged_or_refused_is_not() -> None:
    adapter = adapter_for(JOB["apiVersion"], JOB["kind"])
    before = {why: written(why) for why in ("waiting", "reported")}
    for answer in ("changed", "unchanged", "conflict"):
        telling = Telling(Cache(), Dispatcher(answer))  # type: ignore[arg-type]
        telling.write_status(JOB, adapter, {"queue": {"reason": "Queued"}}, "waiting")
    assert written("waiting") - before["waiting"] == 1
    assert written("reported") == before["reported"]
