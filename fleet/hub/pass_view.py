"""The hub's snapshot step: from the cache's objects to the planner's frozen
:class:`~planner.view.PassView`.

Everything a pass parses is parsed here, once: a policy once per version, a job's demand
once per spec (the one place the hub computes it; quota holdings, admission and division all
use it), times into seconds. What is kept from one pass to the next is only what parsing
costs (policies, demands, assumed capacity); the pass itself keeps nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from fleet.api import protocol
from fleet.api.cluster import HEALTHY
from fleet.api.policy import PropagationPolicySpec
from fleet.api.size import JOB_COPIES, refusal
from fleet.hub import elastic as el
from fleet.hub import preemption_views as pv
from fleet.hub import queueing as q
from fleet.hub import works as w
from fleet.hub.assumed import AssumedCapacity
from fleet.hub.backfill_views import runtime_of, timed_jobs
from fleet.hub.cache import EVICTING, Body, Snapshot
from fleet.hub.views import (
    cell_nodes,
    heartbeat_of,
    job_identity,
    parse_time,
    placement_rules,
    policy_ref,
)
from fleet.kinds import adapter_for
from fleet.kinds.base import InvalidJob
from planner.elastic import count, with_count
from planner.preempting import may_plan
from planner.view import (
    FailoverSettings,
    Hold,
    JobView,
    PassView,
    PolicyView,
    PreemptionView,
    QuotaView,
    Reservation,
    Stage,
    WorkView,
)
from preemption.model import Running
from propagation.jobkey import JobKey
from propagation.matching import PolicyRef, governing_policy
from propagation.resources import Resources
from propagation.views import ClusterView, FitMode, JobDemand
from quota.cells import Cells, deal, guarantees
from quota.engine import Holding
from quota.queues import queue_names
from quota.tree import PlacedNode, QuotaNode, leaves_by_namespace, walk

log = logging.getLogger(__name__)
MAX_REMEMBERED = 100_000  # parsed demands kept across passes (one per job spec)
# Preemption: the planner runs for at most this many waiting jobs a pass (each walks the
# running jobs), and the capacity freed for a preemptor is held this long at most.
PREEMPTION_PLANS_PER_PASS = 3
PREEMPTION_HOLD_SECONDS = 300.0
PREEMPTION_RETRY_SECONDS = 5.0  # a job with no plan is planned for again after this long


def failover_settings(spec: PropagationPolicySpec) -> FailoverSettings | None:
    """The policy's application failover, defaulted as Karmada does; None when it has none."""
    app = spec.failover.application if spec.failover else None
    if app is None:
        return None
    toleration = app.decision_conditions.toleration_seconds if app.decision_conditions else None
    return FailoverSettings(
        toleration_seconds=float(300 if toleration is None else toleration),
        purge_mode=app.purge_mode.value if app.purge_mode else "Graciously",
        grace_period_seconds=float(600 if app.grace_period_seconds is None
                                   else app.grace_period_seconds),
    )


def policy_view(body: Body, fit_mode: FitMode) -> PolicyView:
    spec = PropagationPolicySpec.model_validate(body.get("spec", {}))
    meta = body["metadata"]
    name = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
    return PolicyView(name, placement_rules(body, fit_mode),
                      queues=bool(spec.suspension and spec.suspension.scheduling),
                      failover=failover_settings(spec),
                      propagate_deps=bool(spec.propagate_deps))


def seconds(text: str | None) -> float | None:
    when = parse_time(text)
    return None if when is None else when.timestamp()


def stage_of(job: Mapping[str, Any]) -> Stage:
    meta = job["metadata"]
    annotations = meta.get("annotations") or {}
    if meta.get("deletionTimestamp"):
        return Stage.DELETING
    if q.REQUEUE in annotations:
        return Stage.REQUEUED
    if annotations.get(w.PLACEMENT) not in (None, "", "[]"):
        return Stage.BOUND
    return Stage.DONE if adapter_for(job["apiVersion"], job["kind"]).is_finished(job) \
        else Stage.WAITING


def retry_at(annotations: Mapping[str, Any]) -> float | None:
    """When a job whose reservation was rolled back may be placed again (None: any time)."""
    try:
        return float(annotations[protocol.RESERVE_RETRY_AT])
    except (KeyError, TypeError, ValueError):
        return None


def keeps_copy(work: Mapping[str, Any]) -> bool:
    """Whether removing the Work would leave its member copy (purge mode Never)."""
    manifest = work["spec"]["manifests"][0]
    return ((work["metadata"].get("annotations") or {}).get(w.PURGE_MODE)
            or (manifest["metadata"].get("annotations") or {}).get(w.PURGE_MODE)) == "Never"


def work_key(work: Mapping[str, Any]) -> str:
    return f"{work['metadata']['namespace']}/{work['metadata']['name']}"


def work_view(work: Body) -> WorkView:
    meta = work["metadata"]
    status = work.get("status") or {}
    unhealthy = next((c for c in status.get("conditions") or []
                      if c.get("type") == HEALTHY and c.get("status") == "False"), None)
    reservation, said = protocol.reservation(work)
    return WorkView(
        name=work_key(work),
        cluster=work["spec"]["placement"]["cluster"],
        state=str(status.get("state") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        keeps_copy=keeps_copy(work),
        unhealthy=unhealthy is not None,
        unhealthy_since=seconds(unhealthy.get("lastTransitionTime")) if unhealthy else None,
        unhealthy_reason=str(unhealthy.get("message") or unhealthy.get("reason")
                             or "unhealthy") if unhealthy else "",
        evict_after=seconds((meta.get("annotations") or {}).get(EVICTING)),
        phase=protocol.work_phase(work),
        reservation=reservation,
        reservation_message=said,
        created=seconds(meta.get("creationTimestamp")),
    )


def lost_since(snap: Snapshot) -> dict[str, float]:
    """When each member stopped being usable: its Ready condition turning False, or its
    agent's last heartbeat."""
    out: dict[str, float] = {}
    for body in snap.clusters.values():
        status = body.get("status") or {}
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"),
                     None)
        since = None
        if ready is not None and ready.get("status") != "True":
            since = parse_time(ready.get("lastTransitionTime"))
        since = since or heartbeat_of(body, snap.heartbeat_lease(body["metadata"]["name"]))
        if since is not None:
            out[body["metadata"]["name"]] = since.timestamp()
    return out


def leaf_queue_names(root: QuotaNode) -> dict[str, str]:
    """Queue names by tree-node key ("root/a")."""
    return {"/".join(path): name for path, name in queue_names(p.path for p in walk(root)).items()}


@dataclass
class ViewBuilder:
    """Builds each pass's view; keeps across passes only what parsing costs."""

    fit_mode: FitMode = FitMode.NODE_AWARE
    starvation_bound: int = 5
    _policies: dict[tuple[str, str], tuple[str, PolicyView]] = field(default_factory=dict)
    _demands: dict[tuple[str, int, str, str, str], JobDemand | InvalidJob] = field(
        default_factory=dict)
    _assumed: AssumedCapacity = field(default_factory=AssumedCapacity)
    # A job's view by uid, with the versions it was built from (the job's, its Works', the
    # policies' and PriorityClasses'): at 10,000 pending jobs, building each one's view again
    # on every pass was most of the snapshot step, and between two passes few jobs change.
    _views: dict[str, tuple[tuple[object, ...], JobView]] = field(default_factory=dict)
    _holdings: dict[str, tuple[str, object, Holding | None]] = field(default_factory=dict)
    # A job as a possible victim by uid, with the versions it was read from (the job's, its
    # Works', the PriorityClasses', its quota leaf): parsing every Work's manifest for its
    # roles' requests made the walk over the running jobs a tenth of a pass at 10,000 jobs.
    _running: dict[str, tuple[object, Running | None]] = field(default_factory=dict)
    _cells: tuple[object, Cells] | None = None  # the last deal and its inputs

    def demand(self, job: Mapping[str, Any]) -> JobDemand:
        """The job's demand, parsed once per spec (raises InvalidJob)."""
        meta = job["metadata"]
        annotations = meta.get("annotations") or {}
        # Annotations do not raise a job's generation: the topology it asks for is in the key.
        key = (meta.get("uid", ""), int(meta.get("generation") or 0),
               meta.get("resourceVersion", "") if not meta.get("generation") else "",
               str(annotations.get(w.TOPOLOGY_REQUIRED, "")),
               str(annotations.get(w.TOPOLOGY_PREFERRED, "")))
        found = self._demands.get(key)
        if found is None:
            try:
                found = adapter_for(job["apiVersion"], job["kind"]).demand(JobKey.of_body(job), job)
            except InvalidJob as exc:
                found = exc
            if len(self._demands) >= MAX_REMEMBERED:
                self._demands.pop(next(iter(self._demands)))
            self._demands[key] = found
        if isinstance(found, InvalidJob):
            raise found
        return found

    def placed_demand(self, job: Mapping[str, Any]) -> JobDemand:
        """What a bound job holds: an elastic one at the size its placement runs now."""
        return el.placed_demand(job, self.demand(job))

    def policy(self, body: Body) -> PolicyView:
        """A policy parsed once per version rather than for every job on every pass."""
        meta = body["metadata"]
        key, version = (meta.get("namespace") or "", meta["name"]), meta.get("resourceVersion", "")
        known = self._policies.get(key)
        if known is None or known[0] != version:
            known = (version, policy_view(body, self.fit_mode))
            self._policies[key] = known
        return known[1]

    def build(self, snap: Snapshot, now: datetime, now_text: str, jobs: Sequence[Body],
              clusters: Sequence[ClusterView], inflight: Mapping[str, Sequence[Resources]],
              failed: Callable[[Body, Exception], None],
              holds: Mapping[str, Hold] | None = None,
              retry_at: Mapping[str, float] | None = None,
              reservations: Mapping[str, Reservation] | None = None) -> PassView:
        """The view of ``jobs`` (the ones to look at this pass, in creation order); a job that
        cannot be read is left out and handed to ``failed``. ``holds`` and ``retry_at`` are
        the preemption state the last plan left, ``reservations`` its backfill reservation."""
        bodies = {(b["metadata"].get("namespace") or "", b["metadata"]["name"]): b
                  for b in (*snap.policies.values(), *snap.cluster_policies.values())}
        self._policies = {k: v for k, v in self._policies.items() if k in bodies}
        refs = [policy_ref(b) for b in bodies.values()]
        classes = q.priority_classes(snap)
        context = (tuple(sorted((k, b["metadata"].get("resourceVersion", ""))
                                for k, b in bodies.items())), tuple(sorted(classes.items())))
        views: list[JobView] = []
        for job in jobs:
            try:
                views.append(self.remembered_view(job, snap, bodies, refs, classes, context))
            except Exception as exc:  # one job's problem never stops the others
                failed(job, exc)
        by_name = {c.name: c for c in clusters}
        waiting = any(v.stage is Stage.WAITING or _may_grow(v) for v in views)
        # Most passes (a status arrived) have nothing to place or grow: assumed capacity
        # only then.
        capacity = self._assumed.views(clusters, snap, inflight) if waiting else {}
        quota = self.quota_view(snap, classes)
        cells = self.cells(snap, by_name, quota)
        preemption = self.preemption_view(snap, now.timestamp(), views, classes, quota,
                                          holds or {}, retry_at or {})
        # Backfill reads the running jobs of known runtime: only when some job may be placed.
        timed = timed_jobs(snap) if waiting else ()
        return PassView(now.timestamp(), now_text, tuple(views), by_name, capacity,
                        lost_since(snap), quota, preemption=preemption, timed=timed,
                        reservations=reservations or {}, cells=cells)

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
                        classes: Mapping[str, int], quota: QuotaView | None,
                        holds: Mapping[str, Hold], retry_at: Mapping[str, float]
                        ) -> PreemptionView:
        """The running jobs are read (a walk over every job) only when some waiting job
        may plan a preemption this pass: above the lowest priority, not itself preempted,
        not told a moment ago that there is no plan."""
        floor = pv.lowest_priority(classes)
        running: tuple[Running, ...] = ()
        if may_plan(views, floor, retry_at, now):
            leaves = leaves_by_namespace(quota.root) if quota is not None else {}
            running = self.running_jobs(snap, classes, leaves)
        return PreemptionView(running, floor, holds, retry_at, PREEMPTION_PLANS_PER_PASS,
                              PREEMPTION_HOLD_SECONDS, PREEMPTION_RETRY_SECONDS)

    def running_jobs(self, snap: Snapshot, classes: Mapping[str, int],
                     leaves: Mapping[str, PlacedNode]) -> tuple[Running, ...]:
        """Every running job (:func:`preemption_views.running_job`), read again only for
        the jobs whose versions changed since the last pass that read them."""
        known_classes = tuple(sorted(classes.items()))
        remembered: dict[str, tuple[object, Running | None]] = {}
        out = []
        for job in snap.jobs.values():
            meta = job["metadata"]
            uid = meta["uid"]
            leaf = leaves.get(meta["namespace"])
            versions = (meta.get("resourceVersion", ""), known_classes,
                        leaf.key if leaf is not None else None,
                        tuple(w["metadata"].get("resourceVersion", "")
                              for w in snap.works_of(uid)))
            known = self._running.get(uid)
            if known is None or known[0] != versions:
                known = (versions, pv.running_job(job, snap, classes, leaves,
                                                  self.placed_demand))
            remembered[uid] = known
            if known[1] is not None:
                out.append(known[1])
        self._running = remembered
        return tuple(out)

    def remembered_view(self, job: Body, snap: Snapshot,
                        policies: Mapping[tuple[str, str], Body], refs: Sequence[PolicyRef],
                        classes: Mapping[str, int], context: object) -> JobView:
        """The job's view as the last pass built it while nothing it is built from changed
        (its resourceVersion, its Works' and the policies' and PriorityClasses', ``context``);
        else built anew."""
        meta = job["metadata"]
        uid = meta["uid"]
        versions = (meta.get("resourceVersion", ""), context,
                    tuple(wk["metadata"].get("resourceVersion") for wk in snap.works_of(uid)),
                    tuple(wk["metadata"].get("resourceVersion") for wk in snap.evicting_of(uid)))
        known = self._views.get(uid)
        if known is not None and known[0] == versions:
            return known[1]
        view = self.job_view(job, snap, policies, refs, classes)
        if len(self._views) >= MAX_REMEMBERED and uid not in self._views:
            self._views.pop(next(iter(self._views)))
        self._views[uid] = (versions, view)
        return view

    def job_view(self, job: Body, snap: Snapshot, policies: Mapping[tuple[str, str], Body],
                 refs: Sequence[PolicyRef], classes: Mapping[str, int]) -> JobView:
        adapter = adapter_for(job["apiVersion"], job["kind"])
        meta = job["metadata"]
        annotations = meta.get("annotations") or {}
        stage = stage_of(job)
        key, uid = JobKey.of_body(job), meta["uid"]
        finished = adapter.is_finished(job)
        view = JobView(key, uid, meta.get("creationTimestamp", ""), stage,
                       priority=q.priority_of(job, classes),
                       preempted_by=annotations.get(w.PREEMPTED_BY) or "",
                       reserve_retry_at=retry_at(annotations),
                       requeue_reason=annotations.get(q.REQUEUE, ""),
                       dispatch_finalizer=w.FINALIZER in (meta.get("finalizers") or []),
                       finished=finished,
                       works=tuple(work_view(wk) for wk in snap.works_of(uid)),
                       evicting=tuple(work_view(wk) for wk in snap.evicting_of(uid)))
        if stage is Stage.BOUND:
            ttl = adapter.ttl(job) if finished else None
            done = seconds((job.get("status") or {}).get("completionTime"))
            view = replace(view, placement=w.placement_of(job),
                           policy=self._governing(job, policies, refs),
                           ttl_seconds=ttl, finished_at=done)
            return view if finished else self._elastic_bound(view, job, classes)
        if stage is not Stage.WAITING:
            return view
        refused = refusal(job, why=JOB_COPIES)  # stored without the webhook (not installed)
        if refused:
            return replace(view, invalid=refused)
        try:
            demand = self.demand(job)
            elastic = el.elastic_of(job)
            runtime = runtime_of(job, adapter)
        except InvalidJob as exc:  # checked before any quota or capacity is counted
            return replace(view, invalid=str(exc))
        if elastic is not None:  # asks for its max; the planner sizes it to what fits
            demand = with_count(demand, elastic.role, elastic.max)
            view = replace(view, elastic=elastic)
        policy = self._governing(job, policies, refs)
        quota = q.as_quota_job(job, classes, demand) if policy and policy.queues else None
        avoid = {wk.cluster for wk in view.evicting} | {
            name for name in (annotations.get(w.FAILOVER_AVOID) or "").split(",") if name}
        return replace(view, demand=demand, policy=policy, quota=quota,
                        avoid=tuple(sorted(avoid)),
                        runtime=None if runtime is None else float(runtime))

    def _elastic_bound(self, view: JobView, job: Body, classes: Mapping[str, int]) -> JobView:
        """A running elastic job: its range, its demand at its placed size, and its quota
        view when it holds quota (growing it is charged there)."""
        try:
            elastic = el.elastic_of(job)
            if elastic is None:
                return view
            demand = self.placed_demand(job)
        except InvalidJob:
            return view
        held = q.ADMITTED_AT in (job["metadata"].get("annotations") or {})
        return replace(view, elastic=elastic, demand=demand,
                       quota=q.as_quota_job(job, classes, demand) if held else None)

    def _governing(self, job: Body, policies: Mapping[tuple[str, str], Body],
                   refs: Sequence[PolicyRef]) -> PolicyView | None:
        chosen = governing_policy(job_identity(job), refs)
        return self.policy(policies[(chosen.namespace, chosen.name)]) if chosen else None

    def holdings(self, snap: Snapshot, classes: Mapping[str, int]) -> list[Holding]:
        """Who holds quota (:func:`queueing.holding`), each job's answer remembered while its
        resourceVersion and the PriorityClasses stay as they were."""
        known_classes = tuple(sorted(classes.items()))
        remembered, out = {}, []
        for job in snap.jobs.values():
            meta = job["metadata"]
            uid, version = meta["uid"], meta.get("resourceVersion", "")
            known = self._holdings.get(uid)
            if known is None or known[0] != version or known[1] != known_classes:
                known = (version, known_classes, q.holding(job, classes, self.placed_demand))
            remembered[uid] = known
            if known[2] is not None:
                out.append(known[2])
        self._holdings = remembered
        return out

    def quota_view(self, snap: Snapshot, classes: Mapping[str, int]) -> QuotaView | None:
        tree = q.active_tree(snap)
        if tree is None:
            return None
        names = queue_names(p.path for p in walk(tree[1]))
        return QuotaView(tree[1], tuple(self.holdings(snap, classes)),
                         q.queue_policies(snap, names), self.starvation_bound)


def _may_grow(view: JobView) -> bool:
    """A running elastic job below its max (the pass needs capacity to grow it)."""
    return view.elastic is not None and view.stage is Stage.BOUND and view.demand is not None \
        and count(view.demand, view.elastic.role) < view.elastic.max


def creation_order(job: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = job["metadata"]
    return (meta.get("creationTimestamp", ""), meta.get("namespace", ""), meta.get("name", ""))
