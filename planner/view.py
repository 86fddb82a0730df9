"""The frozen snapshot one scheduling pass plans from.

The hub's shell builds it from its cache (:mod:`fleet.hub.pass_view`), the simulator from its
simulated members (:mod:`fleet.sim.engine`). Everything a decision reads is here, already
parsed: a job's demand is computed once, by whoever builds the view, and times are seconds
since the epoch, so that the planner never reads a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from preemption.model import Pod, Running
from propagation.division import ClusterShare
from propagation.resources import Resources
from propagation.views import ClusterView, JobDemand, PlacementRules
from quota.cells import Cells
from quota.engine import DEFAULT_STARVATION_BOUND, Holding, Job, QueuePolicy, QuotaLedger
from quota.queues import admission_order
from quota.tree import QuotaNode

if TYPE_CHECKING:  # (it reads JobView, below)
    from planner.waiting import Waiting


class Stage(StrEnum):
    """Where a job is in its life, as the hub's durable marks say."""

    WAITING = "Waiting"  # unbound and not finished: this pass may place it
    BOUND = "Bound"  # has a placement
    REQUEUED = "Requeued"  # preempted or failed over: its Works go, then it waits again
    DELETING = "Deleting"  # being deleted: its Works go, then its finalizer
    DONE = "Done"  # unbound and finished: nothing to do


@dataclass(frozen=True)
class FailoverSettings:
    """A policy's application failover, defaulted as Karmada does."""

    toleration_seconds: float
    purge_mode: str  # Immediately, Graciously or Never
    grace_period_seconds: float


@dataclass(frozen=True)
class PolicyView:
    """The governing (Cluster)PropagationPolicy, parsed."""

    name: str
    rules: PlacementRules
    queues: bool = False  # suspension.scheduling: a quota queue must admit the job first
    failover: FailoverSettings | None = None
    propagate_deps: bool = False  # its Works carry the ConfigMaps, Secrets, PVCs referenced
    member_trainer: bool = False  # its TrainJobs run by the member's own Trainer, whole


@dataclass(frozen=True, slots=True)
class WorkView:
    """One of a job's Works (a share on one member)."""

    name: str  # "<member namespace>/<name>"
    cluster: str
    state: str = ""  # the agent's reported state: Running, Succeeded, ...
    deleting: bool = False
    keeps_copy: bool = False  # purge mode Never: removing the Work leaves the member copy
    unhealthy: bool = False  # its Healthy condition is False
    unhealthy_since: float | None = None  # when it turned False (None: unknown)
    unhealthy_reason: str = ""
    evict_after: float | None = None  # graceful eviction deadline (evicting Works only)
    phase: str = ""  # its reservation phase: Reserve, Commit, or "" (none)
    reservation: str = ""  # the agent's report: Reserved, Reserving, Refused, or "" (none yet)
    reservation_message: str = ""
    created: float | None = None  # when the hub created it (the reservation's deadline runs
    # from the first Work of the placement)


@dataclass(frozen=True, slots=True)
class Elastic:
    """An elastic job (PyTorchJob ``elasticPolicy``): its ``role`` runs with anywhere from
    ``min`` to ``max`` replicas, so it is admitted at what fits, grown as capacity frees and
    shrunk rather than evicted when preempted."""

    role: str  # as the kind spells it: "Worker"
    min: int
    max: int


# How long a job that failed over keeps off the members it left: Kubernetes' default
# toleration of a not-ready node. Karmada ends a graceful eviction after a timeout too, so a
# member a job failed on, perhaps the only one that can hold it, takes it again later.
FAILOVER_AVOID_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class JobView:
    key: str  # "<kind>/<namespace>/<name>"
    uid: str
    created: str  # creation time as text: only compared, never parsed
    stage: Stage
    demand: JobDemand | None = None  # None when the job is invalid
    invalid: str = ""  # why the job cannot be divided as it is (a field beyond its bound)
    policy: PolicyView | None = None
    quota: Job | None = None  # its quota view, when its policy queues it
    placement: tuple[ClusterShare, ...] = ()
    works: tuple[WorkView, ...] = ()  # of its current placement
    evicting: tuple[WorkView, ...] = ()  # left on members it failed over from
    # a requeued job's Works deleted after reporting their share succeeded
    ended: tuple[WorkView, ...] = ()
    avoid: tuple[str, ...] = ()  # members it failed over from (its next placement avoids them)
    failed_over_at: float | None = None  # when it failed over from members it avoids
    requeue_reason: str = ""
    dispatch_finalizer: bool = False
    finished: bool = False
    finished_at: float | None = None
    ttl_seconds: int | None = None  # ttlSecondsAfterFinished
    priority: int = 0  # its PriorityClass's value (or T9k's priority), 0 without one
    preempted_by: str = ""  # the job that preempted it, until it is bound again
    # Elastic: a waiting job's demand asks for ``elastic.max``; a bound one's for what its
    # placement runs now (and its quota view is set when it holds quota).
    elastic: Elastic | None = None
    # Seconds it runs once started, when known (runPolicy.activeDeadlineSeconds or the
    # fleet.sh/expected-runtime annotation, the smaller): only such a job may backfill.
    runtime: float | None = None
    reserve_retry_at: float | None = None  # its reservation was rolled back: not before then
    # Derived once per view (a frozen view never changes): waiting lists are ordered and
    # searched by them thousands of times a pass. (Fields, not cached properties: a view
    # has slots, no dict: one is kept per job.)
    namespace: str = field(init=False, repr=False, compare=False)
    # Decision order: by priority, then creation (a queued job as its queue orders).
    order: tuple[int, str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "namespace", self.key.split("/")[1])
        object.__setattr__(self, "order", self.quota.order if self.quota is not None
                           else admission_order(self.priority, self.created, self.key))

    @property
    def avoid_until(self) -> float | None:
        """When the members it failed over from may take it again (None: not before it is
        bound elsewhere)."""
        if self.failed_over_at is None:
            return None
        return self.failed_over_at + FAILOVER_AVOID_SECONDS

    def avoiding(self, now: float) -> tuple[str, ...]:
        """The members its placement avoids at ``now``: those it failed over from until
        ``avoid_until`` (as Karmada's graceful eviction ends after a timeout: a member the
        job failed on may be the only one that can ever hold it), those it is still being
        evicted from for as long as that lasts."""
        until = self.avoid_until
        if until is None or now < until:
            return self.avoid
        return tuple(sorted({work.cluster for work in self.evicting}))


@dataclass(frozen=True)
class QuotaView:
    """The active ElasticQuotaTree and who holds quota under it."""

    root: QuotaNode
    holdings: tuple[Holding, ...] = ()
    policies: Mapping[str, QueuePolicy] = field(default_factory=dict)  # by leaf path
    starvation_bound: int = DEFAULT_STARVATION_BOUND
    # The holdings as a ledger carried from pass to pass (instead of ``holdings``).
    ledger: QuotaLedger | None = None
    # Jobs (keys) whose binds are being written: they hold their quota, but are never
    # reclaimed (a requeue would race the bind, and the quota given away would be held twice).
    settling: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Hold:
    """Capacity freed by preempting for a job, held for it until it binds (or ``expires``)."""

    requests: tuple[tuple[str, tuple[Resources, ...]], ...]  # per cluster, per replica
    expires: float  # seconds since the epoch
    message: str
    # Per cluster, the nodes the plan placed it on (those its victims free): held there.
    nodes: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # The jobs on those nodes when the plan was made, its victims among them: any other job
    # found there later took the hold (a member's scheduler puts pods where it likes).
    stayed: tuple[str, ...] = ()


@dataclass(frozen=True)
class PreemptionView:
    """What priority preemption reads: the possible victims, and the state the last pass
    left (the shell keeps it between passes; each plan returns the next one)."""

    running: tuple[Running, ...]  # bound, unfinished jobs (empty when nobody can preempt)
    floor: int = 0  # the lowest priority a job can have: a job at it preempts nobody
    holds: Mapping[str, Hold] = field(default_factory=dict)  # preemptor uid -> its hold
    retry_at: Mapping[str, float] = field(default_factory=dict)  # uid -> plan again after
    plans_per_pass: int = 3  # each plan walks the running jobs
    hold_seconds: float = 300.0
    retry_seconds: float = 5.0  # a job with no plan is planned for again after this long


@dataclass(frozen=True)
class TimedJob:
    """A running job whose runtime is known: it ends, and gives back its pods' capacity, at
    ``started + runtime``. A reserved gang's start is computed from these alone."""

    key: str
    started: float  # seconds since the epoch (when it began to run, or was bound)
    runtime: float  # seconds
    pods: tuple[Pod, ...]  # where it runs: each pod's node and request

    @property
    def ends(self) -> float:
        return self.started + self.runtime


@dataclass(frozen=True)
class BackfillReservation:
    """Backfill: the first gang that does not fit holds what it needs from ``start``, when
    the running jobs ``waits_for`` will have ended. Each plan returns the one it made, and the
    next view brings it back: it stands while its start cannot be computed again."""

    head: str  # the gang's key
    start: float  # seconds since the epoch
    holds: Resources  # its whole demand
    waits_for: tuple[str, ...]  # keys of the running jobs that end by then, in end order
    overdue: bool = False  # some of them are past their expected end: ``start`` was "now"


@dataclass(frozen=True)
class PassView:
    now: float  # seconds since the epoch
    now_text: str  # ``now`` as the stamps the hub writes (admitted-at)
    jobs: tuple[JobView, ...]  # the jobs to look at this pass (the changed ones, at least)
    clusters: Mapping[str, ClusterView]  # as reported: readiness, staleness
    capacity: Mapping[str, ClusterView]  # free capacity less assumed reservations
    lost_since: Mapping[str, float] = field(default_factory=dict)  # member -> lost since
    quota: QuotaView | None = None
    preemption: PreemptionView | None = None  # None: no priority preemption
    # Running jobs with a known end, for backfill: the first gang that does not fit gets a
    # reservation from the time enough of them end. Empty: no reservation, no backfill.
    timed: tuple[TimedJob, ...] = ()
    reservations: Mapping[str, BackfillReservation] = field(default_factory=dict)  # by head uid
    # Reservation mode: how long every member of a placement has to confirm its reservation,
    # and how long a job rolled back waits before it is placed again.
    reserve_seconds: float = 60.0
    reserve_backoff_seconds: float = 10.0
    # Each tenant's cells (:mod:`quota.cells`): the nodes its guarantee owns. A bind names
    # its tenant's cells in each share (its pods prefer them), and a claim within a
    # guarantee takes back other tenants' jobs there.
    cells: Cells = field(default_factory=Cells)
    # The waiting jobs the last pass left (``Plan.waiting``; None: every waiting job is in
    # ``jobs``), and the uids of jobs deleted since.
    waiting: Waiting | None = None
    gone: tuple[str, ...] = ()
    report_queues: bool = True  # the plan ends with a QueueReport
    # Stop deciding after this many binds (0: never): a pass's cost bounded, the rest is
    # the next pass's (a burst of thousands of jobs is placed over consecutive passes).
    max_binds: int = 0
