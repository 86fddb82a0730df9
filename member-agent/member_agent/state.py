"""What the agent knows of its member, fed by kopf's watches: nodes, all pods, and jobs."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from member_agent.controllers.runtime import Stores
from propagation.jobkey import JobKey

Body = dict[str, Any]


@dataclass
class MemberState:
    stores: Stores = field(default_factory=Stores)
    nodes: dict[str, Body] = field(default_factory=dict)
    pods: dict[tuple[str, str], Body] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    changed: threading.Event = field(default_factory=threading.Event)
    synced: threading.Event = field(default_factory=threading.Event)

    def put_node(self, body: Mapping[str, Any], deleted: bool) -> None:
        with self.lock:
            name = body["metadata"]["name"]
            if deleted:
                self.nodes.pop(name, None)
            else:
                self.nodes[name] = copy.deepcopy(dict(body))
        self.changed.set()

    def put_pod(self, body: Mapping[str, Any], deleted: bool) -> JobKey | None:
        """The pod, kept for the member's capacity and, when a job of ours controls it, for
        that job's controller (whose key is returned). One copy serves both (a copy for
        each was a seventh of the simulated members' CPU in the bench)."""
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        with self.lock:
            if deleted:
                self.pods.pop(key, None)
            else:
                body = self.pods[key] = copy.deepcopy(dict(body))
        self.changed.set()
        return self.stores.put_pod(body, deleted)

    def snapshot(self) -> tuple[list[Body], list[Body]]:
        with self.lock:
            return list(self.nodes.values()), list(self.pods.values())
