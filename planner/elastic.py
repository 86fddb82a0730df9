"""Elastic jobs (PyTorchJob ``elasticPolicy``): how many replicas of the elastic role a job
is admitted with, when and where a running one grows, and the placement a shrink leaves.

Pure: sizes are searched with the caller's fit test (quota, then nodes), so the same rules
decide an elastic job as any other. Replica indices stay contiguous: a job grows on the share
that holds its highest indices (within the topology domains that share keeps to), then, when
its policy lets it split, onto one more member after its highest index; it shrinks from the
highest indices down, so the replicas that run keep their names (torchrun's elastic agents
re-rendezvous; no pod is replaced).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from planner.intents import Grow
from planner.view import Elastic, JobView, Stage
from propagation.clusters import filter_clusters
from propagation.division import ClusterShare, divide
from propagation.resources import Resources
from propagation.spent import with_assumed
from propagation.topology import within
from propagation.views import (
    ClusterView,
    JobDemand,
    PlacementRules,
    Role,
    SchedulingType,
    TopologyRequest,
)
from quota.engine import AdmissionPass
from quota.tree import walk

# A job of at least an elastic job's priority that waits for one of these reasons holds its
# growth back: spare capacity goes to whoever waits before it goes to extra replicas. One
# waiting for nodes holds back growth on the members it may use; one waiting for quota, the
# growth of jobs that hold quota.
WAITING_FOR_NODES = ("Unschedulable", "Preempting")
WAITING_FOR_QUOTA = ("QuotaExceeded", "Reclaiming")


@dataclass(frozen=True)
class Waiting:
    """A job that waits for capacity or quota, as growth sees it."""

    priority: int
    clusters: frozenset[str] = frozenset()  # waiting for nodes: the members it may use
    quota: bool = False  # waiting for quota


def holds_back(waiting: Sequence[Waiting], job: JobView, cluster: str) -> bool:
    """Whether a job of at least ``job``'s priority waits for what growing ``job`` on
    ``cluster`` would take."""
    return any(w.priority >= job.priority and (cluster in w.clusters
                                               or (w.quota and job.quota is not None))
               for w in waiting)
RUNNING = "Running"


def count(demand: JobDemand, role: str) -> int:
    return next((r.replicas for r in demand.roles if r.name == role), 0)


def with_count(demand: JobDemand, role: str, n: int) -> JobDemand:
    return JobDemand(demand.key, tuple(replace(r, replicas=n) if r.name == role else r
                                       for r in demand.roles))


def sized(job: JobView, n: int) -> JobView:
    """``job`` asking for ``n`` replicas of its elastic role (demand and quota charge)."""
    assert job.elastic is not None
    assert job.demand is not None
    demand = with_count(job.demand, job.elastic.role, n)
    quota = replace(job.quota, request=dict(demand.total)) if job.quota is not None else None
    return replace(job, demand=demand, quota=quota)


def choose_size(job: JobView, short: Callable[[JobView], str]) -> tuple[JobView, str]:
    """The largest size in ``min..max`` that fits (``short`` says why a size does not fit
    the quota or the nodes now, "" when it fits) and why; at its min with no reason when
    nothing fits (it waits, or preempts, for its min)."""
    e = job.elastic
    assert e is not None
    if not short(at_max := sized(job, e.max)):
        return at_max, ""
    low, high = e.min, e.max - 1
    if short(sized(job, low)):
        return sized(job, low), ""
    why = ""
    while low < high:  # fitting is monotone in the count: fewer replicas never fit worse
        mid = (low + high + 1) // 2
        reason = short(sized(job, mid))
        if not reason:
            low = mid
        else:
            high, why = mid - 1, reason
    why = why or short(sized(job, low + 1))
    return sized(job, low), (f"elastic: admitted with {low} of {e.min}..{e.max} "
                             f"{e.role.lower()} replicas ({low + 1} do not fit now: {why}); "
                             "it grows as capacity frees")


def last_share(shares: Sequence[ClusterShare], role: str) -> int | None:
    """Index of the share holding ``role``'s highest replica indices."""
    best: tuple[int, int] | None = None
    for i, share in enumerate(shares):
        replicas, offsets = dict(share.replicas), dict(share.offsets)
        if replicas.get(role) and not share.copy:
            top = offsets.get(role, 0) + replicas[role]
            if best is None or top > best[0]:
                best = (top, i)
    return None if best is None else best[1]


def shrunk_shares(shares: Sequence[ClusterShare], role: str, keep: int
                  ) -> tuple[tuple[ClusterShare, ...], tuple[str, ...]]:
    """The placement keeping replicas ``0..keep-1`` of ``role``, and the clusters that lose
    some. A share left with no replica at all is dropped (its Work goes)."""
    out: list[ClusterShare] = []
    changed: list[str] = []
    for share in shares:
        replicas, offsets = dict(share.replicas), dict(share.offsets)
        have = replicas.get(role, 0)
        if not have or share.copy:
            out.append(share)
            continue
        left = max(0, min(have, keep - offsets.get(role, 0)))
        if left == have:
            out.append(share)
            continue
        changed.append(share.cluster)
        if left:
            replicas[role] = left
        else:
            replicas.pop(role)
            offsets.pop(role, None)
        if replicas:
            out.append(replace(share, replicas=tuple(replicas.items()),
                               offsets=tuple(offsets.items())))
    return tuple(out), tuple(changed)


class QuotaRoom:
    """Whether a bound job's quota leaf and every ancestor have room below their max for
    what growing it adds; what each grow adds is charged, so several grows in a pass add up."""

    def __init__(self, admission: AdmissionPass | None) -> None:
        self.admission = admission
        self.nodes = {p.key: p for p in walk(admission.root)} if admission else {}
        self.added: dict[str, dict[str, int]] = {}

    def _path(self, job: JobView) -> list[str]:
        if self.admission is None or job.quota is None:
            return []  # holds no quota: capacity alone decides
        leaf = self.admission.leaf(job.quota)
        return [] if leaf is None else [leaf.key, *("/".join(a) for a in leaf.ancestors)]

    def fits(self, job: JobView, extra: Mapping[str, int]) -> bool:
        for key in self._path(job):
            assert self.admission is not None
            limit, used = self.nodes[key].node.max, self.admission.usage(key)
            more = self.added.get(key, {})
            for name, amount in extra.items():
                if amount and name in limit and \
                        used.get(name, 0) + more.get(name, 0) + amount > limit[name]:
                    return False
        return True

    def charge(self, job: JobView, extra: Mapping[str, int]) -> None:
        for key in self._path(job):
            more = self.added.setdefault(key, {})
            for name, amount in extra.items():
                more[name] = more.get(name, 0) + amount


def grow(jobs: Sequence[JobView], capacity: dict[str, ClusterView], room: QuotaRoom,
         waiting: Sequence[Waiting] = ()) -> list[Grow]:
    """Grow the bound elastic jobs that run below their max, in decision order, with the
    capacity and quota this pass left, unless a ``waiting`` job holds them back. Each grow
    takes its capacity before the next."""
    out = []
    for job in sorted((j for j in jobs if _growable(j)), key=lambda j: j.order):
        intent = _grow_one(job, capacity, room, waiting)
        if intent is not None:
            out.append(intent)
            for cluster, requests in intent.spent:
                share = next(s for s in intent.shares if s.cluster == cluster)
                capacity[cluster] = with_assumed(capacity[cluster], list(requests),
                                                 share.domains_of(intent.role))
                for request in requests:
                    room.charge(job, request)
    return out


def _growable(job: JobView) -> bool:
    e = job.elastic
    return (e is not None and job.stage is Stage.BOUND and not job.finished
            and job.demand is not None and job.policy is not None
            and count(job.demand, e.role) < e.max and bool(job.works)
            and all(w.state == RUNNING and not w.deleting for w in job.works)
            and {s.cluster for s in job.placement} <= {w.cluster for w in job.works})


def _grow_one(job: JobView, capacity: Mapping[str, ClusterView], room: QuotaRoom,
              waiting: Sequence[Waiting]) -> Grow | None:
    """Grow ``job`` on the share holding its highest indices, within the topology domains
    that share keeps to (its pods are pinned there); what that member cannot take goes to
    one member the job does not use yet, as a new share after its highest index, when its
    policy lets it split. Replica indices stay contiguous either way."""
    e, demand, policy = job.elastic, job.demand, job.policy
    assert e is not None
    assert demand is not None
    assert policy is not None
    at = last_share(job.placement, e.role)
    if at is None:
        return None
    share = job.placement[at]
    role = next(r for r in demand.roles if r.name == e.role)
    now = count(demand, e.role)
    wanted = e.max - now
    shares = list(job.placement)
    spent: list[tuple[str, int]] = []  # (cluster, replicas added there)
    cluster = capacity.get(share.cluster)
    if cluster is not None and cluster.ready and not cluster.stale_reason and \
            not holds_back(waiting, job, share.cluster):
        rules = PlacementRules(tolerations=policy.rules.tolerations,
                               fit_mode=policy.rules.fit_mode)
        more, grown = _most(job, role, within(cluster, share.domains_of(e.role)), None, rules,
                            wanted, 0, room)
        if grown is not None:
            replicas = dict(share.replicas)
            replicas[e.role] += more
            shares[at] = replace(share, replicas=tuple(replicas.items()),
                                 nodes=tuple(sorted({*share.nodes, *grown.nodes})))
            spent.append((share.cluster, more))
    added = sum(n for _, n in spent)
    if added < wanted and _may_spread(job, policy.rules):
        new = _new_share(job, role, capacity, room, waiting, wanted - added, added)
        if new is not None:
            top = dict(share.offsets).get(e.role, 0) + dict(shares[at].replicas)[e.role]
            shares.append(replace(new, offsets=((e.role, top),)))
            spent.append((new.cluster, dict(new.replicas)[e.role]))
            added += spent[-1][1]
    if not added:
        return None
    after = now + added
    where = " and ".join(f"{name} (+{n})" if len(spent) > 1 else name for name, n in spent)
    return Grow(job.key, e.role, now, after, tuple(shares),
                f"grown {now}→{after} {e.role.lower()} replicas on {where}: capacity "
                f"freed ({e.min}..{e.max})", tuple(name for name, _ in spent),
                tuple((name, tuple(role.request for _ in range(n))) for name, n in spent),
                policy.propagate_deps)


def _new_share(job: JobView, role: Role, capacity: Mapping[str, ClusterView], room: QuotaRoom,
               waiting: Sequence[Waiting], wanted: int, already: int) -> ClusterShare | None:
    """The share of the member (one the job does not use yet, its policy's affinity and
    tolerations met, its topology kept) that takes the most of ``wanted`` more replicas;
    ties go by member name."""
    assert job.policy is not None
    rules = replace(job.policy.rules, max_clusters=1)
    topology = job.demand.topology if job.demand is not None else None
    used = {s.cluster for s in job.placement}
    best: tuple[int, ClusterShare] | None = None
    for other in filter_clusters(list(capacity.values()), rules.affinity,
                                 rules.tolerations).eligible:
        if other.name in used or other.name in job.avoid or \
                holds_back(waiting, job, other.name):
            continue
        more, share = _most(job, role, other, topology, rules, wanted, already, room)
        if share is not None and (best is None or more > best[0]):
            best = (more, share)
    return None if best is None else best[1]


def _may_spread(job: JobView, rules: PlacementRules) -> bool:
    """Whether a grow may add a member: a divided job below its policy's cluster limit."""
    return rules.scheduling_type is SchedulingType.DIVIDED and rules.gang and \
        len(job.placement) < rules.max_clusters


def _most(job: JobView, role: Role, cluster: ClusterView, topology: TopologyRequest | None,
          rules: PlacementRules, wanted: int, already: int, room: QuotaRoom
          ) -> tuple[int, ClusterShare | None]:
    """The most replicas of ``role`` (up to ``wanted``) that ``cluster`` and the job's quota
    (``already`` added elsewhere this grow) take, and their share; (0, None) for none."""

    def fits(k: int) -> ClusterShare | None:
        if not room.fits(job, Resources.of({n: v * (already + k)
                                            for n, v in role.request.items()})):
            return None
        extra = JobDemand(job.key, (replace(role, replicas=k, leader=False),), topology)
        decision = divide(extra, [cluster], rules)
        return decision.shares[0] if decision.placed else None

    low, high, found = 0, wanted, None
    while low < high:  # the most that fits: fewer replicas never fit worse
        mid = (low + high + 1) // 2
        share = fits(mid)
        if share is not None:
            low, found = mid, share
        else:
            high = mid - 1
    return low, found


__all__ = ["Elastic", "QuotaRoom", "Waiting", "choose_size", "count", "grow", "shrunk_shares",
           "sized"]
