"""What the hub keeps from one pass to the next (job views and quota holdings remembered by
version, MemberClusters parsed once per object, bound jobs not mirrored again while
unchanged) gives the views and plans a hub that keeps nothing gives: a small scale bench's
hub runs passes that bind, write statuses and leave jobs waiting, and after each its
snapshot is viewed and planned by the remembering builder and by a fresh one."""

from __future__ import annotations

from datetime import UTC, datetime

from e2e.bench.passes import run_passes, scale_hub
from fleet.hub.pass_view import ViewBuilder
from fleet.hub.views import cluster_view
from planner import plan_pass


def test_remembered_views_plan_as_fresh_ones() -> None:
    scheduler, kube = scale_hub(members=3, nodes=30, jobs=90)
    decided = 0
    for _ in range(3):
        run_passes(scheduler, kube, 1)
        snap = scheduler.cache.snapshot()
        now = datetime.now(UTC)
        clusters = [cluster_view(b, now, 15.0, snap.heartbeat_lease(b["metadata"]["name"]))
                    for b in snap.clusters.values()]
        looked = list(scheduler.jobs_to_look_at(snap, {}, True, (set(), set())).values())

        def failed(_job: object, exc: Exception) -> None:
            raise exc

        kept = scheduler.views.build(snap, now, "t", looked, clusters, {}, failed)
        fresh = ViewBuilder().build(snap, now, "t", looked, clusters, {}, failed)
        assert kept == fresh
        plan = plan_pass(kept)
        assert plan.intents == plan_pass(fresh).intents
        decided += len(plan.binds) + len(plan.waits)
    assert decided
    assert kube.writes.get("works")  # some passes bound jobs
    assert sum(1 for j in snap.jobs.values() if (j.get("status") or {}).get("queue"))
