"""Per-stage latencies of a bench run, read off the processes' own ``fleet_stage_seconds``
histograms (scraped before and after the run, the difference is the run's), and quantiles
read off the buckets as Prometheus' ``histogram_quantile`` does (linear within a bucket)."""

from __future__ import annotations

import math
import urllib.request
from collections.abc import Iterable, Mapping

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

# A job's way, in order: the hub's stages, then the agent's (fleet.hub.stages,
# member_agent.stages).
HUB_STAGES = ("queued", "admitted", "bound", "dispatched")
AGENT_STAGES = ("applied", "pods_created", "running")
STAGES = HUB_STAGES + AGENT_STAGES
Buckets = dict[str, dict[float, float]]  # stage -> upper bound -> cumulative count


def _samples(url: str, metric: str, suffix: str) -> Iterable[Sample]:
    """The samples named ``metric`` + ``suffix`` that the process at ``url`` shows."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return [sample for family in text_string_to_metric_families(text) if family.name == metric
            for sample in family.samples if sample.name == f"{metric}{suffix}"]


def scrape(urls: Iterable[str], metric: str = "fleet_stage_seconds") -> Buckets:
    """The histogram's buckets summed over ``urls`` (several agents: one histogram)."""
    out: Buckets = {}
    for url in urls:
        for sample in _samples(url, metric, "_bucket"):
            stage = sample.labels.get("stage", "")
            le = float(sample.labels["le"])
            into = out.setdefault(stage, {})
            into[le] = into.get(le, 0.0) + sample.value
    return out


def counters(url: str, metric: str, label: str) -> dict[str, float]:
    """A counter's samples by one label's value (``metric`` without its ``_total``)."""
    return {sample.labels.get(label, ""): sample.value
            for sample in _samples(url, metric, "_total")}


def since(after: Buckets, before: Buckets) -> Buckets:
    return {stage: {le: n - before.get(stage, {}).get(le, 0.0) for le, n in counts.items()}
            for stage, counts in after.items()}


def quantile(q: float, buckets: Mapping[float, float]) -> float:
    """``histogram_quantile``: NaN without observations; the highest finite bound when the
    quantile falls in the +Inf bucket."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    if total <= 0:
        return math.nan
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, count
    return lower


def count(buckets: Mapping[float, float]) -> float:
    return max(buckets.values(), default=0.0)
