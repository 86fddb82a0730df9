"""The waiting jobs, carried from one pass to the next in classes of equals.

Jobs that fit or do not fit alike form one *class* (:func:`class_of`): the same quota leaf
and request, priority, demand (roles, requests, node requirements, topology), governing
policy, members to avoid, runtime and elastic range. Within a pass what is free only
shrinks as jobs are bound (and quota only fills, but for a reclaim, which the pass
accounts for), so once a class's first waiting job does not fit, none behind it can
either: a pass decides each class's jobs in order and stops at its first that waits; the
ones behind it wait with its reason (Kueue's scheduling equivalence hashing does the same).

A class whose head did not fit for want of capacity is *parked*: later passes do not look
at it until something that could let it fit happens (:mod:`planner.waking`: capacity freed
on a member it may use, a member ready or new, its own time), as kube-scheduler parks an
unschedulable pod until a cluster event its queueing hints say may make it schedulable,
and Kueue requeues inadmissible workloads when their cohort frees quota. A job that waits
for quota is not parked: its check costs microseconds, not a division over every member.
Each parked class is looked at again at least every :data:`LOOK_AGAIN_SECONDS` whatever
happened (kube-scheduler flushes its unschedulable pods likewise).

A parked class keeps its place in its queue: its head still blocks a Block queue, and
still counts towards its Priority queue's starvation bound, at its place in the order.

The structure is frozen: a pass returns the next :class:`Waiting` in its plan and the next
view brings it back, as the hub's shell and the simulator carry it.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import overload

from planner.intents import Wait
from planner.view import JobView, Stage
from propagation.views import ClusterView
from quota.ledger import Job

ClassKey = tuple[object, ...]
LOOK_AGAIN_SECONDS = 60.0


def class_of(job: JobView) -> ClassKey:
    """Everything a waiting job's fit depends on but its name and age. A job that holds
    capacity freed for it, or whose reservation was rolled back, is a class of its own."""
    demand, quota = job.demand, job.quota
    return (
        job.invalid, job.policy,
        (demand.roles, demand.topology) if demand is not None else None,
        (quota.namespace, tuple(sorted(quota.request.items())), quota.waiting_since)
        if quota is not None else None,
        job.priority, bool(job.preempted_by), job.avoid, job.failed_over_at, job.runtime,
        job.elastic,
        job.uid if job.reserve_retry_at is not None else None,
    )


def _order(job: JobView) -> tuple[int, str, str]:
    return job.order


class QuotaOf(Sequence[Job]):
    """A class's waiting jobs as the quota engine reads them (each one's quota request), in
    the class's order, read through rather than copied: a pass hands the engine every class
    at the cost of the classes, not of the jobs. Every job of a class has a quota or none."""

    __slots__ = ("_jobs",)

    def __init__(self, jobs: Sequence[JobView]) -> None:
        self._jobs = jobs

    def __len__(self) -> int:
        return len(self._jobs)

    @overload
    def __getitem__(self, index: int) -> Job: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Job]: ...

    def __getitem__(self, index: int | slice) -> Job | Sequence[Job]:
        if isinstance(index, slice):
            return QuotaOf(self._jobs[index])
        quota = self._jobs[index].quota
        assert quota is not None
        return quota


@dataclass(frozen=True)
class Parked:
    """A class whose head did not fit: why, and what may let it fit."""

    head: str  # the head's uid when it was parked
    wait: Wait
    members: frozenset[str]  # capacity freed on one of these wakes it
    since: float  # when it was parked (it is looked at again LOOK_AGAIN_SECONDS later)
    at: float | None = None  # and at this time (a preemption to plan again, a back-off)

    def wakes(self, now: float, freed: frozenset[str]) -> bool:
        return bool(self.members & freed) or now >= self.since + LOOK_AGAIN_SECONDS or (
            self.at is not None and now >= self.at)


@dataclass(frozen=True)
class Waiting:
    """The waiting jobs by class, each class in decision order; the parked classes; and the
    members' capacity as the pass that made it left them (what frees is told from it)."""

    classes: Mapping[ClassKey, tuple[JobView, ...]] = field(default_factory=dict)
    of: Mapping[str, ClassKey] = field(default_factory=dict)  # uid -> its class
    parked: Mapping[ClassKey, Parked] = field(default_factory=dict)
    capacity: Mapping[str, ClusterView] | None = None  # None: nothing seen yet
    said: Mapping[ClassKey, Wait] = field(default_factory=dict)  # why each class last waited

    def __len__(self) -> int:
        return len(self.of)

    def jobs(self) -> Iterable[JobView]:
        for jobs in self.classes.values():
            yield from jobs

    def job(self, uid: str) -> JobView | None:
        """The waiting job ``uid`` (None when it does not wait)."""
        key = self.of.get(uid)
        return next((j for j in self.classes.get(key, ()) if j.uid == uid), None) \
            if key is not None else None

    def changed(self, jobs: Iterable[JobView], gone: Iterable[str] = (), *,
                singletons: bool = False) -> Waiting:
        """With ``jobs`` as they are now (those no longer waiting leave) and ``gone`` (uids
        of jobs deleted) left out. A parked class stays parked while its head is the same
        job: jobs that join it behind the head cannot fit either. With ``singletons``, each
        job is a class of its own."""
        of = dict(self.of)
        leaving: dict[ClassKey, set[str]] = {}  # per class, the uids that leave it
        joining: dict[ClassKey, dict[str, JobView]] = {}  # per class, the jobs that join it

        def leave(uid: str) -> None:
            key = of.pop(uid, None)
            if key is not None:
                leaving.setdefault(key, set()).add(uid)
                joining.get(key, {}).pop(uid, None)

        for uid in gone:
            leave(uid)
        for job in jobs:
            leave(job.uid)
            if job.stage is not Stage.WAITING:
                continue
            key = ("job", job.uid) if singletons else class_of(job)
            of[job.uid] = key
            joining.setdefault(key, {})[job.uid] = job
        # Each class changed once, whatever number of its jobs changed: a change that wakes
        # ten thousand jobs of one class is a filter and a merge, not ten thousand searches.
        classes = dict(self.classes)
        for key in leaving.keys() | joining.keys():
            out = leaving.get(key, set())
            stay = [j for j in classes.get(key, ()) if j.uid not in out] if out \
                else list(classes.get(key, ()))
            new = sorted(joining.get(key, {}).values(), key=_order)
            classes[key] = tuple(heapq.merge(stay, new, key=_order)) if new else tuple(stay)
        kept = {k: tuple(v) for k, v in classes.items() if v}
        parked = {k: p for k, p in self.parked.items()
                  if k in kept and kept[k][0].uid == p.head}
        return Waiting(kept, of, parked, self.capacity,
                       {k: w for k, w in self.said.items() if k in kept})

    def positions(self, jobs: Iterable[JobView], leaf_of: Mapping[str, str]
                  ) -> dict[str, int]:
        """Each of ``jobs``' place among the waiting jobs of its quota leaf (``leaf_of``: a
        namespace's leaf), 1 for the first, by uid; its leaf's classes gathered
        once for all of them: a change that tells ten thousand jobs a new reason asks for
        ten thousand places."""
        orders: dict[str | None, list[list[tuple[int, str, str]]]] = {}
        out: dict[str, int] = {}
        for job in jobs:
            leaf = leaf_of.get(job.namespace)
            if leaf not in orders:
                orders[leaf] = [[j.order for j in members]
                                for members in self.classes.values()
                                if members and members[0].quota is not None
                                and leaf_of.get(members[0].namespace) == leaf]
            out[job.uid] = 1 + sum(bisect.bisect_left(order, job.order)
                                   for order in orders[leaf])
        return out

    def by_leaf(self, leaf_of: Mapping[str, str], first: int
                ) -> dict[str, tuple[int, list[JobView]]]:
        """Per quota leaf: how many jobs wait in it, and its ``first`` ones in order (a queue
        report's), merged from its classes without sorting them all."""
        classes: dict[str, list[tuple[JobView, ...]]] = {}
        for members in self.classes.values():
            if members and members[0].quota is not None:
                leaf = leaf_of.get(members[0].namespace)
                if leaf is not None:
                    classes.setdefault(leaf, []).append(members)
        return {leaf: (sum(map(len, queued)),
                       list(itertools.islice(heapq.merge(*queued, key=_order), first)))
                for leaf, queued in classes.items()}


def heads(waiting: Waiting) -> list[tuple[tuple[int, str, str], ClassKey]]:
    """Each class's first job's order, with the class: a pass takes them in this order."""
    return sorted((jobs[0].order, key) for key, jobs in waiting.classes.items() if jobs)


def after(jobs: Sequence[JobView], job: JobView) -> JobView | None:
    """The job behind ``job`` in its class."""
    at = bisect.bisect_right(jobs, job.order, key=_order)
    return jobs[at] if at < len(jobs) else None


def at(jobs: Sequence[JobView], order: tuple[int, str, str]) -> JobView:
    """The job of ``order`` in its class."""
    return jobs[bisect.bisect_left(jobs, order, key=_order)]
