"""Kubernetes resource quantities: parsing and canonical integer units.

The pure packages work on integers only. cpu is counted in millicores; every other resource
in its base unit (memory in bytes, GPUs and ``kube-queue/max-jobs`` as counts). Rounding is
up, as the kubelet does, so a request never looks smaller than it is.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY = re.compile(QUANTITY_PATTERN)
_EXPONENT = re.compile(r"[eE][+-]?[0-9.]*[0-9][0-9.]*$")

_SUFFIX = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}

CPU = "cpu"
MEMORY = "memory"
GPU = "nvidia.com/gpu"
MAX_JOBS = "kube-queue/max-jobs"


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Decimal:
    """Parse ``value`` ("500m", "2Gi", 3, "1e3") into an exact Decimal."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int | float):
        return Decimal(str(value))
    text = value.strip()
    if not _QUANTITY.match(text):
        raise QuantityError(f"{value!r} is not a quantity (expected e.g. 500m, 2Gi, 4)")
    number, suffix = text, ""
    for candidate in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"):
        if text.endswith(candidate):
            number, suffix = text[:-2], candidate
            break
    else:
        if text[-1] in "numkMGTPE" and not _EXPONENT.search(text):
            number, suffix = text[:-1], text[-1]
    try:
        return Decimal(number) * _SUFFIX[suffix]
    except InvalidOperation as exc:  # pragma: no cover - the regex rules this out
        raise QuantityError(f"{value!r} is not a quantity") from exc


def canonical(resource: str, value: str | int | float) -> int:
    """The quantity in the integer unit fleet counts ``resource`` in (see module doc)."""
    amount = parse_quantity(value)
    if resource == CPU:
        amount *= 1000
    return math.ceil(amount)


def format_canonical(resource: str, amount: int) -> str:
    """The reverse of :func:`canonical`, for display: cpu as cores or millicores."""
    if resource == CPU:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if resource == MEMORY:
        for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount and amount % size == 0:
                return f"{amount // size}{suffix}"
    return str(amount)
