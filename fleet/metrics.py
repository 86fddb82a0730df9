"""Prometheus metrics of the hub and the agents, all prefixed ``fleet_``.

Modelled on Kueue's: jobs per queue and state, quota per tree node and resource (nominal,
max, borrowed, used), admission wait and per-stage latency, preemptions and failovers by
reason, member capacity and heartbeat age, and the API requests each process makes. Labels
stay bounded: queues, tree nodes, members, resources, verbs and reasons are all finite sets
an operator configures; no label ever names a job or a pod.

``deploy/grafana/fleet.json`` charts them; ``e2e/test_metrics.py`` fails when it queries a
metric that is not exported here.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest

from fleet import http_answer

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)

# -- the hub's decisions ------------------------------------------------------------------
PENDING_JOBS = Gauge("fleet_pending_jobs", "Jobs on the hub waiting for a placement")
DECISIONS = Counter("fleet_decisions_total", "Division decisions by result", ["result"])
DECISION_SECONDS = Histogram(
    "fleet_decision_seconds", "Time to compute one division decision",
    buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
)
SCHEDULING_PASS_SECONDS = Histogram(
    "fleet_scheduling_pass_seconds", "Time of one scheduling pass over every job on the hub",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0,
             1.5, 2.5, 5.0, 10.0, 30.0),
)
SCHEDULING_PASS_CPU_SECONDS = Histogram(
    "fleet_scheduling_pass_cpu_seconds",
    "CPU time of the scheduling thread in one pass (the pass's own work; the wall time above "
    "also counts waiting for the interpreter and the machine's cores)",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0,
             1.5, 2.5, 5.0, 10.0, 30.0),
)
DISPATCH_ERRORS = Counter("fleet_dispatch_errors_total", "Dispatches rolled back after an error")
STAGE_SECONDS = Histogram(
    "fleet_stage_seconds",
    "Latency of each step of a job's way, from the step before it, timed by the process "
    "taking it: on the hub created -> queued -> admitted (a pass decided it) -> bound -> "
    "dispatched (Works written), on an agent dispatched -> applied -> pods_created -> running",
    ["stage"],
    # fine below 2 s (the create -> Running budget), so that a bench's p50/p99 read off the
    # buckets mean something
    buckets=(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 1.5, 2,
             3, 5, 10, 30, 60, 300, 1800),
)

# -- members, as the hub sees them --------------------------------------------------------
CLUSTER_READY = Gauge("fleet_cluster_ready", "1 while a member's agent heartbeat is fresh",
                      ["cluster"])
CLUSTER_FREE_GPUS = Gauge("fleet_cluster_free_gpus", "Free GPUs a member reports", ["cluster"])
CLUSTER_CAPACITY = Gauge("fleet_cluster_capacity", "Allocatable amount a member reports, "
                         "canonical units (cpu in millicores, memory in bytes)",
                         ["cluster", "resource"])
CLUSTER_FREE = Gauge("fleet_cluster_free", "Free amount a member reports, canonical units",
                     ["cluster", "resource"])
CLUSTER_HEARTBEAT_AGE = Gauge("fleet_cluster_heartbeat_age_seconds",
                              "Seconds since the hub last saw a member's agent heartbeat",
                              ["cluster"])

# -- the agents ---------------------------------------------------------------------------
HEARTBEAT_AGE = Gauge("fleet_agent_heartbeat_age_seconds",
                      "Seconds since the agent's last successful heartbeat", ["cluster"])
AGENT_LEADING = Gauge("fleet_agent_leading", "1 while this agent holds its member's lease",
                      ["cluster"])
WORKS_APPLIED = Counter("fleet_agent_works_applied_total", "Works applied to the member",
                        ["cluster"])
FENCED_JOBS = Counter("fleet_agent_fenced_jobs_total",
                      "Stale member jobs the agent removed (their Work gone or superseded)",
                      ["cluster"])
REPORT_BYTES = Gauge("fleet_agent_capacity_report_bytes",
                     "Size of the last MemberCluster status the agent applied (JSON bytes)",
                     ["cluster"])

# -- quota queues -------------------------------------------------------------------------
ADMISSIONS = Counter("fleet_admissions_total", "Jobs admitted by their quota queue")
ADMISSION_WAIT = Histogram("fleet_admission_wait_seconds",
                           "From a queued job's creation to its admission", ["queue"],
                           buckets=_LATENCY_BUCKETS)
QUEUE_PENDING = Gauge("fleet_queue_pending_jobs", "Jobs waiting in a quota queue", ["queue"])
QUEUE_ADMITTED = Gauge("fleet_queue_admitted_jobs", "Jobs holding quota under a queue's node",
                       ["queue"])
QUEUE_RUNNING = Gauge("fleet_queue_running_jobs",
                      "Admitted jobs under a queue's node whose pods all run", ["queue"])
QUEUE_CELL_NODES = Gauge("fleet_queue_cell_nodes",
                         "Nodes a quota leaf's guarantee owns (its cells) on the ready members",
                         ["queue"])
QUEUE_PENDING_AGE = Gauge("fleet_queue_oldest_pending_seconds",
                          "Age of the oldest job waiting in a queue", ["queue"])
QUOTA_NOMINAL = Gauge("fleet_quota_nominal", "A tree node's min (guaranteed) quota, canonical "
                      "units", ["queue", "resource"])
QUOTA_MAX = Gauge("fleet_quota_max", "A tree node's max quota, canonical units",
                  ["queue", "resource"])
QUOTA_USED = Gauge("fleet_quota_used", "Quota used at a tree node, canonical units",
                   ["queue", "resource"])
QUOTA_BORROWED = Gauge("fleet_quota_borrowed",
                       "Quota used at a tree node beyond its min, canonical units",
                       ["queue", "resource"])
PREEMPTIONS = Counter("fleet_preemptions_total", "Jobs preempted, by reason", ["reason"])
RESIZES = Counter("fleet_elastic_resizes_total", "Elastic jobs grown or shrunk in place",
                  ["direction"])
RESERVATIONS = Counter("fleet_reservations_total",
                       "Placements in reservation mode, by outcome (reserving, committed, "
                       "rolled_back)", ["outcome"])

# -- failover -----------------------------------------------------------------------------
FAILOVERS = Counter("fleet_failovers_total", "Jobs moved off a lost or unhealthy member",
                    ["reason"])
FAILOVER_SECONDS = Histogram(
    "fleet_failover_seconds", "From a share turning unhealthy to the job bound again",
    buckets=(1, 2, 5, 10, 20, 30, 45, 60, 120, 300, 600),
)

# -- API requests (fleet.clients.kube) ----------------------------------------------------
API_REQUESTS = Counter("fleet_api_requests_total", "Requests to an API server",
                       ["verb", "resource", "code"])
API_ERRORS = Counter("fleet_api_errors_total", "Failed requests to an API server, by reason",
                     ["verb", "resource", "reason"])
JOB_STATUS_WRITES = Counter(
    "fleet_job_status_writes_total", "Job statuses the hub wrote, by what they say: why the "
    "job waits (waiting), its members' reports (reported), that it was requeued (requeued)",
    ["why"])
API_RETRIES = Counter("fleet_api_retries_total", "Requests tried again after a transient error",
                      ["verb", "resource"])

for _reason in ("cluster_lost", "unschedulable"):
    FAILOVERS.labels(_reason)
PREEMPTIONS.labels("reclaim")
PREEMPTIONS.labels("priority")
PREEMPTIONS.labels("shrink")
RESIZES.labels("grow")
RESIZES.labels("shrink")


def set_quota(queue: str, nominal: Mapping[str, int], maximum: Mapping[str, int],
              used: Mapping[str, int]) -> None:
    """A tree node's quota gauges; resources that it names in min or max, and any it uses."""
    for resource in sorted(set(nominal) | set(maximum) | set(used)):
        amount = used.get(resource, 0)
        QUOTA_USED.labels(queue, resource).set(amount)
        QUOTA_NOMINAL.labels(queue, resource).set(nominal.get(resource, 0))
        QUOTA_BORROWED.labels(queue, resource).set(max(0, amount - nominal.get(resource, 0)))
        if resource in maximum:
            QUOTA_MAX.labels(queue, resource).set(maximum[resource])


def set_cluster(cluster: str, allocatable: Mapping[str, int], free: Mapping[str, int]) -> None:
    for resource in sorted(set(allocatable) | set(free)):
        CLUSTER_CAPACITY.labels(cluster, resource).set(allocatable.get(resource, 0))
        CLUSTER_FREE.labels(cluster, resource).set(free.get(resource, 0))


def forget_clusters(known: Iterable[str]) -> None:
    """Drop the series of members that left, so that a removed member is not charted as
    ready forever (the cluster label set stays the current members)."""
    keep = set(known)
    for gauge in (CLUSTER_READY, CLUSTER_FREE_GPUS, CLUSTER_HEARTBEAT_AGE):
        for labels in list(_label_values(gauge)):
            if labels[0] not in keep:
                gauge.remove(*labels)
    for gauge in (CLUSTER_CAPACITY, CLUSTER_FREE):
        for labels in list(_label_values(gauge)):
            if labels[0] not in keep:
                gauge.remove(*labels)


def _label_values(gauge: Gauge) -> list[tuple[str, ...]]:
    # A gauge's samples carry exactly its labels, in the order they were declared.
    return [tuple(sample.labels.values()) for metric in gauge.collect()
            for sample in metric.samples]


def address() -> str:
    """Where /metrics listens: ``FLEET_METRICS_ADDR``, 127.0.0.1 by default (on a shared host
    nothing else should reach it); the deploy manifests set 0.0.0.0 so that Prometheus can
    scrape the Pod."""
    return os.environ.get("FLEET_METRICS_ADDR", "127.0.0.1")





# Named readiness checks: /readyz answers 200 once every registered one returns True.
_READY_CHECKS: dict[str, Callable[[], bool]] = {}


def ready_when(name: str, check: Callable[[], bool]) -> None:
    _READY_CHECKS[name] = check


def not_ready() -> list[str]:
    """The names of the readiness checks that do not pass yet."""
    failing = []
    for name, check in list(_READY_CHECKS.items()):
        try:
            ok = check()
        except Exception:  # a failing check means not ready, never a crashed probe
            ok = False
        if not ok:
            failing.append(name)
    return failing


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._answer(200, generate_latest(), CONTENT_TYPE_LATEST)
        elif path == "/readyz":
            failing = not_ready()
            text = "ok\n" if not failing else "not ready: " + ", ".join(failing) + "\n"
            self._answer(503 if failing else 200, text.encode(), "text/plain")
        elif path == "/healthz":
            self._answer(200, b"ok\n", "text/plain")
        else:
            self._answer(404, b"not found\n", "text/plain")

    def _answer(self, code: int, body: bytes, content_type: str) -> None:
        http_answer.answer(self, code, body, content_type)

    def log_message(self, format: str, *args: object) -> None:
        pass  # probes every few seconds would flood the JSON log


_SERVING: dict[tuple[str, int], ThreadingHTTPServer] = {}
_SERVING_LOCK = threading.Lock()


def serve(port: int, addr: str | None = None) -> None:
    """Serve /metrics, /readyz and /healthz on ``addr``:``port`` (0 = do not serve); the
    address is FLEET_METRICS_ADDR, 127.0.0.1 unless set (a Pod sets 0.0.0.0 so that its
    probes and the Service reach it)."""
    if not port:
        return
    where = (addr or address(), port)
    with _SERVING_LOCK:
        if where in _SERVING:  # a start-up retried after a failure further on: serving
            return
        server = ThreadingHTTPServer(where, _Handler)
        server.daemon_threads = True
        _SERVING[where] = server
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
