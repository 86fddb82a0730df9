"""Names of the objects a job controller creates, kept valid however long the job's name is.

Replica pods and their Services are ``<job>-<type>-<index>``, as Kubeflow and T9k name them.
A Service name and a pod's hostname must be DNS-1035 labels of at most 63 characters, and so
must label values; Kubeflow's controller leaves a job with a long name stuck forever
(kubeflow/training-operator#1101). Here a name that would be too long keeps its readable
start and end and gets a short hash of the whole in between, so it stays unique and stable.
"""

from __future__ import annotations

import hashlib

LABEL_LIMIT = 63


def shorten(value: str, limit: int = LABEL_LIMIT, *, keep_tail: str = "") -> str:
    """``value`` if it fits in ``limit``; else its start, a 6-character hash, and ``keep_tail``
    (which ``value`` must end with)."""
    if len(value) <= limit:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:6]
    head = value[: len(value) - len(keep_tail)][: limit - len(keep_tail) - len(digest) - 1]
    return f"{head.rstrip('-.')}-{digest}{keep_tail}"


def replica_name(job: str, rtype: str, index: int) -> str:
    """Pod and Service name of replica ``index`` of ``rtype``."""
    tail = f"-{rtype.lower()}-{index}"
    return shorten(f"{job}{tail}", keep_tail=tail)


def label_value(value: str) -> str:
    return shorten(value)


def derived_name(job: str, suffix: str) -> str:
    """Name of a per-job object such as ``<job>-tensorboard``."""
    tail = f"-{suffix}"
    return shorten(f"{job}{tail}", keep_tail=tail)
