"""Heartbeat and capacity: the agent's MemberCluster status on the hub.

Every ``interval`` seconds (and soon after a node or pod change) the agent writes its
heartbeat, Ready condition and grouped free capacity to its own MemberCluster's status, the
only cluster-scoped object its hub identity may touch.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any

from fleet import metrics
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube
from member_agent.capacity import group_nodes, totals
from member_agent.state import MemberState

log = logging.getLogger(__name__)


def stamp(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Reporter:
    def __init__(self, hub: Kube, member: Kube, cluster: str, state: MemberState, *,
                 interval: float = 2.0, min_gap: float = 0.5) -> None:
        self.hub, self.member, self.cluster, self.state = hub, member, cluster, state
        self.interval, self.min_gap = interval, min_gap
        self.version = ""
        self.last_ok = time.monotonic()
        self.member_down_since: str | None = None
        self.ready_since: str | None = None

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.report()
                self.last_ok = time.monotonic()
            except errors.ApiError as exc:
                log.warning("heartbeat to the hub failed: %s", exc)
            metrics.HEARTBEAT_AGE.labels(self.cluster).set(time.monotonic() - self.last_ok)
            self.state.changed.wait(max(0.0, self.interval - (time.monotonic() - started)))
            self.state.changed.clear()
            stop.wait(self.min_gap)

    def member_reachable(self) -> bool:
        try:
            self.member.raw("GET", "/readyz")
        except errors.ApiError:
            return False
        return True

    def body(self) -> dict[str, Any]:
        now = datetime.now(UTC)
        if not self.member_reachable():
            # Heartbeat on, but not Ready: the hub learns at once that the member is lost,
            # and since when, rather than waiting for a heartbeat timeout.
            self.member_down_since = self.member_down_since or stamp(now)
            self.ready_since = None
            return {"status": {
                "lastHeartbeatTime": stamp(now),
                "conditions": [{
                    "type": "Ready", "status": "False", "reason": "MemberAPIUnreachable",
                    "message": "the agent cannot reach its member's API server",
                    "lastTransitionTime": self.member_down_since,
                }],
            }}
        self.member_down_since = None
        self.ready_since = self.ready_since or stamp(now)
        nodes, pods = self.state.snapshot()
        groups = group_nodes(nodes, pods)
        allocatable, free = totals(groups)
        if not self.version:
            try:
                self.version = str(self.member.raw("GET", "/version").get("gitVersion", ""))
            except errors.ApiError:
                self.version = ""
        return {"status": {
            "lastHeartbeatTime": stamp(now),
            "kubernetesVersion": self.version or None,
            "readyNodes": sum(g.count for g in groups),
            "freeGpus": free.get("nvidia.com/gpu", 0),
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "AgentHeartbeat",
                "message": f"agent reports {sum(g.count for g in groups)} schedulable nodes",
                "lastTransitionTime": self.ready_since,
            }],
            "capacity": {
                "observedTime": stamp(now),
                "allocatable": allocatable,
                "free": free,
                "nodeGroups": [
                    {"count": g.count, "allocatable": g.allocatable, "free": g.free,
                     "labels": g.labels, "nodes": g.nodes} for g in groups
                ],
            },
        }}

    def report(self) -> None:
        if not self.state.synced.is_set():
            return  # never report an empty cluster before the watches have listed it
        self.hub.patch(r.MEMBERCLUSTERS, self.cluster, self.body(), subresource="status")
