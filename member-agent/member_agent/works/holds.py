"""Reservation mode's placeholders on the member: while a Work reserves (phase Reserve) its
placeholder pods hold the nodes its share was packed onto; once committed, each real pod takes
its slot's node, the placeholder deleted first; no placeholder outlives its Work.

What to create and delete is decided by :func:`member_agent.controllers.placeholders.plan`
(pure); this part carries it out and keeps each Work's verdict for its status.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from fleet.api import protocol
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube
from member_agent.controllers import placeholders as ph
from member_agent.controllers.runtime import KINDS
from member_agent.state import MemberState
from member_agent.works.book import WorkBook, job_key

log = logging.getLogger(__name__)
Body = dict[str, Any]


class ReservationHolds:
    def __init__(self, member: Kube, namespace: str, state: MemberState, book: WorkBook, *,
                 image: str = ph.DEFAULT_IMAGE) -> None:
        self.member, self.namespace, self.state, self.book = member, namespace, state, book
        self.image = image
        self._verdicts: dict[str, ph.Verdict] = {}
        self._lock = threading.Lock()

    def verdict(self, name: str) -> ph.Verdict | None:
        with self._lock:
            return self._verdicts.get(name)

    def forget(self, name: str) -> None:
        with self._lock:
            self._verdicts.pop(name, None)

    def refresh(self, work: Body, applied: Body | None = None) -> ph.Verdict | None:
        """Carry out what the Work's reservation needs now and keep its verdict (None: the
        Work has no reservation). An API error keeps the last verdict: the next round tries
        again. ``applied``: the member copy as just applied (the cache may lag)."""
        name = work["metadata"]["name"]
        try:
            verdict = self.hold(work, applied)
        except errors.ApiError as exc:
            log.warning("placeholders of work %s not updated yet: %s", name, exc)
            return self.verdict(name)
        with self._lock:
            if verdict is None:
                self._verdicts.pop(name, None)
            else:
                self._verdicts[name] = verdict
        return verdict

    def hold(self, work: Body, applied: Body | None = None) -> ph.Verdict | None:
        """Create or delete the Work's placeholders as its phase asks; its verdict."""
        if not protocol.work_phase(work):
            return None
        name = work["metadata"]["name"]
        key = job_key(work)
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
        decided = ph.plan(work, held, real, owner, self.image)
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
            self.delete(key.namespace, gone)
        return verdict

    def take_slot(self, job: Mapping[str, Any], slot: ph.Slot) -> str | None:
        """For the job controller creating the real pod of ``slot``: the node the slot's
        placeholder holds (None when none does), the placeholder deleted first."""
        meta = job["metadata"]
        uid = (meta.get("labels") or {}).get(protocol.JOB_UID)
        namespace, name = protocol.copy_work(meta)
        work = self.book.get(name) if namespace == self.namespace else None
        if not uid or work is None or protocol.work_phase(work) != protocol.PHASE_COMMIT:
            return None  # not a reservation's job: nothing to look for
        pinned = ph.pinned_node(self._placeholders(meta["namespace"], str(uid)), slot)
        if pinned is None:
            return None
        node, placeholder = pinned
        self.delete(meta["namespace"], placeholder)
        return node

    def sweep(self, works: Callable[[], Mapping[str, str]], synced: bool) -> None:
        """No placeholder outlives its Work: those whose Work (by name -> job uid, as the hub
        says) is gone go; before the Works are listed an absent Work means nothing."""
        if not synced:
            return
        _, pods = self.state.snapshot()
        for namespace, name, why in ph.orphans(pods, self.namespace, works()):
            log.info("removing placeholder %s/%s: %s", namespace, name, why)
            self.delete(namespace, name)

    def delete(self, namespace: str, name: str) -> None:
        try:
            self.member.delete(r.PODS, name, namespace, grace_period_seconds=0)
        except errors.ApiError as exc:  # the next sweep or report tries again
            log.warning("placeholder %s/%s not deleted yet: %s", namespace, name, exc)

    def _placeholders(self, namespace: str, job_uid: str) -> list[Body]:
        _, pods = self.state.snapshot()
        return [pod for pod in pods if pod["metadata"]["namespace"] == namespace
                and ph.is_placeholder(pod)
                and (pod["metadata"].get("labels") or {}).get(protocol.JOB_UID) == job_uid]
