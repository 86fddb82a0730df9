"""The hub's writes to the API server, each one request: binding a job, creating its Works,
and every later change to them. The :class:`~fleet.hub.writer.Writer` decides which to send.

Every write is fenced twice. Here, before it is sent: a replica that does not lead (or whose
renewal is past its deadline) sends nothing (:meth:`LeaderElector.fence`). And at the API
server, for the writes that must never happen twice (a job's placement and marks, its
Works): each carries the leader's term (:data:`fleet.api.protocol.TERM`), which the
``fleet-leader-term`` ValidatingAdmissionPolicy compares with the Lease, so a request of an
ended term sent before its replica knew is refused. A Work is deleted by a fenced patch and
then a delete conditional on the version that patch made.

Writes that decide something are guarded by the resourceVersion they were decided from, so
two decisions never act on one version: a stale one is refused (Conflict) and the next pass
decides again.

Binding a job and dispatching its Works: all of a decision's Works exist, or none do.
Order: (1) bind: one patch that records the placement and adds the dispatch finalizer,
guarded by the job's resourceVersion; (2) create every Work under its deterministic name;
(3) if any creation fails, delete the ones made and unbind. A hub that dies between (1) and
(2) finds the placement on restart and completes the same Works (roll forward).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fleet import clock
from fleet.api import protocol as p
from fleet.clients import errors, events
from fleet.clients import resources as r
from fleet.clients.kube import Body, Kube
from fleet.clients.leases import NotLeading
from fleet.clients.patches import merge_diff
from fleet.kinds.base import KindAdapter
from fleet.kinds.deps import CONFIGMAP, PVC, SECRET, dependency_manifest

log = logging.getLogger(__name__)
COMPONENT = "fleet-hub"
LEADER_TERM_POLICY = "fleet-leader-term"  # the admission policy that fences the hub's writes
# Named through this module by the queueing code.
ADMITTED_AT, REQUEUE = p.ADMITTED_AT, p.REQUEUE
GONE = (errors.NotFound,)
STALE = (errors.Conflict, errors.NotFound)  # changed or gone since it was read


def now_text() -> str:
    return clock.text()


def precise_now() -> str:
    """The time to the microsecond, as the Work's dispatched-at annotation carries it."""
    return clock.text(micro=True)


def _refused(exc: errors.ApiError) -> Exception:
    """A write the API server refused for an ended term (or with no Lease at all): this
    replica does not lead."""
    if LEADER_TERM_POLICY in str(exc):
        return NotLeading(f"refused by the API server: {exc}")
    return exc


def still_bound_as(decided: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """``current`` is the job ``decided`` was read as, bound to the same placement and not
    marked to leave it since (whatever else changed: its status)."""
    before, now = decided["metadata"], current["metadata"]
    marks, placed = before.get("annotations") or {}, now.get("annotations") or {}
    return before.get("uid") == now.get("uid") and p.REQUEUE not in placed and all(
        marks.get(k) == placed.get(k) for k in (p.PLACEMENT, p.PLACEMENT_GENERATION))


def unfenced() -> str:
    """The term of a hub that runs alone (tests, a bench): every write allowed."""
    return ""


class Dispatcher:
    def __init__(self, kube: Kube, fence: Callable[[], str] = unfenced) -> None:
        self.kube = kube
        self.fence = fence  # the leader's term, or NotLeading (fleet.clients.leases)
        self.events = events.EventRecorder(kube, COMPONENT)

    # -- the one way a hub object is changed ------------------------------------------------
    def _patch(self, resource: r.Resource, obj: Mapping[str, Any], patch: Body, *,
               guarded: bool = False, swallow: tuple[type[errors.ApiError], ...] = GONE,
               subresource: str | None = None) -> Body | None:
        """A merge patch of ``obj`` under the leader's term, guarded by the resourceVersion
        it was read at when ``guarded``; None when one of ``swallow`` answers (gone, or
        changed since)."""
        meta = obj["metadata"]
        term = self.fence()
        body = dict(patch)
        if subresource is None:
            marks = dict((patch.get("metadata") or {}).get("annotations") or {})
            marks[p.TERM] = term
            body["metadata"] = {**(patch.get("metadata") or {}), "annotations": marks}
        if guarded:
            body["metadata"] = {**(body.get("metadata") or {}),
                                "resourceVersion": meta["resourceVersion"]}
        try:
            return self.kube.patch(resource, meta["name"], body, meta.get("namespace"),
                                   subresource=subresource)
        except swallow:
            return None
        except (errors.Forbidden, errors.Invalid) as exc:
            raise _refused(exc) from None

    # -- jobs -------------------------------------------------------------------------------
    def bind(self, job: Mapping[str, Any], adapter: KindAdapter, placement: str,
             clusters: Sequence[str], extra: Mapping[str, str | None] | None = None
             ) -> Body | None:
        """Record the placement under the job's next placement generation (fencing: every
        Work and member copy of this placement carries it); None when the job changed since
        it was read. The resourceVersion guard makes the generation grow by exactly one per
        bind; unbinding keeps it, so a re-placement gets a higher one."""
        meta = job["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if p.FINALIZER not in finalizers:
            finalizers.append(p.FINALIZER)
        return self._patch(adapter.resource, job, {"metadata": {
            "finalizers": finalizers,
            "annotations": {p.PLACEMENT: placement, p.CLUSTERS: ",".join(clusters),
                            p.PLACEMENT_GENERATION: str(p.placement_generation(meta) + 1),
                            **(extra or {})},
        }}, guarded=True, swallow=STALE)

    def unbind(self, job: Mapping[str, Any], adapter: KindAdapter,
               extra: Mapping[str, str] | None = None) -> Body | None:
        """Forget the placement (and the admission and requeue marks): pending again. Guarded:
        decided on the version read (a job bound again meanwhile stays bound)."""
        finalizers = [f for f in job["metadata"].get("finalizers") or [] if f != p.FINALIZER]
        return self._patch(adapter.resource, job, {"metadata": {
            "finalizers": finalizers, "annotations": {
                p.PLACEMENT: None, p.CLUSTERS: None, p.ADMITTED_AT: None, p.ADMITTED_BY: None,
                p.REQUEUE: None, **(extra or {})}}}, guarded=True, swallow=STALE)

    def unmark_requeue(self, job: Mapping[str, Any], adapter: KindAdapter) -> Body | None:
        """Take a requeue (and the preemption it was for) off a job that stays placed;
        guarded by the version read. None when it changed since."""
        return self._patch(adapter.resource, job, {"metadata": {"annotations": {
            p.REQUEUE: None, p.PREEMPTED_BY: None}}}, guarded=True, swallow=STALE)

    def mark_requeue(self, job: Mapping[str, Any], adapter: KindAdapter, reason: str,
                     extra: Mapping[str, str] | None = None) -> Body | None:
        """Mark a bound job to go back to its queue (:meth:`requeue_mark`); the job as
        marked, or None."""
        return self.requeue_mark(job, adapter, reason, extra)[0]

    def requeue_mark(self, job: Mapping[str, Any], adapter: KindAdapter, reason: str,
                     extra: Mapping[str, str] | None = None, tries: int = 3
                     ) -> tuple[Body | None, bool]:
        """Mark a bound job to go back to its queue; its Works are deleted next. Guarded by
        the version decided on, and again by a newer one as long as the job is still bound
        as decided (its status written meanwhile): the quota it held may already be given
        to another job, so a preemption lost to a status write would leave the tree above
        its max. The job as marked (None when it ended, was unbound or bound again since),
        and whether it still holds the quota it held when decided on (not marked: it
        changed ``tries`` times over)."""
        patch = {"metadata": {"annotations": {p.REQUEUE: reason, **(extra or {})}}}
        meta = job["metadata"]
        for _ in range(tries):
            marked = self._patch(adapter.resource, job, patch, guarded=True, swallow=STALE)
            if marked is not None:
                return marked, False
            current = self.kube.get_or_none(adapter.resource, meta["name"], meta["namespace"])
            if current is None or not still_bound_as(job, current) \
                    or adapter.is_finished(current):
                return None, False
            job = current
        return None, True

    def resize(self, job: Mapping[str, Any], adapter: KindAdapter, placement: str,
               clusters: Sequence[str], mark: str) -> Body | None:
        """Record an elastic job's new placement under the same placement generation (its
        running replicas stay); None when the job changed since it was read."""
        return self._patch(adapter.resource, job, {"metadata": {"annotations": {
            p.PLACEMENT: placement, p.CLUSTERS: ",".join(clusters), p.RESIZED: mark}}},
            guarded=True, swallow=STALE)

    def release(self, job: Mapping[str, Any], adapter: KindAdapter) -> None:
        """The job's Works are gone: let its deletion finish."""
        finalizers = [f for f in job["metadata"].get("finalizers") or [] if f != p.FINALIZER]
        self._patch(adapter.resource, job, {"metadata": {"finalizers": finalizers}},
                    guarded=True, swallow=STALE)

    def delete_job(self, job: Mapping[str, Any], adapter: KindAdapter) -> None:
        meta = job["metadata"]
        self.fence()
        try:
            self.kube.delete(adapter.resource, meta["name"], meta["namespace"], uid=meta["uid"])
        except STALE:
            pass

    def write_status(self, job: Mapping[str, Any], adapter: KindAdapter,
                     status: Mapping[str, Any]) -> Body | None:
        """Write what changed in the status as a merge patch, guarded by the job's
        resourceVersion; None on conflict, the job as it was when nothing changed. (A status
        is said again from the Works' reports: no term needed.) A patch, not a replace:
        sending the whole job back for each status was about a tenth of the hub's busy time
        at Kueue's scale."""
        changed = merge_diff(job.get("status") or {}, status)
        if not changed:
            return dict(job)
        self.fence()
        meta = job["metadata"]
        try:
            return self.kube.patch(adapter.resource, meta["name"], {
                "metadata": {"resourceVersion": meta.get("resourceVersion")},
                "status": changed}, meta["namespace"], subresource="status")
        except STALE:
            return None

    # -- Works ------------------------------------------------------------------------------
    def create_works(self, bodies: Sequence[Body]) -> list[Body]:
        """Create every Work; on failure delete those created here and re-raise."""
        created: list[Body] = []
        term = self.fence()
        try:
            for unsent in bodies:
                meta = unsent["metadata"]
                # when it was sent, for the agent's "applied" stage (fleet.hub.stages)
                body = {**unsent, "metadata": {**meta, "annotations": {
                    **(meta.get("annotations") or {}), p.DISPATCHED_AT: precise_now(),
                    p.TERM: term}}}
                try:
                    created.append(self.kube.create(r.WORKS, body))
                except (errors.Forbidden, errors.Invalid) as exc:
                    raise _refused(exc) from None
                except errors.AlreadyExists:
                    existing = self.kube.get(r.WORKS, body["metadata"]["name"],
                                             body["metadata"]["namespace"])
                    if existing["spec"]["job"]["uid"] != body["spec"]["job"]["uid"]:
                        raise
                    older = p.work_generation(existing)
                    if older != p.work_generation(body):
                        # a Work of an earlier placement still going: never adopt it (its
                        # member copy is fenced off); roll back and decide again once it is gone
                        raise errors.Conflict(409, "Conflict", "work of placement generation "
                                              f"{older} still exists") from None
        except errors.ApiError:
            for work in created:
                self.delete_work(work)
            raise
        return created

    def resize_work(self, work: Mapping[str, Any], manifest: Body, share: Mapping[str, Any],
                    now: str) -> Body | None:
        """Give a Work its share's new replica count (and the manifest rendering it)."""
        placed = work["spec"]["placement"]
        replicas = {**dict.fromkeys(placed.get("replicas") or {}), **share["replicas"]}
        offsets = {**dict.fromkeys(placed.get("offsets") or {}), **share["offsets"]}
        return self._patch(r.WORKS, work, {
            "metadata": {"annotations": {p.RESIZED_AT: now}},
            "spec": {"placement": {"replicas": replicas, "offsets": offsets,
                                   "nodes": list(share.get("nodes") or [])},
                     "manifests": [manifest, *work["spec"]["manifests"][1:]]}},
            guarded=True, swallow=STALE)

    def update_work(self, work: Mapping[str, Any], manifest: Body, generation: str) -> Body | None:
        """Replace the Work's job manifest (a spec change on the hub); None on conflict."""
        return self._patch(r.WORKS, work, {
            "metadata": {"annotations": {p.JOB_GENERATION: generation}},
            "spec": {"manifests": [manifest, *work["spec"]["manifests"][1:]]}},
            guarded=True, swallow=STALE)

    def commit_work(self, work: Mapping[str, Any]) -> Body | None:
        """Move a Work from phase Reserve to Commit (its member starts the pods); None when
        it is gone."""
        return self._patch(r.WORKS, work, {"spec": {"placement": {"phase": p.PHASE_COMMIT}}})

    def evict(self, work: Mapping[str, Any], deadline: str) -> None:
        """Detach a Work from the job's placement; it is deleted once the job runs elsewhere
        or at ``deadline`` (purge mode Graciously)."""
        self._patch(r.WORKS, work, {"metadata": {"annotations": {p.EVICT_AFTER: deadline}}})

    def set_purge_mode(self, work: Mapping[str, Any], mode: str) -> None:
        self._patch(r.WORKS, work, {"metadata": {"annotations": {p.PURGE_MODE: mode}}})

    def drop_agent_finalizer(self, work: Mapping[str, Any]) -> None:
        """For a Work on a lost member: the agent cannot release it, so the hub does."""
        if work["metadata"].get("finalizers"):
            self._patch(r.WORKS, work, {"metadata": {"finalizers": None}})

    def delete_work(self, work: Mapping[str, Any]) -> bool:
        """Delete a Work: first marked with the term (the fenced write), then deleted only
        as that mark left it, so a Work is never deleted by a leader whose term ended.
        Whether it is gone or going now."""
        marked = self._patch(r.WORKS, work, {})
        if marked is None:
            return True  # gone already
        meta = marked["metadata"]
        try:
            self.kube.delete(r.WORKS, meta["name"], meta["namespace"], uid=meta.get("uid"),
                             resource_version=meta.get("resourceVersion"))
        except errors.Conflict:
            return False  # changed since the mark: decided again on the next pass
        return True

    # -- everything else --------------------------------------------------------------------
    def publish_queue(self, queue: Mapping[str, Any],
                      known: Mapping[tuple[str, str, str], Mapping[str, Any]]) -> None:
        """Create or update one Queue: spec by apply, status only when it changed."""
        meta = queue["metadata"]
        key = (f"{queue['apiVersion']}/{queue['kind']}", meta["namespace"], meta["name"])
        current = known.get(key)
        try:
            self.fence()
            if current is None or any(current.get("spec", {}).get(k) != v
                                      for k, v in queue["spec"].items()):
                current = self.kube.apply(r.QUEUES, {k: v for k, v in queue.items()
                                                     if k != "status"},
                                          field_manager=COMPONENT)
            if (current.get("status") or {}) != queue["status"]:
                patch = merge_diff(current.get("status") or {}, queue["status"])
                self.kube.patch(r.QUEUES, meta["name"], {"status": patch}, meta["namespace"],
                                subresource="status")
        except errors.ApiError as exc:
            log.warning("queue %s not published: %s", meta["name"], exc)

    def set_cluster_condition(self, cluster: str, condition: Body) -> None:
        """Apply one condition the hub owns to a MemberCluster's status (the agent owns the
        others; conditions are a list keyed by type, so neither overwrites the other)."""
        try:
            self.fence()
            self.kube.apply(r.MEMBERCLUSTERS, {
                "apiVersion": p.API_VERSION, "kind": "MemberCluster",
                "metadata": {"name": cluster}, "status": {"conditions": [condition]}},
                field_manager=COMPONENT, subresource="status")
        except errors.ApiError as exc:
            log.warning("condition %s of %s not written: %s", condition["type"], cluster, exc)

    def dependencies(self, job: Mapping[str, Any], adapter: KindAdapter) -> list[Body]:
        """The ConfigMaps, Secrets and PVCs the job references, as members should get them;
        a missing one is reported by a Warning event and left out."""
        namespace = job["metadata"]["namespace"]
        kinds = {CONFIGMAP: r.CONFIGMAPS, SECRET: r.SECRETS, PVC: r.PVCS}
        found, missing = [], []
        for kind, name in sorted(adapter.dependencies(job)):
            body = self.kube.get_or_none(kinds[kind], name, namespace)
            if body is None:
                missing.append(f"{kind} {name}")
            else:
                found.append(dependency_manifest({**body, "apiVersion": "v1", "kind": kind}))
        if missing:
            self.event(job, "DependencyMissing", "propagateDeps: not found on the hub, not "
                       f"propagated: {', '.join(missing)}", "Warning")
        return found

    def event(self, obj: Mapping[str, Any], reason: str, message: str,
              kind: str = "Normal") -> None:
        self.events.record(obj, reason, message, type=kind)
