"""Quota and queueing on the hub (seed 002's tree): order, reasons, borrowing and reclaim,
and a hub restart that must leave usage and order exactly as they were."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from e2e.conftest import eventually
from e2e.jobs import seed_pytorchjob, state
from e2e.localfleet import LocalFleet
from e2e.localfleet.demo import EXAMPLES, apply_file
from fleet.api.protocol import ADMITTED_AT, PLACEMENT
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e


def queue_status(hub: Kube, name: str) -> dict[str, Any]:
    queue = hub.get_or_none(r.QUEUES, name, "kube-queue")
    return (queue or {}).get("status") or {}


def events(hub: Kube, job: dict[str, Any], reason: str) -> list[str]:
    listed, _ = hub.list(r.EVENTS, job["metadata"]["namespace"],
                         field_selector=f"involvedObject.uid={job['metadata']['uid']}")
    return [str(e.get("message")) for e in listed if e.get("reason") == reason]


def wait_state(hub: Kube, name: str, wanted: str, namespace: str = "default",
               timeout: float = 60) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        job = hub.get(r.PYTORCHJOBS, name, namespace)
        return job if state(job) == wanted else None
    return eventually(check, timeout=timeout, what=f"{namespace}/{name} {wanted}")


def cleanup(hub: Kube, namespaces: list[str]) -> None:
    for namespace in namespaces:
        jobs, _ = hub.list(r.PYTORCHJOBS, namespace)
        for job in jobs:
            hub.delete(r.PYTORCHJOBS, job["metadata"]["name"], namespace)
    def gone() -> bool:
        return not any(hub.list(r.PYTORCHJOBS, ns)[0] for ns in namespaces)

    eventually(gone, what=f"jobs of {', '.join(namespaces)} gone")


@pytest.fixture
def seed_queue(fleet: LocalFleet, hub: Kube) -> Iterator[Kube]:
    """Seed 002's tree and its gang policy with suspension.scheduling, removed afterwards."""
    cleanup(hub, ["default"])
    apply_file(hub, EXAMPLES / "elasticquotatree.yaml")
    apply_file(hub, EXAMPLES / "propagationpolicy-gang-queue.yaml")
    eventually(lambda: queue_status(hub, "root-child-2").get("max"), what="Queue root-child-2")
    yield hub
    cleanup(hub, ["default"])
    hub.delete(r.ELASTICQUOTATREES, "elasticquotatree", "kube-system")
    apply_file(hub, EXAMPLES / "propagationpolicy-gang.yaml")  # drops suspension again


def test_queues_mirror_the_tree(seed_queue: Kube) -> None:
    queues, _ = seed_queue.list(r.QUEUES, "kube-queue")
    assert {q["metadata"]["name"] for q in queues} >= {"root", "root-child-2"}
    status = queue_status(seed_queue, "root-child-2")
    assert status["max"]["kube-queue/max-jobs"] == "1"
    assert status["max"]["memory"] == "10000Gi"


def test_max_jobs_runs_two_jobs_one_after_the_other(seed_queue: Kube) -> None:
    hub = seed_queue
    hub.create(r.PYTORCHJOBS, seed_pytorchjob("queued-1", run_for="6s"))
    wait_state(hub, "queued-1", "Running")
    hub.create(r.PYTORCHJOBS, seed_pytorchjob("queued-2", run_for="2s"))

    def waiting() -> dict[str, Any] | None:
        queue = (hub.get(r.PYTORCHJOBS, "queued-2", "default").get("status") or {}).get("queue")
        return queue if queue and queue.get("position") == 1 else None

    queue = eventually(waiting, what="queued-2 waiting at position 1")
    assert queue["name"] == "root-child-2"
    assert queue["reason"] == "QuotaExceeded"
    assert "kube-queue/max-jobs used 1 + requested 1 > max 1" in queue["message"]
    assert state(hub.get(r.PYTORCHJOBS, "queued-2", "default")) == "Queuing"
    # (a Queue's status is published once a second, after the jobs' own)
    status = eventually(lambda: (s := queue_status(hub, "root-child-2")).get("pending") == 1
                        and s, what="the Queue counting queued-2 as pending")
    assert (status["pending"], status["admitted"]) == (1, 1)
    assert status["pendingJobs"] == ["default/queued-2"]

    done_first = wait_state(hub, "queued-1", "Succeeded")
    wait_state(hub, "queued-2", "Succeeded")
    started_second = hub.get(r.PYTORCHJOBS, "queued-2", "default")["status"]["startTime"]
    assert started_second >= done_first["status"]["completionTime"]
    def admitted(name: str) -> bool:  # said in the job's status, not by an event
        conditions = (hub.get(r.PYTORCHJOBS, name, "default").get("status") or {}).get(
            "conditions") or []
        return any(c["type"] == "Admitted" and c["message"] == "admitted by quota root/child-2"
                   for c in conditions)

    eventually(lambda: admitted("queued-1") and admitted("queued-2"),
               what="the Admitted conditions")


TWO_TEAMS = {
    "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
    "metadata": {"name": "elasticquotatree", "namespace": "kube-system"},
    "spec": {"root": {
        "name": "root", "min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 8},
        "children": [
            {"name": "team-a", "min": {"nvidia.com/gpu": 4}, "max": {"nvidia.com/gpu": 8},
             "namespaces": ["team-a"]},
            {"name": "team-b", "min": {"nvidia.com/gpu": 4}, "max": {"nvidia.com/gpu": 8},
             "namespaces": ["team-b"]},
        ]}},
}


@pytest.fixture
def two_teams(fleet: LocalFleet, hub: Kube) -> Iterator[Kube]:
    for team in ("team-a", "team-b"):
        if hub.get_or_none(r.NAMESPACES, team) is None:
            hub.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": team}})
        policy = yaml.safe_load((EXAMPLES / "propagationpolicy-gang-queue.yaml").read_text())
        policy["metadata"]["namespace"] = team
        hub.apply(r.PROPAGATIONPOLICIES, policy, field_manager="test")
    hub.apply(r.ELASTICQUOTATREES, TWO_TEAMS, field_manager="test")
    eventually(lambda: queue_status(hub, "root-team-b").get("max"), what="Queue root-team-b")
    yield hub
    cleanup(hub, ["team-a", "team-b"])
    hub.delete(r.ELASTICQUOTATREES, "elasticquotatree", "kube-system")


def test_borrowed_quota_is_reclaimed_by_preempting_the_latest_gang(two_teams: Kube) -> None:
    hub = two_teams
    a1 = hub.create(r.PYTORCHJOBS, seed_pytorchjob("a1", "team-a", run_for="1h", gpus=2,
                                                   workers=1))
    wait_state(hub, "a1", "Running", "team-a")
    # admission stamps are whole seconds (as Kueue's QuotaReserved times): two admitted in
    # one second tie, and the tie goes by name, so a2 must be admitted a second later
    time.sleep(1.1)
    a2 = hub.create(r.PYTORCHJOBS, seed_pytorchjob("a2", "team-a", run_for="1h", gpus=2,
                                                   workers=1))
    wait_state(hub, "a2", "Running", "team-a")  # team-a borrows team-b's idle 4 GPUs
    eventually(lambda: queue_status(hub, "root-team-a")["used"]["nvidia.com/gpu"] == "8",
               what="team-a's Queue using 8 GPUs")

    b1 = hub.create(r.PYTORCHJOBS, seed_pytorchjob("b1", "team-b", run_for="1h", gpus=2,
                                                   workers=1))
    wait_state(hub, "b1", "Running", "team-b", timeout=90)
    # a2 shows Running until its member has removed its pods, then Queuing again.
    wait_state(hub, "a2", "Queuing", "team-a", timeout=90)
    eventually(lambda: events(hub, a2, "Preempted") == [
        "preempted to return quota to PyTorchJob team-b/b1"], what="the Preempted event")
    eventually(lambda: events(hub, b1, "Reclaimed") == [
        "preempted PyTorchJob team-a/a2 to reclaim quota"], what="the Reclaimed event")
    assert state(hub.get(r.PYTORCHJOBS, "a1", "team-a")) == "Running"
    assert not events(hub, a1, "Preempted")
    reason = eventually(lambda: (hub.get(r.PYTORCHJOBS, "a2", "team-a").get("status") or {}
                                 ).get("queue", {}).get("reason") == "QuotaExceeded",
                        what="a2 waiting for quota again")
    assert reason
    eventually(lambda: queue_status(hub, "root")["used"]["nvidia.com/gpu"] == "8",
               what="the root Queue using 8 GPUs")


def test_a_restarted_hub_keeps_waiting_jobs_waiting_and_the_admitted_set(
        fleet: LocalFleet, seed_queue: Kube) -> None:
    """The new hub must derive usage from the bindings it finds: a job that waited behind a
    running one (max-jobs 1) still waits. Only what the new hub writes counts here: a job
    created after the restart gets its position from it, and nothing gets bound."""
    hub = seed_queue
    hub.create(r.PYTORCHJOBS, seed_pytorchjob("order-1", run_for="1h"))
    wait_state(hub, "order-1", "Running")
    for name in ("order-2", "order-3"):
        hub.create(r.PYTORCHJOBS, seed_pytorchjob(name, run_for="2s"))
    eventually(lambda: positions(hub, ("order-2", "order-3")) == {"order-2": 1, "order-3": 2},
               what="both waiting jobs positioned")
    holder = hub.get(r.PYTORCHJOBS, "order-1", "default")["metadata"]["annotations"]
    bound_before = {k: holder[k] for k in (PLACEMENT, ADMITTED_AT)}

    fleet.restart_hub()  # every replica killed at once (Pods deleted with grace 0)
    hub.create(r.PYTORCHJOBS, seed_pytorchjob("order-4", run_for="2s"))
    # Only the new hub can position order-4: once it has, it has judged the whole queue.
    eventually(lambda: positions(hub, ("order-4",)) == {"order-4": 3}, timeout=90,
               what="the new hub positioning a job created after the restart")
    pending = ["default/order-2", "default/order-3", "default/order-4"]
    eventually(lambda: queue_status(hub, "root-child-2").get("pendingJobs") == pending,
               what="the new hub's Queue listing the three waiting jobs")
    for _ in range(10):  # and it keeps the waiting jobs waiting, pass after pass
        for name in ("order-2", "order-3", "order-4"):
            annotations = hub.get(r.PYTORCHJOBS, name, "default")["metadata"].get(
                "annotations") or {}
            assert PLACEMENT not in annotations, f"{name} bound after the restart"
        holder = hub.get(r.PYTORCHJOBS, "order-1", "default")["metadata"]["annotations"]
        assert {k: holder.get(k) for k in bound_before} == bound_before
        status = queue_status(hub, "root-child-2")
        assert (status["admitted"], status["pendingJobs"]) == (1, pending)
        time.sleep(0.5)

    hub.delete(r.PYTORCHJOBS, "order-1", "default")
    for name in ("order-2", "order-3", "order-4"):
        wait_state(hub, name, "Succeeded", timeout=60)
    started = [hub.get(r.PYTORCHJOBS, n, "default")["status"] for n in ("order-2", "order-3",
                                                                         "order-4")]
    for earlier, later in itertools.pairwise(started):
        assert later["startTime"] >= earlier["completionTime"]


def positions(hub: Kube, names: tuple[str, ...]) -> dict[str, int] | None:
    found = {}
    for name in names:
        queue = (hub.get(r.PYTORCHJOBS, name, "default").get("status") or {}).get("queue")
        if not queue or "position" not in queue:
            return None
        found[name] = queue["position"]
    return found


def test_removing_a_leaf_with_admitted_jobs_is_refused(seed_queue: Kube) -> None:
    hub = seed_queue
    hub.create(r.PYTORCHJOBS, seed_pytorchjob("holder", run_for="1h"))
    wait_state(hub, "holder", "Running")
    tree = yaml.safe_load((EXAMPLES / "elasticquotatree.yaml").read_text())
    tree["spec"]["root"]["children"] = [{"name": "other", "namespaces": ["elsewhere"]}]
    with pytest.raises(errors.Invalid) as caught:
        hub.apply(r.ELASTICQUOTATREES, tree, field_manager="kubectl-client-side-apply")
    assert "no leaf would own the namespace of admitted job(s) default/holder" in str(
        caught.value)
