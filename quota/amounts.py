"""Resource amounts as plain integer maps (canonical units: cpu in millicores, memory in bytes,
devices and ``kube-queue/max-jobs`` as counts). The shell converts quantities before calling in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

Amounts = Mapping[str, int]
MAX_JOBS = "kube-queue/max-jobs"


def add(*amounts: Amounts) -> dict[str, int]:
    out: dict[str, int] = {}
    for each in amounts:
        for name, value in each.items():
            out[name] = out.get(name, 0) + value
    return out


def total(amounts: Iterable[Amounts]) -> dict[str, int]:
    return add(*amounts)
