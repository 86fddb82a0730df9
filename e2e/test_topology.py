"""Topology-aware placement on the local fleet: a gang that requires one rack runs inside one
rack of its member, and a gang no rack can hold waits with a condition naming the level.

member2 gets kwok nodes labelled with the default topology levels (block, rack): rack r1 has
one node of 4 GPUs, rack r2 two nodes of 4 GPUs. Its other nodes carry no rack label, so they
belong to no rack. The member's agent reports the levels and the racks; the hub packs each
gang within one rack and names it in the Work; the agent pins the pods there by node
affinity, and the member's scheduler keeps them in it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e.conftest import eventually
from e2e.jobs import delete_jobs, gang_namespace, hub_job, hub_state, pods, seed_pytorchjob
from e2e.localfleet import LocalFleet
from e2e.localfleet.nodes import NodeShape, node_manifests
from fleet.api.protocol import (
    DEFAULT_TOPOLOGY_LEVELS,
    JOB_UID,
    KUEUE_TOPOLOGY_REQUIRED,
    TOPOLOGY_REQUIRED,
)
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e
Body = dict[str, Any]
MEMBER = "member2"
NS = "topology"
BLOCK, RACK = DEFAULT_TOPOLOGY_LEVELS[0], DEFAULT_TOPOLOGY_LEVELS[1]
RACKS = {f"{MEMBER}-topo-r1-0": "r1", f"{MEMBER}-topo-r2-0": "r2", f"{MEMBER}-topo-r2-1": "r2"}


def rack_nodes() -> list[Body]:
    nodes = []
    for name, rack in RACKS.items():
        node = node_manifests(MEMBER, [NodeShape(1, 4, cpu=32, memory_gi=128)])[0]
        node["metadata"]["name"] = name
        node["metadata"]["labels"].update({"kubernetes.io/hostname": name, BLOCK: "b1",
                                           RACK: rack})
        nodes.append(node)
    return nodes


def reports_racks(hub: Kube) -> bool:
    capacity = (hub.get(r.MEMBERCLUSTERS, MEMBER).get("status") or {}).get("capacity") or {}
    sets = capacity.get("labelSets") or []
    racks = {sets[g["labelSet"]][RACK] for g in capacity.get("nodeGroups") or []
             if "labelSet" in g and RACK in sets[g["labelSet"]]}
    assert RACK in (capacity.get("topologyLevels") or []), capacity
    assert racks == {"r1", "r2"}, capacity
    return True


@pytest.fixture(scope="module")
def racks(fleet: LocalFleet, hub: Kube) -> Iterator[Kube]:
    member = fleet.client(MEMBER)
    for node in rack_nodes():
        member.apply(r.NODES, node, field_manager="test")
    # (kwok marks the nodes Ready, then the agent reports them: slow on a busy machine)
    eventually(lambda: reports_racks(hub), timeout=240,
               what=f"{MEMBER}'s agent reporting racks r1 and r2")
    gang_namespace(hub, NS, cluster=MEMBER)
    try:
        yield member
    finally:
        delete_jobs(hub, NS, wait=True)
        for name in RACKS:
            member.delete(r.NODES, name)


def gang(name: str, workers: int) -> Body:
    """``workers`` replicas of 2 GPUs that must all run within one rack."""
    job = seed_pytorchjob(name, NS, gpus=2, workers=workers, master=False, run_for="1h")
    job["metadata"]["annotations"] = {TOPOLOGY_REQUIRED: RACK}
    return job


def test_a_required_rack_gang_runs_inside_one_rack(racks: Kube, hub: Kube) -> None:
    # 4 replicas of 2 GPUs: only r2 (8 GPUs) holds them all; r1 and the unlabelled nodes
    # (which have room, but are in no rack) must not get any.
    job = hub.create(r.PYTORCHJOBS, gang("in-one-rack", workers=4))
    hub_state(hub, job, "Running", timeout=120)
    # The hub chose rack r2 and says so in the Work ...
    works, _ = hub.list(r.WORKS, f"fleet-member-{MEMBER}",
                        label_selector=f"{JOB_UID}={job['metadata']['uid']}")
    assert [w["spec"]["placement"].get("domains") for w in works] == [
        [{BLOCK: "b1", RACK: "r2"}]]
    # ... the agent pinned the pods there, and the member's scheduler kept them in it.
    placed = pods(racks, job)
    assert len(placed) == 4
    for pod in placed.values():
        terms = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert {"key": RACK, "operator": "In", "values": ["r2"]} in terms[0]["matchExpressions"]
    nodes = {p["spec"]["nodeName"] for p in placed.values()}
    assert {RACKS.get(n) for n in nodes} == {"r2"}, nodes


def test_a_gang_no_rack_holds_waits_naming_the_level(racks: Kube, hub: Kube) -> None:
    # 5 replicas of 2 GPUs: more than any rack has (member2's unlabelled nodes would hold it).
    job = hub.create(r.PYTORCHJOBS, gang("no-rack-fits", workers=5))

    def queuing() -> Body | None:
        status = hub_job(hub, job).get("status") or {}
        found = next((c for c in status.get("conditions") or []
                      if c.get("type") == "Queuing" and c.get("reason") == "Unschedulable"),
                     None)
        return found if found and RACK in found.get("message", "") else None

    condition = eventually(queuing, timeout=60, what="a Queuing condition naming the rack level")
    assert f"no {RACK} domain holds all 5 replicas" in condition["message"]
    assert not hub_job(hub, job)["metadata"].get("annotations", {}).get("fleet.sh/placement")
    assert not pods(racks, job)


def test_a_level_that_is_no_label_key_keeps_the_job_waiting_naming_the_annotation(
        racks: Kube, hub: Kube) -> None:
    job = seed_pytorchjob("bad-level", NS, gpus=1, workers=1, master=False)
    job["metadata"]["annotations"] = {TOPOLOGY_REQUIRED: "a rack, please"}
    job = hub.create(r.PYTORCHJOBS, job)

    def invalid() -> Body | None:
        status = hub_job(hub, job).get("status") or {}
        return next((c for c in status.get("conditions") or []
                     if c.get("type") == "Queuing" and c.get("reason") == "Invalid"), None)

    condition = eventually(invalid, timeout=60, what="a Queuing condition, reason Invalid")
    assert f"metadata.annotations[{TOPOLOGY_REQUIRED}]" in condition["message"]


def test_a_roles_own_kueue_topology_keeps_that_role_in_one_rack(racks: Kube, hub: Kube) -> None:
    # Kueue's pod-set annotation on the workers' template only: the 2 workers of 2 GPUs keep
    # to one rack, r1 (its one node of 4 GPUs fits them most tightly; r2 may be taken by an
    # earlier test's gang), which they fill; the master is not pinned and runs outside it.
    job = seed_pytorchjob("role-rack", NS, gpus=2, workers=2, run_for="1h")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][
        KUEUE_TOPOLOGY_REQUIRED] = RACK
    job = hub.create(r.PYTORCHJOBS, job)
    hub_state(hub, job, "Running", timeout=120)
    works, _ = hub.list(r.WORKS, f"fleet-member-{MEMBER}",
                        label_selector=f"{JOB_UID}={job['metadata']['uid']}")
    [placement] = [w["spec"]["placement"] for w in works]
    assert placement["roleDomains"] == {"Worker": [{BLOCK: "b1", RACK: "r1"}]}
    assert "domains" not in placement
    placed = pods(racks, job)
    assert len(placed) == 3
    master = placed.pop("role-rack-master-0")
    affinity = master["spec"]["affinity"]["nodeAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in affinity  # not pinned
    assert affinity["preferredDuringSchedulingIgnoredDuringExecution"][0]["preference"] == {
        "matchExpressions": [{"key": RACK, "operator": "NotIn", "values": ["r1"]}]}
    assert RACKS.get(master["spec"]["nodeName"]) != "r1"
    assert {RACKS.get(p["spec"]["nodeName"]) for p in placed.values()} == {"r1"}
