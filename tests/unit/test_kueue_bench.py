"""The Kueue bench's ledger counts quota held in the API server's order, across the jobs'
and the Works' watches."""

from __future__ import annotations

from typing import Any

from e2e.bench.kueue import Ledger
from fleet.api.protocol import PLACEMENT


def job(name: str, version: int, *, placed: bool = True, done: bool = False) -> dict[str, Any]:
    return {"metadata": {"namespace": "cq-0-0-cohort-0", "name": name,
                         "resourceVersion": str(version),
                         "annotations": {PLACEMENT: "[]"} if placed else {}},
            "status": {"conditions": [{"type": "Succeeded", "status": "True"}] if done else []}}


def ledger() -> Ledger:
    found = Ledger()
    found.size = {"cq-0-0-cohort-0/a": 5, "cq-0-0-cohort-0/b": 5}
    return found


def test_a_job_its_members_report_succeeded_holds_no_more_quota() -> None:
    counted = ledger()
    counted.seen(job("a", 10), 1.0)
    counted.seen(job("b", 13), 2.0)  # seen before a's Work, bound after it
    counted.succeeded("cq-0-0-cohort-0/a", 12)
    counted.seen(job("a", 20, done=True), 3.0)
    assert counted.cohort_peaks() == {"0": 5}


def test_without_the_report_both_held_at_once() -> None:
    counted = ledger()
    counted.seen(job("a", 10), 1.0)
    counted.seen(job("b", 13), 2.0)
    counted.seen(job("a", 20, done=True), 3.0)
    assert counted.cohort_peaks() == {"0": 10}
    assert counted.finished.keys() == {"cq-0-0-cohort-0/a"}


def test_the_order_is_the_api_servers_not_the_watches() -> None:
    """The Works' watch may deliver a job's end before the jobs' watch delivers its bind."""
    counted = ledger()
    counted.succeeded("cq-0-0-cohort-0/a", 12)
    counted.seen(job("a", 10), 1.0)
    counted.seen(job("a", 14), 1.5)  # its status written, still placed: no second hold
    counted.seen(job("b", 13), 2.0)
    counted.seen(job("a", 20, done=True), 3.0)
    assert counted.cohort_peaks() == {"0": 5}
