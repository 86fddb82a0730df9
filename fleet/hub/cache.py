"""The hub's in-memory view of the objects it decides on, fed by kopf's watches.

Decisions read a consistent copy (:meth:`Cache.snapshot`), never the live dicts, so a watch
event arriving mid-pass cannot change the inputs of a decision half-way.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleet.api import protocol
from fleet.api.protocol import HEARTBEAT_LEASE, member_namespace

Body = dict[str, Any]
EVICTING = protocol.EVICT_AFTER  # named through this module by the scheduler
Key = tuple[str, str, str]  # (kind key, namespace, name)

(JOBS, POLICIES, CLUSTER_POLICIES, CLUSTERS, WORKS, QUOTA_TREES, QUEUES, PRIORITY_CLASSES,
 HEARTBEATS) = ("jobs", "policies", "clusterpolicies", "clusters", "works", "quotatrees",
               "queues", "priorityclasses", "heartbeats")
STORES = (JOBS, POLICIES, CLUSTER_POLICIES, CLUSTERS, WORKS, QUOTA_TREES, QUEUES,
          PRIORITY_CLASSES, HEARTBEATS)


@dataclass(frozen=True)
class Snapshot:
    jobs: Mapping[Key, Body]
    policies: Mapping[Key, Body]
    cluster_policies: Mapping[Key, Body]
    clusters: Mapping[Key, Body]
    works: Mapping[Key, Body]
    quota_trees: Mapping[Key, Body]
    queues: Mapping[Key, Body]
    priority_classes: Mapping[Key, Body]
    heartbeats: Mapping[Key, Body]  # the agents' Leases, one per member namespace

    def heartbeat_lease(self, cluster: str) -> Body | None:
        return self.heartbeats.get(("coordination.k8s.io/v1/Lease", member_namespace(cluster),
                                    HEARTBEAT_LEASE))

    @functools.cached_property
    def _works_by_job(self) -> dict[tuple[str, bool], list[Body]]:
        out: dict[tuple[str, bool], list[Body]] = {}
        for work in self.works.values():
            uid = work.get("spec", {}).get("job", {}).get("uid", "")
            evicting = EVICTING in (work["metadata"].get("annotations") or {})
            out.setdefault((uid, evicting), []).append(work)
        return out

    def works_of(self, job_uid: str) -> list[Body]:
        """The Works of the job's current placement."""
        return self._works_by_job.get((job_uid, False), [])

    def evicting_of(self, job_uid: str) -> list[Body]:
        """Works left on clusters the job failed over from, kept until it runs elsewhere."""
        return self._works_by_job.get((job_uid, True), [])


@dataclass
class Cache:
    _stores: dict[str, dict[Key, Body]] = field(
        default_factory=lambda: {name: {} for name in STORES})
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _changed: threading.Event = field(default_factory=threading.Event)
    _dirty_jobs: set[Key] = field(default_factory=set)
    _dirty_uids: set[str] = field(default_factory=set)  # jobs whose Works changed

    @staticmethod
    def key(body: Mapping[str, Any]) -> Key:
        meta = body.get("metadata", {})
        return (f"{body.get('apiVersion')}/{body.get('kind')}", meta.get("namespace") or "",
                meta.get("name", ""))

    def upsert(self, store: str, body: Mapping[str, Any]) -> None:
        item = {k: compact(v) for k, v in body.items() if k != "metadata"}
        # managedFields are most of an object's bytes and no decision reads them
        item["metadata"] = {k: compact(v) for k, v in (body.get("metadata") or {}).items()
                            if k != "managedFields"}
        key = self.key(item)
        with self._lock:
            old = self._stores[store].get(key)
            if old is not None and _rv(old) > _rv(item):
                return  # our own write already came back newer than this watch event
            self._stores[store][key] = item
            self._mark(store, item)
        self._changed.set()

    def remove(self, store: str, body: Mapping[str, Any]) -> None:
        with self._lock:
            self._stores[store].pop(self.key(body), None)
            self._mark(store, body)
        self._changed.set()

    def _mark(self, store: str, body: Mapping[str, Any]) -> None:
        if store == JOBS:
            self._dirty_jobs.add(self.key(body))
        elif store == WORKS:
            self._dirty_uids.add(body.get("spec", {}).get("job", {}).get("uid", ""))

    def take_changed(self) -> tuple[set[Key], set[str]]:
        """Jobs (by key) and jobs' Works (by job uid) changed since the last call; take it
        before the snapshot, so that a change in between is seen in this pass or the next."""
        with self._lock:
            jobs, uids = self._dirty_jobs, self._dirty_uids
            self._dirty_jobs, self._dirty_uids = set(), set()
        return jobs, uids

    def mark_changed(self, jobs: set[Key]) -> None:
        """Look at these jobs again next pass (they were skipped in this one)."""
        with self._lock:
            self._dirty_jobs |= jobs

    def snapshot(self) -> Snapshot:
        with self._lock:
            copies = {name: dict(store) for name, store in self._stores.items()}
        return Snapshot(*(copies[name] for name in STORES))

    def wait_for_change(self, timeout: float) -> None:
        self._changed.wait(timeout)
        self._changed.clear()

    def poke(self) -> None:
        self._changed.set()


INTERN_BELOW = 64  # strings shorter than this are shared between the cached objects


def compact(value: Any) -> Any:
    """A deep copy of a JSON value whose keys and short strings are interned: ten thousand
    jobs repeat the same keys and most of the same values, and a copy of each per object was
    most of the hub's memory."""
    if isinstance(value, Mapping):
        return {sys.intern(str(k)) if isinstance(k, str) else k: compact(v)
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [compact(v) for v in value]
    if isinstance(value, str) and len(value) < INTERN_BELOW:
        return sys.intern(str(value))  # (a str subclass, such as a JobKey, as plain text)
    return value


def _rv(body: Mapping[str, Any]) -> int:
    try:
        return int(body.get("metadata", {}).get("resourceVersion", 0))
    except (TypeError, ValueError):
        return 0
