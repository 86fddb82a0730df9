"""A bound job gets one status write, not two: its members' first report, or the bound status
when no report comes in time; a job that waited shows why until then."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fleet.api.protocol import ADMITTED_AT, ADMITTED_BY
from fleet.hub import status_mirror
from fleet.hub.hub_writes import WriteStatus
from fleet.hub.queueing import with_admitted
from fleet.hub.status_mirror import FIRST_REPORT_WAIT_SECONDS
from fleet.kinds.kubeflow import PYTORCH

CREATED = datetime(2026, 11, 27, 6, 0, 0, tzinfo=UTC)


def job(status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}}},
            **({"status": status} if status is not None else {})}


def work(reported: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": "w", "creationTimestamp": CREATED.strftime("%Y-%m-%dT%H:%M:%SZ")},
        "spec": {"placement": {"cluster": "member1", "replicas": {"Master": 1}}}}
    if reported:
        body["status"] = {"jobStatus": {"conditions": [
            {"type": "Created", "status": "True", "reason": "PyTorchJobCreated"}]}}
    return body


def mirror(current: dict[str, Any], works: list[dict[str, Any]], seconds: float
           ) -> tuple[bool, list[dict[str, Any]]]:
    """Whether the job's status is settled, and the statuses the mirror would write."""
    writes = status_mirror.status_writes(current, PYTORCH, works, "now",
                                         CREATED + timedelta(seconds=seconds))
    return writes is not None, [dict(w.status) for w in writes or []
                                if isinstance(w, WriteStatus)]


def test_a_new_binding_waits_for_its_members_first_report() -> None:
    assert mirror(job(), [work()], 1.0) == (False, [])


def test_the_first_report_is_the_first_status() -> None:
    settled, written = mirror(job(), [work(reported=True)], 1.0)
    assert settled
    assert len(written) == 1
    assert [c["reason"] for c in written[0]["conditions"]] == ["PyTorchJobCreated"]
    assert written[0]["clusters"] == ["member1"]


def test_without_a_report_in_time_the_bound_status_is_written() -> None:
    settled, written = mirror(job(), [work()], FIRST_REPORT_WAIT_SECONDS + 1)
    assert settled
    [status] = written
    assert [(c["type"], c["reason"]) for c in status["conditions"]] == [
        ("Created", "ScheduleBindingSucceed")]
    assert "member1" in status["conditions"][0]["message"]
    assert status["clusters"] == ["member1"]


def test_a_job_that_waited_shows_why_until_its_first_report() -> None:
    waited = {"conditions": [{"type": "Queuing", "status": "True", "reason": "QuotaExceeded"}],
              "queue": {"reason": "QuotaExceeded", "message": "m", "name": "q", "position": 1}}
    assert mirror(job(waited), [work()], 1.0) == (False, [])
    settled, [first] = mirror(job(waited), [work(reported=True)], 1.0)
    assert settled
    assert "queue" not in first
    assert [c["reason"] for c in first["conditions"]] == ["PyTorchJobCreated"]
    settled, [late] = mirror(job(waited), [work()], FIRST_REPORT_WAIT_SECONDS + 1)
    assert settled
    assert "queue" not in late
    assert [c["reason"] for c in late["conditions"]] == ["ScheduleBindingSucceed"]


def test_a_job_that_showed_a_status_is_not_kept_waiting() -> None:
    bound = {"conditions": [{"type": "Created", "status": "True",
                             "reason": "ScheduleBindingSucceed"}], "clusters": ["member1"]}
    assert mirror(job(bound), [work()], 0.0) == (True, [])


def test_the_admitted_condition_never_hides_the_job_state() -> None:
    """kubectl's STATE is the last condition: Admitted goes first, as it came first."""
    admitted = job()
    admitted["metadata"]["annotations"] = {ADMITTED_BY: "root/a",
                                           ADMITTED_AT: "2026-11-27T06:00:00Z"}
    status = {"conditions": [{"type": "Created", "status": "True"},
                             {"type": "Running", "status": "True"}]}
    types = [c["type"] for c in with_admitted(status, admitted)["conditions"]]
    assert types == ["Admitted", "Created", "Running"]
    again = with_admitted(with_admitted(status, admitted), admitted)
    assert [c["type"] for c in again["conditions"]] == types
