"""The hub's decision loop: one pass over every job each time something changes.

A pass takes a snapshot of the cache and walks the jobs: deleting ones release their Works,
bound ones keep their Works complete and their status true, requeued ones wait for their Works
to go and return to their queue. The unbound rest are decided in admission order (priority,
then creation): a job under a policy with ``suspension.scheduling`` must first be admitted by
its quota queue (:mod:`quota.engine`), then every job is divided across members
(:func:`propagation.division.divide`) and dispatched. Waiting jobs get their queue, position
and reason in status. One failing job is logged and skipped; it never stops the pass.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fleet import metrics
from fleet.api.cluster import HEALTHY
from fleet.api.policy import PropagationPolicySpec
from fleet.clients.leases import LeaderElector
from fleet.hub import member_failures as mf
from fleet.hub import preemption_views as pv
from fleet.hub import queueing as q
from fleet.hub import works as w
from fleet.hub.assumed import AssumedCapacity
from fleet.hub.cache import EVICTING, Body, Cache, Snapshot
from fleet.hub.dispatch import Dispatcher, now_text
from fleet.hub.views import (
    cluster_view,
    heartbeat_of,
    job_identity,
    parse_time,
    placement_rules,
    policy_ref,
)
from fleet.kinds import adapter_for
from fleet.kinds.base import InvalidJob, KindAdapter
from preemption.model import Outcome, Running
from preemption.planner import plan as plan_preemption
from preemption.quota_limits import quota_limits
from propagation.binding import binding_message
from propagation.division import Decision, divide, with_assumed
from propagation.failover import ShareHealth, decide_failover
from propagation.matching import governing_policy
from propagation.resources import Resources
from propagation.views import ClusterView, FitMode, PlacementRules
from quota.engine import AdmissionPass, Holding, Job, order_key
from quota.queues import admission_order, queue_names
from quota.tree import QuotaNode, leaves_by_namespace, walk

log = logging.getLogger(__name__)
# Counting running jobs per queue walks every job: for a gauge scraped every 30 s, not
# on every pass.
RUNNING_METRIC_SECONDS = 5.0
# Preemption: the planner runs for at most this many waiting jobs a pass (each walks the
# running jobs), and the capacity freed for a preemptor is held this long at most.
PREEMPTION_PLANS_PER_PASS = 3
PREEMPTION_HOLD_SECONDS = 300.0
PREEMPTION_RETRY_SECONDS = 5.0  # a job with no plan is planned for again after this long
STALENESS_RESEND_SECONDS = 30.0  # a CapacityStale write not seen in the cache by then is redone


@dataclass(frozen=True)
class Settings:
    fit_mode: FitMode = FitMode.NODE_AWARE
    heartbeat_timeout: float = 15.0  # a member is lost when its agent is silent this long
    capacity_stale_after: float = 90.0  # no new work on a member whose report is this old
    resync_seconds: float = 2.0  # a pass runs at least this often (heartbeats age, leases)
    full_pass_seconds: float = 1.0  # every bound job is looked at at least this often
    pass_gap_seconds: float = 0.05  # the least time between passes
    lease_namespace: str = "fleet-system"
    starvation_bound: int = 5


@dataclass
class Candidate:
    """An unbound job this pass decides on."""

    job: Body
    adapter: KindAdapter
    rules: PlacementRules
    queued: Job | None  # its quota view when it must be admitted by a queue first
    priority: int = 0

    @property
    def order(self) -> tuple[int, str, str]:
        if self.queued is not None:
            return order_key(self.queued)
        meta = self.job["metadata"]
        return admission_order(self.priority, meta.get("creationTimestamp", ""),
                               q.job_key(self.job))


@dataclass
class Hold:
    """Capacity freed by preempting for a job, held for it until it binds."""

    requests: dict[str, list[Resources]]  # cluster -> the preemptor's per-replica requests
    expires: float  # monotonic
    message: str


@dataclass
class Waiting:
    reason: str
    message: str
    queue: str = ""  # Queue name, for jobs waiting in a quota queue
    position: int = 0


@dataclass
class Scheduler:
    cache: Cache
    dispatcher: Dispatcher
    elector: LeaderElector
    settings: Settings = field(default_factory=Settings)
    workers: int = 16  # concurrent decision writers (bind, Works, events, status)

    def __post_init__(self) -> None:
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="dispatch")
        self._inflight: dict[str, dict[str, list[Resources]]] = {}  # uid -> cluster -> requests
        self._inflight_lock = threading.Lock()
        self._policy_cache: dict[tuple[str, str, str],
                                 tuple[PlacementRules, FailoverSettings | None, bool]] = {}
        self._snap = self.cache.snapshot()
        self._assumed = AssumedCapacity()
        self._next_full_pass = 0.0
        self._running: tuple[float, dict[str, int]] = (0.0, {})  # (when, per leaf): metrics
        self._failing: dict[str, str] = {}  # job key -> the error last logged for it
        self._holds: dict[str, Hold] = {}  # preemptor uid -> what it waits for
        self._no_plan: dict[str, float] = {}  # uid -> when to plan for it again (monotonic)
        self._preemption = _PreemptionPass()
        self._staleness_sent: dict[str, tuple[str, float]] = {}  # cluster -> (status, when)

    def run(self, stop: threading.Event) -> None:
        next_renewal = 0.0
        while not stop.is_set():
            if time.monotonic() >= next_renewal:
                self.elector.renew()
                next_renewal = time.monotonic() + self.elector.lease_seconds / 3
            if self.elector.leading:
                try:
                    with metrics.SCHEDULING_PASS_SECONDS.time():
                        self.pass_once()
                except Exception:  # a bug in one pass must not stop the hub
                    log.exception("scheduling pass failed")
            # Let events gather for a moment: a pass costs the same for one change as for a
            # hundred, and under a burst they arrive a few hundred a second.
            stop.wait(self.settings.pass_gap_seconds)
            self.cache.wait_for_change(self.settings.resync_seconds)

    # -- one pass -----------------------------------------------------------------------
    def pass_once(self) -> None:
        # In-flight decisions first, then the snapshot: a decision that finishes in between is
        # then in the snapshot with its writes, never seen as bound with a stale version.
        with self._inflight_lock:
            inflight = {uid: dict(spent) for uid, spent in self._inflight.items()}
        changed_jobs, changed_works = self.cache.take_changed()
        snap = self.cache.snapshot()
        self._snap = snap
        now = datetime.now(UTC)
        # A bound job is looked at when it or its Works changed, and every job at least every
        # ``full_pass_seconds`` (clocks, member health, policies); at hundreds of events a
        # second, looking at every bound job on every pass was most of the hub's CPU.
        full = time.monotonic() >= self._next_full_pass
        if full:
            self._next_full_pass = time.monotonic() + self.settings.full_pass_seconds
        clusters = [cluster_view(b, now, self.settings.heartbeat_timeout,
                                 snap.heartbeat_lease(b["metadata"]["name"]),
                                 self.settings.capacity_stale_after)
                    for b in snap.clusters.values()]
        self._show_staleness(snap, clusters)
        self._export_clusters(snap, clusters, now)
        self._clusters = {c.name: c for c in clusters}
        self._lost_since = lost_since(snap)
        self._now = now
        self._stamp = now_text()
        self._policies = {(b["metadata"].get("namespace") or "", b["metadata"]["name"]): b
                          for b in (*snap.policies.values(), *snap.cluster_policies.values())}
        self._refs = [policy_ref(b) for b in self._policies.values()]
        unbound: list[Body] = []
        skipped: set[tuple[str, str, str]] = set()
        for job in sorted(snap.jobs.values(), key=_creation_order):
            key, uid = Cache.key(job), job["metadata"]["uid"]
            if uid in inflight:
                skipped.add(key)  # its decision is being written; the next pass sees it
                continue
            if not (full or key in changed_jobs or uid in changed_works):
                if _waits(job):
                    unbound.append(job)
                continue
            try:
                if self._reconcile_bound(job, snap):
                    unbound.append(job)
            except Exception as exc:
                self._log_failure(q.job_key(job), "job skipped this pass", exc)
        if skipped:
            self.cache.mark_changed(skipped)
        waiting = self._decide(unbound, snap, clusters, now, inflight)
        for job in unbound:
            why = waiting.get(q.job_key(job))
            if why is not None:
                self._show_waiting(job, why)
        metrics.PENDING_JOBS.set(len(waiting))

    @staticmethod
    def _export_clusters(snap: Snapshot, views: Sequence[ClusterView], now: datetime) -> None:
        bodies = {b["metadata"]["name"]: b for b in snap.clusters.values()}
        for view in views:
            body = bodies.get(view.name) or {}
            capacity = (body.get("status") or {}).get("capacity") or {}
            metrics.CLUSTER_READY.labels(view.name).set(1 if view.ready else 0)
            metrics.CLUSTER_FREE_GPUS.labels(view.name).set(view.free.get("nvidia.com/gpu", 0))
            metrics.set_cluster(view.name, capacity.get("allocatable") or {},
                                capacity.get("free") or {})
            beat = heartbeat_of(body, snap.heartbeat_lease(view.name))
            if beat is not None:
                metrics.CLUSTER_HEARTBEAT_AGE.labels(view.name).set(
                    max(0.0, (now - beat).total_seconds()))
        metrics.forget_clusters(bodies)

    def _show_staleness(self, snap: Snapshot, views: Sequence[ClusterView]) -> None:
        """Keep each MemberCluster's CapacityStale condition (the hub's own) current. The
        writes go to the dispatch pool, not the pass: at start-up every member needs one, and
        a hundred applies in a row held up the first decisions. A condition sent is not sent
        again until the cache shows it, or STALENESS_RESEND_SECONDS pass (a failed write)."""
        sent = self._staleness_sent
        bodies = {b["metadata"]["name"]: b for b in snap.clusters.values()}
        for view in views:
            conditions = ((bodies.get(view.name) or {}).get("status") or {}).get("conditions") \
                or []
            current = next((c for c in conditions if c.get("type") == "CapacityStale"), None)
            wanted = "True" if view.stale_reason else "False"
            if current is not None and current.get("status") == wanted:
                sent.pop(view.name, None)
                continue
            last = sent.get(view.name)
            if last is not None and last[0] == wanted and \
                    time.monotonic() - last[1] < STALENESS_RESEND_SECONDS:
                continue
            sent[view.name] = (wanted, time.monotonic())
            self._pool.submit(self.dispatcher.set_cluster_condition, view.name, {
                "type": "CapacityStale", "status": wanted,
                "reason": "ReportTooOld" if view.stale_reason else "ReportFresh",
                "message": view.stale_reason or "capacity report is current",
                "lastTransitionTime": now_text()})
        for name in set(sent) - set(bodies):  # removed members
            sent.pop(name)

    def _reconcile_bound(self, job: Body, snap: Snapshot) -> bool:
        """Everything but deciding; True when the job is unbound and waits for a decision."""
        adapter = adapter_for(job["apiVersion"], job["kind"])
        meta = job["metadata"]
        works = snap.works_of(meta["uid"])
        evicting = snap.evicting_of(meta["uid"])
        if meta.get("deletionTimestamp"):
            self._finalize(job, adapter, [*works, *evicting])
            return False
        if evicting:
            self._sweep_evicting(job, adapter, works, evicting)
        annotations = meta.get("annotations") or {}
        if q.REQUEUE in annotations:
            self._finish_requeue(job, adapter, works, annotations[q.REQUEUE])
            return False
        placement = w.decode_placement(job)
        if placement:
            self._complete_dispatch(job, adapter, placement, works)
            self._propagate_spec(job, adapter, placement, works)
            self._aggregate(job, adapter, works)
            if adapter.is_finished(job):
                self._expire(job, adapter)
            if not adapter.is_finished(job):
                self._check_failover(job, adapter, works)
            return False
        return not adapter.is_finished(job)

    def _dependencies(self, job: Body, adapter: KindAdapter,
                      policy: Mapping[str, Any] | None) -> list[Body]:
        """What the job's Works carry after it: the PriorityClasses it names, always (a
        member without them refuses its pods), then with propagateDeps what it references."""
        classes = q.priority_class_manifests(job, self._snap)
        if not policy or not (policy.get("spec") or {}).get("propagateDeps"):
            return classes
        return [*classes, *self.dispatcher.dependencies(job, adapter)]

    # -- failover ---------------------------------------------------------------------
    def _policy_of(self, job: Body) -> Body | None:
        chosen = governing_policy(job_identity(job), self._refs)
        return self._policies.get((chosen.namespace, chosen.name)) if chosen else None

    def _parsed(self, policy: Mapping[str, Any]
                ) -> tuple[PlacementRules, FailoverSettings | None, bool]:
        """A policy's placement rules, failover settings and whether it queues jobs, parsed
        once per policy version rather than for every job on every pass."""
        meta = policy["metadata"]
        key = (meta.get("namespace") or "", meta["name"], meta.get("resourceVersion", ""))
        parsed = self._policy_cache.get(key)
        if parsed is None:
            spec = PropagationPolicySpec.model_validate(policy.get("spec", {}))
            queues = bool(spec.suspension and spec.suspension.scheduling)
            parsed = (placement_rules(policy, self.settings.fit_mode),
                      failover_settings(policy), queues)
            self._policy_cache = {k: v for k, v in self._policy_cache.items()
                                  if k[:2] != key[:2]}  # drop the policy's older versions
            self._policy_cache[key] = parsed
        return parsed

    def _check_failover(self, job: Body, adapter: KindAdapter, works: Sequence[Body]) -> None:
        policy = self._policy_of(job)
        settings = self._parsed(policy)[1] if policy else None
        if settings is None:
            return
        shares = [self._share_health(work) for work in works]
        decision = decide_failover(shares, settings.toleration_seconds)
        if decision is None:
            return
        metrics.FAILOVERS.labels("cluster_lost" if decision.lost_clusters
                                 else "unschedulable").inc()
        since = min((self._now.timestamp() - s.unhealthy_for for s in shares
                     if not s.healthy and not math.isinf(s.unhealthy_for)),
                    default=self._now.timestamp())
        started = datetime.fromtimestamp(since, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        self.dispatcher.event(job, "FailedOver", decision.reason, "Warning")
        marks = {w.FAILOVER_SINCE: started,
                 w.FAILOVER_AVOID: ",".join(s.cluster for s in shares if not s.healthy)}
        log.info("failing over %s: %s", q.job_key(job), decision.reason)
        if settings.purge_mode == "Graciously":
            deadline = self._now.timestamp() + settings.grace_period_seconds
            for work in works:
                self.dispatcher.evict(work, datetime.fromtimestamp(deadline, UTC).strftime(
                    "%Y-%m-%dT%H:%M:%SZ"))
            unbound = self.dispatcher.unbind(job, adapter, marks)
            if unbound is not None:
                self.cache.upsert("jobs", unbound)
            return
        for work in works:
            self.dispatcher.set_purge_mode(work, settings.purge_mode)
        self.dispatcher.mark_requeue(job, adapter, f"failed over: {decision.reason}", marks)

    def _share_health(self, work: Body) -> ShareHealth:
        cluster = work["spec"]["placement"]["cluster"]
        view = self._clusters.get(cluster)
        if view is None or not view.ready:
            since = self._lost_since.get(cluster)
            # A removed member never comes back: its shares are past any toleration.
            lost_for = float("inf") if view is None else \
                (self._now - since).total_seconds() if since else 0.0
            why = view.not_ready_reason if view else "cluster removed"
            return ShareHealth(cluster, False, lost_for, f"cluster lost ({why})", True)
        for condition in (work.get("status") or {}).get("conditions") or []:
            if condition.get("type") == HEALTHY and condition.get("status") == "False":
                since = parse_time(condition.get("lastTransitionTime")) or self._now
                why = str(condition.get("message") or condition.get("reason") or "unhealthy")
                return ShareHealth(cluster, False, (self._now - since).total_seconds(),
                                   why.removeprefix(f"{cluster}: "))
        return ShareHealth(cluster, True)

    def _sweep_evicting(self, job: Body, adapter: KindAdapter, works: Sequence[Body],
                        evicting: Sequence[Body]) -> None:
        """Graciously: old Works go once the new placement runs, or when their time is up."""
        running = bool(works) and all((wk.get("status") or {}).get("state") in (
            "Running", "Succeeded") for wk in works)
        for work in evicting:
            deadline = parse_time((work["metadata"].get("annotations") or {}).get(EVICTING))
            expired = deadline is not None and self._now >= deadline
            if (running or expired or adapter.is_finished(job)) and not work["metadata"].get(
                    "deletionTimestamp"):
                self.dispatcher.delete_work(work)

    # -- deciding ---------------------------------------------------------------------
    def _decide(self, jobs: Sequence[Body], snap: Snapshot, clusters: Sequence[ClusterView],
                now: datetime, inflight: Mapping[str, Mapping[str, list[Resources]]]
                ) -> dict[str, Waiting]:
        classes = q.priority_classes(snap)
        tree = q.active_tree(snap)
        policies = {(b["metadata"].get("namespace") or "", b["metadata"]["name"]): b
                    for b in (*snap.policies.values(), *snap.cluster_policies.values())}
        refs = [policy_ref(b) for b in policies.values()]
        waiting: dict[str, Waiting] = {}
        candidates: list[Candidate] = []
        for job in jobs:
            try:
                candidate = self._candidate(job, policies, refs, classes)
            except InvalidJob as exc:  # checked before any quota or capacity is counted
                waiting[q.job_key(job)] = Waiting("Invalid", str(exc))
                continue
            except Exception as exc:  # one job's problem never stops the others
                self._log_failure(q.job_key(job), "job skipped this pass", exc)
                continue
            if isinstance(candidate, Waiting):
                waiting[q.job_key(job)] = candidate
            else:
                candidates.append(candidate)

        queued_jobs = [c.queued for c in candidates if c.queued is not None]
        admission = None
        if tree is not None:
            names = _queue_names(tree[1])
            admission = AdmissionPass(tree[1], q.holdings(snap, classes), queued_jobs,
                                      q.queue_policies(snap, names),
                                      self.settings.starvation_bound)
        views: dict[str, ClusterView] = {}
        if candidates:  # most passes (a status arrived) have nothing to decide
            pending: dict[str, list[Resources]] = {}
            for spent in inflight.values():  # decided, Works not yet in the cache
                for cluster, requests in spent.items():
                    pending.setdefault(cluster, []).extend(requests)
            # Capacity as this pass sees it: reported free minus what is assumed; each
            # decision below takes its own requests out of the clusters it chose, so none
            # spends it twice.
            views = self._assumed.views(clusters, snap, pending)
        stamp = self._stamp
        if candidates:
            uids = {c.job["metadata"]["uid"] for c in candidates}
            self._holds = {uid: h for uid, h in self._holds.items() if uid in uids}
            self._no_plan = {uid: t for uid, t in self._no_plan.items() if uid in uids}
            self._preemption = _PreemptionPass(classes, tree[1] if tree else None,
                                               floor=pv.lowest_priority(classes))
        # A preemptor holding freed capacity decides first, so nobody else takes it.
        for candidate in sorted(candidates, key=lambda c: (
                c.job["metadata"]["uid"] not in self._holds, *c.order)):
            key = q.job_key(candidate.job)
            try:
                why = self._decide_one(candidate, admission, views, stamp)
            except InvalidJob as exc:
                why = Waiting("Invalid", str(exc))
            except Exception as exc:
                self._log_failure(key, "decision skipped this pass", exc)
                continue
            if why is not None:
                waiting[key] = why
        if tree is not None and admission is not None:
            self._publish_queues(tree, admission, waiting, now)
        return waiting

    def _candidate(self, job: Body, policies: Mapping[tuple[str, str], Body],
                   refs: Sequence[Any], classes: Mapping[str, int]) -> Candidate | Waiting:
        """The job as this pass decides it, or why it waits before any decision."""
        adapter = adapter_for(job["apiVersion"], job["kind"])
        adapter.roles(job)  # raises InvalidJob (counts beyond bounds) before anything counts
        chosen = governing_policy(job_identity(job), refs)
        if chosen is None:
            return Waiting("NoMatchingPolicy",
                           "no PropagationPolicy or ClusterPropagationPolicy selects this job")
        body = policies[(chosen.namespace, chosen.name)]
        queued = q.as_quota_job(job, classes) if self._parsed(body)[2] else None
        priority = queued.priority if queued is not None else q.priority_of(job, classes)
        return Candidate(job, adapter, self._parsed(body)[0], queued, priority)

    def _log_failure(self, key: str, what: str, exc: Exception) -> None:
        """Log a job's failure with its traceback once, not on every pass: a job that cannot
        be handled stays skipped, and the log says so again only when the error changes."""
        text = f"{type(exc).__name__}: {exc}"[:500]
        if self._failing.get(key) == text:
            log.debug("%s %s: %s", what, key, text)
            return
        if len(self._failing) >= 10_000:  # bounded: forget the oldest
            self._failing.pop(next(iter(self._failing)))
        self._failing[key] = text
        if isinstance(exc, InvalidJob):
            log.warning("%s %s: %s", what, key, text)
        else:
            log.exception("%s %s", what, key)

    def _decide_one(self, c: Candidate, admission: AdmissionPass | None,
                    views: dict[str, ClusterView],
                    stamp: str) -> Waiting | None:
        """Admit (when queued), divide and dispatch one job; why it waits, or None."""
        leaving = {wk["spec"]["placement"]["cluster"]
                   for wk in self._snap.evicting_of(c.job["metadata"]["uid"])}
        leaving.update(_failed_over_from(c.job))
        fleet_views = [v for v in views.values() if v.name not in leaving]
        if c.queued is not None:
            why = self._admit(c, admission)
            if why is not None:
                if why.reason == "QuotaExceeded":
                    return self._preempt_for(c, fleet_views, views, admission) or why
                return why
        demand = c.adapter.demand(q.job_key(c.job), c.job)
        started = time.perf_counter()
        decision = divide(demand, fleet_views, c.rules)
        metrics.DECISION_SECONDS.observe(time.perf_counter() - started)
        if not decision.placed:
            metrics.DECISIONS.labels("unschedulable").inc()
            if admission is not None and c.queued is not None:
                admission.wait(c.queued)
            return self._preempt_for(c, fleet_views, views, admission) or Waiting(
                "Unschedulable", decision.reason)
        metrics.DECISIONS.labels("placed").inc()
        return self._dispatch(c, decision, admission, views, stamp)

    def _admit(self, c: Candidate, admission: AdmissionPass | None) -> Waiting | None:
        """The quota queue's verdict: None to go on to division."""
        assert c.queued is not None
        if admission is None:
            return Waiting("NoQuotaTree", "the policy queues this job (suspension.scheduling) "
                                          f"but no ElasticQuotaTree exists in {q.TREE_NAMESPACE}")
        verdict = admission.check(c.queued)
        if not verdict.fits:
            admission.wait(c.queued)
            reason = "NoQuotaLeaf" if admission.leaf(c.queued) is None else "QuotaExceeded"
            return Waiting(reason, verdict.reason)
        if verdict.victims:
            self._preempt(verdict.victims, for_job=c.job)
            admission.release(verdict.victims)
            admission.wait(c.queued)
            victims = ", ".join(v.job.key for v in verdict.victims)
            return Waiting("Reclaiming", f"{verdict.reason}: preempting {victims}")
        return None

    def _dispatch(self, c: Candidate, decision: Decision, admission: AdmissionPass | None,
                  views: dict[str, ClusterView], stamp: str) -> Waiting | None:
        """Commit the decision in memory now (capacity, quota), and leave its API writes to
        the dispatch pool, so that deciding the next job does not wait for them."""
        uid = c.job["metadata"]["uid"]
        spent = {s.cluster: _share_requests(c.job, c.adapter, dict(s.replicas))
                 for s in decision.shares}
        for cluster, requests in spent.items():
            views[cluster] = with_assumed(views[cluster], requests)
        admitted_by = ""
        if admission is not None and c.queued is not None:
            admission.admit(c.queued, stamp)
            leaf = admission.leaf(c.queued)
            admitted_by = leaf.key if leaf else "?"
        with self._inflight_lock:
            self._inflight[uid] = spent
        self._holds.pop(uid, None)
        self._pool.submit(self._write_decision, c, decision, stamp, admitted_by)
        return None

    def _write_decision(self, c: Candidate, decision: Decision, stamp: str,
                        admitted_by: str) -> None:
        """Bind, create every Work (or roll back), then tell: events and status."""
        job, meta = c.job, c.job["metadata"]
        try:
            clusters_used = [s.cluster for s in decision.shares]
            policy = self._policy_of(job)
            settings = self._parsed(policy)[1] if policy else None
            failed_over = parse_time((meta.get("annotations") or {}).get(w.FAILOVER_SINCE))
            extra: dict[str, str | None] = {
                q.ADMITTED_AT: stamp if c.queued is not None else None,
                w.PURGE_MODE: settings.purge_mode if settings else None,
                w.FAILOVER_SINCE: None,
                w.FAILOVER_AVOID: None,
                w.PREEMPTED_BY: None,
            }
            bound = self.dispatcher.bind(job, c.adapter, w.encode_placement(decision.shares),
                                         clusters_used, extra)
            if bound is None:
                return  # changed under us; the next pass sees the new version
            self.cache.upsert("jobs", bound)
            if failed_over is not None:
                metrics.FAILOVER_SECONDS.observe((self._now - failed_over).total_seconds())
            bound_at = time.time()
            shares = w.decode_placement(bound)
            try:
                deps = self._dependencies(bound, c.adapter, policy)
                created = self.dispatcher.create_works(
                    [w.work_body(bound, c.adapter, share, shares, deps) for share in shares])
            except Exception:
                metrics.DISPATCH_ERRORS.inc()
                log.exception("dispatch of %s failed; rolled back", q.job_key(job))
                self.dispatcher.unbind(bound, c.adapter)
                return
            for work in created:
                self.cache.upsert("works", work)
            if failed_over is None:  # a failover is timed by fleet_failover_seconds
                _observe_stages(meta, stamp if admitted_by else None, bound_at, time.time(),
                                _queue_names_of(self._snap).get(admitted_by, ""))
            if admitted_by:
                self.dispatcher.event(bound, "Admitted", f"admitted by quota {admitted_by}")
                metrics.ADMISSIONS.inc()
            message = binding_message(decision.shares)
            self.dispatcher.event(bound, "ScheduleBindingSucceed", message)
            self._write_status(bound, c.adapter, c.adapter.bound_status(
                bound.get("status"), clusters_used, message, now_text()))
            log.info("bound %s/%s: %s", meta["namespace"], meta["name"], message)
        except Exception:
            log.exception("writing the decision for %s failed", q.job_key(job))
        finally:
            with self._inflight_lock:
                self._inflight.pop(meta["uid"], None)
            self.cache.poke()

    # -- priority preemption (the pure planner: preemption.planner) ----------------------
    def _preempt_for(self, c: Candidate, fleet_views: Sequence[ClusterView],
                     views: dict[str, ClusterView],
                     admission: AdmissionPass | None) -> Waiting | None:
        """A waiting job that does not fit: keep what was freed for it, or plan one
        preemption for it (at most one a pass); None when it simply waits."""
        uid = c.job["metadata"]["uid"]
        state = self._preemption
        if c.priority <= state.floor and uid not in self._holds:
            return None  # the most common case: nobody below it to preempt
        hold = self._holds.get(uid)
        if hold is not None and hold.expires > time.monotonic():
            for cluster, requests in hold.requests.items():  # nobody else takes it
                if cluster in views:
                    views[cluster] = with_assumed(views[cluster], requests)
            verdict = admission.check(c.queued) \
                if admission is not None and c.queued is not None else None
            if admission is not None and c.queued is not None and verdict is not None and \
                    verdict.fits and not verdict.victims:
                admission.admit(c.queued, self._stamp)  # and its quota stays its own
            return Waiting("Preempting", hold.message)
        self._holds.pop(uid, None)
        if state.decided or state.plans >= PREEMPTION_PLANS_PER_PASS or \
                c.priority <= state.floor or \
                w.PREEMPTED_BY in (c.job["metadata"].get("annotations") or {}) or \
                self._no_plan.get(uid, 0.0) > time.monotonic():
            return None  # nobody below it, no cascades, or no plan a moment ago
        if admission is not None and c.queued is not None:
            verdict = admission.check(c.queued)
            if not verdict.fits and not verdict.blockers:
                return None  # it waits for its turn, not for quota: nothing to preempt for
        state.plans += 1
        leaves = leaves_by_namespace(state.root) if state.root else {}
        if state.running is None:
            state.running = pv.running_jobs(self._snap, state.classes, leaves)
        limits = quota_limits(state.root, admission.usage) \
            if state.root is not None and admission is not None else None
        preemptor = pv.preemptor(c.job, c.adapter, c.rules, c.queued, leaves, state.classes)
        planned = plan_preemption(preemptor, state.running, fleet_views, limits)
        key = preemptor.key
        if planned.outcome is not Outcome.PREEMPT or planned.decision is None:
            log.debug("no preemption for %s: %s", key, planned.reason)
            self._no_plan[uid] = time.monotonic() + PREEMPTION_RETRY_SECONDS
            return None
        state.decided = True
        by_key = {q.job_key(j): j for j in self._snap.jobs.values()}
        for victim in planned.victims:
            body = by_key.get(victim.key)
            if body is None:
                continue
            reason = (f"preempted by {key} (priority {preemptor.priority} > "
                      f"{victim.priority})")
            adapter = adapter_for(body["apiVersion"], body["kind"])
            if self.dispatcher.mark_requeue(body, adapter, reason, {w.PREEMPTED_BY: key}):
                metrics.PREEMPTIONS.labels("priority").inc()
                self.dispatcher.event(body, "Preempted", reason, "Warning")
                log.info("preempted %s for %s", victim.key, key)
        self.dispatcher.event(c.job, "Preempting", planned.reason)
        self._holds[uid] = Hold(
            {s.cluster: _share_requests(c.job, c.adapter, dict(s.replicas))
             for s in planned.decision.shares},
            time.monotonic() + PREEMPTION_HOLD_SECONDS, planned.reason)
        return Waiting("Preempting", planned.reason)

    def _preempt(self, victims: Sequence[Holding], for_job: Body) -> None:
        claimant = q.job_key(for_job)
        by_key = {q.job_key(j): j for j in self._snap.jobs.values()}
        for victim in victims:
            kind, namespace, name = victim.job.key.split("/", 2)
            body = by_key.get(victim.job.key)
            if body is None:
                continue
            adapter = adapter_for(body["apiVersion"], body["kind"])
            reason = f"preempted to return quota to {claimant}"
            if self.dispatcher.mark_requeue(body, adapter, reason):
                metrics.PREEMPTIONS.labels("reclaim").inc()
                self.dispatcher.event(body, "Preempted", reason, "Warning")
                self.dispatcher.event(for_job, "Reclaimed",
                                      f"preempted {kind} {namespace}/{name} to reclaim quota")
                log.info("preempted %s for %s", victim.job.key, claimant)

    def _publish_queues(self, tree: tuple[Body, QuotaNode], admission: AdmissionPass,
                        waiting: dict[str, Waiting], now: datetime) -> None:
        names = _queue_names(tree[1])
        pending: dict[str, list[str]] = {}
        for leaf, jobs in admission.queues().items():
            ordered = [j for j in jobs if j.key in waiting]
            pending[leaf] = [j.key.split("/", 1)[1] for j in ordered]
            queue = names[tuple(leaf.split("/"))]
            for position, job in enumerate(ordered, start=1):
                why = waiting[job.key]
                why.queue, why.position = queue, position
            oldest = parse_time(ordered[0].created) if ordered else None
            metrics.QUEUE_PENDING_AGE.labels(queue).set(
                (now - oldest).total_seconds() if oldest else 0)
        if time.monotonic() - self._running[0] >= RUNNING_METRIC_SECONDS:
            self._running = (time.monotonic(), _running_by_leaf(self._snap, tree[1]))
        running = self._running[1]
        nodes = {p.key: p.node for p in walk(tree[1])}
        for state in q.queue_objects(tree[0], tree[1], admission, pending):
            self.dispatcher.publish_queue(state.body, self._snap.queues)
            status = state.body["status"]
            key = "/".join(state.path)
            metrics.QUEUE_PENDING.labels(state.name).set(status["pending"])
            metrics.QUEUE_ADMITTED.labels(state.name).set(status["admitted"])
            metrics.QUEUE_RUNNING.labels(state.name).set(
                sum(n for leaf, n in running.items() if leaf == key or
                    leaf.startswith(key + "/")))
            node = nodes[key]
            metrics.set_quota(state.name, node.min, node.max, admission.usage(key))

    # -- showing why a job waits ----------------------------------------------------------
    def _show_waiting(self, job: Body, why: Waiting) -> None:
        adapter = adapter_for(job["apiVersion"], job["kind"])
        queue = (job.get("status") or {}).get("queue") or {}
        shown: dict[str, str | int] = {"reason": why.reason, "message": why.message}
        if why.queue:
            shown |= {"name": why.queue, "position": why.position}
        if {k: queue.get(k) for k in shown} == shown and set(queue) == set(shown):
            return
        status = pv.with_preempted(adapter.waiting_status(
            job.get("status"), why.reason, why.message, now_text()), job, now_text())
        status["queue"] = shown
        self._write_status(job, adapter, status)

    # -- bound jobs ---------------------------------------------------------------------
    def _complete_dispatch(self, job: Body, adapter: KindAdapter,
                           placement: list[dict[str, Any]], works: Sequence[Body]) -> None:
        have = {wk["spec"]["placement"]["cluster"] for wk in works}
        missing = [s for s in placement if s["cluster"] not in have]
        if missing and not adapter.is_finished(job):
            log.info("completing dispatch of %s to %s", q.job_key(job),
                     [s["cluster"] for s in missing])
            deps = self._dependencies(job, adapter, self._policy_of(job))
            for work in self.dispatcher.create_works(
                    [w.work_body(job, adapter, s, placement, deps) for s in missing]):
                self.cache.upsert("works", work)

    def _propagate_spec(self, job: Body, adapter: KindAdapter, placement: list[dict[str, Any]],
                        works: Sequence[Body]) -> None:
        """Carry a spec change of a bound job (pause, resume, debug, suspend, run policy) to
        its Works. A change of replica counts is not carried: the job was divided for the
        counts it had, so it would need a new placement (an event says so)."""
        stale = [wk for wk in works if w.outdated(job, wk)
                 and not wk["metadata"].get("deletionTimestamp")]
        if not stale:
            return
        placed: dict[str, int] = {}
        for share in placement:
            for role, count in share["replicas"].items():
                placed[role] = placed.get(role, 0) + count
        generation = str(job["metadata"].get("generation", 1))
        try:
            wanted = {r.name: r.replicas for r in adapter.roles(job)}
        except InvalidJob as exc:  # changed beyond the bounds (under an older CRD)
            refusal = f"{exc}; the job keeps running as divided ({placed})"
        else:
            placed = {**dict.fromkeys(wanted, 0), **placed}
            refusal = "" if wanted == {k: v for k, v in placed.items() if v or k in wanted} \
                else (f"replicas changed to {wanted} after the job was divided as {placed}; "
                      "delete and re-create the job to re-divide it")
        if refusal:
            for work in stale:  # remember the refusal so the event is said once
                self.dispatcher.update_work(work, work["spec"]["manifests"][0], generation)
            self.dispatcher.event(job, "ReplicasChangeIgnored", refusal, "Warning")
            return
        shares = {s["cluster"]: s for s in placement}
        for work in stale:
            placed_share = shares.get(work["spec"]["placement"]["cluster"])
            if placed_share is None:
                continue
            manifest = w.member_manifest(job, adapter, placed_share, placement,
                                         work["metadata"]["name"])
            updated = self.dispatcher.update_work(work, manifest, generation)
            if updated is not None:
                self.cache.upsert("works", updated)

    def _expire(self, job: Body, adapter: KindAdapter) -> None:
        """ttlSecondsAfterFinished: the hub deletes the finished job (its Works, and so the
        member jobs, go with it); members leave a federated job's TTL to the hub."""
        ttl = adapter.ttl(job)
        done = (job.get("status") or {}).get("completionTime")
        if ttl is None or not done or job["metadata"].get("deletionTimestamp"):
            return
        finished_at = datetime.fromisoformat(done.replace("Z", "+00:00"))
        if (self._now - finished_at).total_seconds() >= ttl:
            log.info("deleting %s: finished %s s ago (ttlSecondsAfterFinished %s)",
                     q.job_key(job), int((self._now - finished_at).total_seconds()), ttl)
            self.dispatcher.delete_job(job, adapter)

    def _aggregate(self, job: Body, adapter: KindAdapter, works: Sequence[Body]) -> None:
        current = job.get("status") or {}
        failure = mf.replica_failure(works)
        status = mf.with_replica_failure(adapter.aggregate(job, works, self._stamp), failure)
        status["clusters"] = sorted({wk["spec"]["placement"]["cluster"] for wk in works}) \
            or current.get("clusters", [])
        if _differs(current, status):
            self._write_status(job, adapter, status)
        said = mf.current_failure(current)
        if failure is not None and said != (failure["reason"], failure["message"]):
            # once per new failure: the condition above is compared before it is written
            self.dispatcher.event(job, failure["reason"], failure["message"], "Warning")

    def _finish_requeue(self, job: Body, adapter: KindAdapter, works: Sequence[Body],
                        reason: str) -> None:
        """A preempted or failed-over job: once its Works are gone it is unbound and waits
        in its queue again (its quota was released when it was marked)."""
        if works:
            self._delete_works(works, release_lost=True)
            return
        unbound = self.dispatcher.unbind(job, adapter)
        if unbound is not None:
            self.cache.upsert("jobs", unbound)
            preempted = w.PREEMPTED_BY in (job["metadata"].get("annotations") or {})
            self._write_status(unbound, adapter, pv.with_preempted(adapter.waiting_status(
                None, "Preempted" if preempted else "Requeued", reason, now_text()),
                unbound, now_text()))

    def _finalize(self, job: Body, adapter: KindAdapter, works: Sequence[Body]) -> None:
        if w.FINALIZER not in (job["metadata"].get("finalizers") or []):
            return
        if works:  # a lost member's agent cannot purge: its Works go now, the rest by it
            for work in works:
                if _keeps_copy(work) and not work["metadata"].get("deletionTimestamp"):
                    # purgeMode Never is about failover: a deleted job takes its copies along.
                    self.dispatcher.set_purge_mode(work, "Immediately")
            self._delete_works(works, release_lost=True)
            return
        self.dispatcher.release(job, adapter)

    def _delete_works(self, works: Sequence[Body], *, release_lost: bool = False) -> None:
        """Delete Works not already going; with ``release_lost``, also drop the agent's
        finalizer of those on lost members (their agents purge orphans when back)."""
        for work in works:
            if release_lost:
                view = self._clusters.get(work["spec"]["placement"]["cluster"])
                if view is None or not view.ready:
                    self.dispatcher.drop_agent_finalizer(work)
            if not work["metadata"].get("deletionTimestamp"):
                self.dispatcher.delete_work(work)

    def _write_status(self, job: Body, adapter: KindAdapter, status: Mapping[str, Any]) -> None:
        written = self.dispatcher.write_status(job, adapter, status)
        if written is not None:
            self.cache.upsert("jobs", written)


def _queue_names(root: QuotaNode) -> dict[tuple[str, ...], str]:
    return queue_names(p.path for p in walk(root))


def _queue_names_of(snap: Snapshot) -> dict[str, str]:
    """Queue names by tree-node key ("root/a") of the active tree."""
    tree = q.active_tree(snap)
    if tree is None:
        return {}
    return {"/".join(path): name for path, name in _queue_names(tree[1]).items()}


def _running_by_leaf(snap: Snapshot, root: QuotaNode) -> dict[str, int]:
    """Admitted jobs whose state is Running, counted at their quota leaf."""
    leaves = leaves_by_namespace(root)
    out: dict[str, int] = {}
    for job in snap.jobs.values():
        meta = job["metadata"]
        leaf = leaves.get(meta.get("namespace", ""))
        if leaf is None or q.ADMITTED_AT not in (meta.get("annotations") or {}):
            continue
        if adapter_for(job["apiVersion"], job["kind"]).state(job.get("status")) == "Running":
            out[leaf.key] = out.get(leaf.key, 0) + 1
    return out


def _observe_stages(meta: Mapping[str, Any], admitted: str | None, bound_at: float,
                    dispatched_at: float, queue: str) -> None:
    """Stage latencies of a decision just written: created -> admitted (queued jobs) ->
    bound -> dispatched (its Works exist)."""
    created = parse_time(meta.get("creationTimestamp"))
    previous = created.timestamp() if created else None
    admitted_time = parse_time(admitted) if admitted else None
    if admitted_time is not None:
        if previous is not None:
            wait = max(0.0, admitted_time.timestamp() - previous)
            metrics.STAGE_SECONDS.labels("admitted").observe(wait)
            metrics.ADMISSION_WAIT.labels(queue).observe(wait)
        previous = admitted_time.timestamp()
    if previous is not None:
        metrics.STAGE_SECONDS.labels("bound").observe(max(0.0, bound_at - previous))
    metrics.STAGE_SECONDS.labels("dispatched").observe(max(0.0, dispatched_at - bound_at))


@dataclass
class _PreemptionPass:
    """What one pass knows for preemption: the running jobs (read once, when first needed)
    and whether it has decided its one preemption."""

    classes: Mapping[str, int] = field(default_factory=dict)
    root: QuotaNode | None = None
    running: list[Running] | None = None
    floor: int = 0  # the lowest priority a job can have: a job at it preempts nobody
    plans: int = 0
    decided: bool = False


@dataclass(frozen=True)
class FailoverSettings:
    toleration_seconds: float
    purge_mode: str
    grace_period_seconds: float


def failover_settings(policy: Mapping[str, Any]) -> FailoverSettings | None:
    """The policy's application failover, defaulted as Karmada does; None when it has none."""
    spec = PropagationPolicySpec.model_validate(policy.get("spec", {}))
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


def _keeps_copy(work: Mapping[str, Any]) -> bool:
    """Whether removing the Work would leave its member copy (purge mode Never)."""
    manifest = work["spec"]["manifests"][0]
    return ((work["metadata"].get("annotations") or {}).get(w.PURGE_MODE)
            or (manifest["metadata"].get("annotations") or {}).get(w.PURGE_MODE)) == "Never"


def _failed_over_from(job: Mapping[str, Any]) -> set[str]:
    avoid = ((job["metadata"].get("annotations") or {}).get(w.FAILOVER_AVOID) or "")
    return {name for name in avoid.split(",") if name}


def lost_since(snap: Snapshot) -> dict[str, datetime]:
    """When each member stopped being usable: its Ready condition turning False, or its
    agent's last heartbeat."""
    out: dict[str, datetime] = {}
    for body in snap.clusters.values():
        status = body.get("status") or {}
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"),
                     None)
        since = None
        if ready is not None and ready.get("status") != "True":
            since = parse_time(ready.get("lastTransitionTime"))
        since = since or heartbeat_of(body, snap.heartbeat_lease(body["metadata"]["name"]))
        if since is not None:
            out[body["metadata"]["name"]] = since
    return out


def _share_requests(job: Mapping[str, Any], adapter: KindAdapter,
                    counts: Mapping[str, int]) -> list[Resources]:
    demand = adapter.demand("", job)
    return [role.request for role in demand.roles for _ in range(counts.get(role.name, 0))]


def _waits(job: Mapping[str, Any]) -> bool:
    """An unchanged job still to decide: not bound, not going, not finished (what
    ``_reconcile_bound`` would say of it without doing anything)."""
    meta = job["metadata"]
    annotations = meta.get("annotations") or {}
    return not meta.get("deletionTimestamp") and q.REQUEUE not in annotations \
        and annotations.get(w.PLACEMENT) in (None, "", "[]") \
        and not adapter_for(job["apiVersion"], job["kind"]).is_finished(job)


def _creation_order(job: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = job["metadata"]
    return (meta.get("creationTimestamp", ""), meta.get("namespace", ""), meta.get("name", ""))


_VOLATILE = {"lastReconcileTime"}


def _differs(current: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    def strip(status: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in status.items() if k not in _VOLATILE and v not in (None, [], {})}
    return strip(current) != strip(new)
