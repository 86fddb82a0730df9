"""The hub's view of a member: alive from its heartbeat Lease or status, usable for new work
only while its capacity report is fresh."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fleet.api.protocol import member_namespace
from fleet.hub.cache import CLUSTERS, HEARTBEATS, Cache
from fleet.hub.views import cluster_view, heartbeat_of
from propagation.clusters import filter_clusters
from propagation.views import Affinity

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
Body = dict[str, Any]


def ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def member(heartbeat: float, observed: float) -> Body:
    return {"apiVersion": "fleet.sh/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": "m"},
            "status": {"lastHeartbeatTime": ago(heartbeat),
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "capacity": {"observedTime": ago(observed), "nodeGroups": [
                           {"count": 1, "free": {"nvidia.com/gpu": 8}}]}}}


def lease(renewed: float) -> Body:
    return {"spec": {"renewTime": ago(renewed)}}


def test_the_lease_keeps_a_quiet_member_alive() -> None:
    body = member(heartbeat=40, observed=40)
    assert not cluster_view(body, NOW, 15).ready
    view = cluster_view(body, NOW, 15, lease(1))
    assert view.ready
    assert heartbeat_of(body, lease(1)) == NOW - timedelta(seconds=1)


def test_an_old_capacity_report_is_stale_and_gets_no_new_work() -> None:
    view = cluster_view(member(heartbeat=40, observed=100), NOW, 15, lease(1),
                        capacity_stale_after=90)
    assert view.ready
    assert view.stale_reason == "capacity report 100s old"
    filtered = filter_clusters([view], Affinity(), [])
    assert not filtered.eligible
    assert filtered.rejected == (("m", "capacity report 100s old"),)
    fresh = cluster_view(member(heartbeat=1, observed=10), NOW, 15, capacity_stale_after=90)
    assert filter_clusters([fresh], Affinity(), []).eligible


def test_a_member_is_judged_by_when_the_hub_heard_it_not_by_its_clock() -> None:
    """An agent whose clock is a minute behind the hub's, renewing every 2 s: alive while
    its renewals keep coming, lost once they stop for the timeout, whatever its stamps say."""
    now = [0.0]
    cache = Cache(clock=lambda: now[0])
    skewed = member(heartbeat=60, observed=60)  # its stamps read a minute old
    cache.upsert(CLUSTERS, skewed)
    for beat in range(10):  # a renewal every 2 s, each stamped a minute behind
        now[0] = beat * 2.0
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "fleet-agent", "namespace": member_namespace("m")},
                "spec": {"renewTime": ago(60 - beat * 2.0)}}
        cache.upsert(HEARTBEATS, body)
        snap = cache.snapshot()
        view = cluster_view(skewed, NOW, 15, body, 90, heard=snap.heard_at("m", NOW),
                            reported=snap.reported_at("m", NOW))
        assert view.ready, view.not_ready_reason
        assert not view.stale_reason
    now[0] += 16  # then silence
    snap = cache.snapshot()
    view = cluster_view(skewed, NOW, 15, body, heard=snap.heard_at("m", NOW))
    assert not view.ready
    assert view.not_ready_reason == "agent heartbeat 16s old"
    now[0] += 100  # and its capacity report, unchanged since the start, is stale
    snap = cache.snapshot()
    assert cluster_view(skewed, NOW, 15, body, 90,
                        reported=snap.reported_at("m", NOW)).stale_reason.startswith(
        "capacity report 134s old")
