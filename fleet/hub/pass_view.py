"""The hub's snapshot step: from the cache's objects to the planner's frozen
:class:`~planner.view.PassView`, at the cost of what changed.

A pass is handed the jobs to look at (those that changed, and the bound ones when their
timers are due); the waiting jobs it is not handed come back from the last plan
(:class:`planner.waiting.Waiting`). What every pass reads of all jobs is kept current from
the changes rather than walked again: each job's view (:mod:`fleet.hub.job_views`), who
holds quota (:mod:`fleet.hub.quota_holdings`), the running jobs preemption and backfill read
(:mod:`fleet.hub.running_jobs`), the capacity bound but not yet reported
(:mod:`fleet.hub.assumed`). A pass whose policies or PriorityClasses changed looks at every
job again.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fleet.hub import preemption_views as pv
from fleet.hub import queueing as q
from fleet.hub.assumed import AssumedCapacity
from fleet.hub.cache import Body, Changes, Snapshot
from fleet.hub.job_views import Context, JobViews
from fleet.hub.quota_holdings import QuotaHoldings
from fleet.hub.running_jobs import RunningJobs
from fleet.hub.views import cell_nodes, heartbeat_of, parse_time
from planner.elastic import count
from planner.view import (
    BackfillReservation,
    Hold,
    JobView,
    PassView,
    PreemptionView,
    QuotaView,
    Stage,
)
from planner.waiting import Waiting
from propagation.resources import Resources
from propagation.views import ClusterView, FitMode
from quota.cells import Cells, deal, guarantees
from quota.engine import Holding
from quota.priority import is_opportunistic
from quota.queues import queue_names
from quota.tree import QuotaNode, leaves_by_namespace, walk

# Preemption: the planner runs for at most this many waiting jobs a pass (each walks the
# running jobs), and the capacity freed for a preemptor is held this long at most.
PREEMPTION_PLANS_PER_PASS = 3
PREEMPTION_HOLD_SECONDS = 300.0
PREEMPTION_RETRY_SECONDS = 5.0  # a job with no plan is planned for again after this long


@dataclass(frozen=True)
class Carried:
    """What the last plan left for this pass (the planner keeps nothing itself)."""

    holds: Mapping[str, Hold] = field(default_factory=dict)  # capacity held for preemptors
    retry_at: Mapping[str, float] = field(default_factory=dict)  # plan again after
    reservations: Mapping[str, BackfillReservation] = field(default_factory=dict)  # backfill's
    waiting: Waiting | None = None  # the waiting jobs (None: the pass is handed them all)


def lost_since(snap: Snapshot, now: datetime) -> dict[str, float]:
    """When each member stopped being usable: its Ready condition turning False, or the
    last time the hub heard its agent."""
    out: dict[str, float] = {}
    for body in snap.clusters.values():
        status = body.get("status") or {}
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"),
                     None)
        since = None
        if ready is not None and ready.get("status") != "True":
            since = parse_time(ready.get("lastTransitionTime"))
        since = since or snap.heard_at(body["metadata"]["name"], now) or heartbeat_of(
            body, snap.heartbeat_lease(body["metadata"]["name"]))
        if since is not None:
            out[body["metadata"]["name"]] = since.timestamp()
    return out


def leaf_queue_names(root: QuotaNode) -> dict[str, str]:
    """Queue names by tree-node key ("root/a")."""
    return {"/".join(path): name for path, name in queue_names(p.path for p in walk(root)).items()}


@dataclass
class PassViewBuilder:
    """Builds each pass's view from the cache's snapshot and what changed since the last."""

    fit_mode: FitMode = FitMode.NODE_AWARE
    starvation_bound: int = 5
    max_binds: int = 0  # a pass's binds at most (0: any number)
    jobs: JobViews = field(init=False)
    holdings: QuotaHoldings = field(default_factory=QuotaHoldings)
    running: RunningJobs = field(default_factory=RunningJobs)
    assumed: AssumedCapacity = field(default_factory=AssumedCapacity)
    _context: tuple[object, ...] | None = None
    _cells: tuple[object, Cells] | None = None  # the last deal and its inputs

    def __post_init__(self) -> None:
        self.jobs = JobViews(self.fit_mode)

    def context(self, snap: Snapshot) -> tuple[Context, bool]:
        """The pass's context, and whether it differs from the last pass's (every job is
        then looked at again)."""
        context = Context.of(snap)
        anew = context.versions != self._context
        if anew:
            self.jobs.forget_policies(context)
            self._context = context.versions
        return context, anew

    def build(self, snap: Snapshot, now: datetime, now_text: str, changes: Changes,
              looked: Sequence[Body], clusters: Sequence[ClusterView],
              inflight: Mapping[str, Sequence[Resources]], failed: Callable[[Body, Exception],
                                                                            None],
              carried: Carried = Carried(), context: Context | None = None,
              inflight_holdings: Sequence[Holding] = (),
              reclaiming: Collection[str] = ()) -> PassView:
        """The view of ``looked`` (the jobs to look at this pass, in creation order) and of
        the waiting jobs ``carried`` brings; a job that cannot be read is left out and
        handed to ``failed``. ``inflight_holdings``: the quota of binds being written;
        ``reclaiming``: the jobs (keys) whose requeue for a reclaim is being written."""
        context = context or self.context(snap)[0]
        for uid in changes.gone:
            self.jobs.forget(uid)
        changed = _bodies(snap, changes)
        self.running.mark(changes.work_jobs)
        self.running.mark(job["metadata"]["uid"] for job in changed)
        self.assumed.changed(snap, changes.works, changes.clusters)
        views: list[JobView] = []
        for job in looked:
            try:
                views.append(self.jobs.view(job, snap, context))
            except Exception as exc:  # one job's problem never stops the others
                failed(job, exc)
        by_name = {c.name: c for c in clusters}
        waiting = carried.waiting
        placing = any(v.stage is Stage.WAITING or _may_grow(v) for v in views) or bool(
            waiting is not None and len(waiting))
        # Most passes (a status arrived) have nothing to place or grow: assumed capacity
        # only then.
        capacity = self.assumed.views(clusters, snap, inflight) if placing else {}
        # (a job whose Works changed may have ended on its members: it holds no quota then)
        reported = [body for uid in changes.work_jobs if (body := snap.job_of(uid)) is not None]
        quota = self.quota_view(snap, context, [*changed, *reported], changes.gone,
                                inflight_holdings, reclaiming)
        cells = self.cells(snap, by_name, quota)
        preemption = self.preemption_view(snap, now.timestamp(), views, waiting, context,
                                          quota, carried)
        # Backfill reads the running jobs of known runtime: only when some job may be placed.
        timed = self.running.timed(snap) if placing else ()
        return PassView(now.timestamp(), now_text, tuple(views), by_name, capacity,
                        lost_since(snap, now), quota, preemption=preemption, timed=timed,
                        reservations=carried.reservations, cells=cells, waiting=waiting,
                        gone=tuple(sorted(changes.gone)), max_binds=self.max_binds)

    def cells(self, snap: Snapshot, clusters: Mapping[str, ClusterView],
              quota: QuotaView | None) -> Cells:
        """Each tenant's cells on the ready members (``quota.cells``), dealt again only when
        their nodes or the guarantees change."""
        if quota is None:
            return Cells()
        members = tuple(cell_nodes(body) for body in snap.clusters.values()
                        if (view := clusters.get(body["metadata"]["name"])) is not None
                        and view.ready)
        wanted = guarantees(quota.root)
        key = (members, tuple(sorted(wanted.items())))
        if self._cells is None or self._cells[0] != key:
            self._cells = (key, Cells(deal([n for nodes in members for n in nodes], wanted)))
        return self._cells[1]

    def preemption_view(self, snap: Snapshot, now: float, views: Sequence[JobView],
                        waiting: Waiting | None, context: Context, quota: QuotaView | None,
                        carried: Carried) -> PreemptionView:
        """The running jobs are read only when some waiting job may plan a preemption this
        pass: above the lowest priority, or queued within its guarantee, and not told a
        moment ago that there is no plan."""
        floor = pv.lowest_priority(context.classes)
        running: tuple[Any, ...] = ()
        if _may_plan(views, waiting, floor, carried.retry_at, now):
            leaves = leaves_by_namespace(quota.root) if quota is not None else {}
            running = self.running.victims(snap, context.classes, leaves,
                                           self.jobs.placed_demand)
        return PreemptionView(running, floor, carried.holds, carried.retry_at,
                              PREEMPTION_PLANS_PER_PASS, PREEMPTION_HOLD_SECONDS,
                              PREEMPTION_RETRY_SECONDS)

    def quota_view(self, snap: Snapshot, context: Context, changed: Sequence[Body],
                   gone: Iterable[str], inflight: Sequence[Holding] = (),
                   reclaiming: Collection[str] = ()) -> QuotaView | None:
        """The quota as decided: binds being written hold theirs already, and the victims
        of a reclaim being written hold none (the pass that reclaimed gave it away; counted
        until their requeue lands, the tree looked above its max, and more was reclaimed
        for it, across cohorts even)."""
        tree = q.active_tree(snap)
        if tree is None:
            return None
        ledger = self.holdings.ledger(snap, tree[1], context.classes, changed, gone,
                                      self.jobs.placed_demand)
        known = ledger.holdings
        pending = [h for h in inflight if h.job.key not in known]
        leaving = [key for key in reclaiming if key in known]
        if pending or leaving:
            ledger = ledger.changed(pending, leaving)
        names = queue_names(p.path for p in walk(tree[1]))
        return QuotaView(tree[1], policies=q.queue_policies(snap, names),
                         starvation_bound=self.starvation_bound, ledger=ledger,
                         settling=frozenset(h.job.key for h in inflight))


def _bodies(snap: Snapshot, changes: Changes) -> list[Body]:
    """The changed jobs still in the cache."""
    return [body for key in changes.jobs if (body := snap.jobs.get(key)) is not None]


def _may_plan(views: Sequence[JobView], waiting: Waiting | None, floor: int,
              retry_at: Mapping[str, float], now: float) -> bool:
    """Whether some waiting job may plan a preemption this pass: above the lowest priority
    or queued and guaranteed, and not told a moment ago that there is no plan."""
    def may(job: JobView) -> bool:
        return job.stage is Stage.WAITING and retry_at.get(job.uid, 0.0) <= now and (
            job.priority > floor or (job.quota is not None
                                     and not is_opportunistic(job.priority)))
    if any(may(v) for v in views):
        return True
    return waiting is not None and any(may(j) for members in waiting.classes.values()
                                       if members and _may_class(members[0], floor)
                                       for j in members)


def _may_class(head: JobView, floor: int) -> bool:
    return head.priority > floor or (head.quota is not None
                                     and not is_opportunistic(head.priority))


def _may_grow(view: JobView) -> bool:
    """A running elastic job below its max (the pass needs capacity to grow it)."""
    return view.elastic is not None and view.stage is Stage.BOUND and view.demand is not None \
        and count(view.demand, view.elastic.role) < view.elastic.max


def creation_order(job: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = job["metadata"]
    return (meta.get("creationTimestamp", ""), meta.get("namespace", ""), meta.get("name", ""))
