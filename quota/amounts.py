"""Resource amounts as plain integer maps (canonical units: cpu in millicores, memory in bytes,
devices and ``kube-queue/max-jobs`` as counts). The shell converts quantities before calling in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

Amounts = Mapping[str, int]
MAX_JOBS = "kube-queue/max-jobs"


def shown(resource: str, amount: int) -> str:
    """An amount as a person reads it: cpu in cores (millicores when not whole), memory in
    the largest binary unit that divides it, the rest as counts."""
    if resource == "cpu":
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if resource == "memory":
        for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount and amount % size == 0:
                return f"{amount // size}{suffix}"
    return str(amount)


def add(*amounts: Amounts) -> dict[str, int]:
    out: dict[str, int] = {}
    for each in amounts:
        for name, value in each.items():
            out[name] = out.get(name, 0) + value
    return out


def total(amounts: Iterable[Amounts]) -> dict[str, int]:
    return add(*amounts)
