"""An object's size and nesting as fleet stores and copies it, and the field that makes it
too large or too deep.

Schemas bound each field, but not the sum of them: beyond etcd's request limit the API
server answers a bare "500 Internal Server Error" that names nothing. Some fields stay open
(a T9k TensorBoard spec; objects stored under an older, open CRD), and an object near the API
server's nesting limit is stored but breaks every later list of its kind. The hub's webhook
refuses both first, and the hub marks one that got in anyway (stored without the webhook) as
invalid, naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fleet.api.limits import MAX_DEPTH, MAX_OBJECT_BYTES

SYSTEM_FIELDS = ("managedFields",)  # written by the API server, not the user: not counted
JOB_COPIES = "it copies a job into the Work of each member that runs it"  # why, for a job
SHOWN_SEGMENTS = 10  # of a too deep field's path, before "…"


def encoded_size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON (as the API server stores it, near enough)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def refusal(body: Mapping[str, Any], why: str = "") -> str:
    """Why fleet refuses ``body`` as a whole (too deep, or too large); "" when it does not."""
    return too_deep(body) or too_large(body, why=why)


def too_deep(body: Mapping[str, Any], limit: int = MAX_DEPTH) -> str:
    """"" when no field of ``body`` sits more than ``limit`` levels down; else a message
    naming the first that does (walked without recursion: depth is what is in question)."""
    stack: list[tuple[Any, int, tuple[Any, ...]]] = [(body, 0, ())]
    while stack:
        value, depth, path = stack.pop()
        if depth > limit:
            return (f"{_path_text(path)}: nested more than {limit} levels deep; fleet accepts "
                    f"at most {limit}")
        if isinstance(value, Mapping):
            stack.extend((v, depth + 1, (path, k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, depth + 1, (path, i)) for i, v in enumerate(value))
    return ""


def _path_text(path: tuple[Any, ...]) -> str:
    """A path kept as (parent, key) pairs, as ``a.b[0].c``, cut after a few segments."""
    keys: list[object] = []
    while path:
        path, key = path
        keys.append(key)
    keys.reverse()
    text = ""
    for key in keys[:SHOWN_SEGMENTS]:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else str(key))
    return text + ("…" if len(keys) > SHOWN_SEGMENTS else "")


def too_large(body: Mapping[str, Any], limit: int = MAX_OBJECT_BYTES, why: str = "") -> str:
    """"" when ``body`` is within ``limit`` bytes; else a message naming its largest field
    (and ``why`` the limit holds, when given)."""
    counted = {**body, "metadata": {k: v for k, v in (body.get("metadata") or {}).items()
                                    if k not in SYSTEM_FIELDS}}
    size = encoded_size(counted)  # in C, and all a job within the bound costs
    if size <= limit:
        return ""
    sizes: dict[int, int] = {}
    _measure(counted, sizes)  # recursive: callers check too_deep first
    path, part = largest_field(counted, sizes)
    return (f"{path or 'the object'}: {_human(part)} of the object's {_human(size)} as JSON; "
            f"fleet accepts at most {_human(limit)}{f' ({why})' if why else ''}")


def _measure(value: Any, sizes: dict[int, int]) -> int:
    """``value``'s size as compact JSON, each container's size noted in ``sizes`` by id:
    one walk, each string encoded once (a 2 MiB object in some 25 ms)."""
    if isinstance(value, Mapping):
        size = 1 + len(value) + sum(encoded_size(str(k)) + 1 + _measure(v, sizes)
                                    for k, v in value.items()) if value else 2
    elif isinstance(value, list):
        size = 1 + len(value) + sum(_measure(v, sizes) for v in value) if value else 2
    else:
        return encoded_size(value)
    sizes[id(value)] = size
    return size


def largest_field(value: Any, sizes: Mapping[int, int]) -> tuple[str, int]:
    """The deepest field holding at least half of ``value``'s bytes, and its size (as
    ``_measure`` noted them): where to look first (a field the largest only together with
    its siblings is not it)."""
    path, size = "", sizes[id(value)]
    while isinstance(value, Mapping | list) and value:
        items = value.items() if isinstance(value, Mapping) else enumerate(value)
        key, child, child_size = max(
            ((k, v, sizes.get(id(v)) or encoded_size(v)) for k, v in items),
            key=lambda kv: kv[2])
        if child_size * 2 < size:
            break
        path += f"[{key}]" if isinstance(key, int) else (f".{key}" if path else str(key))
        value, size = child, child_size
    return path, size


def _human(size: int) -> str:
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MiB"
    return f"{size / 1024:.0f} KiB" if size >= 1024 else f"{size} bytes"


# What of a member job's status its Work carries: the status is written on the member (by
# its job controller, or anyone allowed to write it there) and copied into the hub's Work,
# where one too deep would break every list of Works, and one too large every write of it.
MAX_JOB_STATUS_BYTES = MAX_OBJECT_BYTES // 2
STATUS_COPY = "a Work carries it to the hub"
MAX_KEPT_VALUE_BYTES = 1_024  # a scalar kept from a status cut down (phase, times, counts)


def reported_status(status: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """``status`` as a Work may carry it, and ""; or, for one too deep or too large, what
    remains of it (its short scalar fields, and its conditions when they alone are within
    bounds) and why it was cut."""
    why = too_deep(status) or too_large(status, limit=MAX_JOB_STATUS_BYTES, why=STATUS_COPY)
    if not why:
        return status, ""
    kept: dict[str, Any] = {k: v for k, v in status.items() if not isinstance(
        v, Mapping | list) and encoded_size(v) <= MAX_KEPT_VALUE_BYTES}
    conditions = status.get("conditions")
    if isinstance(conditions, list) and not (
            too_deep({"conditions": conditions})
            or too_large({"conditions": conditions}, limit=MAX_JOB_STATUS_BYTES)):
        kept["conditions"] = conditions
    return kept, f"status.{why}"
