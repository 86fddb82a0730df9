"""Member-side failures on the hub job: what its Works say the members refused or cannot run.

An agent marks a Work ``Healthy`` False with a reason from ``MEMBER_FAILURE_REASONS`` when its
member refuses the job's pods (a missing PriorityClass, a ResourceQuota, an admission webhook,
403/422) or cannot run them (image pulls). The hub shows the first such share, by cluster, as a
``ReplicaFailure`` condition at the end of the job's conditions (so ``kubectl get`` shows it as
the STATE) and says it once in an event; the same unhealthy share counts toward application
failover (:mod:`propagation.failover`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fleet.api.protocol import HEALTHY, MEMBER_FAILURE_REASONS, REPLICA_FAILURE

Body = dict[str, Any]
MAX_MESSAGE = 1024


def replica_failure(works: Sequence[Mapping[str, Any]]) -> Body | None:
    """The condition for the first failing share, by cluster; None when no share fails."""
    found: list[tuple[str, Mapping[str, Any]]] = []
    for work in works:
        cluster = str(work.get("spec", {}).get("placement", {}).get("cluster", "?"))
        for condition in (work.get("status") or {}).get("conditions") or []:
            if condition.get("type") == HEALTHY and condition.get("status") == "False" \
                    and condition.get("reason") in MEMBER_FAILURE_REASONS:
                found.append((cluster, condition))
    if not found:
        return None
    cluster, condition = min(found, key=lambda item: item[0])
    return {"type": REPLICA_FAILURE, "status": "True", "reason": condition["reason"],
            "message": named(cluster, str(condition.get("message") or ""))[:MAX_MESSAGE],
            "lastTransitionTime": condition.get("lastTransitionTime"),
            "lastUpdateTime": condition.get("lastTransitionTime")}


def named(cluster: str, message: str) -> str:
    """``message`` starting with the member's name, once."""
    return message if message.startswith(f"{cluster}: ") else f"{cluster}: {message}"


def with_replica_failure(status: Mapping[str, Any], failure: Mapping[str, Any] | None) -> Body:
    """``status`` with the hub's ReplicaFailure condition put last, or removed when no share
    fails (a member's own ReplicaFailure conditions, other reasons, are left alone)."""
    out = dict(status)
    conditions = [c for c in status.get("conditions") or []
                  if not (c.get("type") == REPLICA_FAILURE
                          and c.get("reason") in MEMBER_FAILURE_REASONS)]
    if failure is not None:
        conditions.append({k: v for k, v in failure.items() if v is not None})
    if conditions or "conditions" in status:
        out["conditions"] = conditions
    return out


def current_failure(status: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, message) of the ReplicaFailure the hub shows now, to say a new one once."""
    for condition in status.get("conditions") or []:
        if condition.get("type") == REPLICA_FAILURE and condition.get("status") == "True" \
                and condition.get("reason") in MEMBER_FAILURE_REASONS:
            return str(condition["reason"]), str(condition.get("message") or "")
    return None
