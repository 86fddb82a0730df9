"""Backfill without starvation (Slurm's EASY backfill, across members).

The first job of a pass that does not fit the fleet's free capacity (in decision order: by
priority, then age) is the *head*. When its start can be computed -- the running jobs with a
known runtime (:class:`~planner.view.TimedJob`) give their capacity back at their expected
ends, and the head fits once enough of them have ended -- it gets a reservation from that
time. Every job decided after it in the pass may then start only if it cannot delay the head:

- it ends before the head could start (its runtime is known and ``now + runtime`` is no later
  than the reserved start): it *backfills*; or
- the head still fits at its reserved start with this job's capacity still taken (the job
  runs on nodes the head does not need, on another member, on another GPU model).

Otherwise the job is *kept back*. A job with no known runtime therefore never takes capacity
the head needs, and the head is never starved: nothing started after its reservation holds
the capacity it needs past its start, so it starts once the jobs it waits for have ended.
With no running job of known runtime there is no reservation, and a pass decides as it
always did (a queue's Block or Priority policy alone orders it).

The queue policies keep their meaning: Block is Kueue's StrictFIFO (nothing of the queue
passes its head, backfill included); Priority is BestEffortFIFO with a starvation bound (jobs
pass a head that does not fit until the bound, then it blocks its queue). Neither knows time;
the reservation adds it, for capacity: across queues, and through a starvation-blocked
Priority queue for jobs that end before the head could start.

Pure: times are the view's seconds; text is formatted without reading any clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.utils import formatdate

from planner.intents import Wait
from planner.view import BackfillReservation, JobView, TimedJob
from preemption.freed import with_freed
from propagation.division import divide
from propagation.jobkey import shown
from propagation.resources import GPU, Resources
from propagation.spent import with_assumed
from propagation.views import ClusterView

RESERVED = "Reserved"  # the head's Queuing reason while it holds its reservation
KEPT_BACK = "KeptBack"  # a job that would delay the reserved head
RESERVE_TRIES = 3  # jobs a pass tries to reserve for (each costs a few divisions)
# A reservation the last pass made stands while its start cannot be computed again (a job
# just bound has not reported where its pods run), until this long past its start.
REMEMBER_SECONDS = 300.0
SHOWN = 3  # blockers named in a message


def clock_text(seconds: float) -> str:
    """A time as people read it (an HTTP date, UTC): pure formatting, no clock read."""
    return formatdate(seconds, usegmt=True)


def amounts_text(total: Mapping[str, int]) -> str:
    gpus = total.get(GPU, 0)
    if gpus:
        return f"{gpus} GPU{'s' if gpus != 1 else ''}"
    return ", ".join(f"{amount} {name}" for name, amount in sorted(total.items())) or "nothing"


def when(reservation: BackfillReservation) -> str:
    return "as soon as they end (past their expected end)" if reservation.overdue \
        else clock_text(reservation.start)


def head_message(reservation: BackfillReservation, why_not_now: str) -> str:
    waits_for = reservation.waits_for
    named = ", ".join(shown(key) for key in waits_for[:SHOWN])
    more = f" and {len(waits_for) - SHOWN} more" if len(waits_for) > SHOWN else ""
    return (f"holds {amounts_text(reservation.holds)} from {when(reservation)}, when "
            f"{named}{more} will have ended; jobs behind it run first only if they end by "
            f"then (now: {why_not_now})")


def kept_back_message(reservation: BackfillReservation, runtime: float | None, now: float) -> str:
    head = (f"kept back for {shown(reservation.head)}, which holds "
            f"{amounts_text(reservation.holds)} from {when(reservation)}: ")
    if runtime is None:
        return head + ("its runtime is unknown (set runPolicy.activeDeadlineSeconds or the "
                       "fleet.sh/expected-runtime annotation to backfill)")
    return head + f"it would run until {clock_text(now + runtime)}, past then"


def ends_before(job: JobView, reservation: BackfillReservation, now: float) -> bool:
    """Whether ``job`` surely ends before the head could start (it may backfill)."""
    return job.runtime is not None and now + job.runtime <= reservation.start


def reserve(job: JobView, fleet: Sequence[ClusterView], timed: Sequence[TimedJob],
            now: float) -> tuple[BackfillReservation, list[ClusterView]] | None:
    """The earliest time ``job`` fits once running jobs of known runtime end, and the fleet
    as it will be then (capacity taken now stays taken); None when it would not fit even
    with all of them ended (its start is unknown, or never)."""
    assert job.demand is not None
    assert job.policy is not None
    demand, rules = job.demand, job.policy.rules
    names = {c.name for c in fleet}
    ordered = sorted((t for t in timed if any(p.cluster in names for p in t.pods)),
                     key=lambda t: (t.ends, t.key))
    if not ordered:
        return None

    def freed(upto: int) -> list[ClusterView]:
        return with_freed(fleet, (p for t in ordered[:upto + 1] for p in t.pods))

    def fits(upto: int) -> bool:
        return divide(demand, freed(upto), rules).placed

    if not fits(len(ordered) - 1):
        return None
    low, high = 0, len(ordered) - 1  # the first prefix it fits (more freed never hurts)
    while low < high:
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle + 1
    while low + 1 < len(ordered) and ordered[low + 1].ends == ordered[low].ends:
        low += 1  # jobs ending at the same moment are freed together
    start = ordered[low].ends
    return (BackfillReservation(job.key, max(start, now), demand.total,
                        tuple(t.key for t in ordered[:low + 1]), overdue=start <= now),
            freed(low))


@dataclass
class Backfill:
    """The pass's reservation and the fleet as the head will find it at its start; each job
    started after the head is checked against it, and what it keeps past then taken out.
    Without that fleet (a remembered reservation) only jobs that end first pass."""

    reservation: BackfillReservation
    head: JobView
    at_start: dict[str, ClusterView] | None

    @classmethod
    def start(cls, head: JobView, fleet: Sequence[ClusterView], timed: Sequence[TimedJob],
              now: float, remembered: Mapping[str, BackfillReservation]) -> Backfill | None:
        found = reserve(head, fleet, timed, now) if timed else None
        if found is not None:
            reservation, at_start = found
            return cls(reservation, head, {c.name: c for c in at_start})
        last = remembered.get(head.uid)
        if last is not None and last.head == head.key and now < last.start + REMEMBER_SECONDS:
            return cls(last, head, None)
        return None

    def head_wait(self, why: Wait) -> Wait:
        return Wait(why.job, RESERVED, head_message(self.reservation, why.message),
                    why.queue, why.position)

    def admits(self, job: JobView, spent: Sequence[tuple[str, Sequence[Resources]]],
               now: float) -> tuple[bool, str]:
        """May ``job``, which fits now spending ``spent`` (per cluster), start? And the
        backfill note for its bind ("" when it does not pass the head)."""
        if ends_before(job, self.reservation, now):
            return True, (f"backfilled: ends by {clock_text(now + (job.runtime or 0))}, before "
                          f"{shown(self.reservation.head)} could start "
                          f"({when(self.reservation)})")
        if self.at_start is None:
            return False, kept_back_message(self.reservation, job.runtime, now)
        after = dict(self.at_start)
        for cluster, requests in spent:
            if cluster in after:
                after[cluster] = with_assumed(after[cluster], list(requests))
        assert self.head.demand is not None
        assert self.head.policy is not None
        if not divide(self.head.demand, list(after.values()), self.head.policy.rules).placed:
            return False, kept_back_message(self.reservation, job.runtime, now)
        self.at_start = after  # it runs past the head's start, on capacity the head leaves
        return True, ""
