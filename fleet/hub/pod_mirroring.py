"""The hub's mirror loop: members as nodes, their job pods as read-only pods (``mirrors``).

It reads the hub's cache (Works, jobs, policies, MemberClusters, heartbeat Leases) and its own
watch of the mirror pods, so a pass reads nothing from the API server; only the leader writes.
A pass looks only at Works whose version changed since the last one, and at every Work again
when a policy or a member changes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import Counter

from fleet import clock
from fleet.api.cluster import KubeletEndpoint
from fleet.api.protocol import MIRROR_OF
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.informer import DELETED, Informer
from fleet.clients.kube import Kube
from fleet.hub import pod_mirrors as m
from fleet.hub.cache import Cache, Snapshot
from fleet.hub.views import job_identity, policy_ref
from propagation.matching import governing_policy

log = logging.getLogger(__name__)
Body = dict[str, Any]

LEASE_SECONDS = 40  # the node's Lease, as a kubelet's
RENEW_SECONDS = 10
HEARTBEAT_FRESH_SECONDS = 40.0  # an agent heartbeat older than this stops the node's renewals

MIRROR_WRITES = Counter("fleet_mirror_pod_writes_total",
                        "Hub writes for mirror pods, by kind (create, status, delete)", ["kind"])
_MIRRORS: dict[m.PodKey, Body] = {}
_LOCK = threading.Lock()
_SYNCED = threading.Event()


def mirror_pods(kube: Kube) -> Informer:
    """The watch of the mirror pods (an informer of its own: they are no cache store)."""
    return Informer(kube, r.PODS, handle=_seen_mirror, listed=_SYNCED.set, keep=False,
                    label_selector=MIRROR_OF, page=500, timeout_seconds=300)


def _seen_mirror(kind: str, body: Body) -> None:
    meta = body.get("metadata", {})
    key = (str(meta.get("namespace")), str(meta.get("name")))
    with _LOCK:
        if kind == DELETED:
            _MIRRORS.pop(key, None)
        else:
            _MIRRORS[key] = {"metadata": dict(meta), "status": dict(body.get("status") or {})}


class Mirroring:
    def __init__(self, kube: Kube, cache: Cache, leading: Callable[[], bool], *,
                 interval: float = 1.0) -> None:
        self.kube, self.cache, self.leading, self.interval = kube, cache, leading, interval
        self.seen: dict[tuple[str, str], str] = {}  # Work -> resourceVersion last mirrored
        self.desired: dict[tuple[str, str], list[m.Mirror]] = {}
        self.context = ""  # versions of policies, jobs' annotations and members last used
        self.renewed: dict[str, float] = {}
        self.nodes: dict[str, tuple[str, int]] | None = None  # member -> its node's endpoint

    def run(self, stop: threading.Event) -> None:
        # The first list of mirrors must be in before a pass may delete any.
        _SYNCED.wait(10)
        while not stop.wait(self.interval):
            if not self.leading():
                self.seen.clear()
                self.nodes = None
                continue
            try:
                self.step(self.cache.snapshot())
            except Exception:  # a bad object must not stop the loop
                log.exception("mirror pass failed")

    def step(self, snap: Snapshot) -> None:
        if self.nodes is None:  # a new leader: the members' nodes an earlier one made
            self.nodes = self._existing_nodes()
        endpoints = _endpoints(snap)
        policies = [*snap.policies.values(), *snap.cluster_policies.values()]
        # Which Works want mirrors depends on the policies and on which members serve logs.
        context = "|".join([*sorted(
            f"{b['metadata'].get('namespace')}/{b['metadata'].get('name')}@"
            f"{b['metadata'].get('resourceVersion')}" for b in policies),
            *sorted(endpoints)])
        if context != self.context:
            self.seen.clear()
            self.context = context
        if endpoints:
            self._desire(snap, policies, endpoints)
        else:  # no member serves logs: no Work has mirrors (those standing go below)
            self.desired.clear()
            self.seen.clear()
        with _LOCK:
            existing = dict(_MIRRORS)
        plan = m.plan((x for ms in self.desired.values() for x in ms), existing)
        if plan.over_limit:
            log.warning("%d pods not mirrored: at most %d mirrors", plan.over_limit,
                        m.MAX_MIRRORS)
        # A member is a node only while it has mirrors: no node, no Lease writes otherwise.
        needed = {str(x.body["metadata"]["labels"][MIRROR_OF])
                  for ms in self.desired.values() for x in ms}
        ready = self._nodes(snap, endpoints, needed)
        self._apply(m.Plan(
            create=[x for x in plan.create if x.body["metadata"]["labels"][MIRROR_OF] in ready],
            update_status=plan.update_status, delete=plan.delete))
        with _LOCK:
            standing = {(b["metadata"].get("labels") or {}).get(MIRROR_OF)
                        for b in _MIRRORS.values()}
        for cluster in sorted(set(self.nodes) - needed - standing):
            try:
                self.kube.delete(r.NODES, m.node_name(cluster))
            except errors.ApiError as exc:
                log.warning("node of %s: %s", cluster, exc)
                continue
            self.nodes.pop(cluster)
            self.renewed.pop(cluster, None)

    def _apply(self, plan: m.Plan) -> None:
        for mirror in plan.create:
            try:
                self.kube.create(r.PODS, mirror.body)
            except errors.AlreadyExists:
                continue  # ours, not yet seen by the watch, or a pod that is no mirror
            except errors.ApiError as exc:
                log.warning("mirror pod %s/%s: %s", *mirror.key, exc)
                continue
            MIRROR_WRITES.labels("create").inc()
            self._status(mirror)
        for mirror in plan.update_status:
            self._status(mirror)
        for body in plan.delete:
            meta = body["metadata"]
            try:
                self.kube.delete(r.PODS, meta["name"], meta["namespace"], uid=meta.get("uid"),
                                 grace_period_seconds=0)
                MIRROR_WRITES.labels("delete").inc()
                with _LOCK:
                    _MIRRORS.pop((meta["namespace"], meta["name"]), None)
            except (errors.NotFound, errors.Conflict):
                continue
            except errors.ApiError as exc:
                log.warning("mirror pod %s/%s: %s", meta["namespace"], meta["name"], exc)

    def _status(self, mirror: m.Mirror) -> None:
        try:
            written = self.kube.patch(r.PODS, mirror.key[1], {"status": mirror.status},
                                      mirror.key[0], subresource="status")
            MIRROR_WRITES.labels("status").inc()
        except errors.ApiError as exc:
            log.warning("mirror pod status %s/%s: %s", *mirror.key, exc)
            return
        # Ahead of its watch event, so the next pass does not write the same status again.
        with _LOCK:
            _MIRRORS[mirror.key] = {"metadata": written.get("metadata") or {},
                                    "status": written.get("status") or {}}

    # -- members as nodes -------------------------------------------------------------
    def _existing_nodes(self) -> dict[str, tuple[str, int]]:
        items, _ = self.kube.list(r.NODES, label_selector=MIRROR_OF)
        found = {}
        for body in items:
            cluster = (body["metadata"].get("labels") or {}).get(MIRROR_OF)
            endpoint = (body["metadata"].get("annotations") or {}).get(m.ENDPOINT, "")
            address, _, port = endpoint.rpartition(":")
            if cluster and port.isdigit():
                found[cluster] = (address, int(port))
        return found

    def _desire(self, snap: Snapshot, policies: list[Body],
                endpoints: Mapping[str, KubeletEndpoint]) -> None:
        """The mirrors each Work wants, read again for the Works changed since the last
        step."""
        refs = [policy_ref(b) for b in policies]
        by_ref = {(b["metadata"].get("namespace") or "", b["metadata"]["name"]): b
                  for b in policies}
        current: set[tuple[str, str]] = set()
        for work in snap.works.values():
            meta = work["metadata"]
            key = (meta.get("namespace", ""), meta["name"])
            current.add(key)
            version = str(meta.get("resourceVersion", ""))
            job = snap.job_of(str(work.get("spec", {}).get("job", {}).get("uid", "")))
            if self.seen.get(key) == version and job is not None:
                continue
            self.seen[key] = version
            cluster = work.get("spec", {}).get("placement", {}).get("cluster", "")
            if job is None or cluster not in endpoints:
                self.desired.pop(key, None)
                continue
            chosen = governing_policy(job_identity(job), refs)
            policy = by_ref.get((chosen.namespace, chosen.name)) if chosen else None
            if m.wants_mirrors(job, policy):
                self.desired[key] = m.mirrors_of(work, job)
            else:
                self.desired.pop(key, None)
        for key in set(self.desired) - current:
            self.desired.pop(key)
            self.seen.pop(key, None)

    def _nodes(self, snap: Snapshot, endpoints: Mapping[str, KubeletEndpoint],
               needed: set[str]) -> set[str]:
        """Make and keep the nodes ``needed`` (renewing their Leases while their agents'
        heartbeats are fresh); the members whose node is there."""
        assert self.nodes is not None
        now = time.monotonic()
        ready = set()
        for cluster in sorted(needed):
            endpoint = endpoints[cluster]
            if not _fresh(snap, cluster):
                # no renewal: the node goes NotReady, as a silent kubelet's would
                if cluster in self.nodes:
                    ready.add(cluster)
                continue
            try:
                if self.nodes.get(cluster) != (endpoint.address, endpoint.port):
                    self._ensure_node(cluster, endpoint)
                if now - self.renewed.get(cluster, 0.0) >= RENEW_SECONDS:
                    self._renew(cluster)
                    self.renewed[cluster] = now
            except errors.ApiError as exc:
                log.warning("node of %s: %s", cluster, exc)
            if cluster in self.nodes:
                ready.add(cluster)
        return ready

    def _ensure_node(self, cluster: str, endpoint: KubeletEndpoint) -> None:
        body = m.node(cluster, endpoint.address, endpoint.port)
        try:
            self.kube.create(r.NODES, body)
        except errors.AlreadyExists:
            self.kube.patch(r.NODES, body["metadata"]["name"],
                            {"metadata": body["metadata"], "spec": body["spec"]})
        self.kube.patch(r.NODES, body["metadata"]["name"],
                        {"status": m.node_status(endpoint.address, endpoint.port, clock.text())},
                        subresource="status")
        assert self.nodes is not None
        self.nodes[cluster] = (endpoint.address, endpoint.port)
        log.info("member %s is node %s (kubelet endpoint %s:%d)", cluster,
                 body["metadata"]["name"], endpoint.address, endpoint.port)

    def _renew(self, cluster: str) -> None:
        lease = m.node_lease(cluster, LEASE_SECONDS, clock.text(micro=True))
        try:
            self.kube.patch(r.LEASES, lease["metadata"]["name"], {"spec": lease["spec"]},
                            "kube-node-lease")
        except errors.NotFound:
            self.kube.create(r.LEASES, lease)


def _endpoints(snap: Snapshot) -> dict[str, KubeletEndpoint]:
    """Members whose agent reports a kubelet endpoint."""
    out = {}
    for body in snap.clusters.values():
        raw = (body.get("status") or {}).get("kubeletEndpoint")
        if raw:
            try:
                out[body["metadata"]["name"]] = KubeletEndpoint.model_validate(raw)
            except ValueError:
                continue
    return out


def _fresh(snap: Snapshot, cluster: str) -> bool:
    """Whether the hub heard ``cluster``'s agent lately (by its own clock: never the agent's
    timestamps against it)."""
    heard = snap.heard.get(cluster)
    return heard is not None and snap.taken - heard < HEARTBEAT_FRESH_SECONDS

