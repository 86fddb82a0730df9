"""One description per job kind, read by the hub and by the member agents.

A kind's adapter names its resource, where its roles live in the spec (names, replica counts,
templates) and which one leads, each replica's resource request, how to cut a job down to one
cluster's share, how its status reads (state, finished, failed) and how member statuses add up
to the hub job's status. The agent's controllers (``member_agent.controllers``) read the same
adapter and add only how they run the kind on a member. Adding a kind means adding one
adapter here, registering it in :data:`ADAPTERS`, and a controller on the agent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleet.kinds.base import KindAdapter
from fleet.kinds.jobset import JOBSET
from fleet.kinds.kubeflow import JAX, MPI, PADDLE, PYTORCH, TF, XGBOOST
from fleet.kinds.t9k import T9K_MPI, T9K_TF
from fleet.kinds.trainjob import TRAINJOB

ADAPTERS: tuple[KindAdapter, ...] = (PYTORCH, TF, MPI, JAX, PADDLE, XGBOOST, T9K_MPI, T9K_TF,
                                     JOBSET, TRAINJOB)

_BY_KIND = {(a.resource.api_version, a.resource.kind): a for a in ADAPTERS}


def adapter_for(api_version: str, kind: str) -> KindAdapter:
    return _BY_KIND[(api_version, kind)]


def job_state(body: Mapping[str, Any]) -> str:
    """The job's state as its kind reads its status: Pending before it has one, Unknown for
    an object no adapter reads."""
    try:
        return adapter_for(body["apiVersion"], body["kind"]).state(body.get("status")) \
            or "Pending"
    except (KeyError, NotImplementedError):
        return "Unknown"


def managed_elsewhere(body: Mapping[str, Any]) -> str | None:
    """The controller other than fleet the job names to run it (as the training operator
    reads ``runPolicy.managedBy``: any value but its own); None when fleet runs it."""
    adapter = _BY_KIND.get((body.get("apiVersion", ""), body.get("kind", "")))
    if adapter is None:
        return None
    manager = adapter.managed_by(body)
    return manager if manager not in (None, *adapter.own_managers) else None


__all__ = ["ADAPTERS", "KindAdapter", "adapter_for", "job_state", "managed_elsewhere"]
