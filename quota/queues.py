"""Queues: the order in which a queue's jobs are considered, and one Queue object per
quota-tree node, named stably from its path."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

from quota.tree import PlacedNode, walk

MAX_NAME = 63


def queue_names(paths: Iterable[tuple[str, ...]]) -> dict[tuple[str, ...], str]:
    """``("root", "child-2")`` -> ``root-child-2``; a hash suffix only where two paths
    would collide or a name would be too long, so names survive edits of other nodes."""
    paths = sorted(set(paths))
    plain = {p: "-".join(p).lower() for p in paths}
    seen: dict[str, int] = {}
    for name in plain.values():
        seen[name] = seen.get(name, 0) + 1
    out = {}
    for path, name in plain.items():
        if seen[name] > 1 or len(name) > MAX_NAME:
            digest = hashlib.sha256("/".join(path).encode()).hexdigest()[:6]
            out[path] = f"{name[: MAX_NAME - 7].rstrip('-')}-{digest}"
        else:
            out[path] = name
    return out


def admission_order(priority: int, created: str, key: str) -> tuple[int, str, str]:
    """Where a job stands in its queue: higher priority first, then older first (creation
    time, RFC 3339, compared as text), then its key so that equal jobs keep one order.
    Opportunistic jobs (negative priority) so come after every guaranteed one."""
    return (-priority, created, key)


def waiting_below(placed: PlacedNode, pending: Mapping[str, Sequence[str]],
                  counts: Mapping[str, int] | None = None) -> tuple[list[str], int]:
    """The jobs waiting in a node's leaves, in order, and how many wait there in all
    (``pending`` lists a leaf's first waiting jobs, ``counts`` how many wait in all, as
    many as listed when not given)."""
    below = [p.key for p in walk(placed.node, placed.path[:-1])]
    waiting = [job for leaf in below for job in pending.get(leaf, ())]
    return waiting, sum((counts or {}).get(leaf, len(pending.get(leaf, ()))) for leaf in below)
