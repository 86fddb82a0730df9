"""The hub's and an agent's /metrics after a queued job ran, and the Grafana dashboard: every
metric the dashboard queries must be exported by one of them."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from e2e.conftest import eventually
from e2e.jobs import seed_pytorchjob, state
from e2e.localfleet import LocalFleet
from e2e.localfleet.demo import EXAMPLES, apply_file
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e
DASHBOARD = Path(__file__).resolve().parent.parent / "deploy" / "grafana" / "fleet.json"
METRIC = re.compile(r"\bfleet_[a-zA-Z0-9_]+")
SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


def scrape(url: str) -> tuple[set[str], list[Sample]]:
    """Family names (declared, with or without samples) and every sample at ``url`` (a
    component's /metrics: ``LocalFleet.metrics_url``)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    families = list(text_string_to_metric_families(text))
    return {f.name for f in families}, [s for f in families for s in f.samples]


def dashboard_queries(dashboard: dict[str, object]) -> list[str]:
    """Every PromQL expression in the dashboard: panel targets and template queries."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("expr", "definition") and isinstance(value, str):
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(dashboard)
    return found


def missing_metrics(queries: list[str], families: set[str]) -> set[str]:
    """Names the queries use that no scraped family exports (a histogram's ``_bucket`` or a
    counter's ``_total`` belongs to its family)."""
    missing = set()
    for query in queries:
        for name in METRIC.findall(query):
            base = next((name[: -len(s)] for s in SUFFIXES if name.endswith(s)), name)
            if name not in families and base not in families:
                missing.add(name)
    return missing


@pytest.fixture(scope="module")
def ran(fleet: LocalFleet, hub: Kube) -> Iterator[None]:
    """A job admitted by its quota queue ran to completion."""
    apply_file(hub, EXAMPLES / "elasticquotatree.yaml")
    apply_file(hub, EXAMPLES / "propagationpolicy-gang-queue.yaml")
    eventually(lambda: (hub.get_or_none(r.QUEUES, "root-child-2", "kube-queue") or {})
               .get("status"), what="Queue root-child-2")
    hub.create(r.PYTORCHJOBS, seed_pytorchjob("metrics-1", run_for="1s"))
    eventually(lambda: state(hub.get(r.PYTORCHJOBS, "metrics-1", "default")) == "Succeeded",
               timeout=120, what="metrics-1 Succeeded")
    yield
    hub.delete(r.PYTORCHJOBS, "metrics-1", "default")
    hub.delete(r.ELASTICQUOTATREES, "elasticquotatree", "kube-system")
    apply_file(hub, EXAMPLES / "propagationpolicy-gang.yaml")


def test_dashboard_queries_only_exported_metrics(ran: None, fleet: LocalFleet) -> None:
    hub_families, hub_samples = scrape(fleet.metrics_url("hub"))
    agent_families, agent_samples = scrape(fleet.metrics_url("agent-member1"))
    queries = dashboard_queries(json.loads(DASHBOARD.read_text()))
    assert len(queries) >= 25
    assert all(METRIC.search(q) for q in queries), "a query names no fleet metric"
    assert missing_metrics(queries, hub_families | agent_families) == set()
    # The bogus query the dashboard must never contain is caught:
    assert missing_metrics(["sum(fleet_not_exported_total)"], hub_families) == {
        "fleet_not_exported_total"}

    def values(samples: list[Sample], name: str, **labels: str) -> list[float]:
        return [s.value for s in samples if s.name == name and
                all(s.labels.get(k) == v for k, v in labels.items())]

    # What the job left behind, as the dashboard charts it.
    for stage in ("queued", "admitted", "bound", "dispatched"):
        assert values(hub_samples, "fleet_stage_seconds_count", stage=stage)[0] >= 1
    assert values(hub_samples, "fleet_admission_wait_seconds_count", queue="root-child-2")
    assert values(hub_samples, "fleet_quota_max", queue="root-child-2",
                  resource="kube-queue/max-jobs") == [1]
    assert values(hub_samples, "fleet_quota_nominal", queue="root-child-2", resource="cpu")
    # (other tests' jobs may share the namespace, so only that the series exist)
    assert len(values(hub_samples, "fleet_quota_used", queue="root-child-2", resource="cpu")) == 1
    assert len(values(hub_samples, "fleet_queue_pending_jobs", queue="root-child-2")) == 1
    assert values(hub_samples, "fleet_cluster_capacity", cluster="member1",
                  resource="nvidia.com/gpu") == [32]
    assert values(hub_samples, "fleet_cluster_heartbeat_age_seconds", cluster="member1")[0] < 30
    assert sum(values(hub_samples, "fleet_api_requests_total", verb="create",
                      resource="works")) >= 1
    assert values(agent_samples, "fleet_agent_capacity_report_bytes")[0] > 100
    assert sum(values(agent_samples, "fleet_api_requests_total", verb="apply")) >= 1


def test_agent_stages_of_the_job(ran: None, fleet: LocalFleet, hub: Kube) -> None:
    works = [w for w in hub.list(r.WORKS)[0] if w["spec"]["job"]["name"] == "metrics-1"]
    assert works
    cluster = works[0]["spec"]["placement"]["cluster"]
    _, samples = scrape(fleet.metrics_url(f"agent-{cluster}"))
    stages = {}
    for stage in ("applied", "pods_created", "running"):
        stages[stage] = [s.value for s in samples if s.name == "fleet_stage_seconds_count"
                         and s.labels.get("stage") == stage]
    assert all(v and v[0] >= 1 for v in stages.values()), stages
