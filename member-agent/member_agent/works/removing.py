"""Copies taken off the member: a Work's objects when the hub deletes it (purge), and stale
copies fencing finds (invariant 6: a gang never runs on two clusters).

- **Purge**: the hub marks a Work deleted; its job and dependencies (those no other Work
  uses) go from the member, then the agent's finalizer goes from the Work, so the hub sees
  the Work gone only once its copy is. Purge mode Never keeps the copy.
- **Released**: a Work gone without the agent's purge (the hub dropped the finalizer while
  this member was unreachable): its copy goes as soon as the deletion is seen.
- **Sweep**: every ``interval`` seconds, and at once when a list of the Works may have dropped
  some, the member's jobs are judged against the Works' fences (:mod:`member_agent.fencing`,
  pure); a stale copy goes with its pods, so it is removed even when the member's API server
  comes back after the hub moved its job elsewhere.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from fleet import metrics
from fleet.api import protocol
from fleet.api.protocol import AGENT_FINALIZER
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube
from member_agent import fencing
from member_agent.controllers.runtime import KINDS
from member_agent.fencing import Action, Fence
from member_agent.priority_classes import is_priority_class
from member_agent.state import MemberState
from member_agent.works.book import WorkBook, identity, job_key
from propagation.jobkey import JobKey

log = logging.getLogger(__name__)
Body = dict[str, Any]
# A copy's pod whose job is gone is left this long to the member's garbage collector
ORPHAN_GRACE_SECONDS = 10.0


class Remover:
    def __init__(self, hub: Kube, member: Kube, cluster: str, namespace: str,
                 state: MemberState, book: WorkBook) -> None:
        self.hub, self.member, self.cluster, self.namespace = hub, member, cluster, namespace
        self.state, self.book = state, book
        self._lock = threading.Lock()
        self._purged: set[str] = set()  # Works this agent purged (their DELETED is no news)
        self._kept: set[str] = set()  # Works whose copy purge mode Never keeps
        self._orphaned: dict[str, float] = {}  # pod uid -> when first seen without its job

    # -- a Work's deletion -------------------------------------------------------------
    def purge(self, work: Body, job_version: str | None = None) -> bool:
        """Remove the Work's objects from the member, then let the hub delete the Work.
        With ``job_version`` (the member job's version its last report told), the job is
        deleted only at that version: False, and nothing removed, when it changed since."""
        meta = work["metadata"]
        if not self.remove_objects(work, "its Work is being deleted", job_version):
            return False
        with self._lock:
            self._purged.add(meta["name"])
        finalizers = [f for f in meta.get("finalizers") or [] if f != AGENT_FINALIZER]
        try:
            self.hub.patch(r.WORKS, meta["name"], {"metadata": {
                "resourceVersion": meta["resourceVersion"], "finalizers": finalizers}},
                self.namespace)
        except errors.NotFound:
            pass
        return True

    def reapplied(self, name: str) -> None:
        """A Work of this name is applied again: its next deletion is news."""
        with self._lock:
            self._purged.discard(name)

    def released(self, work: Body) -> None:
        """The Work is gone from the hub: unless this agent purged it, its copy goes now."""
        name = work["metadata"]["name"]
        with self._lock:
            purged = name in self._purged
            self._purged.discard(name)
        if purged:
            return
        current = self.state.stores.read(job_key(work))[0]
        self.remove_objects(work, "its Work was deleted without the agent")
        if current is not None and protocol.work_purge_mode(work) != protocol.PURGE_NEVER:
            self.delete_pods(job_key(work), current["metadata"].get("uid", ""))

    def remove_objects(self, work: Body, why: str, job_version: str | None = None) -> bool:
        """The Work's job and its dependencies off the member (those another Work still
        uses stay), unless the purge mode is Never; False when the job is no longer at
        ``job_version`` (then nothing is removed)."""
        name = work["metadata"]["name"]
        if protocol.work_purge_mode(work) == protocol.PURGE_NEVER:
            with self._lock:
                self._kept.add(name)
            log.info("keeping the objects of work %s (%s): purge mode Never", name, why)
            return True
        log.info("removing the objects of work %s: %s", name, why)
        shared = self.book.used_by_others(name)
        job = self.state.stores.read(job_key(work))[0]
        for index, manifest in enumerate(work["spec"]["manifests"]):
            if identity(manifest) in shared or is_priority_class(manifest):
                continue  # a dependency another job on this member still uses, or a
                # cluster-wide class that other pods may use by now
            uid = version = None
            if index == 0 and job is not None:
                if protocol.copy_work(job["metadata"]) != (self.namespace, name):
                    continue  # the job of the same name is another Work's copy now
                uid, version = job["metadata"].get("uid"), job_version
            resource = r.for_kind(manifest["apiVersion"], manifest["kind"])
            try:
                self.member.delete(resource, manifest["metadata"]["name"],
                                   manifest["metadata"].get("namespace"),
                                   propagation="Background", uid=uid, resource_version=version)
            except errors.Conflict:
                if version is not None:
                    return False  # it changed since its report (ended, say): told first
                continue  # replaced meanwhile
        return True

    # -- stale copies --------------------------------------------------------------------
    def replace_stale(self, work: Body) -> None:
        """Before a Work is applied: a copy of an older placement goes first."""
        current = self.state.stores.read(job_key(work))[0]
        if current is None:
            return
        job = fencing.member_job(job_key(work), current, self.namespace)
        verdict = fencing.judge(job, fencing.fence_of(work), synced=True) if job else None
        if verdict is not None and verdict.action is Action.REMOVE:
            self.remove_job(verdict.job, verdict.reason)

    def sweep(self, fences: Mapping[str, Fence], synced: bool) -> None:
        """Remove every stale copy among the member's jobs."""
        jobs = self.state.stores.all_jobs()
        with self._lock:
            self._kept &= {protocol.copy_work(b["metadata"])[1] for _, b in jobs}
            kept = set(self._kept)
        for verdict in fencing.sweep(jobs, self.namespace, fences, synced=synced):
            if verdict.action is Action.REMOVE and verdict.job.work not in kept:
                try:
                    self.remove_job(verdict.job, verdict.reason)
                except errors.ApiError as exc:  # e.g. the member's API server is down
                    log.warning("stale %s not removed yet: %s", verdict.job.key, exc)
        if synced:
            self.sweep_orphaned_pods(dict(jobs), time.monotonic())

    def sweep_orphaned_pods(self, jobs: Mapping[JobKey, Body], now: float) -> None:
        """Pods of removed copies the member's garbage collector has not removed within
        ORPHAN_GRACE_SECONDS (its controller manager may not be back after an outage)."""
        orphans = fencing.orphaned_pods(self.state.stores.all_pods(), jobs)
        seen = {uid for _, _, uid in orphans}
        self._orphaned = {uid: since for uid, since in self._orphaned.items() if uid in seen}
        for namespace, name, uid in orphans:
            if now - self._orphaned.setdefault(uid, now) < ORPHAN_GRACE_SECONDS:
                continue
            log.info("removing pod %s/%s: its job is gone from the member", namespace, name)
            try:
                self.member.delete(r.PODS, name, namespace, uid=uid)
            except (errors.Conflict, errors.NotFound):
                continue
            except errors.ApiError as exc:
                log.warning("orphaned pod %s/%s not removed yet: %s", namespace, name, exc)

    def run(self, stop: threading.Event, now: threading.Event, interval: float,
            before: Callable[[], None], fences: Callable[[], Mapping[str, Fence]],
            synced: threading.Event) -> None:
        """Sweep every ``interval`` seconds, and whenever ``now`` is set."""
        while not stop.is_set():
            now.wait(interval)
            now.clear()
            try:
                before()
                self.sweep(fences(), synced.is_set())
            except Exception:  # keep fencing whatever one job does
                log.exception("fencing sweep failed")

    def remove_job(self, job: fencing.MemberJob, why: str) -> None:
        key = job.key
        log.info("removing %s %s/%s from the member: %s", key.kind_key, key.namespace,
                 key.name, why)
        try:
            if self.member.delete(KINDS[key.kind_key].resource, key.name, key.namespace,
                                  uid=job.uid):
                metrics.FENCED_JOBS.labels(self.cluster).inc()
        except errors.Conflict:
            return  # already replaced by a newer copy
        self.delete_pods(job.key, job.uid)

    def delete_pods(self, key: JobKey, owner_uid: str) -> None:
        """Stop a removed copy's pods now rather than whenever the member's garbage collector
        runs (a member back from an outage may not have its controller manager yet)."""
        for pod in self.state.stores.read(key)[1]:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") or not any(
                    ref.get("uid") == owner_uid for ref in meta.get("ownerReferences") or []):
                continue
            try:
                self.member.delete(r.PODS, meta["name"], meta["namespace"], uid=meta.get("uid"))
            except errors.Conflict:
                continue
