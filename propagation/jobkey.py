"""The one name of a job across fleet: its kind with its API group, its namespace and name.

Two kinds share a name (Kubeflow's and T9k's ``MPIJob``), so a key without the group names
two jobs. A :class:`JobKey` is a ``str`` (``"MPIJob.kubeflow.org/team-a/train"``, kubectl's
``kind.group`` spelling) so that it sorts, hashes and prints as text wherever a key goes (the
planner's intents, the quota engine's queues, messages), and it parses back into its parts.
The hub's cache, the planner, the simulator and the agent all name jobs by it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class JobKey(str):
    """``<Kind>.<group>/<namespace>/<name>``."""

    __slots__ = ()

    @classmethod
    def of(cls, group: str, kind: str, namespace: str, name: str) -> JobKey:
        return cls(f"{kind}.{group}/{namespace}/{name}")

    @classmethod
    def from_api_version(cls, api_version: str, kind: str, namespace: str,
                         name: str) -> JobKey:
        return cls.of(group_of(api_version), kind, namespace, name)

    @classmethod
    def of_body(cls, body: Mapping[str, Any]) -> JobKey:
        """The key of a job object (or of a manifest carrying one)."""
        meta = body.get("metadata") or {}
        return cls.from_api_version(str(body.get("apiVersion", "")), str(body.get("kind", "")),
                                    str(meta.get("namespace") or ""), str(meta.get("name", "")))

    @property
    def kind_key(self) -> str:
        """``<Kind>.<group>``: what tells two kinds of the same name apart."""
        return self.split("/", 1)[0]

    @property
    def kind(self) -> str:
        return self.kind_key.split(".", 1)[0]

    @property
    def group(self) -> str:
        return self.kind_key.partition(".")[2]

    @property
    def namespace(self) -> str:
        return self.split("/", 2)[1]

    @property
    def name(self) -> str:
        return self.split("/", 2)[2]

    @property
    def display(self) -> str:
        """``<Kind> <namespace>/<name>``, as an event about the job says it."""
        return f"{self.kind} {self.namespace}/{self.name}"


def shown(key: str) -> str:
    """A job key as messages name the job: ``<Kind> <namespace>/<name>``."""
    return JobKey(key).display if key.count("/") >= 2 else key


def group_of(api_version: str) -> str:
    """``kubeflow.org`` of ``kubeflow.org/v1`` ("" for the core group's ``v1``)."""
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def kind_key(api_version: str, kind: str) -> str:
    """``<Kind>.<group>`` of an apiVersion and kind."""
    return f"{kind}.{group_of(api_version)}"
