"""Priorities and preemption on the local fleet (issue 18).

PriorityClasses that exist only on the hub reach the members that run the jobs naming them;
a prod job preempts a test job of its own tenant at its max; an opportunistic job runs on
idle GPUs and is the first preempted; a guaranteed job goes where capacity is free instead of
preempting anyone. Each shows its events and conditions on the hub.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
import yaml

from e2e.conftest import eventually
from e2e.jobs import (
    delete_jobs,
    gang_namespace,
    hub_job,
    hub_state,
    member,
    pods,
    seed_pytorchjob,
)
from e2e.localfleet import LocalFleet
from e2e.localfleet.demo import EXAMPLES
from fleet.api.protocol import (
    JOB_UID,
    PROPAGATED_LABEL,
    REQUEUED_AT,
    TENANT,
    member_namespace,
    reported_pods,
)
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e
Body = dict[str, Any]
CLASSES = {"fleet-e2e-prod": 100, "fleet-e2e-test": 0, "fleet-e2e-oppo": -1}
GPU = "nvidia.com/gpu"
NODE_GPUS = 8  # the local fleet's node shape: 2 members x 4 nodes x 8 GPUs


def priority_classes(hub: Kube) -> None:
    for name, value in CLASSES.items():
        if hub.get_or_none(r.PRIORITYCLASSES, name) is None:
            hub.create(r.PRIORITYCLASSES, {"apiVersion": "scheduling.k8s.io/v1",
                                           "kind": "PriorityClass", "metadata": {"name": name},
                                           "value": value,
                                           "description": "fleet e2e: HiveD's demo levels"})


def job_of(name: str, namespace: str, priority_class: str, *, nodes: int) -> Body:
    """A PyTorchJob taking ``nodes`` whole nodes (one 8-GPU replica each), running an hour."""
    manifest = seed_pytorchjob(name, namespace, run_for="1h", gpus=NODE_GPUS,
                               workers=nodes - 1 if nodes > 1 else 0)
    for spec in manifest["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["priorityClassName"] = priority_class
    return manifest



def events(hub: Kube, job: Body, reason: str) -> list[Body]:
    """The job's events of ``reason`` (by uid: names repeat from test to test)."""
    listed, _ = hub.list(r.EVENTS, job["metadata"]["namespace"],
                         field_selector=f"involvedObject.uid={job['metadata']['uid']}")
    return [e for e in listed if e.get("reason") == reason]


def preempted_condition(hub: Kube, job: Body) -> Body | None:
    return next((c for c in (hub_job(hub, job).get("status") or {}).get("conditions") or []
                 if c.get("type") == "Preempted" and c.get("status") == "True"), None)


def queue_reason(hub: Kube, job: Body) -> str:
    return str(((hub_job(hub, job).get("status") or {}).get("queue") or {}).get("reason", ""))


def event_time(hub: Kube, job: Body, reason: str) -> float:
    listed, _ = hub.list(r.EVENTS, job["metadata"]["namespace"],
                         field_selector=f"involvedObject.uid={job['metadata']['uid']}")
    stamps = [e.get("eventTime") or e.get("firstTimestamp") for e in listed
              if e.get("reason") == reason]
    return min(_seconds(s) for s in stamps if s)


def _seconds(stamp: str) -> float:
    from datetime import datetime
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@pytest.fixture
def prio(fleet: LocalFleet, hub: Kube) -> Iterator[Kube]:
    """Namespace ``prio`` under a gang policy (no quota) and the demo classes."""
    priority_classes(hub)
    gang_namespace(hub, "prio")
    idle_fleet(hub)
    yield hub
    delete_jobs(hub, "prio", wait=True)


def idle_fleet(hub: Kube) -> None:
    """Wait for every member to report all its GPUs free: these tests fill members whole, so
    a gang of an earlier test still ending there would be preempted in their place (modules
    delete the jobs they leave running: ``e2e.jobs.delete_jobs``)."""
    def idle() -> bool:
        clusters, _ = hub.list(r.MEMBERCLUSTERS)
        capacities = [((c.get("status") or {}).get("capacity") or {}) for c in clusters]
        return bool(clusters) and all(
            cap.get("free", {}).get(GPU) == cap.get("allocatable", {}).get(GPU)
            for cap in capacities)
    eventually(idle, timeout=180, what="every member's GPUs free")


def test_a_priority_class_only_on_the_hub_reaches_the_member_and_follows_it(
        fleet: LocalFleet, prio: Kube) -> None:
    hub = prio
    for kube in (hub, *(fleet.client(m) for m in fleet.members)):
        if kube.get_or_none(r.PRIORITYCLASSES, "fleet-e2e-carried") is not None:
            kube.delete(r.PRIORITYCLASSES, "fleet-e2e-carried")
    hub.create(r.PRIORITYCLASSES, {"apiVersion": "scheduling.k8s.io/v1",
                                   "kind": "PriorityClass",
                                   "metadata": {"name": "fleet-e2e-carried"}, "value": 5})
    job = hub.create(r.PYTORCHJOBS, job_of("classy", "prio", "fleet-e2e-carried", nodes=1))
    running = hub_state(hub, job, "Running", timeout=90)  # its pods were admitted there
    kube = member(fleet, hub, job)
    carried = kube.get(r.PRIORITYCLASSES, "fleet-e2e-carried")
    assert carried["value"] == 5
    assert carried["metadata"]["labels"][PROPAGATED_LABEL] == "true"
    assert not carried.get("globalDefault")
    assert running["status"]["clusters"]
    # The hub's class changes (a value is immutable: deleted and made again): the next job
    # that names it brings the new value to the member, which replaces the one fleet made.
    hub.delete(r.PRIORITYCLASSES, "fleet-e2e-carried")
    eventually(lambda: hub.get_or_none(r.PRIORITYCLASSES, "fleet-e2e-carried") is None,
               what="the hub's class gone")
    hub.create(r.PRIORITYCLASSES, {"apiVersion": "scheduling.k8s.io/v1",
                                   "kind": "PriorityClass",
                                   "metadata": {"name": "fleet-e2e-carried"}, "value": 7})
    again = hub.create(r.PYTORCHJOBS, job_of("classy-2", "prio", "fleet-e2e-carried",
                                             nodes=1))
    hub_state(hub, again, "Running", timeout=90)
    where = member(fleet, hub, again)
    eventually(lambda: where.get(r.PRIORITYCLASSES, "fleet-e2e-carried")["value"] == 7,
               what="the member's class replaced with the hub's new value")


def test_an_opportunistic_job_runs_on_idle_gpus_and_is_preempted_first(prio: Kube) -> None:
    hub = prio
    # Fill the fleet: an opportunistic gang on one member, a test gang on the other.
    oppo = hub.create(r.PYTORCHJOBS, job_of("oppo-first", "prio", "fleet-e2e-oppo", nodes=4))
    hub_state(hub, oppo, "Running", timeout=90)
    test = hub.create(r.PYTORCHJOBS, job_of("test", "prio", "fleet-e2e-test", nodes=4))
    hub_state(hub, test, "Running", timeout=90)
    prod = hub.create(r.PYTORCHJOBS, job_of("prod", "prio", "fleet-e2e-prod", nodes=1))
    said = eventually(lambda: events(hub, oppo, "Preempted"), timeout=60,
                      what="the opportunistic job preempted")
    assert "preempted by PyTorchJob prio/prod (priority 100 > -1)" in said[0]["message"]
    eventually(lambda: events(hub, prod, "Preempting"), what="the Preempting event")
    hub_state(hub, prod, "Running", timeout=120)
    decided = event_time(hub, prod, "Preempting")
    print(f"preemption decided -> preemptor Running: {time.time() - decided:.1f}s (at most)")
    assert not events(hub, test, "Preempted")  # the guaranteed test job keeps running
    condition = eventually(lambda: preempted_condition(hub, oppo), timeout=90,
                           what="a Preempted condition on the opportunistic job")
    assert "PyTorchJob prio/prod" in condition["message"]
    requeued = hub_job(hub, oppo)
    assert requeued["status"]["queue"]["reason"] in ("Preempted", "Unschedulable")
    # its queue's starvation count starts again from here, not from its creation
    assert REQUEUED_AT in requeued["metadata"]["annotations"]


def test_a_guaranteed_job_goes_where_capacity_is_free_instead_of_preempting(
        prio: Kube) -> None:
    hub = prio
    oppo = hub.create(r.PYTORCHJOBS, job_of("oppo-idle", "prio", "fleet-e2e-oppo", nodes=4))
    running = hub_state(hub, oppo, "Running", timeout=90)
    full = running["status"]["clusters"][0]
    prod = hub.create(r.PYTORCHJOBS, job_of("prod-lazy", "prio", "fleet-e2e-prod", nodes=1))
    placed = hub_state(hub, prod, "Running", timeout=90)
    assert placed["status"]["clusters"] != [full]
    assert not events(hub, oppo, "Preempted")
    assert not events(hub, prod, "Preempting")


TENANT_TREE = {
    "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
    "metadata": {"name": "elasticquotatree", "namespace": "kube-system"},
    "spec": {"root": {
        "name": "root", "min": {"nvidia.com/gpu": 64}, "max": {"nvidia.com/gpu": 64},
        "children": [{"name": "tenant", "min": {"nvidia.com/gpu": 8},
                      "max": {"nvidia.com/gpu": 8}, "namespaces": ["prio-tenant"]}]}},
}


@pytest.fixture
def tenant(fleet: LocalFleet, hub: Kube) -> Iterator[Kube]:
    """Namespace ``prio-tenant``: a quota leaf of 8 GPUs, jobs queued for quota."""
    priority_classes(hub)
    if hub.get_or_none(r.NAMESPACES, "prio-tenant") is None:
        hub.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": "prio-tenant"}})
    policy = yaml.safe_load((EXAMPLES / "propagationpolicy-gang-queue.yaml").read_text())
    policy["metadata"]["namespace"] = "prio-tenant"
    hub.apply(r.PROPAGATIONPOLICIES, policy, field_manager="test")
    hub.apply(r.ELASTICQUOTATREES, TENANT_TREE, field_manager="test")
    eventually(lambda: hub.get_or_none(r.QUEUES, "root-tenant", "kube-queue"),
               what="Queue root-tenant")
    yield hub
    delete_jobs(hub, "prio-tenant", wait=True)
    hub.delete(r.ELASTICQUOTATREES, "elasticquotatree", "kube-system")


def test_a_prod_job_preempts_a_test_job_of_its_tenant_at_its_max(tenant: Kube) -> None:
    hub = tenant
    test = hub.create(r.PYTORCHJOBS, job_of("test", "prio-tenant", "fleet-e2e-test", nodes=1))
    hub_state(hub, test, "Running", timeout=90)  # the tenant is at its max: 8 of 8 GPUs
    prod = hub.create(r.PYTORCHJOBS, job_of("prod", "prio-tenant", "fleet-e2e-prod", nodes=1))
    said = eventually(lambda: events(hub, test, "Preempted"), timeout=60,
                      what="the test job preempted")
    assert said[0]["type"] == "Warning"
    assert "preempted by PyTorchJob prio-tenant/prod (priority 100 > 0)" in said[0]["message"]
    hub_state(hub, prod, "Running", timeout=120)
    decided = event_time(hub, prod, "Preempting")
    print(f"preemption decided -> preemptor Running: {time.time() - decided:.1f}s (at most)")
    condition = eventually(lambda: preempted_condition(hub, test), timeout=90,
                           what="a Preempted condition on the test job")
    assert "PyTorchJob prio-tenant/prod" in condition["message"]
    # it waits in its queue again for the tenant's quota, first in line after prod
    eventually(lambda: queue_reason(hub, test) == "QuotaExceeded", timeout=60,
               what="the test job waiting for quota")
    assert hub_job(hub, test)["status"]["queue"]["position"] == 1


TWO_TENANTS = {
    "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
    "metadata": {"name": "elasticquotatree", "namespace": "kube-system"},
    "spec": {"root": {
        "name": "root", "min": {"nvidia.com/gpu": 64}, "max": {"nvidia.com/gpu": 64},
        "children": [{"name": name, "min": {"nvidia.com/gpu": 16},
                      "max": {"nvidia.com/gpu": 32}, "namespaces": [f"prio-{name}"]}
                     for name in ("alpha", "beta")]}},
}


@pytest.fixture
def two_tenants(fleet: LocalFleet, hub: Kube) -> Iterator[tuple[Kube, str]]:
    """Namespaces ``prio-alpha`` and ``prio-beta``, each its own quota leaf, their jobs queued
    for quota and placed on the first member only; the member named."""
    # a member of four nodes (modules before may have joined smaller ones)
    where = next(name for name, shapes in sorted(fleet.members.items())
                 if sum(s.count for s in shapes if s.gpus == NODE_GPUS) == 4)
    policy = yaml.safe_load((EXAMPLES / "propagationpolicy-gang-queue.yaml").read_text())
    policy["spec"]["placement"]["clusterAffinity"] = {"clusterNames": [where]}
    for namespace in ("prio-alpha", "prio-beta"):
        if hub.get_or_none(r.NAMESPACES, namespace) is None:
            hub.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": namespace}})
        policy["metadata"]["namespace"] = namespace
        hub.apply(r.PROPAGATIONPOLICIES, policy, field_manager="test")
    hub.apply(r.ELASTICQUOTATREES, TWO_TENANTS, field_manager="test")
    eventually(lambda: hub.get_or_none(r.QUEUES, "root-beta", "kube-queue"),
               what="Queue root-beta")
    idle_fleet(hub)
    yield hub, where
    for namespace in ("prio-alpha", "prio-beta"):
        delete_jobs(hub, namespace, wait=True)
    hub.delete(r.ELASTICQUOTATREES, "elasticquotatree", "kube-system")


def sized(name: str, namespace: str, *, replicas: int, gpus: int, cpu: str) -> Body:
    """A PyTorchJob of ``replicas`` pods (a master, then workers) of ``gpus`` GPUs and
    ``cpu`` cores each, running an hour."""
    manifest = seed_pytorchjob(name, namespace, run_for="1h", gpus=gpus,
                               workers=replicas - 1 if replicas > 1 else 0)
    for spec in manifest["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = cpu
    return manifest


def test_each_tenants_pods_keep_to_nodes_of_their_own_on_a_member(
        fleet: LocalFleet, two_tenants: tuple[Kube, str]) -> None:
    """On a member of four 8-GPU nodes, each tenant's guarantee owns some (its cells, named in
    its Works). Alpha's first job, three 4-GPU pods, keeps to alpha's cells, where the
    member's scheduler alone would spread it over the least allocated nodes; beta's small
    job goes to beta's cells, and alpha's next pod beside alpha's own, never beside beta's."""
    hub, where = two_tenants
    kube = fleet.client(where)
    first = hub.create(r.PYTORCHJOBS, sized("alpha-1", "prio-alpha", replicas=3, gpus=4,
                                            cpu="16"))
    hub_state(hub, first, "Running", timeout=90)
    small = hub.create(r.PYTORCHJOBS, sized("beta-1", "prio-beta", replicas=1, gpus=1,
                                            cpu="1"))
    hub_state(hub, small, "Running", timeout=90)
    second = hub.create(r.PYTORCHJOBS, sized("alpha-2", "prio-alpha", replicas=1, gpus=4,
                                             cpu="1"))
    hub_state(hub, second, "Running", timeout=90)
    alpha, beta = set(cells_of(hub, first, where)), set(cells_of(hub, small, where))
    assert alpha, "alpha's guarantee owns no node of the member its jobs go to"
    assert beta, "beta's guarantee owns no node of the member its jobs go to"
    assert not alpha & beta
    nodes = {job["metadata"]["name"]: {p["spec"]["nodeName"] for p in pods(kube, job).values()}
             for job in (first, small, second)}
    assert nodes["alpha-1"] <= alpha, nodes
    assert nodes["beta-1"] <= beta, nodes
    assert nodes["alpha-2"] <= nodes["alpha-1"], nodes  # not beside beta's pod
    for job, tenant, cells in ((first, "root.alpha", alpha), (small, "root.beta", beta)):
        for pod in pods(kube, job).values():
            assert pod["metadata"]["labels"][TENANT] == tenant
            terms = pod["spec"]["affinity"]["podAntiAffinity"][
                "preferredDuringSchedulingIgnoredDuringExecution"]
            assert terms[-1]["podAffinityTerm"]["labelSelector"]["matchExpressions"][1] == {
                "key": TENANT, "operator": "NotIn", "values": [tenant]}
            preferred = pod["spec"]["affinity"]["nodeAffinity"][
                "preferredDuringSchedulingIgnoredDuringExecution"]
            assert {p["preference"]["matchFields"][0]["values"][0] for p in preferred} == cells
    assert hub_job(hub, first)["metadata"]["annotations"][TENANT] == "root/alpha"


def test_a_job_within_its_guarantee_takes_a_node_back_from_a_borrower_of_equal_priority(
        fleet: LocalFleet, two_tenants: tuple[Kube, str]) -> None:
    """Alpha's 4-GPU job stands on one node; beta borrows the other three (24 GPUs of its
    16-GPU min) with jobs of the same priority. Alpha's 8-GPU gang is within alpha's
    guarantee and its quota fits, but no node holds it and no priority lets it preempt: the
    hub takes one of beta's borrowed jobs for it (the youngest of those on alpha's cells,
    where the gang is then at home), as on alpha's private cluster it would not have waited
    for beta."""
    hub, where = two_tenants
    first = hub.create(r.PYTORCHJOBS, sized("alpha-1", "prio-alpha", replicas=1, gpus=4,
                                            cpu="1"))
    hub_state(hub, first, "Running", timeout=90)
    borrowed = []
    for i in range(3):
        borrowed.append(hub.create(r.PYTORCHJOBS, sized(f"beta-{i}", "prio-beta", replicas=1,
                                                        gpus=8, cpu="1")))
        hub_state(hub, borrowed[-1], "Running", timeout=90)
    for job in borrowed:
        eventually(partial(reported, hub, job, where), what="beta's pods reported")
    home = set(cells_of(hub, first, where))
    at_home = [job for job in borrowed if set(nodes_of(hub, job, where)) & home]
    youngest = (at_home or borrowed)[-1]
    big = hub.create(r.PYTORCHJOBS, sized("alpha-big", "prio-alpha", replicas=1, gpus=8,
                                          cpu="1"))
    said = eventually(lambda: events(hub, youngest, "Preempted"), timeout=60,
                      what="beta's youngest borrowed job on alpha's cells preempted")
    assert "preempted by PyTorchJob prio-alpha/alpha-big, which claims the guarantee of " \
        "root/alpha" in said[0]["message"]
    hub_state(hub, big, "Running", timeout=120)
    decided = event_time(hub, big, "Preempting")
    print(f"reclaim for nodes decided -> claimant Running: {time.time() - decided:.1f}s "
          "(at most)")
    assert not any(preempted_condition(hub, job) for job in borrowed
                   if job is not youngest)  # one was enough
    eventually(lambda: queue_reason(hub, youngest) != "", timeout=60,
               what="beta's job waiting in its queue again")


def pinned(name: str, namespace: str, node: str, *, gpus: int) -> Body:
    """A one-pod PyTorchJob of ``gpus`` GPUs that requires ``node`` (a nodeSelector on its
    hostname), running an hour."""
    manifest = sized(name, namespace, replicas=1, gpus=gpus, cpu="1")
    for spec in manifest["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return manifest


def reported(hub: Kube, job: Body, where: str) -> bool:
    """Whether the job's Work reports every pod on a node: only then does the hub know what
    preempting it frees (a plan made before picks among the jobs it can see)."""
    works, _ = hub.list(r.WORKS, member_namespace(where),
                        label_selector=f"{JOB_UID}={job['metadata']['uid']}")
    return bool(works) and all(
        (pods := reported_pods(w)) and all(p.get("node") for p in pods) for w in works)


def nodes_of(hub: Kube, job: Body, where: str) -> list[str]:
    """The nodes the job's Work reports its pods on."""
    works, _ = hub.list(r.WORKS, member_namespace(where),
                        label_selector=f"{JOB_UID}={job['metadata']['uid']}")
    return [p["node"] for w in works for p in reported_pods(w) if p.get("node")]


def cells_of(hub: Kube, job: Body, where: str) -> list[str]:
    """The tenant's cells on ``where`` as the job's Work names them."""
    def named() -> list[str] | None:
        works, _ = hub.list(r.WORKS, member_namespace(where),
                            label_selector=f"{JOB_UID}={job['metadata']['uid']}")
        return list(works[0]["spec"]["placement"].get("cells") or []) if works else None
    return eventually(named, what=f"{job['metadata']['name']}'s Work")


def test_a_guarantee_takes_back_its_cells_from_another_tenant_within_its_min(
        fleet: LocalFleet, two_tenants: tuple[Kube, str]) -> None:
    """HiveD's cells: alpha's guarantee owns whole nodes. Beta, within its own min (4 of 16
    GPUs), runs a 1-GPU pod on every node of the member, some of them alpha's cells. Alpha's
    8-GPU gang fits no node, no priority lets it preempt, and no tenant borrows: before
    cells it waited for beta's jobs to end. Now one of beta's pods on alpha's cells, a guest
    there, goes; beta's pods on its own cells stay."""
    hub, where = two_tenants
    kube = fleet.client(where)
    probe = hub.create(r.PYTORCHJOBS, sized("alpha-probe", "prio-alpha", replicas=1, gpus=1,
                                            cpu="1"))
    cells = set(cells_of(hub, probe, where))
    assert cells, "alpha's guarantee owns no node of the member its jobs go to"
    assert eventually(lambda: pod_node(kube, probe), what="the probe's pod bound") in cells
    delete_jobs(hub, "prio-alpha", wait=True)
    nodes, _ = kube.list(r.NODES)
    names = sorted(n["metadata"]["name"] for n in nodes
                   if (n.get("status") or {}).get("allocatable", {}).get(GPU) == str(NODE_GPUS))
    assert set(names) - cells, "alpha owns every node of the member"
    pinned_to = {node: hub.create(r.PYTORCHJOBS, pinned(f"beta-on-{i}", "prio-beta", node,
                                                        gpus=1))
                 for i, node in enumerate(names)}
    for job in pinned_to.values():
        hub_state(hub, job, "Running", timeout=90)
        eventually(partial(reported, hub, job, where), what="beta's pods reported")
    guests = {node: job for node, job in pinned_to.items() if node in cells}
    big = hub.create(r.PYTORCHJOBS, sized("alpha-big", "prio-alpha", replicas=1, gpus=8,
                                          cpu="1"))

    def preempted() -> list[tuple[str, Body]]:
        return [(node, said[0]) for node, job in pinned_to.items()
                if (said := events(hub, job, "Preempted"))]

    [(node, said)] = eventually(preempted, timeout=60, what="a guest on alpha's cells preempted")
    assert node in guests, f"beta's pod on {node}, not one of alpha's cells, was preempted"
    assert said["message"].startswith(
        "preempted by PyTorchJob prio-alpha/alpha-big, which claims the guarantee of "
        f"root/alpha: it ran on root/alpha's cells ({node})"), said["message"]
    hub_state(hub, big, "Running", timeout=120)
    decided = event_time(hub, big, "Preempting")
    print(f"cell taken back: decided -> claimant Running: {time.time() - decided:.1f}s "
          "(at most)")
    assert eventually(lambda: pod_node(kube, big), what="alpha's gang bound") == node
    assert len(preempted()) == 1  # one guest was enough; beta's own cells untouched


def pod_node(kube: Kube, job: Body) -> str | None:
    found = pods(kube, job)
    return next((p["spec"].get("nodeName") for p in found.values()
                 if p["spec"].get("nodeName")), None)
