"""Heartbeat and capacity: the agent's Lease and MemberCluster status on the hub.

Every ``interval`` seconds the agent renews its heartbeat Lease (``fleet-agent`` in its hub
namespace): a small write that tells the hub it is alive. Its MemberCluster status (Ready
condition and grouped free capacity) is applied when it changes, at most every ``min_gap``
seconds, and at least every ``refresh`` seconds so the hub can tell a fresh report from a
stale one (``CapacityStale``). The status goes by server-side apply, so the condition the hub
writes there stays the hub's.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from fleet import metrics
from fleet.api.protocol import (
    AGENT_HEARTBEAT,
    API_VERSION,
    CLUSTER_LABEL,
    DEFAULT_TOPOLOGY_LEVELS,
    HEARTBEAT_LEASE,
    member_namespace,
)
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube
from member_agent.capacity import grouped, node_free, totals, wire
from member_agent.election import identity
from member_agent.held_nodes import HeldNodes, held_on_nodes
from member_agent.state import MemberState

log = logging.getLogger(__name__)
Body = dict[str, Any]


def stamp(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


FIELD_MANAGER = "fleet-agent"


class Reporter:
    def __init__(self, hub: Kube, member: Kube, cluster: str, state: MemberState, *,
                 interval: float = 2.0, min_gap: float = 1.0, refresh: float = 30.0,
                 held: Callable[[list[Body], dict[str, dict[str, int]]], list[HeldNodes]]
                 | None = None,
                 topology_levels: tuple[str, ...] = DEFAULT_TOPOLOGY_LEVELS) -> None:
        self.hub, self.member, self.cluster, self.state = hub, member, cluster, state
        self.topology_levels = topology_levels
        self.held = held or (lambda pods, room: [])
        self.interval, self.min_gap, self.refresh = interval, min_gap, refresh
        self.version = ""
        self.last_ok = time.monotonic()
        self.member_down_since: str | None = None
        self.ready_since: str | None = None
        self.sent: dict[str, Any] | None = None  # the last status applied, times left out
        self.sent_at = 0.0
        self.capacity_part: dict[str, Any] | None = None
        self.dirty = True  # nodes or pods changed since the capacity was computed
        self.compute_seconds = 0.0
        self.extra: dict[str, Any] = {}  # further status fields (the kubelet endpoint)

    def run(self, stop: threading.Event) -> None:
        next_beat = 0.0
        while not stop.is_set():
            try:
                if time.monotonic() >= next_beat:
                    self.heartbeat()
                    next_beat = time.monotonic() + self.interval
                self.report()
                self.last_ok = time.monotonic()
            except errors.ApiError as exc:
                log.warning("heartbeat to the hub failed: %s", exc)
            metrics.HEARTBEAT_AGE.labels(self.cluster).set(time.monotonic() - self.last_ok)
            if self.state.changed.wait(max(0.05, next_beat - time.monotonic())):
                self.dirty = True
                self.state.changed.clear()
            stop.wait(0.05)

    def heartbeat(self) -> None:
        now = datetime.now(UTC)
        self.hub.apply(r.LEASES, {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": HEARTBEAT_LEASE, "namespace": member_namespace(self.cluster),
                         "labels": {AGENT_HEARTBEAT: "true", CLUSTER_LABEL: self.cluster}},
            "spec": {"holderIdentity": identity(), "renewTime": stamp(now),
                     "leaseDurationSeconds": max(1, int(self.interval * 5))},
        }, field_manager=FIELD_MANAGER)

    def member_reachable(self) -> bool:
        try:
            self.member.raw("GET", "/readyz")
        except errors.ApiError:
            return False
        return True

    def capacity(self) -> dict[str, Any]:
        """The status fields read from nodes and pods (grouped capacity and its sums)."""
        # Stamped before the snapshot is read: the hub takes a Work bound before this time as
        # counted here, which holds only if nothing bound after the stamp is missing from it.
        observed = stamp(datetime.now(UTC))
        nodes, pods = self.state.snapshot()
        room = {node: free for node, (_, free) in node_free(nodes, pods).items()}
        held = self.held(pods, room)
        groups, levels = grouped(nodes, pods, reserved=held_on_nodes(held),
                                 topology_levels=self.topology_levels)
        allocatable, free = totals(groups)
        label_sets, wired = wire(groups)
        reserved: dict[str, int] = {}
        for amounts in held_on_nodes(held).values():
            for resource, amount in amounts.items():
                reserved[resource] = reserved.get(resource, 0) + amount
        if not self.version:
            try:
                self.version = str(self.member.raw("GET", "/version").get("gitVersion", ""))
            except errors.ApiError:
                self.version = ""
        return {
            "kubernetesVersion": self.version or None,
            "readyNodes": sum(g.count for g in groups),
            "freeGpus": free.get("nvidia.com/gpu", 0),
            "capacity": {
                "observedTime": observed,
                "allocatable": allocatable,
                "free": free,
                "reserved": reserved,
                "reservedFor": sorted(h.work for h in held),
                "topologyLevels": list(levels),
                "labelSets": label_sets,
                "nodeGroups": wired,
            },
        }

    def status(self, reachable: bool) -> dict[str, Any]:
        now = stamp(datetime.now(UTC))
        if not reachable:
            # Heartbeat on, but not Ready: the hub learns at once that the member is lost,
            # and since when, rather than waiting for a heartbeat timeout. The last capacity
            # stays (it ages, and the hub marks it stale).
            self.member_down_since = self.member_down_since or now
            self.ready_since = None
            ready = {"type": "Ready", "status": "False", "reason": "MemberAPIUnreachable",
                     "message": "the agent cannot reach its member's API server",
                     "lastTransitionTime": self.member_down_since}
        else:
            self.member_down_since = None
            self.ready_since = self.ready_since or now
            nodes = (self.capacity_part or {}).get("readyNodes", 0)
            ready = {"type": "Ready", "status": "True", "reason": "AgentHeartbeat",
                     "message": f"agent reports {nodes} schedulable nodes",
                     "lastTransitionTime": self.ready_since}
        return {"lastHeartbeatTime": now, **(self.capacity_part or {}), **self.extra,
                "conditions": [ready]}

    def report(self) -> None:
        """Apply the status if it changed (not sooner than ``min_gap`` after the last) or
        if the last is ``refresh`` seconds old; capacity is recomputed only when nodes or
        pods changed, or for the refresh."""
        if not self.state.synced.is_set():
            return  # never report an empty cluster before the watches have listed it
        age = time.monotonic() - self.sent_at
        if age < max(self.min_gap, 4 * self.compute_seconds):
            return  # (a big member's grouping takes a while: keep it under a quarter core)
        reachable = self.member_reachable()
        if reachable and (self.dirty or self.capacity_part is None or age >= self.refresh):
            self.dirty = False
            started = time.monotonic()
            self.capacity_part = self.capacity()
            self.compute_seconds = time.monotonic() - started
        status = self.status(reachable)
        content = _timeless(status)
        if content == self.sent and age < self.refresh:
            return
        body = {"apiVersion": API_VERSION, "kind": "MemberCluster",
                "metadata": {"name": self.cluster}, "status": _without_empty(status)}
        self.hub.apply(r.MEMBERCLUSTERS, body, field_manager=FIELD_MANAGER,
                       subresource="status")
        metrics.REPORT_BYTES.labels(self.cluster).set(
            len(json.dumps(body, separators=(",", ":"))))
        self.sent, self.sent_at = content, time.monotonic()


def _without_empty(value: Any) -> Any:
    """Empty maps and lists left out, at any depth: server-side apply reads an empty one as
    null, which the schema refuses, and leaving a field out is how an applier clears it."""
    if isinstance(value, dict):
        kept = {k: _without_empty(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in ({}, [])}
    if isinstance(value, list):
        return [_without_empty(v) for v in value]
    return value


def _timeless(status: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in status.items() if k != "lastHeartbeatTime"}
    if "capacity" in out:
        out["capacity"] = {k: v for k, v in out["capacity"].items() if k != "observedTime"}
    return out
