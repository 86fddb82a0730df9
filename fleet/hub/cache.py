"""The hub's in-memory view of the objects it decides on, fed by its watches.

Decisions read a consistent copy (:meth:`Cache.snapshot`), never the live dicts, so a watch
event arriving mid-pass cannot change the inputs of a decision half-way.

It also keeps when the hub itself last heard from each member's agent (its heartbeat Lease
renewed, its status report's heartbeat or capacity report changed), on the hub's monotonic
clock: a member's freshness is judged by that, never by comparing the agent's timestamps with
the hub's clock (client-go's observed time; the node lifecycle controller's probe time), so
clock skew between hub and members moves nothing.

Every object is stored interned (:mod:`fleet.hub.interning`): frozen, and sharing each part
equal to a part of another stored object, so what is read from it must be copied before it
is changed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from fleet.api import protocol
from fleet.api.protocol import HEARTBEAT_LEASE, member_namespace
from fleet.clients.resources import JOB_KINDS
from fleet.hub.interning import Interner
from propagation.jobkey import JobKey

Body = dict[str, Any]
EVICTING = protocol.EVICT_AFTER  # named through this module by the scheduler
Key = tuple[str, str, str]  # (kind key, namespace, name)

(JOBS, POLICIES, CLUSTER_POLICIES, CLUSTERS, WORKS, QUOTA_TREES, QUEUES, PRIORITY_CLASSES,
 HEARTBEATS, RUNTIMES) = ("jobs", "policies", "clusterpolicies", "clusters", "works",
                          "quotatrees", "queues", "priorityclasses", "heartbeats", "runtimes")
# RUNTIMES (Trainer's TrainingRuntimes and ClusterTrainingRuntimes) only serve the webhook,
# which snapshots a TrainJob's runtime into it at creation: no pass reads them.
STORES = (JOBS, POLICIES, CLUSTER_POLICIES, CLUSTERS, WORKS, QUOTA_TREES, QUEUES,
          PRIORITY_CLASSES, HEARTBEATS, RUNTIMES)


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

    job_keys: Mapping[str, Key] = field(default_factory=dict)  # a job's uid -> its key
    named: Mapping[str, Key] = field(default_factory=dict)  # a job's JobKey -> its key
    # A job's Works by (its uid, evicting), in arrival order.
    works_by_job: Mapping[tuple[str, bool], tuple[Body, ...]] = field(default_factory=dict)
    # Per member, when the hub last heard its heartbeat and its capacity report change
    # (monotonic seconds; see the module's docstring)
    heard: Mapping[str, float] = field(default_factory=dict)
    reported: Mapping[str, float] = field(default_factory=dict)
    taken: float = 0.0  # when the snapshot was taken, on the same clock
    # Per requeued job (uid), the Works of its placement deleted after they reported it
    # succeeded: its requeue came too late, and they are the members' last word on it.
    ended_by_job: Mapping[str, tuple[Body, ...]] = field(default_factory=dict)

    def heard_at(self, cluster: str, now: datetime) -> datetime | None:
        """When the hub last heard ``cluster``'s agent, on the clock ``now`` reads."""
        return self._on_clock_of(self.heard.get(cluster), now)

    def reported_at(self, cluster: str, now: datetime) -> datetime | None:
        """When the hub last saw ``cluster``'s capacity report change, likewise."""
        return self._on_clock_of(self.reported.get(cluster), now)

    def _on_clock_of(self, seen: float | None, now: datetime) -> datetime | None:
        return None if seen is None else now - timedelta(seconds=self.taken - seen)

    def job_of(self, uid: str) -> Body | None:
        key = self.job_keys.get(uid)
        return self.jobs.get(key) if key is not None else None

    def job_named(self, job_key: str) -> Body | None:
        """The job of a JobKey (``Kind.group/namespace/name``)."""
        key = self.named.get(job_key)
        return self.jobs.get(key) if key is not None else None

    def works_of(self, job_uid: str) -> list[Body]:
        """The Works of the job's current placement."""
        return list(self.works_by_job.get((job_uid, False), ()))

    def evicting_of(self, job_uid: str) -> list[Body]:
        """Works left on clusters the job failed over from, kept until it runs elsewhere."""
        return list(self.works_by_job.get((job_uid, True), ()))

    def ended_of(self, job_uid: str) -> list[Body]:
        """Works of a requeued job deleted after reporting it succeeded (their last
        versions)."""
        return list(self.ended_by_job.get(job_uid, ()))


CONTEXT = (POLICIES, CLUSTER_POLICIES, PRIORITY_CLASSES, QUOTA_TREES, QUEUES)


Heard = dict[tuple[str, str], tuple[str, float]]  # (member, source) -> (what it said, when)


def _note(heard: Heard, name: str, source: str, said: str | None, now: float) -> None:
    """A member's ``source`` said ``said``: heard now if that is news (or its first word)."""
    if not said:
        return
    known = heard.get((name, source))
    if known is None or known[0] != said:
        heard[(name, source)] = (said, now)


def _latest(heard: Heard, sources: tuple[str, ...]) -> dict[str, float]:
    """Per member, when the latest of ``sources`` was heard."""
    out: dict[str, float] = {}
    for (name, source), (_, at) in heard.items():
        if source in sources:
            out[name] = max(at, out.get(name, at))
    return out


@dataclass
class Changes:
    """What changed in the cache since the last :meth:`Cache.take_changed`."""

    jobs: set[Key] = field(default_factory=set)  # jobs changed or deleted
    work_jobs: set[str] = field(default_factory=set)  # uids of jobs whose Works changed
    works: set[Key] = field(default_factory=set)  # Works changed or deleted
    clusters: set[str] = field(default_factory=set)  # MemberClusters (and heartbeats)
    gone: set[str] = field(default_factory=set)  # uids of jobs deleted
    context: bool = False  # a policy, PriorityClass, quota tree or Queue changed

    def merge(self, other: Changes) -> None:
        self.jobs |= other.jobs
        self.work_jobs |= other.work_jobs
        self.works |= other.works
        self.clusters |= other.clusters
        self.gone |= other.gone
        self.context = self.context or other.context


@dataclass
class Cache:
    _stores: dict[str, dict[Key, Body]] = field(
        default_factory=lambda: {name: {} for name in STORES})
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _changed: threading.Event = field(default_factory=threading.Event)
    _dirty: Changes = field(default_factory=Changes)
    _job_keys: dict[str, Key] = field(default_factory=dict)  # uid -> key
    _named: dict[str, Key] = field(default_factory=dict)  # JobKey -> key
    # A job's Works, by (uid, evicting): each entry replaced, never changed in place, so a
    # snapshot copies only the outer map.
    _works_by_job: dict[tuple[str, bool], tuple[Body, ...]] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic
    _heard: Heard = field(default_factory=dict)  # (member, source) -> what, when
    _intern: Interner = field(default_factory=Interner)  # one copy of what objects repeat
    _ended: dict[str, tuple[Body, ...]] = field(default_factory=dict)  # Snapshot.ended_of

    @staticmethod
    def key(body: Mapping[str, Any]) -> Key:
        meta = body.get("metadata", {})
        return (f"{body.get('apiVersion')}/{body.get('kind')}", meta.get("namespace") or "",
                meta.get("name", ""))

    def upsert(self, store: str, body: Mapping[str, Any]) -> None:
        key, version = self.key(body), resource_version(body)
        with self._lock:
            old = self._stores[store].get(key)
        if _holds(old, version):
            # Most often the watch event of the hub's own write, whose answer came first.
            # Nothing changed, so nothing is interned, indexed or looked at again.
            return
        # managedFields are most of an object's bytes and no decision reads them
        slim = {**body, "metadata": {k: v for k, v in (body.get("metadata") or {}).items()
                                     if k != "managedFields"}}
        item: Body = self._intern(slim)
        with self._lock:
            old = self._stores[store].get(key)
            if _holds(old, version):
                return  # our own write's answer raced in while this one was interned
            self._stores[store][key] = item
            if store == JOBS:
                uid = str(item["metadata"].get("uid", ""))
                self._job_keys[uid] = key
                self._named[JobKey.of_body(item)] = key
                if not _requeued(item):
                    self._ended.pop(uid, None)
            elif store == WORKS:
                if old is not None:
                    self._unindex(old)
                self._index(item)
            elif store in (CLUSTERS, HEARTBEATS):
                self._hear(store, item)
            self._mark(store, item)
        self._changed.set()

    def _hear(self, store: str, item: Body) -> None:
        """Note when what a member's agent says of its liveness changed."""
        meta, now = item.get("metadata") or {}, self.clock()
        if store == HEARTBEATS:
            name = protocol.cluster_of_namespace(str(meta.get("namespace", "")))
            _note(self._heard, name, "lease", (item.get("spec") or {}).get("renewTime"), now)
            return
        name, status = str(meta.get("name", "")), item.get("status") or {}
        _note(self._heard, name, "status", status.get("lastHeartbeatTime"), now)
        _note(self._heard, name, "capacity", (status.get("capacity") or {}).get("observedTime"),
              now)

    def remove(self, store: str, body: Mapping[str, Any]) -> None:
        with self._lock:
            gone = self._stores[store].pop(self.key(body), None)
            self._mark(store, body)
            if store == JOBS:
                uid = ((gone or body).get("metadata") or {}).get("uid")
                if uid:
                    self._dirty.gone.add(str(uid))
                    self._job_keys.pop(str(uid), None)
                    self._ended.pop(str(uid), None)
                self._named.pop(JobKey.of_body(body), None)
            elif store == WORKS and gone is not None:
                self._unindex(gone)
                self._keep_if_ended(gone)
            elif store == CLUSTERS:
                name = str((body.get("metadata") or {}).get("name", ""))
                for source in ("lease", "status", "capacity"):
                    self._heard.pop((name, source), None)
        self._changed.set()

    def _keep_if_ended(self, work: Body) -> None:
        """A Work gone after reporting its share succeeded, of a job being requeued: kept
        (until the job is no longer requeued) as the members' word that it ended."""
        uid, evicting = _slot(work)
        key = self._job_keys.get(uid)
        job = self._stores[JOBS].get(key) if key is not None else None
        if evicting or job is None or not _requeued(job) or \
                protocol.work_state(work) != protocol.SUCCEEDED:
            return
        self._ended[uid] = (*self._ended.get(uid, ()), work)

    def _index(self, work: Body) -> None:
        slot = _slot(work)
        self._works_by_job[slot] = (*self._works_by_job.get(slot, ()), work)

    def _unindex(self, work: Body) -> None:
        slot = _slot(work)
        key = self.key(work)
        kept = tuple(w for w in self._works_by_job.get(slot, ()) if self.key(w) != key)
        if kept:
            self._works_by_job[slot] = kept
        else:
            self._works_by_job.pop(slot, None)

    def _mark(self, store: str, body: Mapping[str, Any]) -> None:
        dirty = self._dirty
        if store == JOBS:
            kind, namespace, name = self.key(body)
            dirty.jobs.add((kind, namespace, name))
            # a job of another kind with its name may wait for this one (one name, one job)
            dirty.jobs.update(key for res in JOB_KINDS if (key := (
                f"{res.api_version}/{res.kind}", namespace, name)) != (kind, namespace, name)
                and key in self._stores[JOBS])
        elif store == WORKS:
            dirty.works.add(self.key(body))
            dirty.work_jobs.add(body.get("spec", {}).get("job", {}).get("uid", ""))
        elif store == CLUSTERS:
            dirty.clusters.add(str((body.get("metadata") or {}).get("name", "")))
        elif store == HEARTBEATS:
            dirty.clusters.add(protocol.cluster_of_namespace(
                str((body.get("metadata") or {}).get("namespace", ""))))
        elif store in CONTEXT:
            dirty.context = True

    def take_changed(self) -> Changes:
        """What changed since the last call; take it before the snapshot, so that a change
        in between is seen in this pass or the next."""
        with self._lock:
            taken, self._dirty = self._dirty, Changes()
        return taken

    def mark_changed(self, jobs: set[Key]) -> None:
        """Look at these jobs again next pass (they were skipped in this one)."""
        with self._lock:
            self._dirty.jobs |= jobs

    def snapshot_job(self, key: Key) -> Body | None:
        """One job as the cache has it now."""
        return self.item(JOBS, key)

    def item(self, store: str, key: Key) -> Body | None:
        """One object of ``store`` as the cache has it now."""
        with self._lock:
            return self._stores[store].get(key)

    def snapshot(self) -> Snapshot:
        with self._lock:
            copies = {name: dict(store) for name, store in self._stores.items()}
            keys, named = dict(self._job_keys), dict(self._named)
            works = dict(self._works_by_job)
            heard = _latest(self._heard, ("lease", "status"))
            reported = _latest(self._heard, ("capacity",))
            ended = dict(self._ended)
        return Snapshot(copies[JOBS], copies[POLICIES], copies[CLUSTER_POLICIES],
                        copies[CLUSTERS], copies[WORKS], copies[QUOTA_TREES], copies[QUEUES],
                        copies[PRIORITY_CLASSES], copies[HEARTBEATS], keys, named, works,
                        heard, reported, self.clock(), ended)

    def wait_for_change(self, timeout: float) -> None:
        self._changed.wait(timeout)
        self._changed.clear()

    def poke(self) -> None:
        self._changed.set()


def _requeued(job: Mapping[str, Any]) -> bool:
    return protocol.REQUEUE in ((job.get("metadata") or {}).get("annotations") or {})


def _slot(work: Mapping[str, Any]) -> tuple[str, bool]:
    """Where a Work is indexed: its job's uid, and whether it is being evicted."""
    uid = str(((work.get("spec") or {}).get("job") or {}).get("uid", ""))
    return uid, EVICTING in ((work.get("metadata") or {}).get("annotations") or {})


def _holds(old: Mapping[str, Any] | None, version: int) -> bool:
    """Whether the cached `old` is this version or newer (a body with no version is new)."""
    if old is None:
        return False
    held = resource_version(old)
    return held > version or (version > 0 and held == version)


def resource_version(body: Mapping[str, Any]) -> int:
    """An object's resourceVersion as a number (etcd's revisions; 0 when none)."""
    try:
        return int(body.get("metadata", {}).get("resourceVersion", 0))
    except (TypeError, ValueError):
        return 0
