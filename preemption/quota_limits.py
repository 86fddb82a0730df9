"""Quota as preemption sees it: does the preemptor fit its leaf and every ancestor once the
victims' charges are returned, and which other tenants are borrowing."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from preemption.model import Preemptor, QuotaLimits, Running
from quota.amounts import MAX_JOBS, Amounts, add
from quota.tree import QuotaNode, walk


def quota_limits(root: QuotaNode, usage: Callable[[str], Amounts]) -> QuotaLimits:
    """The frozen view of a tree whose per-node usage ``usage(key)`` gives."""
    nodes = list(walk(root))
    paths = {p.key: tuple("/".join(a) for a in (p.path, *p.ancestors))
             for p in nodes if p.node.is_leaf}
    return QuotaLimits(min={p.key: dict(p.node.min) for p in nodes},
                       max={p.key: dict(p.node.max) for p in nodes},
                       usage={p.key: dict(usage(p.key)) for p in nodes}, paths=paths)


def fits_quota(preemptor: Preemptor, victims: Iterable[Running], limits: QuotaLimits) -> bool:
    """Whether the preemptor's charge fits every node on its path once ``victims`` hold no
    quota. A preemptor that no tree covers, or that holds no quota (opportunistic), fits."""
    if preemptor.leaf is None or not preemptor.charge:
        return True
    path = limits.paths.get(preemptor.leaf, ())
    returned: dict[str, dict[str, int]] = {}
    for victim in victims:
        if victim.leaf is None or not victim.charge:
            continue
        for key in limits.paths.get(victim.leaf, ()):
            returned[key] = add(returned.get(key, {}), victim.charge)
    for key in path:
        used = add(limits.usage.get(key, {}), preemptor.charge)
        back = returned.get(key, {})
        for resource, limit in limits.max.get(key, {}).items():
            want = preemptor.charge.get(resource, 0)
            if want and used.get(resource, 0) - back.get(resource, 0) > limit:
                return False
    return True


def borrowing(leaf: str, limits: QuotaLimits) -> bool:
    """The leaf uses more than its min of some resource (the rest is lent to it)."""
    used, guaranteed = limits.usage.get(leaf, {}), limits.min.get(leaf, {})
    return any(amount > guaranteed.get(r, 0) for r, amount in used.items() if r != MAX_JOBS)


def on_borrowed(job: Running, resource: str, limits: QuotaLimits) -> bool:
    """The job holds ``resource`` wholly on borrowed capacity: its leaf, without it, still
    uses at least its min of it."""
    if job.leaf is None or not job.charge.get(resource):
        return False
    used = limits.usage.get(job.leaf, {}).get(resource, 0)
    return used - job.charge[resource] >= limits.min.get(job.leaf, {}).get(resource, 0)


def within_guarantee(preemptor: Preemptor, limits: QuotaLimits) -> bool:
    """Admitting the preemptor keeps its leaf within its min for every resource it asks for
    that the leaf guarantees (and it asks for at least one)."""
    if preemptor.leaf is None:
        return False
    used: Mapping[str, int] = add(limits.usage.get(preemptor.leaf, {}), preemptor.charge)
    guaranteed = limits.min.get(preemptor.leaf, {})
    asked = [r for r, v in preemptor.charge.items() if v and r in guaranteed and r != MAX_JOBS]
    return bool(asked) and all(used.get(r, 0) <= guaranteed[r] for r in asked)
