"""Backfill without starvation on the local fleet (issue 18).

On one member (4 nodes of 8 GPUs), a gang that runs for a known time holds two nodes. A gang
of all four nodes arrives: it does not fit, and gets a reservation from the time the running
gang ends. A stream of one-node jobs follows: those without a known runtime are kept back,
those with a short one backfill the two idle nodes and finish first; the big gang starts as
soon as the gang in its way ends, before any job kept back. Each shows its events and
conditions on the hub.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.conftest import eventually
from e2e.jobs import delete_jobs, gang_namespace, hub_job, hub_state, seed_pytorchjob
from e2e.localfleet import LocalFleet
from fleet.api.protocol import CLUSTERS, EXPECTED_RUNTIME
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e
Body = dict[str, Any]
NAMESPACE = "backfill"
GPU = "nvidia.com/gpu"
NODE_GPUS = 8  # the local fleet's node shape: 2 members x 4 nodes x 8 GPUs


def gang(name: str, nodes: int, run_for: str, *, runtime: str | None = None,
         deadline: int | None = None) -> Body:
    """A PyTorchJob of ``nodes`` whole nodes (one 8-GPU replica each) whose pods run for
    ``run_for``; its known runtime from the annotation and/or activeDeadlineSeconds."""
    job = seed_pytorchjob(name, NAMESPACE, run_for=run_for, gpus=NODE_GPUS,
                          workers=nodes - 1 if nodes > 1 else 0)
    if runtime is not None:
        job["metadata"]["annotations"] = {EXPECTED_RUNTIME: runtime}
    if deadline is not None:
        job["spec"].setdefault("runPolicy", {})["activeDeadlineSeconds"] = deadline
    return job


def events(hub: Kube, job: Body, reason: str) -> list[Body]:
    listed, _ = hub.list(r.EVENTS, NAMESPACE,
                         field_selector=f"involvedObject.uid={job['metadata']['uid']}")
    return [e for e in listed if e.get("reason") == reason]


def queue(hub: Kube, job: Body) -> dict[str, Any]:
    return dict((hub_job(hub, job).get("status") or {}).get("queue") or {})


def queuing(hub: Kube, job: Body) -> Body | None:
    return next((c for c in (hub_job(hub, job).get("status") or {}).get("conditions") or []
                 if c.get("type") == "Queuing" and c.get("status") == "True"), None)


def bound(hub: Kube, job: Body) -> bool:
    return bool((hub_job(hub, job)["metadata"].get("annotations") or {}).get(CLUSTERS))


@pytest.fixture
def member_name(fleet: LocalFleet, hub: Kube) -> Iterator[str]:
    """Namespace ``backfill``, gangs pinned to one member, which starts idle."""
    name = sorted(fleet.members)[0]
    gang_namespace(hub, NAMESPACE, cluster=name)

    def idle() -> bool:
        status = hub.get(r.MEMBERCLUSTERS, name).get("status") or {}
        capacity = status.get("capacity") or {}
        gpus = (capacity.get("allocatable") or {}).get(GPU)
        return bool(gpus) and (capacity.get("free") or {}).get(GPU) == gpus
    eventually(idle, timeout=180, what=f"{name}'s GPUs all free")
    yield name
    delete_jobs(hub, NAMESPACE, wait=True)


def test_a_big_gang_is_not_starved_by_a_stream_of_small_jobs(hub: Kube,
                                                              member_name: str) -> None:
    # Two nodes taken by a gang that ends within a minute (its deadline says so).
    blocker = hub.create(r.PYTORCHJOBS, gang("blocker", 2, "40s", deadline=60))
    hub_state(hub, blocker, "Running", timeout=90)
    big = hub.create(r.PYTORCHJOBS, gang("big", 4, "1h"))

    def reserved() -> Body | None:
        condition = queuing(hub, big)
        return condition if condition and condition.get("reason") == "Reserved" else None
    condition = eventually(reserved, timeout=60, what="the big gang's reservation")
    assert "holds 32 GPUs from " in condition["message"]
    assert "PyTorchJob backfill/blocker" in condition["message"]
    said = eventually(lambda: events(hub, big, "Reserved"), what="the Reserved event")
    assert said[0]["message"].startswith("holds 32 GPUs from ")

    # The stream: one-node jobs without a runtime (they would fit the two idle nodes now),
    # then with a short one.
    unknown = [hub.create(r.PYTORCHJOBS, gang(f"unknown-{i}", 1, "5s")) for i in range(2)]
    for job in unknown:
        said = eventually(lambda: events(hub, job, "KeptBack"), timeout=60,  # noqa: B023
                          what=f"{job['metadata']['name']} kept back")
        assert "kept back for PyTorchJob backfill/big, which holds 32 GPUs" in \
            said[0]["message"]
        assert "its runtime is unknown" in said[0]["message"]
        # its status is written beside the event, not before it
        eventually(lambda: queue(hub, job).get("reason") == "KeptBack",  # noqa: B023
                   what=f"{job['metadata']['name']} KeptBack in its status")
    short = [hub.create(r.PYTORCHJOBS, gang(f"short-{i}", 1, "5s", runtime="20s"))
             for i in range(2)]
    for job in short:
        hub_state(hub, job, "Succeeded", timeout=60)  # backfilled, and done before big starts
        [note] = events(hub, job, "Backfilled")
        assert "before PyTorchJob backfill/big could start" in note["message"]
    assert not any(bound(hub, job) for job in unknown)
    assert not bound(hub, big)

    # The big gang starts when the blocker ends, ahead of every job kept back.
    hub_state(hub, blocker, "Succeeded", timeout=90)
    ended = time.time()
    hub_state(hub, big, "Running", timeout=90)
    print(f"blocker Succeeded -> big gang Running: {time.time() - ended:.1f}s (at most)")
    assert not any(bound(hub, job) for job in unknown)
    assert all(queue(hub, job).get("reason") != "Reserved" for job in unknown)
