"""Who holds quota, as the hub's durable state says, carried from pass to pass.

A job holds quota while it is bound through a queue and not finished, nor reported succeeded
by every member (:func:`fleet.hub.queueing.holding`). Each pass reads again only the jobs that
changed (or whose Works did) and carries its :class:`~quota.ledger.QuotaLedger` forward with
the difference; a new quota tree or new PriorityClass values (a holding's priority) build it
again from every job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fleet.hub import queueing as q
from fleet.hub.cache import Body, Snapshot
from propagation.views import JobDemand
from quota.engine import Holding
from quota.ledger import QuotaLedger
from quota.tree import QuotaNode

Demand = Callable[[Mapping[str, Any]], JobDemand]


@dataclass
class QuotaHoldings:
    _held: dict[str, Holding] = field(default_factory=dict)  # by job uid
    _ledger: QuotaLedger | None = None
    _basis: tuple[object, ...] = ()  # the tree and PriorityClasses it was built for

    def ledger(self, snap: Snapshot, root: QuotaNode, classes: Mapping[str, int],
               changed: Iterable[Body], gone: Iterable[str], demand_of: Demand
               ) -> QuotaLedger:
        """The ledger after ``changed`` jobs (as they are now, with their Works) and ``gone``
        uids."""
        basis = (root, tuple(sorted(classes.items())))
        if self._ledger is None or self._basis != basis:
            self._held = {job["metadata"]["uid"]: h for job in snap.jobs.values()
                          if (h := _holding(job, snap, classes, demand_of)) is not None}
            self._ledger = QuotaLedger.of(root, self._held.values())
            self._basis = basis
            return self._ledger
        added: list[Holding] = []
        removed: list[str] = []
        for uid in gone:
            before = self._held.pop(uid, None)
            if before is not None:
                removed.append(before.job.key)
        for job in changed:
            uid = job["metadata"]["uid"]
            now = _holding(job, snap, classes, demand_of)
            before = self._held.get(uid)
            if now == before:
                continue
            if before is not None:
                removed.append(before.job.key)
                del self._held[uid]
            if now is not None:
                added.append(now)
                self._held[uid] = now
        if added or removed:
            self._ledger = self._ledger.changed(added, removed)
        return self._ledger


def _holding(job: Body, snap: Snapshot, classes: Mapping[str, int], demand_of: Demand
             ) -> Holding | None:
    try:
        return q.holding(job, classes, demand_of, snap.works_of(job["metadata"]["uid"]))
    except ValueError:  # (InvalidJob) a bound job whose spec no longer reads: holds nothing
        return None
