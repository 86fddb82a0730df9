"""One active agent per member: the agent DaemonSet's pods elect a leader over a Lease on the
member (``fleet-system/fleet-agent``). Every pod watches and keeps its caches warm; only the
leader writes. A leader that loses the Lease exits, so it can never act beside its successor
(the DaemonSet restarts it as a standby); a standby takes over once the Lease expires.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable

from fleet import metrics
from fleet.clients.kube import Kube
from fleet.clients.leases import LeaderElector

log = logging.getLogger(__name__)
NAMESPACE, NAME = "fleet-system", "fleet-agent"


def identity() -> str:
    """The pod's name under a DaemonSet; host and pid elsewhere (e.g. the local fleet)."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


class AgentElection:
    def __init__(self, member: Kube, cluster: str, *, lease_seconds: int = 6) -> None:
        self.cluster = cluster
        self.elector = LeaderElector(member, NAMESPACE, NAME, lease_seconds=lease_seconds,
                                     identity=identity())

    def run(self, stop: threading.Event, on_lead: Callable[[], None],
            on_loss: Callable[[], None]) -> None:
        """Hold the election (the lease renewed on this thread, as the hub's: a leader that
        cannot renew within its deadline stops leading before a standby may take over); call
        ``on_lead`` once on winning, ``on_loss`` if a won lease is ever lost."""
        self.elector.ensure_namespace()

        def changed(leading: bool) -> None:
            metrics.AGENT_LEADING.labels(self.cluster).set(1 if leading else 0)
            if leading:
                log.info("agent %s leads %s", self.elector.identity, self.cluster)
                on_lead()
            else:
                log.error("agent %s lost the lease of %s; exiting", self.elector.identity,
                          self.cluster)
                on_loss()

        metrics.AGENT_LEADING.labels(self.cluster).set(0)
        self.elector.run(stop, changed)
