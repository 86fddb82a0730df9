"""Kubernetes resource quantities: parsing and canonical integer units.

The pure packages work on integers only. cpu is counted in millicores; every other resource
in its base unit (memory in bytes, GPUs and ``kube-queue/max-jobs`` as counts). Rounding is
up, as the kubelet does, so a request never looks smaller than it is.

Why not ``kubernetes.utils.parse_quantity``: the modules that parse quantities (``fleet.api``,
``fleet.kinds``, the agent's capacity grouping) are pure and may not import the API client
(import-linter), and that function is laxer than the API server: it takes ``1e-3m``,
``1_000`` and ``True``, which the server's quantity pattern (used here) refuses. Where both
accept a text they agree exactly (``tests/unit/test_quantity.py`` checks them against each
other).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, DecimalException

from fleet.api.limits import MAX_QUANTITY, MAX_QUANTITY_TEXT
from quota.amounts import shown

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
# What a request, a limit or a quota may say: no sign but "+" (a negative amount would add
# capacity where it is subtracted), and a decimal exponent of at most two digits: parsing
# "1e999999999" ties up the API server's quantity library (and the Python int it denotes
# would take a gigabyte), while 10^18 is already more than any cluster has of anything.
NON_NEGATIVE_QUANTITY_PATTERN = (
    r"^(\+)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?[0-9]{1,2}))?$"
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
    except DecimalException as exc:  # an exponent beyond what Decimal holds: "1e999999999Ei"
        raise QuantityError(f"{value!r} is not a quantity fleet can count") from exc


def canonical(resource: str, value: str | int | float) -> int:
    """The quantity in the integer unit fleet counts ``resource`` in (see module doc).

    Amounts beyond ``MAX_QUANTITY`` are refused before they become integers: "1e999999999"
    is a valid Kubernetes quantity whose integer would take a gigabyte of digits."""
    amount = parse_quantity(value)
    if abs(amount) > MAX_QUANTITY:
        raise QuantityError(f"{value!r} is above the bound {MAX_QUANTITY_TEXT}")
    if resource == CPU:
        amount *= 1000
    return math.ceil(amount)


def format_canonical(resource: str, amount: int) -> str:
    """The reverse of :func:`canonical`, for display: cpu as cores or millicores."""
    return shown(resource, amount)
