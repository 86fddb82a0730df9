"""The controller machinery around the pure core: caches fed by watches, a de-duplicating work
queue, and the reconcile that turns a plan into API calls.

kopf delivers job and pod events (``handlers``); they land in :class:`Stores` and queue the
job's key. Worker threads take keys one at a time (a key is never reconciled twice at once),
read the job and its pods from the stores, call the pure planner, and write.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube
from member_agent.controllers import core
from member_agent.controllers.conditions import is_true, set_condition
from member_agent.controllers.kubeflow import (
    JOB_NAME,
    PYTORCH,
    REPLICA_INDEX,
    REPLICA_TYPE,
    TF,
    KubeflowKind,
)

log = logging.getLogger(__name__)
Body = dict[str, Any]
JobKey = tuple[str, str, str]  # (kind, namespace, name)

KINDS: dict[str, tuple[r.Resource, KubeflowKind]] = {
    "PyTorchJob": (r.PYTORCHJOBS, PYTORCH),
    "TFJob": (r.TFJOBS, TF),
}


def now_text(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Stores:
    jobs: dict[JobKey, Body] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Body]] = field(default_factory=dict)  # (ns, job)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put_job(self, key: JobKey, body: Mapping[str, Any] | None) -> None:
        with self.lock:
            if body is None:
                self.jobs.pop(key, None)
            else:
                self.jobs[key] = copy.deepcopy(dict(body))

    def put_pod(self, body: Mapping[str, Any], deleted: bool) -> tuple[str, str] | None:
        meta = body["metadata"]
        job = (meta.get("labels") or {}).get(JOB_NAME)
        if not job:
            return None
        group = (meta["namespace"], job)
        with self.lock:
            pods = self.pods.setdefault(group, {})
            if deleted:
                pods.pop(meta["name"], None)
            else:
                pods[meta["name"]] = copy.deepcopy(dict(body))
        return group

    def read(self, key: JobKey) -> tuple[Body | None, list[Body]]:
        with self.lock:
            job = self.jobs.get(key)
            pods = list(self.pods.get((key[1], key[2]), {}).values())
        return job, pods


class WorkQueue:
    """Keys waiting for a reconcile; a key queued twice runs once, never concurrently."""

    def __init__(self) -> None:
        self._pending: list[JobKey] = []
        self._queued: set[JobKey] = set()
        self._running: set[JobKey] = set()
        self._dirty: set[JobKey] = set()
        self._cond = threading.Condition()

    def add(self, key: JobKey) -> None:
        with self._cond:
            if key in self._running:
                self._dirty.add(key)
            elif key not in self._queued:
                self._queued.add(key)
                self._pending.append(key)
                self._cond.notify()

    def take(self, timeout: float) -> JobKey | None:
        with self._cond:
            if not self._pending:
                self._cond.wait(timeout)
            if not self._pending:
                return None
            key = self._pending.pop(0)
            self._queued.discard(key)
            self._running.add(key)
            return key

    def done(self, key: JobKey) -> None:
        with self._cond:
            self._running.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._queued.add(key)
                self._pending.append(key)
                self._cond.notify()


def observe(pod: Mapping[str, Any], container: str) -> core.ObservedPod:
    meta, status = pod["metadata"], pod.get("status") or {}
    labels = meta.get("labels") or {}
    exit_code = None
    statuses = status.get("containerStatuses") or []
    preferred = [s for s in statuses if s.get("name") == container] or statuses
    for item in preferred:
        terminated = (item.get("state") or {}).get("terminated")
        if terminated is not None:
            exit_code = int(terminated.get("exitCode", 0))
            break
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or [])
    return core.ObservedPod(
        name=meta["name"], role=labels.get(REPLICA_TYPE, ""),
        index=int(labels.get(REPLICA_INDEX, "-1")), phase=status.get("phase") or "Pending",
        exit_code=exit_code, deleting=bool(meta.get("deletionTimestamp")), ready=ready,
    )


class JobController:
    def __init__(self, kube: Kube, stores: Stores, queue: WorkQueue) -> None:
        self.kube = kube
        self.stores = stores
        self.queue = queue
        self._services: set[str] = set()
        self._timers: dict[JobKey, threading.Timer] = {}

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            key = self.queue.take(timeout=1.0)
            if key is None:
                continue
            try:
                self.reconcile(key)
            except errors.Conflict:
                self.queue.add(key)  # read again and retry
            except Exception:
                log.exception("reconcile of %s failed", "/".join(key))
                self.requeue_after(key, 2.0)
            finally:
                self.queue.done(key)

    def requeue_after(self, key: JobKey, seconds: float) -> None:
        old = self._timers.pop(key, None)
        if old:
            old.cancel()
        timer = threading.Timer(seconds, self.queue.add, args=(key,))
        timer.daemon = True
        self._timers[key] = timer
        timer.start()

    def reconcile(self, key: JobKey) -> None:
        job, pods = self.stores.read(key)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        resource, kind = KINDS[key[0]]
        now = datetime.now(UTC)
        stamp = now_text(now)
        types = kind.replica_types(job)
        status = job.get("status") or {}
        conditions = status.get("conditions") or []
        finished = is_true(conditions, "Succeeded") or is_true(conditions, "Failed")
        run_policy = job["spec"].get("runPolicy") or {}
        suspended = bool(run_policy.get("suspend"))
        observed = [observe(p, kind.container) for p in pods]
        result = core.plan(
            key[2], types, observed, restarts_so_far=int(status.get("restartCount", 0)),
            backoff_limit=run_policy.get("backoffLimit"), stop=finished or suspended,
        )
        for name in result.delete:
            self.kube.delete(r.PODS, name, key[1])
        if not (finished or suspended):
            by_name = {t.name: t for t in types}
            for rtype_name, index in result.create:
                self._ensure_service(job, kind, rtype_name, index)
                try:
                    self.kube.create(r.PODS, kind.pod(job, by_name[rtype_name], index))
                except errors.AlreadyExists:
                    pass
        new_status = kind.status(job, types, result, stamp)
        deadline = run_policy.get("activeDeadlineSeconds")
        if deadline and not finished:
            started = datetime.fromisoformat(new_status["startTime"].replace("Z", "+00:00"))
            remaining = (started + timedelta(seconds=int(deadline)) - now).total_seconds()
            if remaining <= 0:
                new_status = _deadline_failure(kind, job, new_status, stamp)
            else:
                self.requeue_after(key, remaining + 0.1)
        now_finished = is_true(new_status["conditions"], "Succeeded") or is_true(
            new_status["conditions"], "Failed")
        if now_finished:
            self._clean_up(job, run_policy, observed, key[1], failed=is_true(
                new_status["conditions"], "Failed"))
        if _strip(status) != _strip(new_status):
            # A whole-status replace guarded by resourceVersion: a merge patch would keep
            # counts this reconcile dropped, and a stale read must not overwrite a newer one.
            written = self.kube.replace(resource, {**job, "status": new_status},
                                        subresource="status")
            self.stores.put_job(key, written)
        ttl = run_policy.get("ttlSecondsAfterFinished")
        if now_finished and ttl is not None:
            done_at = datetime.fromisoformat(new_status["completionTime"].replace("Z", "+00:00"))
            left = (done_at + timedelta(seconds=int(ttl)) - now).total_seconds()
            if left <= 0:
                self.kube.delete(resource, key[2], key[1], uid=job["metadata"]["uid"])
            else:
                self.requeue_after(key, left + 0.1)

    def _ensure_service(self, job: Body, kind: KubeflowKind, rtype: str, index: int) -> None:
        body = kind.service(job, rtype, index)
        name = f"{job['metadata']['namespace']}/{body['metadata']['name']}/{job['metadata']['uid']}"
        if name in self._services:
            return
        try:
            self.kube.create(r.SERVICES, body)
        except errors.AlreadyExists:
            pass
        self._services.add(name)

    def _clean_up(self, job: Body, run_policy: Mapping[str, Any],
                  pods: list[core.ObservedPod], namespace: str, failed: bool) -> None:
        """cleanPodPolicy: None keeps pods, Running deletes unfinished ones, All deletes all.
        A job that failed its deadline or backoff has every pod stopped (Kubeflow rule)."""
        policy = run_policy.get("cleanPodPolicy") or "None"
        for pod in pods:
            if pod.deleting:
                continue
            unfinished = pod.phase not in ("Succeeded", "Failed")
            if policy == "All" or (unfinished and (policy == "Running" or failed)):
                self.kube.delete(r.PODS, pod.name, namespace)


def _deadline_failure(kind: KubeflowKind, job: Body, status: Body, stamp: str) -> Body:
    name = job["metadata"]["name"]
    message = f"{kind.kind} {name} has failed because it was active longer than specified deadline"
    conditions = set_condition(status["conditions"], "Running", False, f"{kind.kind}Failed",
                               message, stamp)
    conditions = set_condition(conditions, "Failed", True, f"{kind.kind}Failed", message, stamp)
    return {**status, "conditions": conditions, "completionTime": stamp}


def _strip(status: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in status.items() if v not in (None, {}, [])}
