"""The hub's incremental shell plans as a fresh one: what it carries from one pass to the
next (the waiting jobs by class, the quota ledger, the running jobs, the assumed capacity,
job views by version) gives the binds a hub that starts afresh on every pass gives. A
small scale bench's hub runs passes that bind, write statuses and leave jobs waiting, with
jobs ending between them; before each, its snapshot is viewed and planned from scratch by a
fresh shell, and the pass must bind exactly those jobs, alike."""

from __future__ import annotations

from datetime import UTC, datetime

from e2e.bench.passes import finish, scale_hub, settle
from fleet.hub.cache import Changes
from fleet.hub.pass_view import Carried
from fleet.hub.scheduler import Scheduler
from fleet.hub.views import cluster_view
from planner import plan_pass


def test_an_incremental_hub_binds_as_a_fresh_one() -> None:
    scheduler, kube = scale_hub(members=3, nodes=30, jobs=120)
    bound = 0
    for round_ in range(6):
        if round_:
            finish(kube, 6)
        snap = scheduler.cache.snapshot()
        now = datetime.now(UTC)
        clusters = [cluster_view(b, now, 15.0, snap.heartbeat_lease(b["metadata"]["name"]))
                    for b in snap.clusters.values()]
        fresh = Scheduler(scheduler.cache, scheduler.dispatcher, scheduler.elector)
        looked = fresh.jobs_to_look_at(snap, {}, set(), Changes(), everything=True)
        carried = scheduler._carried or Carried()
        expected = plan_pass(fresh.pass_view(
            snap, now, clusters, {}, list(looked.values()),
            carried=Carried(carried.holds, carried.retry_at, carried.reservations)))
        plan = scheduler.pass_once()
        settle(scheduler)
        assert [(b.job, b.shares) for b in plan.binds] == \
            [(b.job, b.shares) for b in expected.binds], f"round {round_}"
        bound += len(plan.binds)
    assert bound
    assert sum(1 for j in snap.jobs.values() if (j.get("status") or {}).get("queue"))
