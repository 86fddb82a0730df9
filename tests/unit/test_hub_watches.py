"""The hub's watches record each event into the cache, and a bad one never ends a watch."""

from __future__ import annotations

from typing import Any, cast

from fleet.clients import resources as r
from fleet.clients.informer import ADDED, Informer
from fleet.hub import cache as stores
from fleet.hub.cache import Cache
from fleet.hub.watches import WATCHED, record


def a_job(name: str = "a", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}",
                         "resourceVersion": "5"},
            "spec": {"pytorchReplicaSpecs": {}, **spec}}


def test_events_go_into_the_cache_and_out_again() -> None:
    cache = Cache()
    record(cache, stores.JOBS, "ADDED", a_job())
    assert cache.snapshot_job(Cache.key(a_job())) is not None
    # a vanished object handed over as the informer's stub: named, no spec
    stub = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u-a"}}
    record(cache, stores.JOBS, "DELETED", stub)
    assert cache.snapshot_job(Cache.key(a_job())) is None


def test_a_job_another_controller_manages_is_never_in_the_cache() -> None:
    cache = Cache()
    job = a_job(runPolicy={"managedBy": "kueue.x-k8s.io/multikueue"})
    record(cache, stores.JOBS, "ADDED", job)
    assert cache.snapshot_job(Cache.key(job)) is None


def test_an_event_that_cannot_be_recorded_is_logged_not_raised(caplog: Any) -> None:
    record(Cache(), stores.JOBS, "ADDED", {"apiVersion": "v1", "kind": "X", "metadata": "oops"})
    assert "watch event not recorded" in caplog.text


def test_every_resource_the_hub_decides_from_is_watched() -> None:
    assert {w.store for w in WATCHED} == {
        stores.JOBS, stores.POLICIES, stores.CLUSTER_POLICIES, stores.CLUSTERS, stores.WORKS,
        stores.QUOTA_TREES, stores.QUEUES, stores.PRIORITY_CLASSES, stores.HEARTBEATS,
        stores.RUNTIMES}


def test_an_informer_that_does_not_keep_objects_keeps_their_outline() -> None:
    """A hub informer keeps a stub of each object (enough to hand over its deletion after a
    relist), not the object: the hub's cache has the object."""
    seen: list[tuple[str, Any]] = []
    informer = Informer(cast(Any, None), r.WORKS, handle=lambda kind, body: seen.append(
        (kind, body)), keep=False)
    body = {"apiVersion": "fleet.sh/v1alpha1", "kind": "Work",
            "metadata": {"name": "w", "namespace": "fleet-member-m1", "uid": "u1",
                         "resourceVersion": "7", "labels": {"a": "b"}},
            "spec": {"job": {"uid": "j"}}}
    informer._seen(ADDED, body)
    assert seen == [(ADDED, body)]
    assert informer.items() == [{"apiVersion": "fleet.sh/v1alpha1", "kind": "Work",
                                 "metadata": {"name": "w", "namespace": "fleet-member-m1",
                                              "uid": "u1", "resourceVersion": "7"}}]
    assert informer.get("fleet-member-m1", "w") == informer.items()[0]
    informer._seen(ADDED, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}})
    assert informer.get("", "n") == {"apiVersion": "v1", "kind": "Namespace",
                                     "metadata": {"name": "n"}}
