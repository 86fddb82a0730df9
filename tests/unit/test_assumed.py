"""Capacity the hub assumes taken: carrying a pass's views over to the next must give the
same views as computing them afresh, whatever Works come, go or get reported, whatever members
report, and whatever binds are being written."""

from __future__ import annotations

import random
from datetime import datetime
from typing import Any

from fleet.hub.assumed import AssumedCapacity, share_requests, unreported_works
from fleet.hub.cache import Cache, Changes
from fleet.hub.views import cluster_view
from propagation.resources import Resources
from propagation.spent import with_assumed, with_held
from propagation.views import ClusterView, NodeGroup

Body = dict[str, Any]
OBSERVED = "2026-11-21T12:00:00.000000Z"


def member(name: str, reserved: tuple[str, ...] = ()) -> Body:
    return {"apiVersion": "fleet.sh/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": name},
            "status": {"lastHeartbeatTime": OBSERVED,
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "capacity": {"observedTime": OBSERVED, "reservedFor": list(reserved),
                                    "nodeGroups": [
                                        {"count": 4, "free": {"nvidia.com/gpu": 8,
                                                              "cpu": 64000}},
                                        {"count": 2, "free": {"nvidia.com/gpu": 2,
                                                              "cpu": 16000}}]}}}


def work(index: int, cluster: str, gpus: int, workers: int, bound: str | None = None) -> Body:
    container = {"name": "c", "image": "x",
                 "resources": {"limits": {"nvidia.com/gpu": str(gpus), "cpu": "1"}}}
    manifest = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                "metadata": {"name": f"j{index}", "namespace": "ns"},
                "spec": {"pytorchReplicaSpecs": {"Worker": {
                    "replicas": workers, "template": {"spec": {"containers": [container]}}}}}}
    return {"apiVersion": "fleet.sh/v1alpha1", "kind": "Work",
            "metadata": {"name": f"w{index}", "namespace": f"fleet-member-{cluster}",
                         "uid": f"uid-{index}", "generation": 1, "resourceVersion": str(index)},
            "spec": {"placement": {"cluster": cluster}, "job": {"uid": f"job-{index}"},
                     "manifests": [manifest]},
            "status": {"boundTime": bound} if bound else {}}


def fresh(clusters: list[ClusterView], cache: Cache,
          inflight: dict[str, list[Resources]] | None = None) -> dict[str, ClusterView]:
    unreported = unreported_works(cache.snapshot())
    return {c.name: with_assumed(with_assumed(c, [r for w in unreported.get(c.name, [])
                                                  for r in share_requests(w)]),
                                 (inflight or {}).get(c.name, [])) for c in clusters}


def test_carried_views_equal_fresh_ones_through_random_passes() -> None:
    rng = random.Random(7)
    cache = Cache()
    for name in ("a", "b"):
        cache.upsert("clusters", member(name))
    assumed = AssumedCapacity()
    live: list[Body] = []
    # binds being written: more come after the last, any one lands and goes
    inflight: dict[str, list[Resources]] = {"a": [], "b": []}
    for step in range(60):
        flying = inflight[rng.choice("ab")]
        if rng.random() < 0.6 or not flying:
            flying.append(Resources.of({"nvidia.com/gpu": rng.choice((1, 2, 8))}))
        else:
            flying.pop(rng.randrange(len(flying)))
        roll = rng.random()
        if roll < 0.6 or not live:  # a new Work, appended
            body = work(step, rng.choice("ab"), rng.choice((0, 1, 2, 4)), rng.randint(1, 3))
            live.append(body)
            cache.upsert("works", body)
        elif roll < 0.75:  # one goes away from the middle
            cache.remove("works", live.pop(rng.randrange(len(live))))
        elif roll < 0.85:  # one ends before any report counted it
            ended = rng.choice(live)
            ended["status"] = {"state": rng.choice(("Succeeded", "Failed"))}
            ended["metadata"]["resourceVersion"] = str(1000 + step)
            cache.upsert("works", ended)
        elif roll < 0.9:  # a member's new report: its nodes' free capacity moved
            body = member(rng.choice("ab"))
            body["status"]["capacity"]["nodeGroups"][0]["count"] = rng.randint(1, 6)
            body["metadata"]["resourceVersion"] = str(1000 + step)
            cache.upsert("clusters", body)
        else:  # the member reports one: bound before the report was taken
            reported = rng.choice(live)
            reported["status"] = {"boundTime": "2026-11-21T11:59:00.000000Z"}
            reported["metadata"]["resourceVersion"] = str(1000 + step)
            cache.upsert("works", reported)
        changes = cache.take_changed()
        snap = cache.snapshot()
        assumed.changed(snap, changes.works, changes.clusters)
        clusters = [cluster_view(b, _now(), 3600) for b in snap.clusters.values()]
        assert assumed.views(clusters, snap, inflight) == fresh(clusters, cache, inflight), \
            f"step {step}"
        # and it keeps the parsed shares of the unreported Works only
        assert set(assumed.kept_shares()) == {
            (w["metadata"]["uid"], 1) for ws in unreported_works(snap).values() for w in ws}


def test_a_reserved_work_is_not_assumed_twice() -> None:
    cache = Cache()
    cache.upsert("clusters", member("a", reserved=("w1",)))
    cache.upsert("works", work(1, "a", 8, 2))
    cache.upsert("works", work(2, "a", 8, 1))
    assert [w["metadata"]["name"] for w in unreported_works(cache.snapshot())["a"]] == ["w2"]


def test_a_work_resized_after_the_report_is_assumed_whole() -> None:
    # The report reserved (or saw bound) the share before the hub grew it: the grown share
    # is not in it, so the whole share is assumed until a report taken after the resize.
    cache = Cache()
    cache.upsert("clusters", member("a", reserved=("w1",)))
    grown = work(1, "a", 8, 3, bound="2026-11-21T11:59:00.000000Z")
    grown["metadata"]["annotations"] = {"fleet.sh/resized-at": "2026-11-21T12:00:01.000000Z"}
    cache.upsert("works", grown)
    cache.upsert("works", work(2, "a", 8, 1, bound="2026-11-21T11:59:00.000000Z"))
    assert [w["metadata"]["name"] for w in unreported_works(cache.snapshot())["a"]] == ["w1"]
    later = member("a", reserved=("w1",))
    later["status"]["capacity"]["observedTime"] = "2026-11-21T12:00:02.000000Z"
    cache.upsert("clusters", later)
    assert unreported_works(cache.snapshot()) == {}


def test_inflight_requests_come_off_last() -> None:
    cache = Cache()
    cache.upsert("clusters", member("a"))
    snap = cache.snapshot()
    clusters = [cluster_view(b, _now(), 3600) for b in snap.clusters.values()]
    inflight = share_requests(work(9, "a", 8, 3))
    views = AssumedCapacity().views(clusters, snap, {"a": inflight})
    assert views["a"].free["nvidia.com/gpu"] == 4 * 8 + 2 * 2 - 24


def test_a_share_is_assumed_on_the_nodes_its_decision_packed_it_onto() -> None:
    """Two empty 8-GPU nodes; a 1-GPU share bound to n2 (pinned there, say) and not reported
    yet is counted on n2, not on whichever node it fits best: the next 8-GPU job fits n1
    only. Counted where it fit best, n2 looked empty and a job was bound to a full node."""
    body = member("a")
    body["status"]["capacity"]["nodeGroups"] = [
        {"count": 2, "free": {"nvidia.com/gpu": 8, "cpu": 64000}, "nodes": ["n1", "n2"]}]
    cache = Cache()
    cache.upsert("clusters", body)
    pinned = work(1, "a", 1, 1)
    pinned["spec"]["placement"]["nodes"] = ["n2"]
    cache.upsert("works", pinned)
    snap = cache.snapshot()
    clusters = [cluster_view(b, _now(), 3600) for b in snap.clusters.values()]
    [view] = AssumedCapacity().views(clusters, snap, {}).values()
    free = {node: dict(g.free.items_)["nvidia.com/gpu"] for g in view.node_groups
            for node in g.nodes}
    assert free == {"n1": 8, "n2": 7}


def test_a_pass_tells_which_jobs_changed() -> None:
    cache = Cache()
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "j", "namespace": "ns", "uid": "u", "resourceVersion": "1"}}
    cache.upsert("jobs", job)
    cache.upsert("works", work(1, "a", 1, 1))
    changes = cache.take_changed()
    assert (changes.jobs, changes.work_jobs) == ({Cache.key(job)}, {"job-1"})
    assert changes.works == {Cache.key(work(1, "a", 1, 1))}
    assert changes.clusters == set()  # a Work is not its member
    cache.upsert("clusters", member("b"))
    cache.remove("jobs", job)
    again = cache.take_changed()
    assert (again.clusters, again.gone, again.jobs) == ({"b"}, {"u"}, {Cache.key(job)})
    assert cache.take_changed() == Changes()


def _now() -> datetime:
    return datetime.fromisoformat(OBSERVED.replace("Z", "+00:00"))


def test_capacity_held_on_a_node_never_goes_below_zero() -> None:
    """An 8-GPU hold on a node that still reports 4 free leaves it at 0, not -4: the rest of
    the planner reads free capacity as a count (a negative one once crashed a division)."""
    cluster = ClusterView("a", True, node_groups=(
        NodeGroup(1, Resources.of({"nvidia.com/gpu": 4, "cpu": 8000}), nodes=("n0",)),))
    held = with_held(cluster, [Resources.of({"nvidia.com/gpu": 8, "cpu": 1000})], ["n0"])
    [group] = held.node_groups
    assert dict(group.free.items_) == {"cpu": 7000}
