"""What a pass decides, as typed intents in the order to write them.

Each intent names its job by key and says why. The hub's writer carries each one out
idempotently (guarded by the job's resourceVersion where the write decides something); the
simulator applies them to its simulated members. Preemption, growing and shrinking a job are
further intents of the same shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from propagation.division import ClusterShare, Decision
from propagation.resources import Resources
from propagation.views import JobDemand
from quota.ledger import Job


@dataclass(frozen=True)
class Bind:
    """Record the placement (admitted by quota first when ``admitted_at``), then dispatch
    one Work per share."""

    job: str
    shares: tuple[ClusterShare, ...]
    reason: str  # the ScheduleBindingSucceed message
    admitted_at: str = ""  # the admission stamp, for a job a quota queue admitted
    admitted_by: str = ""  # its quota leaf, e.g. "root/team-a"
    purge_mode: str = ""  # the policy's failover purge mode, carried on the job
    spent: tuple[tuple[str, tuple[Resources, ...]], ...] = ()  # per cluster, per replica
    propagate_deps: bool = False
    member_trainer: bool = False  # a TrainJob's Work carries it for the member's Trainer
    sized: str = ""  # an elastic job admitted below its max: at what size, and why
    backfill: str = ""  # it starts before a reserved gang, ending first: how (an event)
    # Reservation mode on a chosen member: the Works start in phase Reserve (no pods until
    # every member confirmed its reservation; see ``Commit`` and ``RollBack``).
    reserve: bool = False
    # Whose nodes its pods keep to (HiveD's cells, node by node): its quota leaf, or
    # OPPORTUNISTIC_TENANT for an opportunistic job; "" for a guaranteed job no quota tree
    # covers. Pods of one tenant prefer nodes no other tenant's pods are on, so that what a
    # reclaim or a preemption frees is whole nodes, and one tenant's small jobs do not break
    # up the nodes another's guarantee needs.
    tenant: str = ""
    # The quota it holds once admitted: its job's, at the size it was bound (what the shell
    # counts as held while the bind is being written).
    holds: Job | None = None

    @property
    def clusters(self) -> tuple[str, ...]:
        return tuple(s.cluster for s in self.shares)


@dataclass(frozen=True)
class Dispatch:
    """A bound job lacks the Works of these clusters (a hub died between bind and
    dispatch): create them for the recorded placement."""

    job: str
    clusters: tuple[str, ...]
    propagate_deps: bool = False
    member_trainer: bool = False
    reason: str = "placement recorded, Works missing"


@dataclass(frozen=True)
class Commit:
    """Every member reserved its share: move these Works to phase Commit (pods start)."""

    job: str
    works: tuple[str, ...]  # "<member namespace>/<name>", the ones still in phase Reserve
    reason: str


@dataclass(frozen=True)
class RollBack:
    """A reservation failed (a member refused, or the deadline passed): requeue the job, so
    every Work of the placement goes (with its placeholders), and place it again no sooner
    than ``retry_at``."""

    job: str
    member: str  # the member that refused or did not confirm in time
    reason: str
    retry_at: float  # seconds since the epoch


@dataclass(frozen=True)
class Wait:
    """The job stays unbound: its Queuing condition says why (and its place in its queue)."""

    job: str
    # Invalid, NoMatchingPolicy, NoQuotaTree, NoQuotaLeaf, QuotaExceeded, Unschedulable,
    # Reserved (a gang holding capacity from a computed start), KeptBack (behind one), ...
    reason: str
    message: str
    queue: str = ""  # Queue name, for a job waiting in a quota queue
    position: int = 0


@dataclass(frozen=True)
class Requeue:
    """Preempt a bound job: mark it to go back to its queue (its quota is released now, its
    Works are deleted next)."""

    job: str
    reason: str
    claimant: str = ""  # the job whose guarantee it returns


@dataclass(frozen=True)
class Preempt:
    """Preemption for a waiting job: mark each victim to go back to its queue, preempted by
    ``job`` (the capacity freed is held for it: the plan's holds)."""

    job: str  # the preemptor
    victims: tuple[tuple[str, str], ...]  # victim key, why
    reason: str
    # "priority", or "guarantee": a job within its tenant's guarantee takes nodes back from
    # borrowers whatever their priority (preemption.planner.plan_reclaim)
    kind: str = "priority"


@dataclass(frozen=True)
class Resize:
    """Change an elastic job's replica count in place: its placement becomes ``shares`` and
    the Works of the clusters whose share changed carry the new count (the placement
    generation stays: the running replicas are kept, only replicas are added or removed)."""

    job: str
    role: str
    before: int  # replicas of ``role`` before and after
    after: int
    shares: tuple[ClusterShare, ...]
    reason: str
    changed: tuple[str, ...] = ()  # the clusters whose share changed (Works to rewrite)
    spent: tuple[tuple[str, tuple[Resources, ...]], ...] = ()  # a grow: per cluster, added

    @property
    def grown(self) -> bool:
        return self.after > self.before


@dataclass(frozen=True)
class Grow(Resize):
    """Capacity freed: add replicas to an elastic job that runs below its max."""

    propagate_deps: bool = False  # the Work of a member it grows onto carries its references


@dataclass(frozen=True)
class Shrink(Resize):
    """Preemption: give back replicas of an elastic job down to (at least) its min instead
    of evicting it."""

    preemptor: str = ""


@dataclass(frozen=True)
class FailOver:
    """Move a bound job off an unhealthy member: Graciously evicts its Works and unbinds it at
    once; Immediately and Never mark it requeued (its Works go with that purge mode)."""

    job: str
    reason: str
    purge_mode: str
    since: float  # when its first share became unhealthy
    avoid: tuple[str, ...]  # unhealthy members its next placement avoids
    lost_clusters: tuple[str, ...] = ()
    evict_after: float | None = None  # Graciously: when the evicted Works go at the latest
    works: tuple[str, ...] = ()  # its Works, to evict or to set the purge mode on


@dataclass(frozen=True)
class WorkRemoval:
    work: str  # "<member namespace>/<name>"
    delete: bool = True  # False when it is already going
    purge_now: bool = False  # purge mode Never overridden: a deleted job takes its copies
    drop_agent_finalizer: bool = False  # its member is lost: its agent cannot release it


@dataclass(frozen=True)
class RemoveWorks:
    job: str
    works: tuple[WorkRemoval, ...]
    reason: str
    release: bool = False  # a deleted job: its finalizer goes once every Work is going


@dataclass(frozen=True)
class Unbind:
    """A requeued job's Works are gone: it waits in its queue again."""

    job: str
    reason: str


@dataclass(frozen=True)
class Completed:
    """A requeued job that every member reported succeeded: its requeue reached them too
    late. It keeps its placement, takes its members' word as its status and never runs
    again (its quota was released when it was marked)."""

    job: str
    reason: str


@dataclass(frozen=True)
class Release:
    """A deleted job's Works are gone: let its deletion finish (drop the dispatch finalizer)."""

    job: str
    reason: str = "Works gone"


@dataclass(frozen=True)
class Expire:
    """ttlSecondsAfterFinished has passed: delete the finished job."""

    job: str
    reason: str


@dataclass(frozen=True)
class QueueReport:
    """Every quota node's usage after the pass and each leaf's waiting jobs in order: the
    Queue objects to publish."""

    usage: Mapping[str, Mapping[str, int]]  # node key -> resource -> used
    pending: Mapping[str, tuple[str, ...]]  # leaf key -> its first waiting job keys in order
    oldest: Mapping[str, str] = field(default_factory=dict)  # leaf key -> first's created
    # leaf key -> member -> how many of the member's nodes its guarantee owns (its cells)
    cells: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    waiting: Mapping[str, int] = field(default_factory=dict)  # leaf key -> jobs waiting


Intent = (Bind | Commit | RollBack | Dispatch | Wait | Requeue | Preempt | Grow | Shrink
          | FailOver | RemoveWorks | Unbind | Completed | Release | Expire | QueueReport)


def share_requests(demand: JobDemand, decision: Decision
                   ) -> tuple[tuple[str, tuple[Resources, ...]], ...]:
    """Per cluster, the request of every replica the decision puts there."""
    requests = {role.name: role.request for role in demand.roles}
    return tuple((share.cluster, tuple(requests[role] for role, count in share.replicas
                                       for _ in range(count)))
                 for share in decision.shares)
