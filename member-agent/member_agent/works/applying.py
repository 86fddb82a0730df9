"""A Work's manifests applied to the member, and put back when they drift.

A Work is applied with server-side apply under the field manager ``fleet-agent``, so applying
again is idempotent and drift on the member is put back; dependencies first (the job's pods
refer to its PriorityClass and ConfigMaps), the job last. A copy of an older placement goes
first (:meth:`Remover.replace_stale`). The Work gets the agent's finalizer, so the hub's
deletion waits for the agent's purge. A Work whose generation is on the member already is not
applied again: its status and metadata changes need no apply.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from fleet import metrics
from fleet.api import protocol
from fleet.api.protocol import AGENT_FINALIZER
from fleet.clients import resources as r
from fleet.clients.kube import Kube
from member_agent.priority_classes import apply_priority_class, is_priority_class
from member_agent.stages import STAGES
from member_agent.state import MemberState
from member_agent.topology import placed
from member_agent.works.book import WorkBook, job_key
from member_agent.works.removing import Remover

log = logging.getLogger(__name__)
Body = dict[str, Any]
FIELD_MANAGER = "fleet-agent"
DRIFT_GRACE_SECONDS = 10.0  # how long a job may be missing from the member's cache after apply


class Applier:
    def __init__(self, hub: Kube, member: Kube, cluster: str, namespace: str,
                 state: MemberState, book: WorkBook, remover: Remover) -> None:
        self.hub, self.member, self.cluster, self.namespace = hub, member, cluster, namespace
        self.state, self.book, self.remover = state, book, remover
        self._namespaces: set[str] = set()  # member namespaces known to exist

    def is_applied(self, work: Body) -> bool:
        """The Work's generation is on the member and the Work carries our finalizer."""
        return self.book.is_applied(work) \
            and AGENT_FINALIZER in (work["metadata"].get("finalizers") or [])

    def apply(self, work: Body) -> tuple[bool, Body | None, Body | None]:
        """Apply the Work; returns whether it is new to this agent, the copy it replaces, and
        the member job as applied."""
        meta = work["metadata"]
        self.remover.reapplied(meta["name"])  # its DELETED may have been superseded
        self.remover.replace_stale(work)
        if AGENT_FINALIZER not in (meta.get("finalizers") or []):  # a Work from an older hub
            work = self.hub.patch(r.WORKS, meta["name"], {"metadata": {
                "resourceVersion": meta["resourceVersion"],
                "finalizers": [*(meta.get("finalizers") or []), AGENT_FINALIZER]}},
                self.namespace)
        manifests = [placed(work), *work["spec"]["manifests"][1:]]
        applied: Body | None = None  # the job, last
        for manifest in [*manifests[1:], manifests[0]]:
            if is_priority_class(manifest):
                apply_priority_class(self.member, manifest, FIELD_MANAGER)
                continue
            self._ensure_namespace(manifest["metadata"].get("namespace"))
            resource = r.for_kind(manifest["apiVersion"], manifest["kind"])
            applied = self.member.apply(resource, manifest, field_manager=FIELD_MANAGER)
        new, before = self.book.record(work)
        if new:
            metrics.WORKS_APPLIED.labels(self.cluster).inc()
            STAGES.applied(work)
            log.info("applied work %s", meta["name"])
        self.state.changed.set()
        return new, before, applied

    def _ensure_namespace(self, namespace: str | None) -> None:
        if namespace and namespace not in self._namespaces:
            self.member.apply(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                             "metadata": {"name": namespace}},
                              field_manager=FIELD_MANAGER)
            self._namespaces.add(namespace)

    def drifted(self, current: Callable[[str], Body | None]) -> list[Body]:
        """Works whose job has been gone from the member for a while (someone deleted it
        there), as the hub's current copy (``current``), to apply again: the hub's word wins.
        A Work being deleted is not: purging removed its job on purpose."""
        out = []
        for work in self.book.works():
            name = work["metadata"]["name"]
            seen = self.book.seen_for(name)
            if seen is None or seen < DRIFT_GRACE_SECONDS \
                    or self.state.stores.read(job_key(work))[0] is not None:
                continue
            latest = current(name)
            if latest is None or latest["metadata"].get("deletionTimestamp"):
                continue
            if self.book.to_apply_again(name):
                log.info("job of work %s is gone from the member; applying it again", name)
                out.append(latest)
        return out

    def run_drift_repair(self, stop: threading.Event, current: Callable[[str], Body | None],
                         submit: Callable[[Body], None], interval: float = 2.0) -> None:
        while not stop.is_set():
            try:
                for work in self.drifted(current):
                    submit(work)
            except Exception:  # keep repairing whatever one Work does
                log.exception("drift repair failed")
            stop.wait(interval)


def is_reserving(work: Body) -> bool:
    return protocol.work_phase(work) == protocol.PHASE_RESERVE
