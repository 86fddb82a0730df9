"""The member job-controller core: which pods to create and delete, restarts and backoff."""

from __future__ import annotations

import pytest

from member_agent.controllers.core import ObservedPod, ReplicaType, Restart, plan, retryable


def types(restart: Restart = Restart.NEVER, workers: int = 2) -> list[ReplicaType]:
    return [ReplicaType("Master", 1, restart, {}), ReplicaType("Worker", workers, restart, {})]


def pod(role: str, index: int, phase: str, exit_code: int | None = None,
        deleting: bool = False) -> ObservedPod:
    return ObservedPod(f"j-{role}-{index}", role, index, phase, exit_code, deleting)


def test_missing_replicas_are_created_in_order() -> None:
    result = plan("j", types(), [], restarts_so_far=0, backoff_limit=None)
    assert result.create == (("Master", 0), ("Worker", 0), ("Worker", 1))
    assert not result.delete


def test_nothing_is_created_once_the_job_stops() -> None:
    result = plan("j", types(), [], restarts_so_far=0, backoff_limit=None, stop=True)
    assert result.create == ()


def test_surplus_replicas_are_deleted() -> None:
    pods = [pod("master", 0, "Running"), pod("worker", 0, "Running"), pod("worker", 1, "Running"),
            pod("worker", 2, "Running")]
    result = plan("j", types(workers=2), pods, restarts_so_far=0, backoff_limit=None)
    assert result.delete == ("j-worker-2",)


@pytest.mark.parametrize(("policy", "code", "restarted"), [
    (Restart.NEVER, 1, False), (Restart.NEVER, 137, False),
    (Restart.ON_FAILURE, 1, True), (Restart.ALWAYS, 1, True),
    (Restart.EXIT_CODE, 1, False), (Restart.EXIT_CODE, 127, False),
    (Restart.EXIT_CODE, 128, True), (Restart.EXIT_CODE, 137, True),
])
def test_kubeflow_restart_policies(policy: Restart, code: int, restarted: bool) -> None:
    pods = [pod("master", 0, "Running"), pod("worker", 0, "Failed", code),
            pod("worker", 1, "Running")]
    result = plan("j", types(policy), pods, restarts_so_far=0, backoff_limit=None)
    assert (result.restarted == (("Worker", 0),)) is restarted
    assert ("j-worker-0" in result.delete) is restarted
    assert result.counts["Worker"].failed == (0 if restarted else 1)


@pytest.mark.parametrize(("code", "retry"), [(130, True), (137, True), (143, True), (138, True),
                                             (128, False), (139, False), (1, False)])
def test_t9k_exit_codes(code: int, retry: bool) -> None:
    assert retryable(Restart.EXIT_CODE, code, frozenset({130, 137, 143, 138})) is retry


def test_backoff_limit_is_shared_by_all_replicas() -> None:
    pods = [pod("master", 0, "Running"), pod("worker", 0, "Failed", 1),
            pod("worker", 1, "Failed", 1)]
    result = plan("j", types(Restart.ON_FAILURE), pods, restarts_so_far=2, backoff_limit=3)
    assert result.restarted == (("Worker", 0),)
    assert result.counts["Worker"].failed == 1
    assert "backoff limit 3" in result.exhausted


def test_pods_being_deleted_are_neither_counted_nor_recreated_yet() -> None:
    pods = [pod("master", 0, "Running"), pod("worker", 0, "Failed", 1, deleting=True)]
    result = plan("j", types(Restart.ON_FAILURE, workers=1), pods, restarts_so_far=0,
                  backoff_limit=None)
    assert result.create == ()
    assert result.counts["Worker"].active == 0


def test_offsets_number_a_split_share_from_its_first_index() -> None:
    split = [ReplicaType("Worker", 2, Restart.NEVER, {}, offset=3)]
    result = plan("j", split, [], restarts_so_far=0, backoff_limit=None)
    assert result.create == (("Worker", 3), ("Worker", 4))
