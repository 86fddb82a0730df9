"""Pulling Works from the hub and applying them to the member; pushing their status back.

The agent lists and watches Works in its own hub namespace (the only one it can read). A Work
is applied with server-side apply under the field manager ``fleet-agent``, so re-applying is
idempotent and drift on the member is put back; several Works apply at once, each Work's
events in order (``keyed``). A Work carries the agent's finalizer: when the
hub deletes it, the agent removes the job from the member first, honouring the purge mode.
Status goes back as a diff: only Works whose reported status changed are written.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from fleet import metrics
from fleet.api.cluster import AGENT_FINALIZER, member_namespace
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube
from fleet.clients.patches import merge_diff
from fleet.kinds import adapter_for
from member_agent.controllers.runtime import kind_key
from member_agent.keyed import LatestPerKey
from member_agent.reservations import Reservation, reservations
from member_agent.state import MemberState

log = logging.getLogger(__name__)
Body = dict[str, Any]
FIELD_MANAGER = "fleet-agent"
PURGE_MODE = "fleet.sh/purge-mode"
WORK_ANNOTATION = "fleet.sh/work"
JOB_UID = "fleet.sh/job-uid"
DRIFT_GRACE_SECONDS = 10.0  # how long a job may be missing from the member's cache after apply


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class HubSync:
    def __init__(self, hub: Kube, member: Kube, cluster: str, state: MemberState) -> None:
        self.hub, self.member, self.cluster, self.state = hub, member, cluster, state
        self.namespace = member_namespace(cluster)
        self.works: dict[str, Body] = {}
        self.reported: dict[str, Body] = {}
        self.bound_at: dict[str, str] = {}
        self.unhealthy_since: dict[str, str] = {}
        self.lock = threading.Lock()
        self.namespaces: set[str] = set()
        self.first_seen: dict[str, float] = {}  # Work name -> when this agent applied it
        self.applied: dict[str, int] = {}  # Work name -> the generation last applied
        self.appliers: LatestPerKey[tuple[Body, bool]] = LatestPerKey(
            lambda item: self.handle(item[0], deleted=item[1]), workers=4, name="apply")

    # -- pulling ------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        version = ""
        while not stop.is_set():
            try:
                if not version:
                    version = self.relist()
                for kind, work in self.hub.watch(r.WORKS, self.namespace,
                                                 resource_version=version, timeout_seconds=60):
                    version = work["metadata"].get("resourceVersion", version)
                    if kind == "BOOKMARK":
                        continue
                    self.appliers.submit(work["metadata"]["name"], (work, kind == "DELETED"))
                    if stop.is_set():
                        return
            except errors.ApiError as exc:
                if exc.status == 410:
                    version = ""
                    continue
                log.warning("hub watch of Works interrupted: %s", exc)
                version = ""
                stop.wait(1.0)

    def relist(self) -> str:
        items, version = self.hub.list(r.WORKS, self.namespace)
        names = {w["metadata"]["name"] for w in items}
        with self.lock:
            for gone in set(self.works) - names:
                self.works.pop(gone, None)
        for work in items:
            self.appliers.submit(work["metadata"]["name"], (work, False))
        self.collect_orphans(names)
        return version

    def collect_orphans(self, works: set[str]) -> None:
        """Jobs this agent applied whose Work is gone (deleted while the agent or its member
        was away, e.g. a failover from a lost cluster) are purged as their purge mode says."""
        for resource in r.JOB_KINDS:
            try:
                jobs, _ = self.member.list(resource, label_selector=JOB_UID)
            except errors.ApiError:
                continue
            for job in jobs:
                annotations = job["metadata"].get("annotations") or {}
                owner = annotations.get(WORK_ANNOTATION, "")
                if not owner.startswith(f"{self.namespace}/") or owner.split("/", 1)[1] in works:
                    continue
                if annotations.get(PURGE_MODE) == "Never":
                    continue
                log.info("purging orphaned %s %s/%s (work %s is gone)", job["kind"],
                         job["metadata"]["namespace"], job["metadata"]["name"], owner)
                self.member.delete(resource, job["metadata"]["name"],
                                   job["metadata"]["namespace"])

    def handle(self, work: Body, *, deleted: bool) -> None:
        name = work["metadata"]["name"]
        if deleted:
            with self.lock:
                self.works.pop(name, None)
                self.reported.pop(name, None)
                self.applied.pop(name, None)
            self.state.changed.set()  # any reservation it held ends
            return
        try:
            if work["metadata"].get("deletionTimestamp"):
                self.purge(work)
            elif self._already_applied(work):
                with self.lock:  # a status or metadata change: nothing to apply again
                    self.works[name] = work
            else:
                self.apply(work)
        except errors.ApiError as exc:
            log.warning("work %s not applied: %s", name, exc)

    def apply(self, work: Body) -> None:
        meta = work["metadata"]
        if AGENT_FINALIZER not in (meta.get("finalizers") or []):  # a Work from an older hub
            work = self.hub.patch(r.WORKS, meta["name"], {"metadata": {
                "resourceVersion": meta["resourceVersion"],
                "finalizers": [*(meta.get("finalizers") or []), AGENT_FINALIZER]}},
                self.namespace)
        for manifest in work["spec"]["manifests"]:
            namespace = manifest["metadata"].get("namespace")
            if namespace and namespace not in self.namespaces:
                self.member.apply(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": namespace}},
                                  field_manager=FIELD_MANAGER)
                self.namespaces.add(namespace)
            resource = r.for_kind(manifest["apiVersion"], manifest["kind"])
            self.member.apply(resource, manifest, field_manager=FIELD_MANAGER)
        with self.lock:
            first = work["metadata"]["name"] not in self.works
            self.first_seen.setdefault(work["metadata"]["name"], time.monotonic())
            self.works[work["metadata"]["name"]] = work
            self.applied[work["metadata"]["name"]] = work["metadata"].get("generation", 0)
            if first and (work.get("status") or {}).get("boundTime"):
                self.bound_at[work["metadata"]["name"]] = work["status"]["boundTime"]
        if first:
            metrics.WORKS_APPLIED.labels(self.cluster).inc()
            log.info("applied work %s", work["metadata"]["name"])
        self.state.changed.set()

    def _already_applied(self, work: Body) -> bool:
        """The Work's spec (its generation) is on the member already and carries our finalizer:
        its own status writes and metadata changes need no new apply (each apply costs the
        member's API server a server-side apply per manifest)."""
        meta = work["metadata"]
        with self.lock:
            applied = self.applied.get(meta["name"])
        return applied is not None and applied == meta.get("generation", 0) \
            and AGENT_FINALIZER in (meta.get("finalizers") or [])

    def repair_drift(self, work: Body) -> None:
        """Apply again a Work whose job has been gone from the member for a while (someone
        deleted it there): the hub's word wins."""
        name = work["metadata"]["name"]
        seen = self.first_seen.get(name)
        if seen is None or time.monotonic() - seen < DRIFT_GRACE_SECONDS \
                or work["metadata"].get("deletionTimestamp") or self._job_of(work) is not None:
            return
        with self.lock:
            if self.applied.pop(name, None) is None:
                return  # already being applied again
        log.info("job of work %s is gone from the member; applying it again", name)
        self.appliers.submit(name, (work, False))

    def purge(self, work: Body) -> None:
        """Remove the Work's objects from the member, then let the hub delete the Work."""
        meta = work["metadata"]
        mode = (meta.get("annotations") or {}).get(PURGE_MODE) or _purge_mode(work)
        if mode != "Never":
            shared = self._used_by_others(meta["name"])
            for manifest in work["spec"]["manifests"]:
                if _identity(manifest) in shared:
                    continue  # a dependency another job on this member still uses
                resource = r.for_kind(manifest["apiVersion"], manifest["kind"])
                self.member.delete(resource, manifest["metadata"]["name"],
                                   manifest["metadata"].get("namespace"),
                                   propagation="Background")
        finalizers = [f for f in meta.get("finalizers") or [] if f != AGENT_FINALIZER]
        try:
            self.hub.patch(r.WORKS, meta["name"], {"metadata": {
                "resourceVersion": meta["resourceVersion"], "finalizers": finalizers}},
                self.namespace)
        except errors.NotFound:
            pass
        with self.lock:
            self.works.pop(meta["name"], None)
            self.reported.pop(meta["name"], None)
            self.applied.pop(meta["name"], None)
        self.state.changed.set()

    def held(self, pods: list[Body]) -> list[Reservation]:
        """What this member holds for its Works' unbound pods (see ``reservations``)."""
        with self.lock:
            works = list(self.works.values())
            seen = dict(self.first_seen)
            bound = set(self.bound_at)
        return reservations(works, pods, seen, time.monotonic(), bound=bound)

    def _used_by_others(self, name: str) -> set[tuple[str, str, str]]:
        with self.lock:
            others = [w for n, w in self.works.items() if n != name]
        return {_identity(m) for w in others for m in w["spec"]["manifests"][1:]}

    # -- pushing status --------------------------------------------------------------------
    def report_loop(self, stop: threading.Event, interval: float = 0.5) -> None:
        while not stop.is_set():
            try:
                self.report_once()
            except Exception:  # keep reporting whatever one Work does
                log.exception("work status report failed")
            stop.wait(interval)

    def report_once(self) -> None:
        with self.lock:
            works = list(self.works.values())
        for work in works:
            name = work["metadata"]["name"]
            self.repair_drift(work)
            status = self.work_status(work)
            before = self.reported.get(name) or work.get("status") or {}
            patch = merge_diff(before, status)
            if not patch:
                self.reported[name] = status
                continue
            try:
                self.hub.patch(r.WORKS, name, {"status": patch}, self.namespace,
                               subresource="status")
                self.reported[name] = status
            except errors.NotFound:
                continue

    def _job_of(self, work: Mapping[str, Any]) -> Body | None:
        return self.state.stores.read(_job_key(work))[0]

    def work_status(self, work: Mapping[str, Any]) -> Body:
        manifest = work["spec"]["manifests"][0]
        job, job_pods = self.state.stores.read(_job_key(work))
        adapter = adapter_for(manifest["apiVersion"], manifest["kind"])
        healthy, why = _health(job_pods)
        job_status = (job or {}).get("status") or {}
        expected = sum(role.replicas for role in adapter.roles(manifest))
        pods = [_summary(p) for p in sorted(job_pods, key=lambda p: p["metadata"]["name"])]
        name = work["metadata"]["name"]
        if name not in self.bound_at and len([p for p in pods if p.get("node")]) >= expected:
            self.bound_at[name] = stamp()
            self.state.changed.set()  # its reservation ends: the capacity report changes
        status: Body = {
            "applied": job is not None,
            "state": adapter.state(job_status) or ("Applied" if job else "Pending"),
            "jobStatus": job_status or None,
            "pods": pods,
            "conditions": [{"type": "Applied", "status": "True" if job else "False",
                            "reason": "AppliedToMember" if job else "Applying",
                            "message": f"job applied on {self.cluster}" if job else "",
                            "lastTransitionTime": work["metadata"].get("creationTimestamp")}],
        }
        if name in self.bound_at:
            status["boundTime"] = self.bound_at[name]
        if healthy:
            self.unhealthy_since.pop(name, None)
        else:
            self.unhealthy_since.setdefault(name, stamp())
        status["conditions"].append({
            "type": "Healthy", "status": "True" if healthy else "False",
            "reason": "Healthy" if healthy else "Unschedulable", "message": why,
            "lastTransitionTime": self.unhealthy_since.get(name) or work["metadata"].get(
                "creationTimestamp")})
        return status


def _job_key(work: Mapping[str, Any]) -> tuple[str, str, str]:
    manifest = work["spec"]["manifests"][0]
    meta = manifest["metadata"]
    return kind_key(manifest["apiVersion"], manifest["kind"]), meta["namespace"], meta["name"]


def _identity(manifest: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = manifest["metadata"]
    return (manifest["kind"], meta.get("namespace", ""), meta["name"])


def _purge_mode(work: Mapping[str, Any]) -> str:
    manifests = work["spec"]["manifests"]
    return str((manifests[0]["metadata"].get("annotations") or {}).get(PURGE_MODE)
               or "Immediately")


def _health(pods: list[Body]) -> tuple[bool, str]:
    """A share is unhealthy while one of its pods cannot be scheduled on the member."""
    for pod in pods:
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if (condition.get("type") == "PodScheduled" and condition.get("status") == "False"
                    and condition.get("reason") == "Unschedulable"):
                return False, f"pod {pod['metadata']['name']} unschedulable: " + str(
                    condition.get("message", ""))[:200]
    return True, ""


def _summary(pod: Mapping[str, Any]) -> Body:
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    exit_code = None
    for item in containers:
        terminated = (item.get("state") or {}).get("terminated")
        if terminated is not None:
            exit_code = terminated.get("exitCode")
    summary: Body = {
        "name": meta["name"],
        "role": next((v for k, v in (meta.get("labels") or {}).items()
                      if k.endswith("/replica-type")), None),
        "phase": status.get("phase") or "Pending",
        "ready": any(c.get("type") == "Ready" and c.get("status") == "True"
                     for c in status.get("conditions") or []),
        "restarts": sum(int(c.get("restartCount", 0)) for c in containers),
        "node": spec.get("nodeName"),
        "exitCode": exit_code,
        "startTime": status.get("startTime"),
    }
    return {k: v for k, v in summary.items() if v is not None}


