"""One scheduling pass: ``plan_pass(view) -> Plan``.

Pure and deterministic: the same view gives the same plan, in the same order. Nothing here
reads a clock, a cache or an API server; the hub's shell and the simulator both build a
:class:`~planner.view.PassView`, call :func:`plan_pass`, and carry out its intents.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from planner.bound import next_look, settle, settled
from planner.deciding import decide
from planner.intents import Bind, Intent, QueueReport, Wait
from planner.view import BackfillReservation, Hold, PassView
from planner.waiting import Waiting


@dataclass(frozen=True)
class Plan:
    intents: tuple[Intent, ...]  # in write order
    # Preemption state for the next pass's view (the planner keeps none itself).
    holds: Mapping[str, Hold] = field(default_factory=dict)
    retry_at: Mapping[str, float] = field(default_factory=dict)
    # Backfill: the reservation made, for the next pass's view.
    reservations: Mapping[str, BackfillReservation] = field(default_factory=dict)
    # The jobs still waiting, by class, with the classes parked: for the next pass's view.
    waiting: Waiting = field(default_factory=Waiting)
    # When to look at a placed job again though nothing about it changes (by uid): its
    # toleration, TTL or reservation deadline.
    look_at: Mapping[str, float] = field(default_factory=dict)
    # The jobs (uids) left with nothing to decide until they change (``bound.settled``).
    settled: frozenset[str] = frozenset()

    def __iter__(self) -> Iterator[Intent]:
        return iter(self.intents)

    @property
    def binds(self) -> list[Bind]:
        return [i for i in self.intents if isinstance(i, Bind)]

    @property
    def waits(self) -> list[Wait]:
        return [i for i in self.intents if isinstance(i, Wait)]

    @property
    def queues(self) -> QueueReport | None:
        return next((i for i in self.intents if isinstance(i, QueueReport)), None)


def plan_pass(view: PassView, *, singletons: bool = False) -> Plan:
    """Placed jobs first (in the view's order: Works to complete, to remove, failovers,
    expiries), then the waiting ones decided in admission order (preemptions and bindings):
    those the view carries from the last pass (``view.waiting``) with those of its jobs
    that changed, the queues' state, and why the jobs decided or new wait. With
    ``singletons``, every waiting job is decided on its own (no classes, nothing parked):
    the plan the classes are tested against."""
    intents: list[Intent] = []
    look_at: dict[str, float] = {}
    for job in view.jobs:
        intents += settle(job, view)
        when = next_look(job, view)
        if when is not None:
            look_at[job.uid] = when
    decided = decide(view.jobs, view, view.waiting, view.gone, singletons=singletons)
    return Plan(tuple(intents + decided.intents), decided.holds, decided.retry_at,
                decided.reservations, decided.waiting, look_at,
                frozenset(job.uid for job in view.jobs if settled(job)))
