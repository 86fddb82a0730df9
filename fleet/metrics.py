"""Prometheus metrics of the hub and the agents, all prefixed ``fleet_``."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

PENDING_JOBS = Gauge("fleet_pending_jobs", "Jobs on the hub waiting for a placement")
DECISIONS = Counter("fleet_decisions_total", "Division decisions by result", ["result"])
DECISION_SECONDS = Histogram(
    "fleet_decision_seconds", "Time to compute one division decision",
    buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
)
DISPATCH_ERRORS = Counter("fleet_dispatch_errors_total", "Dispatches rolled back after an error")
CLUSTER_READY = Gauge("fleet_cluster_ready", "1 while a member's agent heartbeat is fresh",
                      ["cluster"])
CLUSTER_FREE_GPUS = Gauge("fleet_cluster_free_gpus", "Free GPUs a member reports", ["cluster"])
HEARTBEAT_AGE = Gauge("fleet_agent_heartbeat_age_seconds",
                      "Seconds since the agent's last successful heartbeat", ["cluster"])
AGENT_LEADING = Gauge("fleet_agent_leading", "1 while this agent holds its member's lease",
                      ["cluster"])
WORKS_APPLIED = Counter("fleet_agent_works_applied_total", "Works applied to the member",
                        ["cluster"])


ADMISSIONS = Counter("fleet_admissions_total", "Jobs admitted by their quota queue")
QUEUE_PENDING = Gauge("fleet_queue_pending_jobs", "Jobs waiting in a quota queue", ["queue"])
QUEUE_ADMITTED = Gauge("fleet_queue_admitted_jobs", "Jobs holding quota under a queue's node",
                       ["queue"])
QUEUE_PENDING_AGE = Gauge("fleet_queue_oldest_pending_seconds",
                          "Age of the oldest job waiting in a queue", ["queue"])
QUOTA_USED = Gauge("fleet_quota_used", "Quota used at a tree node, canonical units",
                   ["queue", "resource"])


FAILOVERS = Counter("fleet_failovers_total", "Jobs moved off a lost or unhealthy member")
FAILOVER_SECONDS = Histogram(
    "fleet_failover_seconds", "From a share turning unhealthy to the job bound again",
    buckets=(1, 2, 5, 10, 20, 30, 45, 60, 120, 300, 600),
)


def serve(port: int) -> None:
    """Serve /metrics on 127.0.0.1:``port`` (0 = do not serve)."""
    if port:
        start_http_server(port, addr="127.0.0.1")
