"""Per-kind adapters: what the hub needs to know about each job kind.

An adapter names a kind's roles (and which one leads), each replica's resource request, how to
cut a job down to one cluster's share, and how member statuses add up to the hub job's status.
Adding a kind means adding one adapter here and registering it in :data:`ADAPTERS`.
"""

from __future__ import annotations

from fleet.kinds.base import KindAdapter
from fleet.kinds.kubeflow import MPI, PYTORCH, TF
from fleet.kinds.t9k import T9K_MPI, T9K_TF

ADAPTERS: tuple[KindAdapter, ...] = (PYTORCH, TF, MPI, T9K_MPI, T9K_TF)

_BY_KIND = {(a.resource.api_version, a.resource.kind): a for a in ADAPTERS}


def adapter_for(api_version: str, kind: str) -> KindAdapter:
    return _BY_KIND[(api_version, kind)]


__all__ = ["ADAPTERS", "KindAdapter", "adapter_for"]
