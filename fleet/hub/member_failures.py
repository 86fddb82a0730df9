"""Member-side failures and waits on the hub job: what its Works say the members refused,
cannot run, or wait for.

An agent marks a Work ``Healthy`` False with a reason from ``MEMBER_FAILURE_REASONS`` when its
member refuses the job's pods for good (a missing PriorityClass, a quota the pod exceeds, an
admission webhook's denial, RBAC, an invalid pod) or cannot run them (image pulls), and with
one from ``MEMBER_WAITING_REASONS`` for a cause the member lifts by itself (a new namespace's
ServiceAccount, a full quota, an unreachable webhook). The hub shows the first failing share,
by cluster, as a ``ReplicaFailure`` condition at the end of the job's conditions (so
``kubectl get`` shows it as the STATE), and the first waiting one as a ``Waiting`` condition
(before it, when both are there), and says each once in an event. Either is removed as soon
as no share has it: the hub shows what its members have now. Both count toward application
failover (:mod:`propagation.failover`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fleet.api.protocol import (
    HEALTHY,
    MEMBER_FAILURE_REASONS,
    MEMBER_WAITING,
    MEMBER_WAITING_REASONS,
    REPLICA_FAILURE,
)

Body = dict[str, Any]
MAX_MESSAGE = 1024
# condition type on the hub job -> the Work reasons it shows
SHOWN = {MEMBER_WAITING: MEMBER_WAITING_REASONS, REPLICA_FAILURE: MEMBER_FAILURE_REASONS}


def replica_failure(works: Sequence[Mapping[str, Any]]) -> Body | None:
    """The condition for the first failing share, by cluster; None when no share fails."""
    return _first(works, REPLICA_FAILURE)


def member_wait(works: Sequence[Mapping[str, Any]]) -> Body | None:
    """The condition for the first share whose member holds its pods back for a passing
    cause, by cluster; None when none does."""
    return _first(works, MEMBER_WAITING)


def _first(works: Sequence[Mapping[str, Any]], kind: str) -> Body | None:
    found: list[tuple[str, Mapping[str, Any]]] = []
    for work in works:
        cluster = str(work.get("spec", {}).get("placement", {}).get("cluster", "?"))
        for condition in (work.get("status") or {}).get("conditions") or []:
            if condition.get("type") == HEALTHY and condition.get("status") == "False" \
                    and condition.get("reason") in SHOWN[kind]:
                found.append((cluster, condition))
    if not found:
        return None
    cluster, condition = min(found, key=lambda item: item[0])
    return {"type": kind, "status": "True", "reason": condition["reason"],
            "message": named(cluster, str(condition.get("message") or ""))[:MAX_MESSAGE],
            "lastTransitionTime": condition.get("lastTransitionTime"),
            "lastUpdateTime": condition.get("lastTransitionTime")}


def named(cluster: str, message: str) -> str:
    """``message`` starting with the member's name, once."""
    return message if message.startswith(f"{cluster}: ") else f"{cluster}: {message}"


def with_member_conditions(status: Mapping[str, Any], failure: Mapping[str, Any] | None,
                           wait: Mapping[str, Any] | None = None) -> Body:
    """``status`` with the hub's Waiting and ReplicaFailure conditions put last (the failure
    last of all), or removed when no share has them (a member's own ReplicaFailure
    conditions, other reasons, are left alone)."""
    out = dict(status)
    conditions = [c for c in status.get("conditions") or [] if not _ours(c)]
    for condition in (wait, failure):
        if condition is not None:
            conditions.append({k: v for k, v in condition.items() if v is not None})
    if conditions or "conditions" in status:
        out["conditions"] = conditions
    return out


def _ours(condition: Mapping[str, Any]) -> bool:
    return condition.get("reason") in SHOWN.get(str(condition.get("type")), ())


def current(status: Mapping[str, Any], kind: str) -> tuple[str, str] | None:
    """(reason, message) of the ``kind`` condition (Waiting or ReplicaFailure) the hub shows
    now, to say a new one once."""
    for condition in status.get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") == kind \
                and _ours(condition):
            return str(condition["reason"]), str(condition.get("message") or "")
    return None
