"""Pulling Works from the hub and applying them to the member; pushing their status back.

The agent lists and watches Works in its own hub namespace (the only one it can read). A Work
is applied with server-side apply under the field manager ``fleet-agent``, so re-applying is
idempotent and drift on the member is put back; several Works apply at once, each Work's
events in order (``keyed``). A Work carries the agent's finalizer: when the
hub deletes it, the agent removes the job from the member first, honouring the purge mode.
Status goes back as a diff: only Works whose reported status changed are written.

Fencing (DESIGN §5.6, :mod:`member_agent.fencing`): the agent keeps, from its watch, which
Works exist and at which placement generation. The member's job controller creates pods only
for a job whose Work of the same generation exists; a job whose Work is gone, or superseded by
a newer generation, is removed: at once when the Work's deletion is seen, and by a sweep of the
member-side cache every ``fence_interval`` seconds (so a copy is removed even when the hub
dropped the agent's finalizer while this member was unreachable, and as soon as the member's
API server answers again).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from fleet import metrics
from fleet.api import protocol, size
from fleet.api.protocol import AGENT_FINALIZER, member_namespace
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube
from fleet.clients.patches import merge_diff
from fleet.kinds import adapter_for
from member_agent import fencing
from member_agent.controllers import placeholders as ph
from member_agent.controllers.runtime import KINDS
from member_agent.fencing import Action, Fence
from member_agent.held_nodes import HeldNodes, held_nodes
from member_agent.keyed import LatestPerKey
from member_agent.member_failures import health
from member_agent.priority_classes import apply_priority_class, is_priority_class
from member_agent.stages import STAGES
from member_agent.state import MemberState
from member_agent.topology import placed
from propagation.jobkey import JobKey

log = logging.getLogger(__name__)
Body = dict[str, Any]
FIELD_MANAGER = "fleet-agent"
DRIFT_GRACE_SECONDS = 10.0  # how long a job may be missing from the member's cache after apply


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class HubSync:
    def __init__(self, hub: Kube, member: Kube, cluster: str, state: MemberState, *,
                 fence_interval: float = 2.0,
                 placeholder_image: str = ph.DEFAULT_IMAGE) -> None:
        self.hub, self.member, self.cluster, self.state = hub, member, cluster, state
        self.fence_interval = fence_interval
        self.placeholder_image = placeholder_image
        # Reservations (phase Reserve): each Work's verdict on its placeholders, and how to
        # wake the job controller for a job whose Work was committed.
        self.verdicts: dict[str, ph.Verdict] = {}
        self.wake: Callable[[JobKey], None] = lambda key: None
        self.namespace = member_namespace(cluster)
        self.works: dict[str, Body] = {}
        self.reported: dict[str, Body] = {}
        self.bound_at: dict[str, str] = {}
        self.unhealthy_since: dict[str, str] = {}
        self.cut: dict[str, str] = {}  # Work name -> why its job's status was cut
        self.lock = threading.Lock()
        self.namespaces: set[str] = set()
        self.first_seen: dict[str, float] = {}  # Work name -> when this agent applied it
        self.applied: dict[str, int] = {}  # Work name -> the generation last applied
        # Fencing: the Works in the hub namespace as the watch last said (the watch thread
        # writes it before any apply is queued), and whether one list has filled it yet.
        self.fences: dict[str, Fence] = {}
        self.synced = threading.Event()
        self.purged: set[str] = set()  # Works this agent purged itself (their DELETED is no news)
        self.kept: set[str] = set()  # Works whose copy purge mode Never keeps
        self.sweep_now = threading.Event()
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
                    self._fence(work, deleted=kind == "DELETED")
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
            self.fences = {w["metadata"]["name"]: fencing.fence_of(w) for w in items
                           if not w["metadata"].get("deletionTimestamp")}
            self.purged &= names  # their deletion was missed while the watch was down
        self.synced.set()
        self.sweep_now.set()  # Works deleted while the watch was down: their copies go now
        for work in items:
            self.appliers.submit(work["metadata"]["name"], (work, False))
        return version

    def _fence(self, work: Body, *, deleted: bool) -> None:
        name = work["metadata"]["name"]
        with self.lock:
            if deleted or work["metadata"].get("deletionTimestamp"):
                self.fences.pop(name, None)
            else:
                self.fences[name] = fencing.fence_of(work)

    # -- fencing ------------------------------------------------------------------------
    def may_run(self, job: Mapping[str, Any], key: JobKey) -> bool:
        """For the member's job controller: whether ``job`` may get pods now."""
        with self.lock:
            verdict = fencing.may_run(job, key, self.namespace, self.fences,
                                      synced=self.synced.is_set())
        return verdict is None or verdict.action is Action.RUN

    def fence_loop(self, stop: threading.Event) -> None:
        """Remove stale copies from the member's jobs, every ``fence_interval`` seconds and
        whenever a list of the Works may have dropped some."""
        while not stop.is_set():
            self.sweep_now.wait(self.fence_interval)
            self.sweep_now.clear()
            try:
                self.sweep()
            except Exception:  # keep fencing whatever one job does
                log.exception("fencing sweep failed")

    def sweep(self) -> None:
        self.sweep_placeholders()
        jobs = self.state.stores.all_jobs()
        with self.lock:
            fences = dict(self.fences)
            self.kept &= {protocol.copy_work(b["metadata"])[1] for _, b in jobs}
            kept = set(self.kept)
        for verdict in fencing.sweep(jobs, self.namespace, fences,
                                     synced=self.synced.is_set()):
            if verdict.action is Action.REMOVE and verdict.job.work not in kept:
                try:
                    self._remove_job(verdict.job, verdict.reason)
                except errors.ApiError as exc:  # e.g. the member's API server is down
                    log.warning("stale %s not removed yet: %s", verdict.job.key, exc)

    def sweep_placeholders(self) -> None:
        """No placeholder outlives its Work: those whose Work is gone go (once the Works
        were listed: before that an absent Work means nothing)."""
        if not self.synced.is_set():
            return
        with self.lock:
            works = {name: fence.job_uid for name, fence in self.fences.items()}
        _, pods = self.state.snapshot()
        for namespace, name, why in ph.orphans(pods, self.namespace, works):
            log.info("removing placeholder %s/%s: %s", namespace, name, why)
            self._delete_placeholder(namespace, name)

    def _delete_placeholder(self, namespace: str, name: str) -> None:
        try:
            self.member.delete(r.PODS, name, namespace, grace_period_seconds=0)
        except errors.ApiError as exc:  # the next sweep or report tries again
            log.warning("placeholder %s/%s not deleted yet: %s", namespace, name, exc)

    def _placeholders(self, namespace: str, job_uid: str) -> list[Body]:
        _, pods = self.state.snapshot()
        return [pod for pod in pods if pod["metadata"]["namespace"] == namespace
                and ph.is_placeholder(pod)
                and (pod["metadata"].get("labels") or {}).get(protocol.JOB_UID) == job_uid]

    def hold(self, work: Body, applied: Body | None = None) -> ph.Verdict | None:
        """Carry out what the Work's reservation needs now (placeholders to create or
        delete) and return its verdict (None: the Work has no reservation). ``applied``: the
        member copy as just applied (the member-side cache may not have it yet)."""
        name = work["metadata"]["name"]
        if not protocol.work_phase(work):
            return None
        key = _job_key(work)
        job, job_pods = self.state.stores.read(key)
        job = job or applied
        held = self._placeholders(key.namespace, work["spec"]["job"]["uid"])
        kind = KINDS.get(key.kind_key)
        real: list[ph.Slot] = []
        if kind is not None:
            for pod in job_pods:
                labels = pod["metadata"].get("labels") or {}
                try:
                    real.append((str(labels[kind.type_label]), int(labels[kind.index_label])))
                except (KeyError, ValueError):
                    continue
        owner = None
        if job is not None and protocol.copy_work(job["metadata"]) == (self.namespace, name):
            owner = {"apiVersion": job["apiVersion"], "kind": job["kind"],
                     "name": job["metadata"]["name"], "uid": job["metadata"]["uid"]}
        decided = ph.plan(work, held, real, owner, self.placeholder_image)
        verdict = decided.verdict
        for pod in decided.create:
            try:
                self.member.create(r.PODS, pod)
            except errors.AlreadyExists:
                continue
            except errors.ApiError as exc:
                if exc.status not in (400, 403, 422):
                    raise
                # the member refuses the pod itself (a quota, an admission policy): as
                # final as a scheduler that cannot place it
                verdict = ph.Verdict(protocol.REFUSED, f"placeholder "
                                     f"{pod['metadata']['name']} refused: {exc}"[:1024])
        for gone in decided.delete:
            self._delete_placeholder(key.namespace, gone)
        return verdict

    def take_slot(self, job: Mapping[str, Any], slot: ph.Slot) -> str | None:
        """For the job controller creating the real pod of ``slot``: the node the slot's
        placeholder holds (None when none does), the placeholder deleted first."""
        meta = job["metadata"]
        uid = (meta.get("labels") or {}).get(protocol.JOB_UID)
        namespace, name = protocol.copy_work(meta)
        with self.lock:
            work = self.works.get(name) if namespace == self.namespace else None
        if not uid or work is None or protocol.work_phase(work) != protocol.PHASE_COMMIT:
            return None  # not a reservation's job: nothing to look for
        pinned = ph.pinned_node(self._placeholders(meta["namespace"], str(uid)), slot)
        if pinned is None:
            return None
        node, placeholder = pinned
        self._delete_placeholder(meta["namespace"], placeholder)
        return node

    def _remove_job(self, job: fencing.MemberJob, why: str) -> None:
        key = job.key
        kind, namespace, name = key.kind_key, key.namespace, key.name
        log.info("removing %s %s/%s from the member: %s", kind, namespace, name, why)
        try:
            if self.member.delete(KINDS[kind].resource, name, namespace, uid=job.uid):
                metrics.FENCED_JOBS.labels(self.cluster).inc()
        except errors.Conflict:
            return  # already replaced by a newer copy
        self._delete_pods(job.key, job.uid)

    def _delete_pods(self, key: JobKey, owner_uid: str) -> None:
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

    def handle(self, work: Body, *, deleted: bool) -> None:
        name = work["metadata"]["name"]
        if deleted:
            with self.lock:
                self.works.pop(name, None)
                self.reported.pop(name, None)
                self.applied.pop(name, None)
                # A Work of the same name made later (the job placed there again) starts
                # afresh: healthy, its pods not bound (an old boundTime would tell the hub
                # that this member's report counts the new share), its reservation's clock
                # at zero.
                self.unhealthy_since.pop(name, None)
                self.bound_at.pop(name, None)
                self.cut.pop(name, None)
                self.first_seen.pop(name, None)
                purged = name in self.purged
                self.purged.discard(name)
            self.state.changed.set()  # any reservation it held ends
            self.sweep_now.set()  # its placeholders go
            self.verdicts.pop(name, None)
            if not purged:  # released without us (its member was lost): its copy goes now
                current = self._job_of(work)
                self._remove_objects(work, "its Work was deleted without the agent")
                if current is not None and protocol.work_purge_mode(work) != protocol.PURGE_NEVER:
                    self._delete_pods(_job_key(work), current["metadata"].get("uid", ""))
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
        with self.lock:  # a Work of this name again (its DELETED may have been superseded)
            self.purged.discard(meta["name"])
        current = self._job_of(work)
        if current is not None:
            job = fencing.member_job(_job_key(work), current, self.namespace)
            verdict = fencing.judge(job, fencing.fence_of(work), synced=True) if job else None
            if verdict is not None and verdict.action is Action.REMOVE:
                self._remove_job(verdict.job, verdict.reason)  # then apply a fresh copy
        if AGENT_FINALIZER not in (meta.get("finalizers") or []):  # a Work from an older hub
            work = self.hub.patch(r.WORKS, meta["name"], {"metadata": {
                "resourceVersion": meta["resourceVersion"],
                "finalizers": [*(meta.get("finalizers") or []), AGENT_FINALIZER]}},
                self.namespace)
        manifests = [placed(work), *work["spec"]["manifests"][1:]]
        # What the job needs first: its pods refer to its PriorityClass and dependencies.
        applied: Body | None = None  # the job, last
        for manifest in [*manifests[1:], manifests[0]]:
            if is_priority_class(manifest):
                apply_priority_class(self.member, manifest, FIELD_MANAGER)
                continue
            namespace = manifest["metadata"].get("namespace")
            if namespace and namespace not in self.namespaces:
                self.member.apply(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": namespace}},
                                  field_manager=FIELD_MANAGER)
                self.namespaces.add(namespace)
            resource = r.for_kind(manifest["apiVersion"], manifest["kind"])
            applied = self.member.apply(resource, manifest, field_manager=FIELD_MANAGER)
        with self.lock:
            first = work["metadata"]["name"] not in self.works
            before = self.works.get(work["metadata"]["name"])
            if before is not None and _replicas(before) != _replicas(work):
                # An elastic share resized: bound again once its new count of pods is.
                self.bound_at.pop(work["metadata"]["name"], None)
            self.first_seen.setdefault(work["metadata"]["name"], time.monotonic())
            self.works[work["metadata"]["name"]] = work
            self.applied[work["metadata"]["name"]] = work["metadata"].get("generation", 0)
            bound = protocol.bound_time(work)
            if first and bound:
                self.bound_at[work["metadata"]["name"]] = bound
        if first:
            metrics.WORKS_APPLIED.labels(self.cluster).inc()
            STAGES.applied(work)
            log.info("applied work %s", work["metadata"]["name"])
        self.state.changed.set()
        self.wake(_job_key(work))  # e.g. committed: its pods may start now
        if protocol.work_phase(work) == protocol.PHASE_RESERVE:
            self._hold_now(work, applied)  # its placeholders now, not at the next report

    def _hold_now(self, work: Body, job: Body | None) -> None:
        name = work["metadata"]["name"]
        try:
            verdict = self.hold(work, job)
        except errors.ApiError as exc:  # the report loop tries again
            log.warning("placeholders of work %s not created yet: %s", name, exc)
            return
        if verdict is not None:
            self.verdicts[name] = verdict

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
        # ``work`` is the report loop's copy: the job may be gone because the Work is being
        # deleted and purge() removed it. Purging starts only once the hub has marked the
        # Work deleted, so the hub's current copy tells the two apart.
        try:
            current = self.hub.get_or_none(r.WORKS, name, self.namespace)
        except errors.ApiError:
            return
        if current is None or current["metadata"].get("deletionTimestamp"):
            return
        with self.lock:
            if self.applied.pop(name, None) is None:
                return  # already being applied again, or purged meanwhile
        log.info("job of work %s is gone from the member; applying it again", name)
        self.appliers.submit(name, (current, False))

    def purge(self, work: Body) -> None:
        """Remove the Work's objects from the member, then let the hub delete the Work."""
        meta = work["metadata"]
        self._remove_objects(work, "its Work is being deleted")
        with self.lock:
            self.purged.add(meta["name"])
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
        self.sweep_now.set()  # its placeholders go
        self.state.changed.set()

    def _remove_objects(self, work: Body, why: str) -> None:
        """The Work's job and its dependencies off the member (those another Work still
        uses stay), unless the purge mode is Never."""
        meta = work["metadata"]
        name = meta["name"]
        if protocol.work_purge_mode(work) == protocol.PURGE_NEVER:
            with self.lock:
                self.kept.add(name)
            log.info("keeping the objects of work %s (%s): purge mode Never", name, why)
            return
        log.info("removing the objects of work %s: %s", name, why)
        shared = self._used_by_others(name)
        job = self._job_of(work)
        for index, manifest in enumerate(work["spec"]["manifests"]):
            if _identity(manifest) in shared or is_priority_class(manifest):
                continue  # a dependency another job on this member still uses, or a
                # cluster-wide class that other pods may use by now
            uid = None
            if index == 0 and job is not None:
                if protocol.copy_work(job["metadata"]) != (self.namespace, name):
                    continue  # the job of the same name is another Work's copy now
                uid = job["metadata"].get("uid")
            resource = r.for_kind(manifest["apiVersion"], manifest["kind"])
            try:
                self.member.delete(resource, manifest["metadata"]["name"],
                                   manifest["metadata"].get("namespace"),
                                   propagation="Background", uid=uid)
            except errors.Conflict:
                continue  # replaced meanwhile

    def held(self, pods: list[Body], room: Mapping[str, Mapping[str, int]]
             ) -> list[HeldNodes]:
        """What this member holds for its Works' unbound pods (see ``reservations``)."""
        with self.lock:
            works = list(self.works.values())
            seen = dict(self.first_seen)
            bound = set(self.bound_at)
        return held_nodes(works, pods, room, seen, time.monotonic(), bound=bound)

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
            try:
                verdict = self.hold(work)
            except errors.ApiError as exc:  # the member's API server: the next round retries
                log.warning("placeholders of work %s not updated: %s", name, exc)
                verdict = self.verdicts.get(name)
            if verdict is None:
                self.verdicts.pop(name, None)
            else:
                self.verdicts[name] = verdict
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
        share = health(self.cluster, job_pods, self.state.stores.refusal(_job_key(work)))
        job_status = (job or {}).get("status") or {}
        state = adapter.state(job_status) or ("Applied" if job else "Pending")
        reported, cut = size.reported_status(job_status)
        name = work["metadata"]["name"]
        if not cut:
            self.cut.pop(name, None)
        elif self.cut.get(name) != cut:  # once per Work and reason
            log.warning("reporting part of a member job's status: %s", cut,
                        extra={"work": name})
            self.cut[name] = cut
        expected = sum(role.replicas for role in adapter.roles(manifest))
        pods = [_summary(p) for p in sorted(job_pods, key=lambda p: p["metadata"]["name"])]
        STAGES.progress(name, [p["phase"] for p in pods], expected)
        if name not in self.bound_at and len([p for p in pods if p.get("node")]) >= expected:
            self.bound_at[name] = stamp()
            self.state.changed.set()  # its reservation ends: the capacity report changes
        if share.healthy:
            self.unhealthy_since.pop(name, None)
        else:
            self.unhealthy_since.setdefault(name, stamp())
        created = work["metadata"].get("creationTimestamp")
        verdict = self.verdicts.get(name)
        reserved = [] if verdict is None else [{
            "type": protocol.RESERVED,
            "status": "True" if verdict.state == protocol.RESERVED else "False",
            "reason": verdict.state, "message": verdict.message[:1024],
            "lastTransitionTime": created}]
        return protocol.work_status(
            applied=job is not None,
            state=state, job_status=reported, pods=pods, bound_time=self.bound_at.get(name),
            conditions=[{"type": protocol.APPLIED, "status": "True" if job else "False",
                         "reason": "AppliedToMember" if job else "Applying",
                         "message": f"job applied on {self.cluster}" if job else "",
                         "lastTransitionTime": created},
                        {"type": protocol.HEALTHY, "status": "True" if share.healthy else "False",
                         "reason": share.reason, "message": share.message,
                         "lastTransitionTime": self.unhealthy_since.get(name) or created},
                        *reserved])


def _job_key(work: Mapping[str, Any]) -> JobKey:
    return JobKey.of_body(work["spec"]["manifests"][0])


def _replicas(work: Mapping[str, Any]) -> Mapping[str, Any]:
    return dict(((work.get("spec") or {}).get("placement") or {}).get("replicas") or {})


def _identity(manifest: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = manifest["metadata"]
    return (manifest["kind"], meta.get("namespace", ""), meta["name"])


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
        # for the hub's mirror of the pod (fleet.hub.pod_mirrors)
        "labels": meta.get("labels") or None,
        "containers": [c["name"] for c in spec.get("containers") or []] or None,
    }
    return {k: v for k, v in summary.items() if v is not None}


