"""Resource vectors: immutable maps from resource name to an integer amount.

Amounts are in canonical units (cpu in millicores, memory in bytes, devices as counts); the
hub converts quantities before building views, so this package never parses strings.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar, overload

_T = TypeVar("_T")

GPU = "nvidia.com/gpu"
CPU = "cpu"
MEMORY = "memory"


@dataclass(frozen=True, slots=True)
class Resources(Mapping[str, int]):
    items_: tuple[tuple[str, int], ...] = ()

    @staticmethod
    def of(amounts: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> Resources:
        """The vector of ``amounts`` (summed per name, zeros left out): one shared object per
        value while it is among the last :data:`SHARED_MAX` made, since ten thousand jobs'
        roles and a fleet's nodes repeat a few shapes (values never change, so sharing one
        is safe)."""
        pairs = amounts.items() if isinstance(amounts, Mapping) else amounts
        merged: dict[str, int] = {}
        for name, amount in pairs:
            merged[name] = merged.get(name, 0) + amount
        items = tuple(sorted((k, v) for k, v in merged.items() if v != 0))
        found = _SHARED.get(items)
        if found is None:
            if len(_SHARED) >= SHARED_MAX:
                _SHARED.clear()  # (a bound, not a policy: the shapes in use come back at once)
            found = _SHARED[items] = Resources(items)
        return found

    def __getitem__(self, key: str) -> int:
        for name, amount in self.items_:
            if name == key:
                return amount
        raise KeyError(key)

    @overload
    def get(self, key: str, /) -> int | None: ...
    @overload
    def get(self, key: str, /, default: int | _T) -> int | _T: ...
    def get(self, key: str, /, default: object = None) -> object:
        """As ``Mapping.get``, without raising and catching KeyError for absent names (the
        common case in packing, where most nodes lack most requested resources)."""
        for name, amount in self.items_:
            if name == key:
                return amount
        return default

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self.items_)

    def __len__(self) -> int:
        return len(self.items_)

    def __add__(self, other: Mapping[str, int]) -> Resources:
        return Resources.of([*self.items_, *other.items()])

    def __sub__(self, other: Mapping[str, int]) -> Resources:
        return Resources.of([*self.items_, *((k, -v) for k, v in other.items())])

    def scaled(self, factor: int) -> Resources:
        return Resources.of({k: v * factor for k, v in self.items_})

    def fits_in(self, free: Mapping[str, int]) -> bool:
        """Every requested amount is available in ``free`` (absent means zero)."""
        return all(amount <= free.get(name, 0) for name, amount in self.items_)

    def shortfall(self, free: Mapping[str, int]) -> dict[str, int]:
        """What ``free`` lacks to hold this request, per resource."""
        return {k: v - free.get(k, 0) for k, v in self.items_ if v > free.get(k, 0)}

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k}: {v}" for k, v in self.items_) + "}"


ZERO = Resources()
SHARED_MAX = 65_536
_SHARED: dict[tuple[tuple[str, int], ...], Resources] = {}


def scarcity_order(request: Iterable[str]) -> tuple[str, ...]:
    """Resources in the order fleet treats them as scarce: GPUs, other devices, cpu, memory."""

    def rank(name: str) -> tuple[int, str]:
        if name == GPU:
            return (0, name)
        if name not in (CPU, MEMORY):
            return (1, name)
        return (2 if name == CPU else 3, name)

    return tuple(sorted(request, key=rank))
