"""The running jobs as preemption and backfill read them, kept from pass to pass.

Preemption reads every running job as a possible victim (its pods on their nodes, the quota
it holds: :func:`fleet.hub.preemption_views.running_job`), backfill every running job whose
runtime is known (:func:`fleet.hub.backfill_views.timed_job`). Both are needed only on some
passes (a job that may preempt waits; a job that may backfill waits), and between two
passes few jobs change: each job is read again only when it or its Works changed since it
was last read (or, for victims, the PriorityClasses or the quota tree).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from fleet.hub import preemption_views as pv
from fleet.hub.backfill_views import counted, node_usage, timed_job
from fleet.hub.cache import Snapshot
from planner.view import TimedJob
from preemption.model import Running
from propagation.views import JobDemand
from quota.tree import PlacedNode

T = TypeVar("T")


@dataclass
class Kept(Generic[T]):
    """One derived view per job, read again for the jobs marked since."""

    basis: object = None  # what every entry was read under; a new one reads them all
    entries: dict[str, T] = field(default_factory=dict)  # uid -> view
    dirty: set[str] = field(default_factory=set)  # uids to read again
    fresh: bool = False  # every job read at least once
    ordered: tuple[T, ...] | None = None  # the entries sorted by key, until one changes

    def mark(self, uids: Iterable[str]) -> None:
        self.dirty.update(uids)

    def current(self, snap: Snapshot, basis: object,
                read: Callable[[Mapping[str, Any]], T | None],
                key: Callable[[T], str]) -> tuple[T, ...]:
        """Every job's entry, sorted by ``key``, those marked read again first."""
        if not self.fresh or basis != self.basis:
            self.entries = {}
            self.dirty = {job["metadata"]["uid"] for job in snap.jobs.values()}
            self.basis, self.fresh = basis, True
        if self.dirty:
            for uid in self.dirty:
                job = snap.job_of(uid)
                found = read(job) if job is not None else None
                if found is None:
                    self.entries.pop(uid, None)
                else:
                    self.entries[uid] = found
            self.dirty = set()
            self.ordered = None
        if self.ordered is None:
            self.ordered = tuple(sorted(self.entries.values(), key=key))
        return self.ordered


@dataclass
class RunningJobs:
    victims_kept: Kept[Running] = field(default_factory=Kept)
    timed_kept: Kept[TimedJob] = field(default_factory=Kept)

    def mark(self, uids: Iterable[str]) -> None:
        """These jobs (or their Works) changed since the last pass."""
        listed = list(uids)
        self.victims_kept.mark(listed)
        self.timed_kept.mark(listed)

    def victims(self, snap: Snapshot, classes: Mapping[str, int],
                leaves: Mapping[str, PlacedNode],
                demand_of: Callable[[Mapping[str, Any]], JobDemand]) -> tuple[Running, ...]:
        basis = (tuple(sorted(classes.items())), tuple(sorted(
            (ns, leaf.key) for ns, leaf in leaves.items())))
        return self.victims_kept.current(
            snap, basis, lambda job: pv.running_job(dict(job), snap, classes, leaves, demand_of),
            lambda r: r.key)

    def timed(self, snap: Snapshot) -> tuple[TimedJob, ...]:
        """Running jobs of known runtime, each with the pods its nodes still count."""
        found = self.timed_kept.current(snap, None, lambda job: timed_job(job, snap),
                                        lambda t: t.key)
        if not found:
            return ()
        usage = node_usage(snap)
        return tuple(TimedJob(t.key, t.started, t.runtime, tuple(counted(t.pods, usage)))
                     for t in found)
