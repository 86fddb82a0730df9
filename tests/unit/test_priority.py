"""Priority levels in the quota engine (HiveD's guaranteed and opportunistic) and the order
of a queue: priority first, then age."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from quota.amounts import MAX_JOBS
from quota.engine import AdmissionPass, Holding, Job, QueuePolicy, order_key
from quota.priority import Level, level_of
from quota.queues import admission_order
from quota.tree import QuotaNode

GPU = "nvidia.com/gpu"


def two_teams() -> QuotaNode:
    return QuotaNode("root", min={GPU: 8}, max={GPU: 8}, children=(
        QuotaNode("a", min={GPU: 4}, max={GPU: 4, MAX_JOBS: 2}, namespaces=("team-a",)),
        QuotaNode("b", min={GPU: 4}, max={GPU: 8}, namespaces=("team-b",))))


def job(name: str, ns: str = "team-a", gpus: int = 4, priority: int = 0,
        created: str = "2026-01-01T00:00:00Z") -> Job:
    return Job(f"PyTorchJob/{ns}/{name}", ns, {GPU: gpus}, priority, created)


def test_hived_levels() -> None:
    assert level_of(-1) is Level.OPPORTUNISTIC
    assert level_of(0) is Level.GUARANTEED
    assert level_of(1000) is Level.GUARANTEED


def test_an_opportunistic_job_uses_no_quota() -> None:
    full = [Holding(job("prod", priority=100), "2026-01-01T00:01:00Z")]  # team-a at its max
    oppo = job("oppo", priority=-1, gpus=8)
    admission = AdmissionPass(two_teams(), full, [oppo])
    assert admission.check(oppo).fits
    admission.admit(oppo, "2026-01-01T00:02:00Z")
    assert admission.usage("root/a") == {GPU: 4, MAX_JOBS: 1}  # unchanged
    # and a guaranteed job of the tenant still fits exactly as before the opportunistic one
    assert not admission.check(job("more", gpus=1)).fits


def test_an_opportunistic_job_is_not_paused_by_a_claim_within_a_guarantee() -> None:
    held = [Holding(job("a0", gpus=4), "2026-01-01T00:01:00Z"),
            Holding(job("b-borrow", "team-b", gpus=4), "2026-01-01T00:01:01Z")]
    claim = job("a-claim", gpus=4, created="2026-01-01T00:02:00Z")
    oppo = job("oppo", "team-b", priority=-1, gpus=8, created="2026-01-01T00:03:00Z")
    admission = AdmissionPass(two_teams(), held, [claim, oppo])
    assert admission.check(oppo).fits


def test_reclaim_never_picks_an_opportunistic_job_it_gains_nothing_from() -> None:
    root = QuotaNode("root", min={GPU: 8}, max={GPU: 8}, children=(
        QuotaNode("a", min={GPU: 4}, max={GPU: 8}, namespaces=("team-a",)),
        QuotaNode("b", min={GPU: 4}, max={GPU: 8}, namespaces=("team-b",))))
    held = [Holding(job("a-borrow", gpus=8), "2026-01-01T00:01:00Z"),
            Holding(job("a-oppo", gpus=4, priority=-1), "2026-01-01T00:01:09Z")]
    claim = job("b0", "team-b", gpus=4)
    verdict = AdmissionPass(root, held, [claim]).check(claim)
    assert [v.job.key for v in verdict.victims] == ["PyTorchJob/team-a/a-borrow"]


def test_a_queue_orders_by_priority_then_age_and_opportunistic_last() -> None:
    jobs = [job("old-test", created="2026-01-01T00:00:01Z"),
            job("oppo", priority=-1, created="2026-01-01T00:00:00Z"),
            job("new-prod", priority=100, created="2026-01-01T00:00:09Z"),
            job("new-test", created="2026-01-01T00:00:05Z")]
    admission = AdmissionPass(two_teams(), [], jobs)
    assert [j.key.rsplit("/", 1)[1] for j in admission.queues()["root/a"]] == [
        "new-prod", "old-test", "new-test", "oppo"]


def test_block_keeps_strict_priority_order() -> None:
    prod = job("prod", priority=100, gpus=8)  # never fits team-a's max of 4
    test = job("test", gpus=1, created="2026-01-01T00:00:05Z")
    admission = AdmissionPass(two_teams(), [], [prod, test], {"root/a": QueuePolicy.BLOCK})
    assert not admission.check(prod).fits
    admission.wait(prod)
    assert not admission.check(test).fits


@given(st.lists(st.tuples(st.integers(-1, 1000), st.integers(0, 59)), min_size=1, max_size=20))
def test_order_is_priority_descending_then_creation(entries: list[tuple[int, int]]) -> None:
    jobs = [job(f"j{i}", priority=p, created=f"2026-01-01T00:00:{s:02d}Z")
            for i, (p, s) in enumerate(entries)]
    ordered = sorted(jobs, key=order_key)
    for first, second in itertools.pairwise(ordered):
        assert first.priority >= second.priority
        if first.priority == second.priority:
            assert first.created <= second.created
    assert order_key(jobs[0]) == admission_order(jobs[0].priority, jobs[0].created, jobs[0].key)
