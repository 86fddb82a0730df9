"""Leader election over a Lease, so that of several replicas (hub or agent) exactly one acts,
and one that may no longer act knows it before another can.

As client-go's leader election does:

- The Lease is renewed on a thread of its own every ``retry_seconds``, whatever the replica is
  busy with (a scheduling pass longer than the lease once let a standby take over while the
  leader kept writing).
- A leader leads while its last renewal *sent* is younger than ``renew_deadline`` (shorter
  than the lease): past it, :attr:`LeaderElector.leading` is False at once and every write
  the replica guards with :meth:`LeaderElector.fence` is refused, before a standby may take
  over.
- A standby judges a Lease expired by when it *observed* the record last change, on its own
  monotonic clock, never by comparing the holder's ``renewTime`` with its own clock: clock
  skew between replicas moves nothing. It takes over only ``lease_seconds`` after that.

Each acquisition starts a new *term*: ``<the Lease's uid>:<its leaseTransitions>`` as this
replica set them (the uid too, as a Lease deleted and made again counts its transitions
from 1 again). A request already sent cannot be recalled, so the writes that must never
happen twice carry the term (:data:`fleet.api.protocol.TERM`) and the API server refuses
those of an ended term (the ``fleet-leader-term`` ValidatingAdmissionPolicy, against the
Lease itself).
Every write to the Lease is a replace guarded by its resourceVersion, so two replicas racing
for it cannot both win.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from fleet import clock
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

log = logging.getLogger(__name__)


class NotLeading(RuntimeError):
    """A write refused here: this replica does not lead (or no longer knows it does)."""


def _micro(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, kube: Kube, namespace: str, name: str, *,
                 lease_seconds: int = 10, identity: str | None = None,
                 renew_deadline: float | None = None, retry_seconds: float | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 annotations: Mapping[str, str] | None = None) -> None:
        self.kube = kube
        self.annotations = dict(annotations or {})  # what the holder tells about itself
        self.namespace = namespace
        self.name = name
        self.lease_seconds = lease_seconds
        # client-go's defaults keep these ratios: 15 s lease, 10 s deadline, 2 s retry
        self.renew_deadline = renew_deadline if renew_deadline is not None \
            else lease_seconds * 2 / 3
        self.retry_seconds = retry_seconds if retry_seconds is not None else lease_seconds / 5
        self.identity = identity or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
        self.clock = clock
        self.term = ""  # "<lease uid>:<transitions>" when this replica last acquired it
        self.holder = ""  # whom the Lease named when this replica last read or wrote it
        self._renewed_at: float | None = None  # when the last successful renewal was sent
        self._observed: tuple[object, float] | None = None  # (record, when first seen)
        self._lock = threading.Lock()
        self._was_leading = False

    # -- what the replica asks ------------------------------------------------------------
    @property
    def leading(self) -> bool:
        """Whether this replica leads now: it holds the Lease and renewed it within its
        renew deadline (by its own clock, from when the renewal was sent)."""
        with self._lock:
            renewed = self._renewed_at
        return renewed is not None and self.clock() - renewed < self.renew_deadline

    def fence(self) -> str:
        """The term to write under; raises NotLeading when this replica may not write."""
        if not self.leading:
            raise NotLeading(f"{self.identity} does not lead {self.namespace}/{self.name}")
        return self.term

    # -- the renewing thread ----------------------------------------------------------------
    def run(self, stop: threading.Event, on_change: Callable[[bool], None] | None = None
            ) -> None:
        """Take or keep the Lease every ``retry_seconds`` until ``stop``; ``on_change(True)``
        when this replica starts leading, ``on_change(False)`` when it stops."""
        while not stop.is_set():
            self.renew()
            self._tell(on_change)
            # (wakes at the renew deadline too: a leader that could not renew stops on time)
            stop.wait(self.retry_seconds)
        self._tell(on_change)

    def _tell(self, on_change: Callable[[bool], None] | None) -> None:
        leading = self.leading
        if leading != self._was_leading:
            log.info("%s %s leadership of %s/%s (term %s)", self.identity,
                     "took" if leading else "lost", self.namespace, self.name, self.term)
            self._was_leading = leading
            if on_change is not None:
                on_change(leading)

    def ensure_namespace(self) -> None:
        try:
            self.kube.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": self.namespace}})
        except errors.AlreadyExists:
            pass

    def renew(self) -> bool:
        """One attempt to take or keep the Lease; whether this replica leads after it."""
        sent = self.clock()
        try:
            lease = self.kube.get_or_none(r.LEASES, self.name, self.namespace)
            if lease is None:
                made = self.kube.create(r.LEASES, self._lease(1, sent), namespace=self.namespace)
                return self._won(made, 1, sent)
            spec = lease.get("spec") or {}
            holder = self.holder = spec.get("holderIdentity") or ""
            transitions = int(spec.get("leaseTransitions") or 0)
            mine = holder == self.identity and self._renewed_at is not None and \
                term_of(lease, transitions) == self.term
            if not mine and holder and not self._expired(lease, sent):
                return self._lost()
            count = transitions if mine else transitions + 1  # a new term each acquisition
            body = self._lease(count, sent, spec.get("acquireTime") if mine else None)
            body["metadata"]["resourceVersion"] = lease["metadata"]["resourceVersion"]
            return self._won(self.kube.replace(r.LEASES, body), count, sent)
        except (errors.Conflict, errors.AlreadyExists):
            return self.leading  # another replica wrote first: its record is seen next time
        except errors.ApiError as exc:
            log.warning("lease %s/%s not renewed: %s", self.namespace, self.name, exc)
            return self.leading  # it may still lead until its renew deadline

    def _expired(self, lease: dict[str, Any], now: float) -> bool:
        """Whether the holder has not renewed for ``leaseDurationSeconds``, as observed here:
        since this replica first saw the record as it is now."""
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"),
                  spec.get("leaseTransitions"), lease["metadata"].get("resourceVersion"))
        if self._observed is None or self._observed[0] != record:
            self._observed = (record, now)
            return False
        duration = float(spec.get("leaseDurationSeconds") or self.lease_seconds)
        return now - self._observed[1] > duration

    def _won(self, lease: dict[str, Any], transitions: int, sent: float) -> bool:
        with self._lock:
            self.term, self._renewed_at = term_of(lease, transitions), sent
        self.holder = self.identity
        return True

    def _lost(self) -> bool:
        with self._lock:
            self._renewed_at = None
        return False

    def release(self) -> None:
        """Give the lease up at once (a clean shutdown), so a standby need not wait for it to
        expire."""
        if not self.leading:
            return
        self._lost()
        try:
            lease = self.kube.get(r.LEASES, self.name, self.namespace)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["leaseDurationSeconds"] = 1
                self.kube.replace(r.LEASES, lease)
        except errors.ApiError as exc:
            log.warning("lease %s/%s not released: %s", self.namespace, self.name, exc)

    def _lease(self, transitions: int, sent: float, acquired: str | None = None
               ) -> dict[str, Any]:
        now = _micro(clock.now())  # (for people reading it: nobody compares it)
        return {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace,
                         **({"annotations": self.annotations} if self.annotations else {})},
            "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_seconds,
                     "acquireTime": acquired or now, "renewTime": now,
                     "leaseTransitions": transitions},
        }


def term_of(lease: dict[str, Any], transitions: int) -> str:
    """A leader's term: the Lease's uid and its transitions (as the admission policy reads
    them)."""
    return f"{lease['metadata'].get('uid', '')}:{transitions}"
