"""Binding a job and dispatching its Works: all of a decision's Works exist, or none do.

Order: (1) bind: one patch that records the placement and adds the dispatch finalizer, guarded
by the job's resourceVersion, so two hubs never bind one job; (2) create every Work under its
deterministic name; (3) if any creation fails, delete the ones made and unbind. A hub that dies
between (1) and (2) finds the placement on restart and completes the same Works (roll forward).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Body, Kube
from fleet.hub import works as w
from fleet.kinds.base import KindAdapter

log = logging.getLogger(__name__)
COMPONENT = "fleet-hub"


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Dispatcher:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def bind(self, job: Mapping[str, Any], adapter: KindAdapter, placement: str,
             clusters: Sequence[str]) -> Body | None:
        """Record the placement; None when the job changed since it was read."""
        meta = job["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if w.FINALIZER not in finalizers:
            finalizers.append(w.FINALIZER)
        patch = {"metadata": {
            "resourceVersion": meta["resourceVersion"],
            "finalizers": finalizers,
            "annotations": {w.PLACEMENT: placement, w.CLUSTERS: ",".join(clusters)},
        }}
        try:
            return self.kube.patch(adapter.resource, meta["name"], patch, meta["namespace"])
        except (errors.Conflict, errors.NotFound):
            return None

    def unbind(self, job: Mapping[str, Any], adapter: KindAdapter) -> None:
        meta = job["metadata"]
        finalizers = [f for f in meta.get("finalizers") or [] if f != w.FINALIZER]
        patch = {"metadata": {"finalizers": finalizers,
                              "annotations": {w.PLACEMENT: None, w.CLUSTERS: None}}}
        try:
            self.kube.patch(adapter.resource, meta["name"], patch, meta["namespace"])
        except errors.NotFound:
            pass

    def create_works(self, bodies: Sequence[Body]) -> list[Body]:
        """Create every Work; on failure delete those created here and re-raise."""
        created: list[Body] = []
        try:
            for body in bodies:
                try:
                    created.append(self.kube.create(r.WORKS, body))
                except errors.AlreadyExists:
                    existing = self.kube.get(r.WORKS, body["metadata"]["name"],
                                             body["metadata"]["namespace"])
                    if existing["spec"]["job"]["uid"] != body["spec"]["job"]["uid"]:
                        raise
        except errors.ApiError:
            for work in created:
                self.delete_work(work)
            raise
        return created

    def delete_work(self, work: Mapping[str, Any]) -> None:
        meta = work["metadata"]
        self.kube.delete(r.WORKS, meta["name"], meta["namespace"])

    def release(self, job: Mapping[str, Any], adapter: KindAdapter) -> None:
        """The job's Works are gone: let its deletion finish."""
        meta = job["metadata"]
        finalizers = [f for f in meta.get("finalizers") or [] if f != w.FINALIZER]
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"],
                              "finalizers": finalizers}}
        try:
            self.kube.patch(adapter.resource, meta["name"], patch, meta["namespace"])
        except (errors.NotFound, errors.Conflict):
            pass

    def write_status(self, job: Mapping[str, Any], adapter: KindAdapter,
                     status: Mapping[str, Any]) -> Body | None:
        """Replace the whole status, guarded by the job's resourceVersion; None on conflict."""
        try:
            return self.kube.replace(adapter.resource, {**job, "status": dict(status)},
                                     subresource="status")
        except (errors.NotFound, errors.Conflict):
            return None

    def event(self, obj: Mapping[str, Any], reason: str, message: str,
              kind: str = "Normal") -> None:
        meta = obj["metadata"]
        stamp = now_text()
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
                               "name": meta["name"], "namespace": meta["namespace"],
                               "uid": meta.get("uid"),
                               "resourceVersion": meta.get("resourceVersion")},
            "reason": reason, "message": message, "type": kind,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT, "reportingInstance": COMPONENT,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        try:
            self.kube.create(r.EVENTS, body)
        except errors.ApiError as exc:  # an event is never worth failing a decision for
            log.warning("event %s on %s/%s not recorded: %s", reason, meta["namespace"],
                        meta["name"], exc)
