from __future__ import annotations

from prometheus_client import REGISTRY

from member_agent.stages import StageClock


def count(stage: str) -> float:
    return REGISTRY.get_sample_value("fleet_stage_seconds_count", {"stage": stage}) or 0.0


def test_each_step_is_timed_once_in_order() -> None:
    clock = StageClock(limit=10)
    before = {s: count(s) for s in ("applied", "pods_created", "running")}
    work = {"metadata": {"name": "w1", "creationTimestamp": "2026-01-01T00:00:00Z"}}
    clock.applied(work)
    clock.progress("w1", [{"phase": "Pending"}], expected=2)  # one pod of two: nothing yet
    assert count("pods_created") == before["pods_created"]
    clock.progress("w1", [{"phase": "Pending"}, {"phase": "Running"}], expected=2)
    clock.progress("w1", [{"phase": "Running"}, {"phase": "Running"}], expected=2)
    clock.progress("w1", [{"phase": "Running"}, {"phase": "Running"}], expected=2)
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
