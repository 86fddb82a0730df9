"""Binding a job and dispatching its Works: all of a decision's Works exist, or none do.

Order: (1) bind: one patch that records the placement and adds the dispatch finalizer, guarded
by the job's resourceVersion, so two hubs never bind one job; (2) create every Work under its
deterministic name; (3) if any creation fails, delete the ones made and unbind. A hub that dies
between (1) and (2) finds the placement on restart and completes the same Works (roll forward).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from fleet.api import protocol as p
from fleet.clients import errors, events
from fleet.clients import resources as r
from fleet.clients.kube import Body, Kube
from fleet.clients.patches import merge_diff
from fleet.kinds.base import KindAdapter
from fleet.kinds.deps import CONFIGMAP, PVC, SECRET, dependency_manifest

log = logging.getLogger(__name__)
COMPONENT = "fleet-hub"
# Named through this module by the queueing code.
ADMITTED_AT, REQUEUE = p.ADMITTED_AT, p.REQUEUE


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def precise_now() -> str:
    """The time to the microsecond, as the Work's dispatched-at annotation carries it."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Dispatcher:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.events = events.EventRecorder(kube, COMPONENT)

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
        patch = {"metadata": {
            "resourceVersion": meta["resourceVersion"],
            "finalizers": finalizers,
            "annotations": {p.PLACEMENT: placement, p.CLUSTERS: ",".join(clusters),
                            p.PLACEMENT_GENERATION: str(p.placement_generation(meta) + 1),
                            **(extra or {})},
        }}
        try:
            return self.kube.patch(adapter.resource, meta["name"], patch, meta["namespace"])
        except (errors.Conflict, errors.NotFound):
            return None

    def unbind(self, job: Mapping[str, Any], adapter: KindAdapter,
               extra: Mapping[str, str] | None = None) -> Body | None:
        """Forget the placement (and the admission and requeue marks): pending again."""
        meta = job["metadata"]
        finalizers = [f for f in meta.get("finalizers") or [] if f != p.FINALIZER]
        patch = {"metadata": {"finalizers": finalizers, "annotations": {
            p.PLACEMENT: None, p.CLUSTERS: None, p.ADMITTED_AT: None, p.ADMITTED_BY: None,
            p.REQUEUE: None,
            **(extra or {})}}}
        try:
            return self.kube.patch(adapter.resource, meta["name"], patch, meta["namespace"])
        except errors.NotFound:
            return None

    def mark_requeue(self, job: Mapping[str, Any], adapter: KindAdapter, reason: str,
                     extra: Mapping[str, str] | None = None) -> bool:
        """Mark a bound job to go back to its queue; its Works are deleted next."""
        meta = job["metadata"]
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"],
                              "annotations": {p.REQUEUE: reason, **(extra or {})}}}
        try:
            self.kube.patch(adapter.resource, meta["name"], patch, meta["namespace"])
        except (errors.Conflict, errors.NotFound):
            return False
        return True

    def resize(self, job: Mapping[str, Any], adapter: KindAdapter, placement: str,
               clusters: Sequence[str], mark: str) -> Body | None:
        """Record an elastic job's new placement under the same placement generation (its
        running replicas stay); None when the job changed since it was read."""
        meta = job["metadata"]
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"], "annotations": {
            p.PLACEMENT: placement, p.CLUSTERS: ",".join(clusters), p.RESIZED: mark}}}
        try:
            return self.kube.patch(adapter.resource, meta["name"], patch, meta["namespace"])
        except (errors.Conflict, errors.NotFound):
            return None

    def resize_work(self, work: Mapping[str, Any], manifest: Body, share: Mapping[str, Any],
                    now: str) -> Body | None:
        """Give a Work its share's new replica count (and the manifest rendering it)."""
        meta, placed = work["metadata"], work["spec"]["placement"]
        replicas = {**dict.fromkeys(placed.get("replicas") or {}), **share["replicas"]}
        offsets = {**dict.fromkeys(placed.get("offsets") or {}), **share["offsets"]}
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"],
                              "annotations": {p.RESIZED_AT: now}},
                 "spec": {"placement": {"replicas": replicas, "offsets": offsets,
                                        "nodes": list(share.get("nodes") or [])},
                          "manifests": [manifest, *work["spec"]["manifests"][1:]]}}
        try:
            return self.kube.patch(r.WORKS, meta["name"], patch, meta["namespace"])
        except (errors.NotFound, errors.Conflict):
            return None

    def publish_queue(self, queue: Mapping[str, Any],
                      known: Mapping[tuple[str, str, str], Mapping[str, Any]]) -> None:
        """Create or update one Queue: spec by apply, status only when it changed."""
        meta = queue["metadata"]
        key = (f"{queue['apiVersion']}/{queue['kind']}", meta["namespace"], meta["name"])
        current = known.get(key)
        try:
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

    def create_works(self, bodies: Sequence[Body]) -> list[Body]:
        """Create every Work; on failure delete those created here and re-raise."""
        created: list[Body] = []
        try:
            for unsent in bodies:
                meta = unsent["metadata"]
                # when it was sent, for the agent's "applied" stage (fleet.hub.stages)
                body = {**unsent, "metadata": {**meta, "annotations": {
                    **(meta.get("annotations") or {}), p.DISPATCHED_AT: precise_now()}}}
                try:
                    created.append(self.kube.create(r.WORKS, body))
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

    def evict(self, work: Mapping[str, Any], deadline: str) -> None:
        """Detach a Work from the job's placement; it is deleted once the job runs elsewhere
        or at ``deadline`` (purge mode Graciously)."""
        self._annotate_work(work, {p.EVICT_AFTER: deadline})

    def set_purge_mode(self, work: Mapping[str, Any], mode: str) -> None:
        self._annotate_work(work, {p.PURGE_MODE: mode})

    def update_work(self, work: Mapping[str, Any], manifest: Body, generation: str) -> Body | None:
        """Replace the Work's job manifest (a spec change on the hub); None on conflict."""
        meta = work["metadata"]
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"],
                              "annotations": {p.JOB_GENERATION: generation}},
                 "spec": {"manifests": [manifest, *work["spec"]["manifests"][1:]]}}
        try:
            return self.kube.patch(r.WORKS, meta["name"], patch, meta["namespace"])
        except (errors.NotFound, errors.Conflict):
            return None

    def commit_work(self, work: Mapping[str, Any]) -> Body | None:
        """Move a Work from phase Reserve to Commit (its member starts the pods); None when
        it is gone."""
        meta = work["metadata"]
        try:
            return self.kube.patch(r.WORKS, meta["name"],
                                   {"spec": {"placement": {"phase": p.PHASE_COMMIT}}},
                                   meta["namespace"])
        except errors.NotFound:
            return None

    def set_cluster_condition(self, cluster: str, condition: Body) -> None:
        """Apply one condition the hub owns to a MemberCluster's status (the agent owns the
        others; conditions are a list keyed by type, so neither overwrites the other)."""
        try:
            self.kube.apply(r.MEMBERCLUSTERS, {
                "apiVersion": p.API_VERSION, "kind": "MemberCluster",
                "metadata": {"name": cluster}, "status": {"conditions": [condition]}},
                field_manager=COMPONENT, subresource="status")
        except errors.ApiError as exc:
            log.warning("condition %s of %s not written: %s", condition["type"], cluster, exc)

    def delete_job(self, job: Mapping[str, Any], adapter: KindAdapter) -> None:
        meta = job["metadata"]
        try:
            self.kube.delete(adapter.resource, meta["name"], meta["namespace"], uid=meta["uid"])
        except (errors.NotFound, errors.Conflict):
            pass

    def drop_agent_finalizer(self, work: Mapping[str, Any]) -> None:
        """For a Work on a lost member: the agent cannot release it, so the hub does."""
        meta = work["metadata"]
        if not meta.get("finalizers"):
            return
        try:
            self.kube.patch(r.WORKS, meta["name"], {"metadata": {"finalizers": None}},
                            meta["namespace"])
        except errors.NotFound:
            pass

    def _annotate_work(self, work: Mapping[str, Any], annotations: Mapping[str, str]) -> None:
        meta = work["metadata"]
        try:
            self.kube.patch(r.WORKS, meta["name"], {"metadata": {"annotations": annotations}},
                            meta["namespace"])
        except errors.NotFound:
            pass

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

    def delete_work(self, work: Mapping[str, Any]) -> None:
        meta = work["metadata"]
        self.kube.delete(r.WORKS, meta["name"], meta["namespace"])

    def release(self, job: Mapping[str, Any], adapter: KindAdapter) -> None:
        """The job's Works are gone: let its deletion finish."""
        meta = job["metadata"]
        finalizers = [f for f in meta.get("finalizers") or [] if f != p.FINALIZER]
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"],
                              "finalizers": finalizers}}
        try:
            self.kube.patch(adapter.resource, meta["name"], patch, meta["namespace"])
        except (errors.NotFound, errors.Conflict):
            pass

    def write_status(self, job: Mapping[str, Any], adapter: KindAdapter,
                     status: Mapping[str, Any]) -> Body | None:
        """Replace the whole status, guarded by the job's resourceVersion; None on conflict."""
        try:
            return self.kube.replace(adapter.resource, {**job, "status": dict(status)},
                                     subresource="status")
        except (errors.NotFound, errors.Conflict):
            return None

    def event(self, obj: Mapping[str, Any], reason: str, message: str,
              kind: str = "Normal") -> None:
        self.events.record(obj, reason, message, type=kind)

