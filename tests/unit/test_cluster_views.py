"""The hub's view of a member: alive from its heartbeat Lease or status, usable for new work
only while its capacity report is fresh."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

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
