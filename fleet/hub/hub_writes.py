"""The writes the hub's own observation asks for, as values: the status mirror
(:mod:`fleet.hub.status_mirror`) computes them and writes nothing; the
:class:`~fleet.hub.writer.Writer` carries them out, as it does a plan's intents.

Each names the object it changes as read (its resourceVersion guards the write).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Body = Mapping[str, Any]


@dataclass(frozen=True)
class WriteStatus:
    """Replace a job's status (said from its Works' reports)."""

    job: Body
    status: Mapping[str, Any]


@dataclass(frozen=True)
class RewriteWork:
    """Give a Work the manifest of a newer spec of its job."""

    work: Body
    manifest: Body
    generation: str  # the job's generation it renders


@dataclass(frozen=True)
class ResizeWork:
    """Give a Work its share's new replica count (an elastic job grown or shrunk)."""

    work: Body
    manifest: Body
    share: Mapping[str, Any]
    when: str  # the resize's time, for the agent's bound-again test


@dataclass(frozen=True)
class DeleteWork:
    """Remove a Work whose share a shrink took away."""

    work: Body


@dataclass(frozen=True)
class Say:
    """An event about a job."""

    obj: Body
    reason: str
    message: str
    kind: str = "Normal"


HubWrite = WriteStatus | RewriteWork | ResizeWork | DeleteWork | Say
