"""The hub job's ``Reservation`` condition: what reservation mode's two phases are doing.

From the job's Works (``fleet.api.protocol`` describes the phases): ``Reserving`` while some
Work is in phase Reserve (the message names the members that confirmed and those still
reserving), ``Committed`` once every Work is in phase Commit, and ``RolledBack`` (written when
a rolled-back job is unbound) with the member and its reason. The condition goes first in the
job's conditions, so the last one (which ``kubectl get`` prints as the STATE) stays the job's
own.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fleet.api import protocol as p

Body = dict[str, Any]
TYPE = "Reservation"
MAX_MESSAGE = 1024


def condition(works: Sequence[Mapping[str, Any]], now: str,
              current: Mapping[str, Any] | None) -> Body | None:
    """The condition for a bound job's Works; None when none of them was reserved."""
    phases = {p.work_phase(w) for w in works}
    if not works or phases == {""}:
        return None
    if p.PHASE_RESERVE not in phases:
        return _condition("Committed", "every member reserved its share; the pods started "
                          "in their places", now, current)
    said = []
    for work in sorted(works, key=lambda w: str(w["spec"]["placement"]["cluster"])):
        cluster = work["spec"]["placement"]["cluster"]
        state, message = p.reservation(work)
        said.append(f"{cluster}: {state or p.RESERVING}" + (f" ({message})" if message and
                                                               state != p.RESERVED else ""))
    return _condition(p.RESERVING, "; ".join(said), now, current)


def rolled_back(reason: str, now: str, current: Mapping[str, Any] | None) -> Body:
    return _condition("RolledBack", reason, now, current)


def kept(status: Mapping[str, Any] | None) -> Body | None:
    """The RolledBack condition of a waiting job's status (None without one): it stays
    while the job waits, until a new placement reports on its own."""
    return next((dict(c) for c in (status or {}).get("conditions") or []
                 if c.get("type") == TYPE and c.get("reason") == "RolledBack"), None)


def with_condition(status: Mapping[str, Any], said: Mapping[str, Any] | None) -> Body:
    """``status`` with its Reservation condition first (replaced, or removed when None)."""
    out = dict(status)
    others = [c for c in status.get("conditions") or [] if c.get("type") != TYPE]
    if said is not None:
        others.insert(0, dict(said))
    if others or "conditions" in status:
        out["conditions"] = others
    return out


def _condition(reason: str, message: str, now: str, current: Mapping[str, Any] | None) -> Body:
    since = now
    for old in (current or {}).get("conditions") or []:
        if old.get("type") == TYPE and old.get("reason") == reason:
            since = old.get("lastTransitionTime") or now
    return {"type": TYPE, "status": "True", "reason": reason, "message": message[:MAX_MESSAGE],
            "lastTransitionTime": since}
