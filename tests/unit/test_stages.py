from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from prometheus_client import REGISTRY

from fleet.api.protocol import DISPATCHED_AT, PLACEMENT
from fleet.hub.stages import HubStageClock
from member_agent.stages import StageClock


def count(stage: str) -> float:
    return REGISTRY.get_sample_value("fleet_stage_seconds_count", {"stage": stage}) or 0.0


def test_each_step_is_timed_once_in_order() -> None:
    clock = StageClock(limit=10)
    before = {s: count(s) for s in ("applied", "pods_created", "running")}
    work = {"metadata": {"name": "w1", "creationTimestamp": "2026-01-01T00:00:00Z"}}
    clock.applied(work)
    clock.progress("w1", ["Pending"], expected=2)  # one pod of two: nothing yet
    assert count("pods_created") == before["pods_created"]
    clock.progress("w1", ["Pending", "Running"], expected=2)
    clock.progress("w1", ["Running", "Running"], expected=2)
    clock.progress("w1", ["Running", "Running"], expected=2)
    assert {s: count(s) - before[s] for s in before} == {
        "applied": 1, "pods_created": 1, "running": 1}


def test_a_work_the_member_already_runs_is_not_timed_again() -> None:
    clock = StageClock(limit=10)
    before = count("applied")
    clock.applied({"metadata": {"name": "w2", "creationTimestamp": "2026-01-01T00:00:00Z"},
                   "status": {"applied": True}})
    assert count("applied") == before


def test_memory_stays_bounded() -> None:
    clock = StageClock(limit=3)
    for i in range(10):
        clock.applied({"metadata": {"name": f"w{i}"}})
    assert len(clock._reached) == 3


def sum_of(stage: str) -> float:
    return REGISTRY.get_sample_value("fleet_stage_seconds_sum", {"stage": stage}) or 0.0


def test_applied_is_timed_from_the_hubs_dispatch_stamp_not_the_whole_second() -> None:
    clock = StageClock(limit=10)
    before = sum_of("applied")
    sent = datetime.now(UTC) - timedelta(seconds=0.25)
    clock.applied({"metadata": {
        "name": "w3", "creationTimestamp": "2020-01-01T00:00:00Z",
        "annotations": {DISPATCHED_AT: sent.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}})
    assert 0.25 <= sum_of("applied") - before < 5  # not six years


def test_hub_stages_follow_the_job_from_its_first_sight() -> None:
    clock = HubStageClock(limit=10)
    before = {s: count(s) for s in ("queued", "admitted", "bound", "dispatched")}
    job = {"metadata": {"uid": "u1", "creationTimestamp": "2026-01-01T00:00:00Z"}}
    clock.seen(job)
    clock.seen(job)  # every later event of it is no news
    clock.seen({"metadata": {"uid": "u2", "annotations": {PLACEMENT: "[]"}}})  # bound: none
    clock.decided("u1")
    clock.dispatched(job["metadata"], None, time.time(), time.time(), "")
    assert {s: count(s) - before[s] for s in before} == {
        "queued": 1, "admitted": 1, "bound": 1, "dispatched": 1}


def test_hub_clock_stays_bounded() -> None:
    clock = HubStageClock(limit=3)
    for i in range(10):
        clock.seen({"metadata": {"uid": f"u{i}"}})
        clock.decided(f"u{i}")
    assert len(clock._seen) == 3
    assert len(clock._decided) == 3
