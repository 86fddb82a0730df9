"""Which propagation policy governs a job.

A policy's resourceSelectors match a job by apiVersion and kind, and optionally namespace, name
and labels. Among matching policies the highest ``priority`` wins, then the most specific
selector (name over labelSelector over kind alone), then a namespaced PropagationPolicy over a
ClusterPropagationPolicy, then the alphabetically first name, so the answer is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from propagation.clusters import affinity_mismatch
from propagation.views import Affinity, ClusterView


@dataclass(frozen=True)
class JobIdentity:
    api_version: str
    kind: str
    namespace: str
    name: str
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Selector:
    api_version: str
    kind: str
    namespace: str = ""
    name: str = ""
    label_selector: Affinity | None = None  # reuses the label-matching rules of clusters


@dataclass(frozen=True)
class PolicyRef:
    namespace: str  # "" for a ClusterPropagationPolicy
    name: str
    selectors: tuple[Selector, ...]
    priority: int = 0


NAME, LABELS, KIND = 3, 2, 1


def specificity(job: JobIdentity, selector: Selector) -> int:
    """0 when ``selector`` does not match ``job``; otherwise how specifically it does."""
    if (selector.api_version, selector.kind) != (job.api_version, job.kind):
        return 0
    if selector.namespace and selector.namespace != job.namespace:
        return 0
    if selector.name:
        return NAME if selector.name == job.name else 0
    if selector.label_selector is not None:
        as_cluster = ClusterView(name=job.name, ready=True, labels=job.labels)
        return LABELS if not affinity_mismatch(as_cluster, selector.label_selector) else 0
    return KIND


def governing_policy(job: JobIdentity, policies: Sequence[PolicyRef]) -> PolicyRef | None:
    best: tuple[tuple[int, int, int, str], PolicyRef] | None = None
    for policy in policies:
        if policy.namespace and policy.namespace != job.namespace:
            continue
        score = max((specificity(job, s) for s in policy.selectors), default=0)
        if not score:
            continue
        key = (-policy.priority, -score, 0 if policy.namespace else 1, policy.name)
        if best is None or key < best[0]:
            best = (key, policy)
    return best[1] if best else None
