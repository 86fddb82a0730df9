"""One copy of each JSON value the hub's cache holds, however many objects hold it.

Ten thousand jobs and their Works repeat the same pod templates, containers, resource maps,
label sets and condition texts, and a copy of each per object was most of the hub's memory.
The cache interns each object it stores, bottom up (hash consing): a dict or list equal to
one already held, with the same JSON types (``True`` is not ``1``, ``-0.0`` is not ``0.0``),
becomes that one. So a job's next version shares what did not change with the last, a Work's
manifest shares its job's pod templates, and jobs alike share theirs with each other.

Interned values are frozen (:class:`FrozenDict`, :class:`FrozenList`): shared between objects,
a change made in place to one would change every object holding it, so a change raises
instead. ``copy.deepcopy`` of one gives plain, changeable dicts and lists.

The table holds each interned value once, by a hash of its contents; a value no object holds
any more is swept out when the table has grown by a quarter since its last sweep.
"""

from __future__ import annotations

import copy
import sys
import threading
from collections.abc import Mapping
from typing import Any, NoReturn

INTERN_BELOW = 64  # strings shorter than this are shared too (names, keys, enum values)
SWEEP_FROM = 65_536  # the table's size below which it is never swept
# Swept when it has grown by a quarter since the last sweep: what no object holds any more
# stays at most about a quarter of what they hold (doubling, it was a seventh of the hub's
# RSS at 10,000 bound jobs; a sweep is one pass over the table).
SWEEP_GROWTH = 1.25


def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(f"a cached {type(self).__name__} is shared between objects: copy it "
                    "(copy.deepcopy, or {**it}) before changing it")


class FrozenDict(dict[str, Any]):
    """A dict of the cache: reads as a dict (and is one, for ``json`` and the clients), but
    refuses changes."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return {k: copy.deepcopy(v, memo) for k, v in self.items()}

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))


class FrozenList(list[Any]):
    """A list of the cache, refusing changes as :class:`FrozenDict` does."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return [copy.deepcopy(v, memo) for v in self]

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))


class Interner:
    """Turns JSON values into frozen ones that share every part equal to a part of a value
    interned before (and still held)."""

    def __init__(self, sweep_from: int = SWEEP_FROM) -> None:
        self._table: dict[int, FrozenDict | FrozenList] = {}
        self._lock = threading.Lock()
        self._sweep_from = sweep_from
        self._swept_at = sweep_from

    def __len__(self) -> int:
        return len(self._table)

    def __call__(self, value: Any) -> Any:
        with self._lock:
            out = self._intern(value)[0]
            if len(self._table) > SWEEP_GROWTH * self._swept_at:
                self.sweep()
        return out

    def _intern(self, value: Any) -> tuple[Any, int]:
        """The interned value and its content hash."""
        if isinstance(value, Mapping):
            keys: list[Any] = []
            values: list[Any] = []
            flat: list[Any] = ["{"]
            for key, child in value.items():
                name = sys.intern(key) if type(key) is str and len(key) < INTERN_BELOW else key
                interned, part = self._part(child)
                keys.append(name)
                values.append(interned)
                flat += (name, part)
            digest = hash(tuple(flat))
            known = self._table.get(digest)
            if type(known) is FrozenDict and len(known) == len(keys) and all(
                    k == key and (v is have or _same(v, have)) for k, v, (key, have)
                    in zip(keys, values, known.items(), strict=True)):
                return known, digest
            made: FrozenDict | FrozenList = FrozenDict(zip(keys, values, strict=True))
        elif isinstance(value, list | tuple):
            values, flat = [], ["["]
            for child in value:
                interned, part = self._part(child)
                values.append(interned)
                flat.append(part)
            digest = hash(tuple(flat))
            known = self._table.get(digest)
            if type(known) is FrozenList and len(known) == len(values) and all(
                    v is have or _same(v, have)
                    for v, have in zip(values, known, strict=True)):
                return known, digest
            made = FrozenList(values)
        else:
            return _leaf(value)
        self._table.setdefault(digest, made)  # (a collision keeps the first: made is unshared)
        return made, digest

    def _part(self, value: Any) -> tuple[Any, int]:
        """A child interned: the common leaves here, without a call each (most of an
        object's nodes are leaves)."""
        kind = type(value)
        if kind is str:
            if len(value) < INTERN_BELOW:
                value = sys.intern(value)
            return value, hash(value)
        if kind is int or kind is bool or value is None:
            return value, hash((kind, value))
        return self._intern(value)

    def sweep(self) -> None:
        """Drop the values only the table holds, in one pass from the newest: a value is
        interned after its parts, so a parent comes before its parts in that order, and one
        dropped has freed them by the time they are looked at."""
        table = self._table
        for digest in reversed(list(table)):
            # a value's references here: the table's and getrefcount's argument
            if sys.getrefcount(table[digest]) <= 2:
                del table[digest]
        self._swept_at = max(self._sweep_from, len(table))


def _leaf(value: Any) -> tuple[Any, int]:
    if isinstance(value, str):
        if len(value) < INTERN_BELOW:
            value = sys.intern(str(value))  # (a str subclass, such as a JobKey, as plain text)
        return value, hash(value)
    if isinstance(value, float):
        return value, hash((float, repr(value)))
    return value, hash((type(value), value))


def _same(value: Any, known: Any) -> bool:
    """Whether two interned values are the same JSON: containers are interned bottom up, so
    equal ones are one object (or were not shared, then they count as different)."""
    if value is known:
        return True
    if isinstance(value, dict | list) or type(value) is not type(known) or value != known:
        return False
    return not isinstance(value, float) or repr(value) == repr(known)
