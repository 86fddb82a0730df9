"""What the hub says of the fleet beside its decisions: each member's gauges and its
``CapacityStale`` condition, each Queue's status and gauges.

None of it decides anything, so none of it holds a pass: a pass hands over what it saw
(:meth:`Reporting.offer`: its snapshot, the members' views, its queue report) and a thread
of its own writes it from the latest offer, soon after it comes (at most every
``MIN_GAP_SECONDS``) and at least once a second.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from fleet import metrics
from fleet.hub import queueing as q
from fleet.hub.cache import Snapshot
from fleet.hub.dispatch import Dispatcher, now_text
from fleet.hub.pass_view import leaf_queue_names
from fleet.hub.views import heartbeat_of, parse_time
from fleet.kinds import adapter_for
from planner.intents import QueueReport
from propagation.jobkey import JobKey
from propagation.views import ClusterView
from quota.tree import leaves_by_namespace, walk

log = logging.getLogger(__name__)
EVERY_SECONDS = 1.0
MIN_GAP_SECONDS = 0.2  # offers closer than this are reported together
RUNNING_METRIC_SECONDS = 5.0  # counting running jobs per queue walks every job
STALENESS_RESEND_SECONDS = 30.0  # a CapacityStale write not seen in the cache by then is redone


@dataclass(frozen=True)
class Offer:
    snap: Snapshot
    clusters: Sequence[ClusterView]
    now: datetime
    queues: QueueReport | None
    number: int = 0  # counts the offers: tells a later pass's from an earlier one


class Reporting:
    def __init__(self, dispatcher: Dispatcher,
                 submit: Callable[..., object] | None = None) -> None:
        self.dispatcher = dispatcher
        self.submit = submit or (lambda write, *args: write(*args))
        self._offer: Offer | None = None
        self._queues: QueueReport | None = None  # the latest queue report not yet written
        self._last_queues: QueueReport | None = None  # the latest queue report offered
        self._offered = threading.Event()
        self._lock = threading.Lock()
        self._running: tuple[float, dict[str, int]] = (0.0, {})  # (when, per leaf)
        self._staleness_sent: dict[str, tuple[str, float]] = {}  # member -> (status, when)

    def offer(self, snap: Snapshot, clusters: Sequence[ClusterView], now: datetime,
              queues: QueueReport | None) -> None:
        """What the last pass saw; a queue report stays the latest until another comes."""
        with self._lock:
            number = self._offer.number + 1 if self._offer else 1
            self._offer = Offer(snap, clusters, now, queues, number)
            if queues is not None:
                self._queues = self._last_queues = queues
        self._offered.set()

    def latest(self) -> tuple[Offer | None, QueueReport | None]:
        """What the last pass saw, and the latest queue report (a pass that admitted nothing
        new may offer none): what the dashboard shows."""
        with self._lock:
            return self._offer, self._last_queues

    def run(self, stop: threading.Event, leading: Callable[[], bool]) -> None:
        while not stop.is_set():
            self._offered.wait(EVERY_SECONDS)
            self._offered.clear()
            with self._lock:
                offer, queues = self._offer, self._queues
                self._queues = None
            if offer is not None and leading():
                try:
                    self.report(offer, queues)
                except Exception:  # a report must never stop the next
                    log.exception("fleet report failed")
            stop.wait(MIN_GAP_SECONDS)

    def report(self, offer: Offer, queues: QueueReport | None) -> None:
        self.staleness(offer.snap, offer.clusters)
        export_clusters(offer.snap, offer.clusters, offer.now)
        if queues is not None:
            self.publish_queues(queues, offer.snap, offer.now)

    def staleness(self, snap: Snapshot, views: Sequence[ClusterView]) -> None:
        """Keep each MemberCluster's CapacityStale condition (the hub's own) current. A
        condition sent is not sent again until the cache shows it, or
        STALENESS_RESEND_SECONDS pass (a failed write)."""
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
            self.submit(self.dispatcher.set_cluster_condition, view.name, {
                "type": "CapacityStale", "status": wanted,
                "reason": "ReportTooOld" if view.stale_reason else "ReportFresh",
                "message": view.stale_reason or "capacity report is current",
                "lastTransitionTime": now_text()})
        for name in set(sent) - set(bodies):  # removed members
            sent.pop(name)

    def publish_queues(self, report: QueueReport, snap: Snapshot, now: datetime) -> None:
        tree = q.active_tree(snap)
        if tree is None:
            return
        names = leaf_queue_names(tree[1])
        for leaf in report.pending:
            oldest = parse_time(report.oldest.get(leaf))
            metrics.QUEUE_PENDING_AGE.labels(names[leaf]).set(
                (now - oldest).total_seconds() if oldest else 0)
        if time.monotonic() - self._running[0] >= RUNNING_METRIC_SECONDS:
            self._running = (time.monotonic(), running_by_leaf(snap))
        running = self._running[1]
        nodes = {p.key: p.node for p in walk(tree[1])}
        pending_names = {leaf: [f"{JobKey(k).namespace}/{JobKey(k).name}" for k in keys]
                         for leaf, keys in report.pending.items()}
        for state in q.queue_objects(tree[0], tree[1], report.usage, pending_names,
                                     report.cells, report.waiting):
            self.dispatcher.publish_queue(state.body, snap.queues)
            status = state.body["status"]
            key = "/".join(state.path)
            metrics.QUEUE_PENDING.labels(state.name).set(status["pending"])
            if nodes[key].is_leaf:
                metrics.QUEUE_CELL_NODES.labels(state.name).set(
                    sum(report.cells.get(key, {}).values()))
            metrics.QUEUE_ADMITTED.labels(state.name).set(status["admitted"])
            metrics.QUEUE_RUNNING.labels(state.name).set(
                sum(n for leaf, n in running.items() if leaf == key or
                    leaf.startswith(key + "/")))
            node = nodes[key]
            metrics.set_quota(state.name, node.min, node.max, report.usage.get(key, {}))


def export_clusters(snap: Snapshot, views: Sequence[ClusterView], now: datetime) -> None:
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


def running_by_leaf(snap: Snapshot) -> dict[str, int]:
    """Admitted jobs whose state is Running, counted at their quota leaf."""
    tree = q.active_tree(snap)
    if tree is None:
        return {}
    leaves = leaves_by_namespace(tree[1])
    out: dict[str, int] = {}
    for job in snap.jobs.values():
        meta = job["metadata"]
        leaf = leaves.get(meta.get("namespace", ""))
        if leaf is None or q.ADMITTED_AT not in (meta.get("annotations") or {}):
            continue
        if adapter_for(job["apiVersion"], job["kind"]).state(job.get("status")) == "Running":
            out[leaf.key] = out.get(leaf.key, 0) + 1
    return out


__all__ = ["Mapping", "Reporting", "export_clusters", "running_by_leaf"]
