"""Elastic PyTorchJobs on the local fleet (issue 18): admitted at what fits (at least
``elasticPolicy.minReplicas``), grown in place as capacity frees, shrunk in place (not
evicted) when a higher-priority job of its tenant preempts it. The hub says each resize in a
``Resized`` event and condition; the member runs the new count without replacing the workers
that run, with torchrun's elastic rendezvous settings.

Run with ``-s`` to see the timings: decision (the hub's event) -> the replicas Running.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import yaml

from e2e.conftest import eventually
from e2e.jobs import delete_jobs, hub_job, hub_state, member, member_job, pods, seed_pytorchjob
from e2e.localfleet import LocalFleet
from e2e.localfleet.demo import EXAMPLES
from e2e.test_priority import idle_fleet, priority_classes
from e2e.test_propagation import policy as spread_policy
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e
Body = dict[str, Any]
NAMESPACE = "elastic"
GPU = "nvidia.com/gpu"
WORKER_GPUS = 2
# Above what jobs other modules may leave waiting (priority 0 at most): a job of at least its
# priority waiting for capacity holds an elastic job's growth back.
ELASTIC_CLASS, ELASTIC_PRIORITY = "fleet-e2e-elastic", 50
TREE = {
    "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
    "metadata": {"name": "elasticquotatree", "namespace": "kube-system"},
    "spec": {"root": {
        "name": "root", "min": {GPU: 64}, "max": {GPU: 64},
        "children": [{"name": "elastic", "min": {GPU: 8}, "max": {GPU: 8},
                      "namespaces": [NAMESPACE]}]}},
}


def elastic_classes(hub: Kube) -> None:
    """The priority classes of the e2e modules, and the elastic jobs' own."""
    priority_classes(hub)
    if hub.get_or_none(r.PRIORITYCLASSES, ELASTIC_CLASS) is None:
        hub.create(r.PRIORITYCLASSES, {"apiVersion": "scheduling.k8s.io/v1",
                                       "kind": "PriorityClass",
                                       "metadata": {"name": ELASTIC_CLASS},
                                       "value": ELASTIC_PRIORITY,
                                       "description": "fleet e2e: elastic jobs"})


@pytest.fixture
def tenant(fleet: LocalFleet, hub: Kube) -> Iterator[Kube]:
    """Namespace ``elastic``: a quota leaf of 8 GPUs, jobs queued for quota; the fleet idle
    (the job grows on the member it runs on: another module's gang there would stop it)."""
    elastic_classes(hub)
    idle_fleet(hub)
    if hub.get_or_none(r.NAMESPACES, NAMESPACE) is None:
        hub.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": NAMESPACE}})
    policy = yaml.safe_load((EXAMPLES / "propagationpolicy-gang-queue.yaml").read_text())
    policy["metadata"]["namespace"] = NAMESPACE
    hub.apply(r.PROPAGATIONPOLICIES, policy, field_manager="test")
    hub.apply(r.ELASTICQUOTATREES, TREE, field_manager="test")
    eventually(lambda: hub.get_or_none(r.QUEUES, "root-elastic", "kube-queue"),
               what="Queue root-elastic")
    yield hub
    delete_jobs(hub, NAMESPACE, wait=True)
    hub.delete(r.ELASTICQUOTATREES, "elasticquotatree", "kube-system")


def plain_job(name: str, priority_class: str, gpus: int) -> Body:
    """One replica of ``gpus`` GPUs, running an hour."""
    job = seed_pytorchjob(name, NAMESPACE, run_for="1h", gpus=gpus, workers=0)
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"][
        "priorityClassName"] = priority_class
    return job


def elastic_job(name: str, low: int, high: int) -> Body:
    """Workers only (torchrun elastic), ``WORKER_GPUS`` GPUs each, running an hour."""
    job = seed_pytorchjob(name, NAMESPACE, run_for="1h", gpus=WORKER_GPUS, workers=high,
                          master=False)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"][
        "priorityClassName"] = ELASTIC_CLASS
    job["spec"]["elasticPolicy"] = {"minReplicas": low, "maxReplicas": high,
                                    "rdzvId": "e2e", "maxRestarts": 3}
    return job


def events(hub: Kube, job: Body, reason: str | None = None) -> list[Body]:
    """The job's events in order: those of ``reason``, or all."""
    listed, _ = hub.list(r.EVENTS, job["metadata"]["namespace"],
                         field_selector=f"involvedObject.uid={job['metadata']['uid']}")
    return sorted((e for e in listed if reason is None or e.get("reason") == reason),
                  key=_stamp)


def _stamp(event: Body) -> float:
    text = event.get("eventTime") or event.get("lastTimestamp") or event.get("firstTimestamp")
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


def resized(hub: Kube, job: Body, containing: str, *others: Body) -> Body:
    """The job's Resized event whose message contains ``containing`` (waits for it); when
    none comes, the failure tells what the job and ``others`` went through."""
    try:
        return eventually(lambda: next((e for e in events(hub, job, "Resized")
                                        if containing in e["message"]), None),
                          timeout=90, what=f"a Resized event saying {containing!r}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{story(hub, job, *others)}") from None


def story(hub: Kube, *jobs: Body) -> str:
    """Each job's conditions and events, in order, as lines (a failure's explanation)."""
    lines = []
    for job in jobs:
        now = hub_job(hub, job)
        lines.append(f"{job['metadata']['name']}: annotations "
                     f"{now['metadata'].get('annotations') or {}}")
        for c in (now.get("status") or {}).get("conditions") or []:
            lines.append(f"  condition {c.get('type')}={c.get('status')} {c.get('reason')}: "
                         f"{c.get('message')}")
        for e in events(hub, job):
            lines.append(f"  event {e.get('reason')} x{e.get('count') or 1}: {e.get('message')}")
    return "\n".join(lines)


def resized_condition(hub: Kube, job: Body) -> Body | None:
    return next((c for c in (hub_job(hub, job).get("status") or {}).get("conditions") or []
                 if c.get("type") == "Resized"), None)


def running_workers(kube: Kube, job: Body, count: int) -> dict[str, Body]:
    """Wait until exactly ``count`` of the job's pods run there (and no others are left)."""
    def check() -> dict[str, Body] | None:
        found = {n: p for n, p in pods(kube, job).items()
                 if not p["metadata"].get("deletionTimestamp")}
        running = {n: p for n, p in found.items()
                   if (p.get("status") or {}).get("phase") == "Running"}
        return running if len(running) == len(found) == count else None
    return eventually(check, timeout=120, what=f"{count} workers Running")


def env(pod: Body) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}


def test_an_elastic_job_is_admitted_at_min_grows_and_shrinks_instead_of_dying(
        fleet: LocalFleet, tenant: Kube) -> None:
    hub = tenant
    # A job of the tenant takes 4 of its 8 GPUs: only 2 workers of 2 GPUs fit its quota.
    blocker = hub.create(r.PYTORCHJOBS, plain_job("blocker", "fleet-e2e-test", 4))
    hub_state(hub, blocker, "Running", timeout=90)

    created = time.time()
    job = hub.create(r.PYTORCHJOBS, elastic_job("elastic", 2, 4))
    said = resized(hub, job, "admitted with 2 of 2..4 worker replicas")
    kube = member(fleet, hub, job)
    first = running_workers(kube, job, 2)
    print(f"\nelastic admitted at its min: created -> 2 workers Running "
          f"{time.time() - created:.1f}s (at most)")
    hub_state(hub, job, "Running", timeout=60)
    copy = member_job(kube, job)
    assert copy is not None
    assert copy["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    rendezvous = env(next(iter(first.values())))
    assert rendezvous["PET_NNODES"] == "2:4"  # the same at any size: nobody restarts
    assert rendezvous["PET_RDZV_BACKEND"] == "c10d"
    assert rendezvous["PET_RDZV_ENDPOINT"].startswith("elastic-worker-0")
    assert rendezvous["PET_RDZV_ID"] == "e2e"
    assert rendezvous["PET_MAX_RESTARTS"] == "3"
    assert "WORLD_SIZE" not in rendezvous  # torchrun assigns it
    sized = eventually(lambda: resized_condition(hub, job), what="a Resized condition")
    assert sized["reason"] == "Sized"
    assert said["message"] in sized["message"]

    # The blocker ends: the elastic job grows in place to its max.
    hub.delete(r.PYTORCHJOBS, "blocker", NAMESPACE)
    grown = resized(hub, job, "grown 2→4 worker replicas")
    decided = _stamp(grown)
    now_running = running_workers(kube, job, 4)
    print(f"elastic grown 2->4: decision -> 4 workers Running "
          f"{time.time() - decided:.1f}s (at most)")
    assert {n: p["metadata"]["uid"] for n, p in first.items()} == {
        n: now_running[n]["metadata"]["uid"] for n in first}  # the first two kept running
    assert (member_job(kube, job) or {})["spec"]["pytorchReplicaSpecs"]["Worker"][
        "replicas"] == 4
    condition = eventually(lambda: (c := resized_condition(hub, job)) and
                           c["reason"] == "Grown" and c, what="the Resized condition: Grown")
    assert "grown 2→4" in condition["message"]

    # A prod job of the tenant needs 4 GPUs: the tenant is at its max, so the elastic job
    # gives back two workers instead of being evicted.
    prod = hub.create(r.PYTORCHJOBS, plain_job("prod", "fleet-e2e-prod", 4))
    shrunk = resized(hub, job, "shrunk 4→2 worker replicas", prod)
    assert f"preempted by PyTorchJob elastic/prod (priority 100 > {ELASTIC_PRIORITY})" in \
        shrunk["message"]
    decided = _stamp(shrunk)
    hub_state(hub, prod, "Running", timeout=120)
    print(f"elastic shrunk 4->2 for a prod job: decision -> preemptor Running "
          f"{time.time() - decided:.1f}s (at most)")
    left = running_workers(kube, job, 2)
    print(f"elastic shrunk 4->2: decision -> 2 workers left "
          f"{time.time() - decided:.1f}s (at most)")
    assert {n: p["metadata"]["uid"] for n, p in left.items()} == {
        n: p["metadata"]["uid"] for n, p in first.items()}  # the lowest indices stay
    assert not events(hub, job, "Preempted")  # shrunk, not evicted
    assert events(hub, prod, "Preempting")
    running = hub_state(hub, job, "Running", timeout=30)
    annotations = running["metadata"].get("annotations") or {}
    assert "fleet.sh/requeue" not in annotations
    condition = eventually(lambda: (c := resized_condition(hub, job)) and
                           c["reason"] == "Shrunk" and c, what="the Resized condition: Shrunk")
    assert "PyTorchJob elastic/prod" in condition["message"]
    # It does not grow back into the quota the prod job holds.
    time.sleep(3)
    assert len(events(hub, job, "Resized")) == 3


SPREAD = "elastic-spread"


@pytest.fixture
def spread(fleet: LocalFleet, hub: Kube) -> Iterator[Kube]:
    """Namespace ``elastic-spread``: gang jobs that may split over two members, no quota;
    the fleet idle."""
    elastic_classes(hub)
    idle_fleet(hub)
    if hub.get_or_none(r.NAMESPACES, SPREAD) is None:
        hub.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": SPREAD}})
    hub.apply(r.PROPAGATIONPOLICIES, spread_policy(SPREAD, split=2), field_manager="test")
    yield hub
    delete_jobs(hub, SPREAD, wait=True)


def test_an_elastic_job_grows_onto_another_member_when_its_own_is_full(
        fleet: LocalFleet, spread: Kube) -> None:
    hub = spread
    node_gpus = 8  # a worker per node: a member holds 4
    # A blocker fills one member; the elastic job (2..6 whole-node workers) is admitted at
    # the 4 the other member holds (its policy lets it split, but there is nowhere to).
    blocker = seed_pytorchjob("blocker", SPREAD, run_for="1h", gpus=node_gpus, workers=3)
    hub_state(hub, hub.create(r.PYTORCHJOBS, blocker), "Running", timeout=90)
    job = elastic_job("spreading", 2, 6)
    job["metadata"]["namespace"] = SPREAD
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "resources"]["limits"][GPU] = node_gpus
    job = hub.create(r.PYTORCHJOBS, job)
    resized(hub, job, "admitted with 4 of 2..6 worker replicas")
    home = member(fleet, hub, job)
    first = running_workers(home, job, 4)
    [home_name] = hub_job(hub, job)["metadata"]["annotations"]["fleet.sh/clusters"].split(",")
    [other_name] = [m for m in fleet.members if m != home_name]

    # The blocker ends: the job's member is still full, so it grows onto the other one,
    # with the indices after its highest, and the four that run keep running. (It grows by
    # what the member reports free at each pass: at once, or a node at a time as the
    # blocker's pods end.)
    hub.delete(r.PYTORCHJOBS, "blocker", SPREAD)
    grown = resized(hub, job, f"→6 worker replicas on {other_name}")
    steps = [e["message"] for e in events(hub, job, "Resized") if "grown" in e["message"]]
    assert steps[0].startswith("grown 4→")
    assert all(f" on {other_name}:" in m for m in steps)
    decided = _stamp(grown)
    other = fleet.client(other_name)
    added = running_workers(other, job, 2)
    print(f"\nelastic grown 4->6 onto {other_name}: decision -> 2 workers Running there "
          f"{time.time() - decided:.1f}s (at most)")
    assert sorted(added) == ["spreading-worker-4", "spreading-worker-5"]
    assert {n: p["metadata"]["uid"] for n, p in running_workers(home, job, 4).items()} == {
        n: p["metadata"]["uid"] for n, p in first.items()}
    rendezvous = env(next(iter(added.values())))  # worker 0 is on the first member
    assert rendezvous["PET_RDZV_ENDPOINT"].startswith(
        f"spreading-worker-0.{SPREAD}.svc.clusterset.local:")
    assert rendezvous["PET_NNODES"] == "2:6"
    running = hub_state(hub, job, "Running", timeout=60)
    assert sorted(running["status"]["clusters"]) == sorted(fleet.members)
