"""When a bound job must leave its clusters: a share has been unhealthy (its cluster lost, or
its replicas unschedulable there) for longer than the policy tolerates."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ShareHealth:
    cluster: str
    healthy: bool
    unhealthy_for: float = 0.0  # seconds since the share became unhealthy
    reason: str = ""
    cluster_lost: bool = False


@dataclass(frozen=True)
class Failover:
    reason: str
    lost_clusters: tuple[str, ...]  # whose agents cannot clean up: the hub must


def decide_failover(shares: Sequence[ShareHealth], toleration_seconds: float) -> Failover | None:
    """The whole gang moves as soon as one share is past the toleration; None while not."""
    expired = sorted((s for s in shares if not s.healthy and s.unhealthy_for > toleration_seconds),
                     key=lambda s: s.cluster)
    if not expired:
        return None
    first = expired[0]
    how_long = "" if math.isinf(first.unhealthy_for) else f" for {first.unhealthy_for:.0f}s"
    return Failover(
        reason=f"{first.cluster}: {first.reason}{how_long} "
               f"(toleration {toleration_seconds:.0f}s)",
        lost_clusters=tuple(s.cluster for s in shares if s.cluster_lost),
    )
