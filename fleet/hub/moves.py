"""What happens to placed jobs, carried out: reservations committed or rolled back, jobs
preempted (for quota or priority), resized, failed over, their Works removed, unbound
once those are gone, released when deleted, expired past their TTL."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from fleet import metrics
from fleet.api import protocol as p
from fleet.hub import elastic as el
from fleet.hub import preemption_views as pv
from fleet.hub import reservations
from fleet.hub import works as w
from fleet.hub.binder import Binder
from fleet.hub.cache import Body, Cache, Snapshot
from fleet.hub.dispatch import Dispatcher, now_text
from fleet.hub.hub_writes import HubWrite, WriteStatus
from fleet.hub.status_mirror import resized_shares, status_writes
from fleet.hub.telling import Telling
from fleet.kinds import adapter_for
from fleet.kinds.base import KindAdapter
from planner.intents import (
    Commit,
    Completed,
    Dispatch,
    FailOver,
    Grow,
    Preempt,
    RemoveWorks,
    Requeue,
    Resize,
    RollBack,
    Shrink,
    Unbind,
)
from propagation.jobkey import JobKey

log = logging.getLogger(__name__)
ROLLED_BACK = "reservation rolled back"  # how a rolled-back job's requeue reason starts


@dataclass
class Moves:
    cache: Cache
    dispatcher: Dispatcher
    telling: Telling
    binder: Binder
    carry_out: Callable[[Sequence[HubWrite]], None]  # the writer's, for a resize's Works

    # -- reservations: the second phase --------------------------------------------------
    def commit(self, intent: Commit, job: Body, works: Mapping[str, Body]) -> None:
        """Every member holds its share: its Works move to phase Commit (the pods start)."""
        for name in intent.works:
            if name in works:
                committed = self.dispatcher.commit_work(works[name])
                if committed is not None:
                    self.cache.upsert("works", committed)
        metrics.RESERVATIONS.labels("committed").inc()
        self.dispatcher.event(job, "Committed", intent.reason)
        log.info("committed %s: %s", intent.job, intent.reason)

    def roll_back(self, intent: RollBack, job: Body, adapter: KindAdapter) -> None:
        """A member refused or did not confirm: the job goes back to waiting (its Works and
        their placeholders go), to be placed again after ``intent.retry_at``."""
        reason = f"{ROLLED_BACK}: {intent.reason}"
        if not self.dispatcher.mark_requeue(job, adapter, reason,
                                            {p.RESERVE_RETRY_AT: f"{intent.retry_at:.3f}"}):
            return
        metrics.RESERVATIONS.labels("rolled_back").inc()
        self.dispatcher.event(job, "RolledBack", intent.reason, "Warning")
        log.info("rolled back %s: %s", intent.job, intent.reason)

    # -- preemption -------------------------------------------------------------------------
    def preempt(self, intent: Requeue, victim: Body, adapter: KindAdapter,
                claimant: Body | None) -> bool:
        """A quota reclaim: the victim goes back to its queue (in the cache at once: the
        passes count its quota as given back from now on). Whether its quota is given back:
        marked, or ended (or unbound) since it was decided on."""
        marked, holding = self.dispatcher.requeue_mark(victim, adapter, intent.reason)
        if marked is None:
            return not holding
        self.cache.upsert("jobs", marked)
        metrics.PREEMPTIONS.labels("reclaim").inc()
        self.dispatcher.event(victim, "Preempted", intent.reason, "Warning")
        if claimant is not None:
            self.dispatcher.event(claimant, "Reclaimed",
                                  f"preempted {JobKey(intent.job).display} to reclaim quota")
        log.info("preempted %s for %s", intent.job, intent.claimant)
        return True

    def preempt_for(self, intent: Preempt, preemptor: Body,
                    job: Callable[[str], Body | None]) -> None:
        """Priority preemption (or a guarantee taking nodes back): each victim goes back to
        its queue, marked preempted by ``intent.job`` (cleared when it is bound again)."""
        for key, reason in intent.victims:
            victim = job(key)
            if victim is None:
                continue
            adapter = adapter_for(victim["apiVersion"], victim["kind"])
            if self.dispatcher.mark_requeue(victim, adapter, reason,
                                            {w.PREEMPTED_BY: intent.job}):
                metrics.PREEMPTIONS.labels(intent.kind).inc()
                self.dispatcher.event(victim, "Preempted", reason, "Warning")
                log.info("preempted %s for %s", key, intent.job)
        self.dispatcher.event(preemptor, "Preempting", intent.reason)

    def resize(self, intent: Resize, job: Body, adapter: KindAdapter, snap: Snapshot) -> None:
        """An elastic job grown or shrunk in place: its placement (same generation), then
        the Works of the clusters whose share changed; an event and its Resized condition
        say so; a member it grows onto gets its Work now. A Work not rewritten (or created)
        now is by the status mirror (``resized_shares``), or the next pass (``Dispatch``)."""
        grown = intent.grown
        now = now_text()
        resized = self.dispatcher.resize(
            job, adapter, w.encode_placement(intent.shares), [s.cluster for s in intent.shares],
            el.resized_mark("Grown" if grown else "Shrunk", intent.reason, now))
        if resized is None:
            return  # changed under us; the next pass decides again
        self.cache.upsert("jobs", resized)
        works = [wk for wk in snap.works_of(job["metadata"]["uid"])
                 if wk["spec"]["placement"]["cluster"] in intent.changed]
        self.carry_out(resized_shares(resized, adapter, w.placement_dicts(intent.shares),
                                      works, now))
        have = {wk["spec"]["placement"]["cluster"] for wk in works}
        new = tuple(c for c in intent.changed if c not in have)
        if isinstance(intent, Grow) and new:  # grown onto a member it did not use
            self.binder.complete_dispatch(Dispatch(intent.job, new, intent.propagate_deps),
                                          resized, adapter, snap)
        metrics.RESIZES.labels("grow" if grown else "shrink").inc()
        self.dispatcher.event(resized, "Resized", intent.reason)
        if isinstance(intent, Shrink):
            metrics.PREEMPTIONS.labels("shrink").inc()
        log.info("resized %s: %s", intent.job, intent.reason)

    # -- moving and removing ----------------------------------------------------------------
    def fail_over(self, intent: FailOver, job: Body, adapter: KindAdapter,
                  works: Mapping[str, Body]) -> None:
        metrics.FAILOVERS.labels("cluster_lost" if intent.lost_clusters
                                 else "unschedulable").inc()
        started = datetime.fromtimestamp(intent.since, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        self.dispatcher.event(job, "FailedOver", intent.reason, "Warning")
        marks = {w.FAILOVER_SINCE: started, w.FAILOVER_AVOID: ",".join(intent.avoid)}
        log.info("failing over %s: %s", intent.job, intent.reason)
        mine = [works[name] for name in intent.works if name in works]
        if intent.evict_after is not None:  # Graciously
            deadline = datetime.fromtimestamp(intent.evict_after, UTC).strftime(
                "%Y-%m-%dT%H:%M:%SZ")
            for work in mine:
                self.dispatcher.evict(work, deadline)
            unbound = self.dispatcher.unbind(job, adapter, marks)
            if unbound is not None:
                self.cache.upsert("jobs", unbound)
            return
        for work in mine:
            self.dispatcher.set_purge_mode(work, intent.purge_mode)
        self.dispatcher.mark_requeue(job, adapter, f"failed over: {intent.reason}", marks)

    def remove_works(self, intent: RemoveWorks, works: Mapping[str, Body], job: Body,
                     adapter: KindAdapter) -> None:
        """Purge-mode overrides first, then each Work: a lost member's agent cannot release
        it, so the hub drops its finalizer; then it is deleted unless already going. With
        ``release``, the deleted job's finalizer goes once every Work is going."""
        found = [(r, works[r.work]) for r in intent.works if r.work in works]
        for removal, work in found:
            if removal.purge_now:
                self.dispatcher.set_purge_mode(work, "Immediately")
        going = True
        for removal, work in found:
            if removal.drop_agent_finalizer:
                self.dispatcher.drop_agent_finalizer(work)
            if removal.delete:
                going = self.dispatcher.delete_work(work) and going
        if intent.release and going:
            self.dispatcher.release(job, adapter)

    def completed(self, intent: Completed, job: Body, adapter: KindAdapter,
                  works: Mapping[str, Body]) -> None:
        """A requeued job its members reported succeeded: their word becomes its status
        first (from then on it is finished, and never placed again whatever happens
        next), then its requeue mark comes off; the next pass retries what did not land."""
        if not adapter.is_finished(job):
            said = status_writes(job, adapter, list(works.values()), now_text(),
                                 datetime.now(UTC))
            self.carry_out([write for write in said or [] if isinstance(write, WriteStatus)])
            job = self.cache.snapshot_job(Cache.key(job)) or job
            if not adapter.is_finished(job):
                return
        unmarked = self.dispatcher.unmark_requeue(job, adapter)
        if unmarked is None:
            return
        self.cache.upsert("jobs", unmarked)
        self.dispatcher.event(unmarked, "Completed", intent.reason)
        log.info("completed %s: %s", intent.job, intent.reason)

    def unbind(self, intent: Unbind, job: Body, adapter: KindAdapter) -> None:
        """A requeued job whose Works are gone waits in its queue again. One that ran (not
        a reservation rolled back before it could) starts its queue's starvation count
        again."""
        rolled_back = intent.reason.startswith(ROLLED_BACK)
        again = {} if rolled_back else {p.REQUEUED_AT: now_text()}
        unbound = self.dispatcher.unbind(job, adapter, again)
        if unbound is None:
            return
        self.cache.upsert("jobs", unbound)
        preempted = w.PREEMPTED_BY in (job["metadata"].get("annotations") or {})
        waits = "Preempted" if preempted else "Requeued"
        status = pv.with_preempted(
            adapter.waiting_status(None, waits, intent.reason, now_text()), unbound, now_text())
        if rolled_back:
            status = reservations.with_condition(status, reservations.rolled_back(
                intent.reason, now_text(), job.get("status")))
        self.telling.write_status(unbound, adapter, status, "requeued")
        self.telling.waiting_event(unbound, adapter, waits, intent.reason)
