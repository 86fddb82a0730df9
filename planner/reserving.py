"""Reservation mode's second phase: commit a placement only when every member holds its share.

A bind on members in reservation mode creates its Works in phase Reserve; each member's agent
holds its share's nodes with placeholder pods and reports whether it could (the Work's
``Reserved`` condition; ``fleet.api.protocol`` has the protocol). This module decides, for one
bound job, from its Works' reports and the view's time:

- every Work of the placement Reserved -> ``Commit`` them all (the pods start, whole);
- one Work Refused, or its member lost -> ``RollBack``: the job is requeued, so every Work and
  every placeholder goes, and it is placed again after a back-off;
- the deadline (``reserve_seconds`` after the first Work was created) passed with a member
  still not confirmed -> ``RollBack`` naming that member;
- otherwise nothing yet.

So a split gang starts whole or not at all even while local workloads race for its nodes.
"""

from __future__ import annotations

from planner.intents import Commit, Intent, RollBack
from planner.view import JobView, PassView

# The protocol's words (fleet.api.protocol, which the planner may not import; a unit test
# keeps them equal).
PHASE_RESERVE = "Reserve"
RESERVED, REFUSED = "Reserved", "Refused"


def reserving(job: JobView) -> bool:
    """Whether some Work of the job's placement waits in phase Reserve."""
    return any(w.phase == PHASE_RESERVE and not w.deleting for w in job.works)


def settle_reservation(job: JobView, view: PassView) -> list[Intent]:
    """Commit, roll back, or wait: for a bound job whose Works are in phase Reserve."""
    if not reserving(job) or job.finished:
        return []
    works = sorted(job.works, key=lambda w: w.cluster)
    retry_at = view.now + view.reserve_backoff_seconds
    for work in works:
        if work.reservation == REFUSED:
            return [RollBack(job.key, work.cluster, f"{work.cluster} refused the reservation: "
                             f"{work.reservation_message or 'no reason given'}", retry_at)]
        member = view.clusters.get(work.cluster)
        if member is None or not member.ready:
            why = member.not_ready_reason if member is not None else "cluster removed"
            return [RollBack(job.key, work.cluster, f"{work.cluster} lost while reserving "
                             f"({why})", retry_at)]
    have = {w.cluster for w in works}
    missing = sorted(s.cluster for s in job.placement if s.cluster not in have)
    confirmed = [w for w in works if w.reservation == RESERVED or w.phase != PHASE_RESERVE]
    if not missing and len(confirmed) == len(works):
        names = tuple(w.name for w in works if w.phase == PHASE_RESERVE and not w.deleting)
        return [Commit(job.key, names, "every member reserved its share: "
                       + ", ".join(sorted(have)))]
    started = min((w.created for w in works if w.created is not None), default=None)
    if started is None or view.now < started + view.reserve_seconds:
        return []
    late = missing[0] if missing else next(w for w in works if w not in confirmed).cluster
    said = next((w.reservation_message for w in works
                 if w.cluster == late and w.reservation_message), "no report")
    return [RollBack(job.key, late, f"{late} did not confirm its reservation within "
                     f"{view.reserve_seconds:g} s ({said})", retry_at)]


def waiting_after_rollback(job: JobView, view: PassView) -> str:
    """Why a job rolled back a moment ago is not placed yet ("" when it may be)."""
    if job.reserve_retry_at is None or job.reserve_retry_at <= view.now:
        return ""
    return (f"its reservation was rolled back; placed again in "
            f"{job.reserve_retry_at - view.now:.0f} s")


__all__ = ["PHASE_RESERVE", "REFUSED", "RESERVED", "reserving",
           "settle_reservation", "waiting_after_rollback"]
