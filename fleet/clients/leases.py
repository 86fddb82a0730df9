"""Leader election over a Lease, so that of several replicas (hub or agent) exactly one acts.

A replica leads while it holds the Lease and renews it within ``lease_seconds``. Every write to
the Lease is a replace guarded by its resourceVersion, so two replicas racing for an expired
Lease cannot both win.
"""

from __future__ import annotations

import logging
import socket
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

log = logging.getLogger(__name__)


def _micro(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


class LeaderElector:
    def __init__(self, kube: Kube, namespace: str, name: str, *,
                 lease_seconds: int = 10, identity: str | None = None) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.lease_seconds = lease_seconds
        self.identity = identity or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
        self.leading = False

    def ensure_namespace(self) -> None:
        try:
            self.kube.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": self.namespace}})
        except errors.AlreadyExists:
            pass

    def renew(self) -> bool:
        """Try to take or keep the lease; return whether this replica leads now."""
        now = datetime.now(UTC)
        try:
            lease = self.kube.get_or_none(r.LEASES, self.name, self.namespace)
            if lease is None:
                self.kube.create(r.LEASES, self._lease(now, now, 0), namespace=self.namespace)
                return self._set(True)
            spec = lease.get("spec", {})
            holder = spec.get("holderIdentity")
            renewed = _parse(spec.get("renewTime")) or now
            expired = now - renewed > timedelta(seconds=spec.get("leaseDurationSeconds", 0))
            if holder != self.identity and not expired:
                return self._set(False)
            transitions = int(spec.get("leaseTransitions", 0)) + (holder != self.identity)
            acquired = _parse(spec.get("acquireTime")) if holder == self.identity else now
            body = self._lease(acquired or now, now, transitions)
            body["metadata"]["resourceVersion"] = lease["metadata"]["resourceVersion"]
            self.kube.replace(r.LEASES, body)
            return self._set(True)
        except (errors.Conflict, errors.AlreadyExists):
            return self._set(False)
        except errors.ApiError as exc:
            log.warning("lease %s/%s not renewed: %s", self.namespace, self.name, exc)
            return self._set(False)

    def release(self) -> None:
        """Give the lease up at once (a clean shutdown), so a standby need not wait for it to
        expire."""
        if not self.leading:
            return
        try:
            lease = self.kube.get(r.LEASES, self.name, self.namespace)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["leaseDurationSeconds"] = 1
                self.kube.replace(r.LEASES, lease)
        except errors.ApiError as exc:
            log.warning("lease %s/%s not released: %s", self.namespace, self.name, exc)
        self._set(False)

    def _set(self, leading: bool) -> bool:
        if leading != self.leading:
            log.info("%s %s leadership of %s/%s", self.identity,
                     "took" if leading else "lost", self.namespace, self.name)
        self.leading = leading
        return leading

    def _lease(self, acquired: datetime, renewed: datetime, transitions: int) -> dict[str, Any]:
        return {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_seconds,
                     "acquireTime": _micro(acquired), "renewTime": _micro(renewed),
                     "leaseTransitions": transitions},
        }
