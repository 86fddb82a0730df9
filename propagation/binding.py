"""The text of the ScheduleBindingSucceed event, exactly as ACK One prints it."""

from __future__ import annotations

from collections.abc import Sequence

from propagation.division import ClusterShare


def binding_result(shares: Sequence[ClusterShare]) -> str:
    """``{member1:0,[{master 1} {worker 2}]}``: one group per cluster, roles lower-case."""
    groups = []
    for share in shares:
        roles = " ".join(f"{{{role.lower()} {count}}}" for role, count in share.replicas)
        groups.append(f"{{{share.cluster}:0,[{roles}]}}")
    return " ".join(groups)


def binding_message(shares: Sequence[ClusterShare]) -> str:
    return f"Binding has been scheduled successfully. Result: {binding_result(shares)}"
