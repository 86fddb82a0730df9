"""The hub's decision loop: one pass over every job each time something changes.

A pass takes a snapshot of the cache, turns it into the pure packages' views, and for each job
in creation order either finishes its deletion, keeps its Works complete and its status true, or
asks :func:`propagation.division.divide` where it goes and dispatches it. One failing job is
logged and skipped; it never stops the pass or the jobs behind it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fleet import metrics
from fleet.hub import works as w
from fleet.hub.cache import Body, Cache, Snapshot
from fleet.hub.dispatch import Dispatcher, now_text
from fleet.hub.leader import LeaderElector
from fleet.hub.views import cluster_view, job_identity, parse_time, placement_rules, policy_ref
from fleet.kinds import adapter_for
from fleet.kinds.base import KindAdapter
from propagation.binding import binding_message
from propagation.division import divide, with_assumed
from propagation.matching import governing_policy
from propagation.resources import Resources
from propagation.views import ClusterView, FitMode

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    fit_mode: FitMode = FitMode.NODE_AWARE
    heartbeat_timeout: float = 15.0  # a member is lost when its agent is silent this long
    resync_seconds: float = 2.0  # a pass runs at least this often (heartbeats age, leases)
    lease_namespace: str = "fleet-system"


@dataclass
class Scheduler:
    cache: Cache
    dispatcher: Dispatcher
    elector: LeaderElector
    settings: Settings = field(default_factory=Settings)

    def run(self, stop: threading.Event) -> None:
        self.elector.ensure_namespace()
        next_renewal = 0.0
        while not stop.is_set():
            if time.monotonic() >= next_renewal:
                self.elector.renew()
                next_renewal = time.monotonic() + self.elector.lease_seconds / 3
            if self.elector.leading:
                try:
                    self.pass_once()
                except Exception:  # a bug in one pass must not stop the hub
                    log.exception("scheduling pass failed")
            self.cache.wait_for_change(self.settings.resync_seconds)

    def pass_once(self) -> None:
        snap = self.cache.snapshot()
        now = datetime.now(UTC)
        clusters = [cluster_view(b, now, self.settings.heartbeat_timeout)
                    for b in snap.clusters.values()]
        for view in clusters:
            metrics.CLUSTER_READY.labels(view.name).set(1 if view.ready else 0)
            metrics.CLUSTER_FREE_GPUS.labels(view.name).set(view.free.get("nvidia.com/gpu", 0))
        assumed = assumed_requests(snap)
        pending = 0
        for job in sorted(snap.jobs.values(), key=_creation_order):
            try:
                adapter = adapter_for(job["apiVersion"], job["kind"])
                if not self._reconcile(job, adapter, snap, clusters, assumed):
                    pending += 1
            except Exception:
                log.exception("job %s/%s skipped this pass", job["metadata"].get("namespace"),
                              job["metadata"].get("name"))
        metrics.PENDING_JOBS.set(pending)

    def _reconcile(self, job: Body, adapter: KindAdapter, snap: Snapshot,
                   clusters: Sequence[ClusterView], assumed: dict[str, list[Resources]]) -> bool:
        """Returns False while the job waits for a placement."""
        meta = job["metadata"]
        works = snap.works_of(meta["uid"])
        if meta.get("deletionTimestamp"):
            self._finalize(job, adapter, works)
            return True
        placement = w.decode_placement(job)
        if placement:
            self._complete_dispatch(job, adapter, placement, works)
            self._aggregate(job, adapter, works)
            return True
        if adapter.is_finished(job):
            return True
        return self._schedule(job, adapter, snap, clusters, assumed)

    def _schedule(self, job: Body, adapter: KindAdapter, snap: Snapshot,
                  clusters: Sequence[ClusterView], assumed: dict[str, list[Resources]]) -> bool:
        policies = {(b["metadata"].get("namespace") or "", b["metadata"]["name"]): b
                    for b in (*snap.policies.values(), *snap.cluster_policies.values())}
        chosen = governing_policy(job_identity(job), [policy_ref(b) for b in policies.values()])
        if chosen is None:
            self._wait(job, adapter, "NoMatchingPolicy",
                       "no PropagationPolicy or ClusterPropagationPolicy selects this job")
            return False
        rules = placement_rules(policies[(chosen.namespace, chosen.name)], self.settings.fit_mode)
        meta = job["metadata"]
        demand = adapter.demand(f"{job['kind']}/{meta['namespace']}/{meta['name']}", job)
        views = [with_assumed(c, assumed.get(c.name, [])) for c in clusters]
        started = time.perf_counter()
        decision = divide(demand, views, rules)
        metrics.DECISION_SECONDS.observe(time.perf_counter() - started)
        if not decision.placed:
            metrics.DECISIONS.labels("unschedulable").inc()
            self._wait(job, adapter, "Unschedulable", decision.reason)
            return False
        metrics.DECISIONS.labels("placed").inc()
        placement = w.encode_placement(decision.shares)
        clusters_used = [s.cluster for s in decision.shares]
        bound = self.dispatcher.bind(job, adapter, placement, clusters_used)
        if bound is None:
            return False  # changed under us; the next pass sees the new version
        self.cache.upsert("jobs", bound)
        shares = w.decode_placement(bound)
        try:
            created = self.dispatcher.create_works(
                [w.work_body(bound, adapter, share, shares) for share in shares])
        except Exception:
            metrics.DISPATCH_ERRORS.inc()
            log.exception("dispatch of %s/%s failed; rolled back", meta["namespace"],
                          meta["name"])
            self.dispatcher.unbind(bound, adapter)
            return False
        for work in created:  # later decisions in this pass must not spend the same capacity
            self.cache.upsert("works", work)
            cluster = work["spec"]["placement"]["cluster"]
            assumed.setdefault(cluster, []).extend(share_requests(work))
        message = binding_message(decision.shares)
        self.dispatcher.event(bound, "ScheduleBindingSucceed", message)
        self._write_status(bound, adapter, adapter.bound_status(
            bound.get("status"), clusters_used, message, now_text()))
        log.info("bound %s/%s: %s", meta["namespace"], meta["name"], message)
        return True

    def _wait(self, job: Body, adapter: KindAdapter, reason: str, message: str) -> None:
        queue = (job.get("status") or {}).get("queue") or {}
        if queue.get("reason") == reason and queue.get("message") == message:
            return
        self._write_status(job, adapter, adapter.waiting_status(
            job.get("status"), reason, message, now_text()))

    def _complete_dispatch(self, job: Body, adapter: KindAdapter,
                           placement: list[dict[str, Any]], works: Sequence[Body]) -> None:
        have = {wk["spec"]["placement"]["cluster"] for wk in works}
        missing = [s for s in placement if s["cluster"] not in have]
        if missing and not adapter.is_finished(job):
            log.info("completing dispatch of %s/%s to %s", job["metadata"]["namespace"],
                     job["metadata"]["name"], [s["cluster"] for s in missing])
            for work in self.dispatcher.create_works(
                    [w.work_body(job, adapter, s, placement) for s in missing]):
                self.cache.upsert("works", work)

    def _aggregate(self, job: Body, adapter: KindAdapter, works: Sequence[Body]) -> None:
        current = job.get("status") or {}
        status = adapter.aggregate(job, works, now_text())
        status["clusters"] = sorted({wk["spec"]["placement"]["cluster"] for wk in works}) \
            or current.get("clusters", [])
        if _differs(current, status):
            self._write_status(job, adapter, status)

    def _write_status(self, job: Body, adapter: KindAdapter, status: Mapping[str, Any]) -> None:
        written = self.dispatcher.write_status(job, adapter, status)
        if written is not None:
            self.cache.upsert("jobs", written)

    def _finalize(self, job: Body, adapter: KindAdapter, works: Sequence[Body]) -> None:
        if w.FINALIZER not in (job["metadata"].get("finalizers") or []):
            return
        if works:
            for work in works:
                if not work["metadata"].get("deletionTimestamp"):
                    self.dispatcher.delete_work(work)
            return
        self.dispatcher.release(job, adapter)


def share_requests(work: Mapping[str, Any]) -> list[Resources]:
    """Per-replica requests of the share a Work carries."""
    manifest = work["spec"]["manifests"][0]
    adapter = adapter_for(manifest["apiVersion"], manifest["kind"])
    demand = adapter.demand("", manifest)
    return [role.request for role in demand.roles for _ in range(role.replicas)]


def assumed_requests(snap: Snapshot) -> dict[str, list[Resources]]:
    """Requests of Works whose pods the member's last capacity report does not yet count."""
    observed: dict[str, datetime | None] = {}
    for body in snap.clusters.values():
        capacity = (body.get("status") or {}).get("capacity") or {}
        observed[body["metadata"]["name"]] = parse_time(capacity.get("observedTime"))
    out: dict[str, list[Resources]] = {}
    for work in snap.works.values():
        status = work.get("status") or {}
        if status.get("state") in ("Succeeded", "Failed") or work["metadata"].get(
                "deletionTimestamp"):
            continue
        cluster = work["spec"]["placement"]["cluster"]
        bound, seen = parse_time(status.get("boundTime")), observed.get(cluster)
        if bound is not None and seen is not None and seen >= bound:
            continue
        out.setdefault(cluster, []).extend(share_requests(work))
    return out


def _creation_order(job: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = job["metadata"]
    return (meta.get("creationTimestamp", ""), meta.get("namespace", ""), meta.get("name", ""))


_VOLATILE = {"lastReconcileTime"}


def _differs(current: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    def strip(status: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in status.items() if k not in _VOLATILE and v not in (None, [], {})}
    return strip(current) != strip(new)
