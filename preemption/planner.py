"""One fleet-wide preemption decision for one waiting job.

Given a job that waits (it does not fit any node of the fleet, or its quota is full), the
running jobs of the fleet and the quota tree, :func:`plan` says one of three things:

- **Fits**: the job fits as things are, somewhere in the fleet: it is placed there and nobody
  is preempted (HiveD's lazy preemption, fleet-wide);
- **Preempt**: these victims, once gone, let every replica of the job fit a node (and its
  quota): fewest victims first, then the lowest priorities, then those on the preemptor's
  tenant's cells (it lands at home, :func:`home_first`), then the youngest;
- **Preempt** by shrinking: elastic jobs (PyTorchJob ``elasticPolicy``) that may be victims
  are first asked to give back replicas down to their min; when that is enough, nobody is
  evicted, and each shrunk job gives back as few replicas as the preemptor needs;
- **NoPlan**: with every victim it may take gone it would still not fit, or it may not
  preempt at all (an opportunistic job).

No cascades: a job itself preempted, until it runs again, takes only opportunistic jobs (they
run on idle capacity and preempt nobody, so the chain ends there). Taking nothing at all left
such a job waiting for a whole node that idle-capacity jobs kept refilling, and a Priority
queue that had blocked for it (its starvation bound) waiting with it: on the trace, a tenant's
p99 five times as long with preemption as without.

Who may be a victim of a job of priority ``p`` (always strictly lower than ``p``):
opportunistic jobs anywhere; jobs of the same quota leaf (a tenant orders its own work);
jobs holding no quota (no tree covers their namespace: capacity alone decides, as with
kube-scheduler's preemption in one cluster); and jobs of another leaf that borrows beyond
its min, when the job claims capacity within its own leaf's guarantee. A guaranteed job
within another tenant's min is never taken.

:func:`plan_reclaim` is the guarantee's own claim, asked when no priority plan helps: a job
within its leaf's guarantee that no node holds takes back nodes from tenants borrowing beyond
their min (and from opportunistic jobs) whatever their priority, the fewest jobs first, as on
its private cluster it would not wait for another tenant's jobs. The quota reclaim alone
(:mod:`quota.engine`) frees quota, not nodes: on the trace a tenant's 8-GPU gang within its
guarantee waited 684 s for a whole node that the other tenants' jobs kept refilling.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from itertools import combinations

from preemption.freed import with_freed
from preemption.model import Outcome, Plan, Preemptor, QuotaLimits, Running
from preemption.quota_limits import borrowing, fits_quota, on_borrowed, within_guarantee
from propagation.clusters import filter_clusters
from propagation.division import Decision, divide
from propagation.jobkey import shown
from propagation.resources import scarcity_order
from propagation.views import ClusterView
from quota.cells import node_key
from quota.priority import is_opportunistic

# Exact search for the fewest victims tries sets of up to this many, within this many fit
# checks; beyond it a greedy pass decides (take candidates in victim order until the job
# fits, then spare every one it can do without), a few checks per victim.
EXACT_SET_SIZE = 3
EXACT_BUDGET = 128


def plan(preemptor: Preemptor, running: Sequence[Running], clusters: Sequence[ClusterView],
         limits: QuotaLimits | None = None, owners: Mapping[str, str] | None = None) -> Plan:
    limits = limits or QuotaLimits()
    quota_ok = fits_quota(preemptor, (), limits)
    if quota_ok:
        decision = divide(preemptor.demand, clusters, preemptor.rules)
        if decision.placed:
            return Plan(Outcome.FITS, f"fits without preemption: {decision.reason}",
                        decision=decision)
    if is_opportunistic(preemptor.priority):
        return Plan(Outcome.NO_PLAN, "an opportunistic job preempts nobody")
    useful = _useful(preemptor, clusters, limits, quota_ok)
    candidates = sorted((r for r in running if may_preempt(preemptor, r, limits)
                         and useful(r) and (is_opportunistic(r.priority)
                                            or not preemptor.preempted)),
                        key=home_first(owners or {}, preemptor.leaf))
    if not candidates:
        return Plan(Outcome.NO_PLAN, "it was preempted itself: until it runs again it "
                                     "preempts only opportunistic jobs, and none is in its way"
                    if preemptor.preempted else "no lower-priority job it may preempt")
    shrinking = _shrink(preemptor, candidates, clusters, limits, useful)
    if shrinking is not None:
        return shrinking
    check = _Check(preemptor, clusters, limits)
    if check(candidates) is None:
        return Plan(Outcome.NO_PLAN, f"it would not fit even with all {len(candidates)} "
                                     "lower-priority jobs it may preempt gone")
    found = _fewest(candidates, check) or _greedy(candidates, check)
    victims, decision = found
    names = ", ".join(v.key for v in victims)
    return Plan(Outcome.PREEMPT, f"preempting {len(victims)} lower-priority "
                                 f"job{'s' if len(victims) > 1 else ''} ({names}) lets it fit: "
                                 f"{decision.reason}", victims, decision)


def plan_reclaim(preemptor: Preemptor, running: Sequence[Running],
                 clusters: Sequence[ClusterView], limits: QuotaLimits,
                 owners: Mapping[str, str] | None = None) -> Plan:
    """For a claim within the preemptor's guarantee that no node holds (its quota may well
    fit: the fleet is fragmented, or its GPUs taken by other tenants): the jobs of other
    tenants that hold the scarcest resource it asks for (GPUs) wholly on borrowed capacity
    (their tenant still at its min of it without each), other tenants' jobs with a pod on
    the preemptor's tenant's cells (``owners``: node key -> leaf, dealt by ``quota.cells``:
    guests there, whether or not their tenant borrows), and opportunistic jobs, whose
    removal lets every replica fit a node, whatever their priority. A guarantee is not a
    priority: on HiveD another virtual cluster runs on a VC's cells only as opportunistic
    jobs, and on its private cluster a tenant's gang waits only for its own jobs. Fewest
    victims, then the lowest priority, then those at home first (``home_first``), then
    the youngest."""
    if preemptor.leaf is None or not within_guarantee(preemptor, limits):
        return Plan(Outcome.NO_PLAN, "not within its guarantee")
    check = _Check(preemptor, clusters, limits)
    as_is = check(())
    if as_is is not None:
        return Plan(Outcome.FITS, f"fits without preemption: {as_is.reason}", decision=as_is)
    useful = _useful(preemptor, clusters, limits, True)
    scarcest = next(iter(scarcity_order(preemptor.demand.total)), "")
    owners = owners or {}
    candidates = sorted((r for r in running if r.key != preemptor.key and useful(r) and (
        is_opportunistic(r.priority) or (r.leaf is not None and r.leaf != preemptor.leaf
                                         and on_borrowed(r, scarcest, limits))
        or _guest(r, preemptor, owners))), key=home_first(owners, preemptor.leaf))
    if not candidates or check(candidates) is None:
        return Plan(Outcome.NO_PLAN, "it would not fit even with every borrowed job in its "
                                     "way gone")
    victims, decision = _fewest(candidates, check) or _greedy(candidates, check)
    names = ", ".join(v.key for v in victims)
    return Plan(Outcome.PREEMPT, f"reclaiming {len(victims)} job"
                                 f"{'s' if len(victims) > 1 else ''} of other tenants, beyond "
                                 f"their min or on its tenant's cells ({names}), lets it fit "
                                 f"within its guarantee: {decision.reason}", victims, decision)


def _guest(job: Running, preemptor: Preemptor, owners: Mapping[str, str]) -> bool:
    """Another tenant's job with a pod on one of the preemptor's tenant's cells."""
    return job.leaf != preemptor.leaf and any(
        owners.get(node_key(pod.cluster, pod.node)) == preemptor.leaf
        for pod in job.pods if pod.node)


def shrunk(job: Running, keep: int) -> Running | None:
    """``job`` as a shrink to ``keep`` replicas of its elastic role: the pods and quota it
    gives back (its highest replica indices). None when it cannot shrink that far, or when a
    pod of its role has no known index (the plan would not know which pods go)."""
    e = job.elastic
    if e is None or not e.min <= keep < e.size:
        return None
    role = e.role.lower()
    mine = [p for p in job.pods if p.role == role]
    if any(p.index < 0 for p in mine):
        return None
    given = e.size - keep
    charge = {name: amount * given for name, amount in e.unit.items()} if job.charge else {}
    return replace(job, pods=tuple(p for p in mine if p.index >= keep), charge=charge,
                   keep=keep)


def _shrink(preemptor: Preemptor, candidates: Sequence[Running],
            clusters: Sequence[ClusterView], limits: QuotaLimits,
            useful: Callable[[Running], bool]) -> Plan | None:
    """Shrinking elastic jobs first: when shrinking them (each at most to its min) lets the
    preemptor fit, the fewest shrinks, each giving back as few replicas as it can."""
    shrinks = [s for c in candidates if c.elastic is not None
               and (s := shrunk(c, c.elastic.min)) is not None and useful(s)]
    if not shrinks:
        return None
    check = _Check(preemptor, clusters, limits)
    if check(shrinks) is None:
        return None
    victims, _ = _fewest(shrinks, check) or _greedy(shrinks, check)
    kept = list(victims)
    for i, victim in enumerate(kept):  # give back no more than needed, in victim order
        assert victim.elastic is not None
        assert victim.keep is not None
        low, high = victim.keep, victim.elastic.size - 1
        while low < high:
            mid = (low + high + 1) // 2
            trial = shrunk(_whole(victim, candidates), mid)
            fits = check([*kept[:i], trial, *kept[i + 1:]]) if trial is not None else None
            if fits is not None:
                low = mid
            else:
                high = mid - 1
        less = shrunk(_whole(victim, candidates), low)
        assert less is not None
        kept[i] = less
    final = check(kept)
    assert final is not None
    names = ", ".join(f"{shown(v.key)} to {v.keep}" for v in kept)
    return Plan(Outcome.PREEMPT, f"shrinking {len(kept)} elastic job"
                                 f"{'s' if len(kept) > 1 else ''} ({names}) lets it fit: "
                                 f"{final.reason}", tuple(kept), final)


def _whole(victim: Running, candidates: Sequence[Running]) -> Running:
    return next(c for c in candidates if c.key == victim.key)


def victim_order(job: Running) -> tuple[int, tuple[int, ...], str]:
    """Lowest priority first, then the youngest (latest started), then by key."""
    return (job.priority, tuple(-ord(c) for c in job.started), job.key)


def may_preempt(preemptor: Preemptor, job: Running, limits: QuotaLimits) -> bool:
    if job.key == preemptor.key or job.priority >= preemptor.priority:
        return False
    if is_opportunistic(job.priority) or job.leaf is None:
        return True  # no guarantee to keep: opportunistic, or holding no quota
    if preemptor.leaf is None:
        return False  # a job outside every tree never takes a tenant's quota'd job
    if job.leaf == preemptor.leaf:
        return True
    return borrowing(job.leaf, limits) and within_guarantee(preemptor, limits)


def home_first(owners: Mapping[str, str], leaf: str | None
               ) -> Callable[[Running], tuple[object, ...]]:
    """Victim order, with the jobs standing on the preemptor's tenant's cells before those
    on nodes nobody owns, and those before jobs on other tenants' cells, at each priority.
    Freed there, the preemptor lands at home: on another tenant's cells it would be a guest
    that tenant takes back (on the trace, a tenant's 8-GPU gang that had preempted
    opportunistic jobs on another tenant's cells was taken back twice, and its queue waited
    for it). Without cells every job ranks alike."""
    def key(job: Running) -> tuple[object, ...]:
        away = 0
        for pod in job.pods:
            owner = owners.get(node_key(pod.cluster, pod.node)) if pod.node else None
            away = max(away, 1 if owner is None else 0 if owner == leaf else 2)
        priority, *rest = victim_order(job)
        return (priority, away, *rest)

    return key


class _Check:
    """Does the preemptor fit (quota, then nodes) once these victims are gone?"""

    def __init__(self, preemptor: Preemptor, clusters: Sequence[ClusterView],
                 limits: QuotaLimits) -> None:
        self.preemptor, self.clusters, self.limits = preemptor, clusters, limits
        self.calls = 0

    def __call__(self, victims: Sequence[Running]) -> Decision | None:
        self.calls += 1
        if not fits_quota(self.preemptor, victims, self.limits):
            return None
        views = with_freed(self.clusters, (pod for v in victims for pod in v.pods))
        decision = divide(self.preemptor.demand, views, self.preemptor.rules)
        return decision if decision.placed else None


Found = tuple[tuple[Running, ...], Decision]


def _fewest(candidates: Sequence[Running], check: _Check) -> Found | None:
    """The first set, smallest first, in victim order (so the lowest-priority, youngest
    jobs are preferred), that lets the preemptor fit; None past the search budget."""
    for size in range(1, min(EXACT_SET_SIZE, len(candidates)) + 1):
        for victims in combinations(candidates, size):
            if check.calls >= EXACT_BUDGET:
                return None
            decision = check(victims)
            if decision is not None:
                return victims, decision
    return None


def _greedy(candidates: Sequence[Running], check: _Check) -> Found:
    """Every candidate gone fits (checked by the caller): take them in victim order until
    the preemptor fits, then spare back the most valuable (highest priority, oldest) first
    while it still fits, so that none is taken in vain."""
    victims: list[Running] = []
    decision = None
    for candidate in candidates:
        victims.append(candidate)
        decision = check(victims)
        if decision is not None:
            break
    assert decision is not None
    for spared in reversed(list(victims)):
        rest = [v for v in victims if v is not spared]
        fits = check(rest) if rest else None
        if fits is not None:
            victims, decision = rest, fits
    return tuple(sorted(victims, key=victim_order)), decision


def _useful(preemptor: Preemptor, clusters: Sequence[ClusterView], limits: QuotaLimits,
            quota_ok: bool) -> Callable[[Running], bool]:
    """Whether taking a job could help at all: it frees a node of a cluster the preemptor
    may go to, or quota on the preemptor's path when that is what is short."""
    eligible = {c.name for c in filter_clusters(clusters, preemptor.rules.affinity,
                                                preemptor.rules.tolerations).eligible}
    path = set(limits.paths.get(preemptor.leaf, ())) if preemptor.leaf else set()

    def useful(job: Running) -> bool:
        if any(pod.node and pod.cluster in eligible for pod in job.pods):
            return True
        return not quota_ok and job.leaf is not None and \
            bool(path & set(limits.paths.get(job.leaf, ())))

    return useful
