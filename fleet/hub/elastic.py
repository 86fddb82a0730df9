"""Elastic PyTorchJobs as the hub reads them: the range of worker replicas a job accepts
(``spec.elasticPolicy``, defaulted as the training-operator does) and what its placement runs
now, so that quota and preemption count what runs, not what the spec asks for.

A resize is said durably on the hub job (an annotation the status mirror turns into a
``Resized`` condition), since the job's status is otherwise rebuilt from its Works.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fleet.api import protocol as p
from fleet.kinds.base import InvalidJob, condition
from planner.elastic import with_count
from planner.view import Elastic
from propagation.views import JobDemand

ELASTIC_ROLE = "Worker"  # the replica type torchrun's elastic agents scale


def elastic_of(job: Mapping[str, Any]) -> Elastic | None:
    """The worker range of an elastic PyTorchJob; None for any other job. A missing bound
    takes the other's value, both missing the Worker replicas (the training-operator's
    defaults); min above max is refused with the field named."""
    if job.get("kind") != "PyTorchJob":
        return None
    spec = job.get("spec") or {}
    policy = spec.get("elasticPolicy")
    if not isinstance(policy, Mapping):
        return None
    worker = (spec.get("pytorchReplicaSpecs") or {}).get(ELASTIC_ROLE)
    if not isinstance(worker, Mapping):
        raise InvalidJob("spec.elasticPolicy: an elastic PyTorchJob needs a Worker replica spec")
    low, high = policy.get("minReplicas"), policy.get("maxReplicas")
    replicas = int(worker.get("replicas", 1))
    low = int(low if low is not None else high if high is not None else replicas)
    high = int(high if high is not None else low)
    if not 1 <= low <= high:
        raise InvalidJob(f"spec.elasticPolicy.minReplicas: {low} must be between 1 and "
                         f"maxReplicas ({high})")
    return Elastic(ELASTIC_ROLE, low, high)


def elastic_of_or_none(job: Mapping[str, Any]) -> Elastic | None:
    """:func:`elastic_of`, None for a job whose elastic policy is invalid."""
    try:
        return elastic_of(job)
    except InvalidJob:
        return None


def placed_count(job: Mapping[str, Any], role: str) -> int:
    return sum(int(s["replicas"].get(role, 0)) for s in p.decode_placement(job)
               if not s.get("copy"))


def placed_demand(job: Mapping[str, Any], demand: JobDemand) -> JobDemand:
    """A bound elastic job's demand at the size its placement runs; any other job's as is."""
    found = elastic_of_or_none(job)
    shares = p.decode_placement(job)
    if found is None or not shares or any(s.get("copy") for s in shares):
        return demand  # Duplicated copies: charged by the spec, as any duplicated job
    return with_count(demand, found.role, placed_count(job, found.role))


def resized_mark(reason: str, message: str, now: str) -> str:
    return json.dumps({"reason": reason, "message": message, "time": now},
                      separators=(",", ":"))


def with_resized(status: dict[str, Any], job: Mapping[str, Any]) -> dict[str, Any]:
    """A bound job's mirrored status plus its ``Resized`` condition (the last resize)."""
    text = (job["metadata"].get("annotations") or {}).get(p.RESIZED)
    if not text:
        return status
    try:
        mark = json.loads(text)
        said = condition("Resized", str(mark["reason"]), str(mark["message"]), str(mark["time"]))
    except (ValueError, KeyError, TypeError):
        return status
    said["lastTransitionTime"] = said["lastUpdateTime"] = str(mark["time"])
    kept = [c for c in status.get("conditions") or [] if c.get("type") != "Resized"]
    # First, not last: a Kubeflow job's STATE is its last True condition (Running).
    return {**status, "conditions": [said, *kept]}
