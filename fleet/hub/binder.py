"""A bind carried out: the placement recorded on the job, every Work of it created (or the
bind rolled back), then told: the seed's event, and the job's status if it said it waits.
Written in the background, the next pass not waiting for it (see :class:`Writer`)."""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleet import jobkeys, metrics
from fleet.api import protocol as p
from fleet.clients.leases import NotLeading
from fleet.hub import elastic as el
from fleet.hub import queueing as q
from fleet.hub import stages
from fleet.hub import works as w
from fleet.hub.cache import Body, Cache, Snapshot
from fleet.hub.dispatch import Dispatcher, now_text
from fleet.hub.pass_view import leaf_queue_names
from fleet.hub.telling import Telling
from fleet.hub.views import parse_time
from fleet.kinds import adapter_for
from fleet.kinds.base import KindAdapter
from planner.intents import Bind, Dispatch

log = logging.getLogger(__name__)


@dataclass
class Binder:
    cache: Cache
    dispatcher: Dispatcher
    telling: Telling

    def bind(self, bind: Bind, job: Body, snap: Snapshot) -> None:
        """Bind, create every Work (or roll back), then tell: events and status."""
        meta = job["metadata"]
        adapter = adapter_for(job["apiVersion"], job["kind"])
        failed_over = parse_time((meta.get("annotations") or {}).get(w.FAILOVER_SINCE))
        bound = self.dispatcher.bind(job, adapter, w.encode_placement(bind.shares),
                                     list(bind.clusters), marks(bind))
        if bound is None:
            return  # changed under us; the next pass sees the new version
        self.cache.upsert("jobs", bound)
        if failed_over is not None:
            metrics.FAILOVER_SECONDS.observe(time.time() - failed_over.timestamp())
        bound_at = time.time()
        try:
            shares = w.placement_dicts(bind.shares)
            deps = self.dependencies(bound, adapter, snap, bind.propagate_deps, shares)
            phase = p.PHASE_RESERVE if bind.reserve else ""
            created = self.dispatcher.create_works(
                [w.work_body(bound, adapter, share, shares, deps, phase, bind.member_trainer)
                 for share in shares])
        except NotLeading:
            raise  # the next leader finds the placement and completes it (roll forward)
        except Exception:
            metrics.DISPATCH_ERRORS.inc()
            log.exception("dispatch of %s failed; rolled back", bind.job)
            self.dispatcher.unbind(bound, adapter)
            return
        for work in created:
            self.cache.upsert("works", work)
        if failed_over is None:  # a failover is timed by fleet_failover_seconds
            tree = q.active_tree(snap)
            names = leaf_queue_names(tree[1]) if tree else {}
            stages.CLOCK.dispatched(meta, bind.admitted_at or None, bound_at, time.time(),
                                    names.get(bind.admitted_by, ""))
        self.tell(bind, bound)
        log.info("bound %s/%s: %s", meta["namespace"], meta["name"], bind.reason)

    def tell(self, bind: Bind, bound: Body) -> None:
        """The seed's event (the others only when the bind did more than bind). The job's
        status is its members' first report, a moment later (fleet.hub.status_mirror): one
        write less on the path every job takes."""
        if bind.admitted_by:  # (said by the job's Admitted condition: no event of its own)
            metrics.ADMISSIONS.inc()
        if bind.sized:
            self.dispatcher.event(bound, "Resized", bind.sized)
        self.dispatcher.event(bound, "ScheduleBindingSucceed", bind.reason)
        if bind.backfill:
            metrics.DECISIONS.labels("backfilled").inc()
            self.dispatcher.event(bound, "Backfilled", bind.backfill)
        if bind.reserve:
            metrics.RESERVATIONS.labels("reserving").inc()
            self.dispatcher.event(bound, p.RESERVING, "reserving the nodes of every share "
                                  "before any pod starts: " + ", ".join(bind.clusters))

    def dependencies(self, job: Body, adapter: KindAdapter, snap: Snapshot,
                     propagate_deps: bool, placement: Sequence[Mapping[str, Any]]
                     ) -> list[Body]:
        """What the job's Works carry after it: the PriorityClasses it names, always (a
        member without them refuses its pods), a split gang's keys, then with propagateDeps
        what it references."""
        classes = q.priority_class_manifests(job, snap)
        keys = split_keys(job, adapter, snap, placement)
        if not propagate_deps:
            return [*classes, *keys]
        return [*classes, *keys, *self.dispatcher.dependencies(job, adapter)]

    def complete_dispatch(self, intent: Dispatch, job: Body, adapter: KindAdapter,
                          snap: Snapshot) -> None:
        """Roll forward: the Works of a recorded placement that are missing."""
        placement = w.decode_placement(job)
        log.info("completing dispatch of %s to %s", intent.job, list(intent.clusters))
        deps = self.dependencies(job, adapter, snap, intent.propagate_deps, placement)
        phase = w.dispatch_phase(job, snap.works_of(job["metadata"]["uid"]))
        for work in self.dispatcher.create_works(
                [w.work_body(job, adapter, s, placement, deps, phase, intent.member_trainer)
                 for s in placement if s["cluster"] in intent.clusters]):
            self.cache.upsert("works", work)


def split_keys(job: Body, adapter: KindAdapter, snap: Snapshot,
               placement: Sequence[Mapping[str, Any]]) -> list[Body]:
    """The Secrets of the keys a gang split over members trusts itself by (an MPI TrainJob's
    SSH key, a flux one's CURVE certificate), so that every member gets the same: those an
    earlier Work of the job carries (a roll forward, a move), else new ones. A gang on one
    member gets its keys from its agent instead."""
    if len(placement) < 2 or any(share.get("copy") for share in placement):
        return []
    wanted = adapter.generated_secrets(job)
    if not wanted:
        return []
    meta = job["metadata"]
    carried = {m["metadata"]["name"]: m for work in snap.works_of(meta["uid"])
               for m in work["spec"]["manifests"][1:] if m.get("kind") == "Secret"}
    return [copy.deepcopy(carried[name]) if name in carried  # (the cache's: a plain copy)
            else jobkeys.secret(kind, name, meta["namespace"], meta["name"])
            for name, kind in wanted]


def marks(bind: Bind) -> dict[str, str | None]:
    """What a bind writes on the job beside its placement (None: taken off)."""
    return {
        q.ADMITTED_AT: bind.admitted_at or None,
        p.ADMITTED_BY: bind.admitted_by or None,
        p.PURGE_MODE: bind.purge_mode or None,
        w.FAILOVER_SINCE: None,
        w.FAILOVER_AVOID: None,
        w.PREEMPTED_BY: None,
        p.REQUEUED_AT: None,
        w.RESIZED: el.resized_mark("Sized", bind.sized, now_text()) if bind.sized else None,
        p.RESERVED_PLACEMENT: "true" if bind.reserve else None,
        p.RESERVE_RETRY_AT: None,
        p.TENANT: bind.tenant or None,
    }
