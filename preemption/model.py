"""The planner's frozen inputs and its decision."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from propagation.division import ClusterShare, Decision
from propagation.resources import Resources
from propagation.views import JobDemand, PlacementRules
from quota.amounts import Amounts


@dataclass(frozen=True, slots=True)
class Pod:
    """One running replica of a job that might be preempted."""

    cluster: str
    node: str  # "" when unknown (not bound yet): its capacity is not counted as freed
    request: Resources
    role: str = ""  # its replica type, lower-case ("worker"); "" when unknown
    index: int = -1  # its replica index; -1 when unknown (it is never shrunk away)


@dataclass(frozen=True, slots=True)
class Elasticity:
    """A running elastic job: ``role`` runs ``size`` replicas now and may run ``min``."""

    role: str  # as the kind spells it: "Worker"
    min: int
    size: int
    placement: tuple[ClusterShare, ...]
    unit: Amounts = field(default_factory=dict)  # the quota one replica of ``role`` charges


@dataclass(frozen=True)
class Running:
    """A bound, unfinished job: a possible victim."""

    key: str  # "<kind>/<namespace>/<name>"
    namespace: str
    priority: int
    started: str  # RFC 3339 time it was admitted or bound; the youngest is preempted first
    pods: tuple[Pod, ...]
    charge: Amounts = field(default_factory=dict)  # what it counts against quota
    leaf: str | None = None  # quota leaf it is charged to ("root/a"); None: holds no quota
    elastic: Elasticity | None = None
    # A shrink rather than an eviction: the job keeps this many replicas of its elastic
    # role; ``pods`` and ``charge`` are then only what it gives back.
    keep: int | None = None


@dataclass(frozen=True)
class Preemptor:
    """A job that waits: it does not fit, or its quota is full."""

    key: str
    namespace: str
    priority: int
    demand: JobDemand
    rules: PlacementRules
    charge: Amounts = field(default_factory=dict)  # its quota charge (request and one job)
    leaf: str | None = None  # its quota leaf; None: no quota tree covers its namespace
    preempted: bool = False  # itself preempted, not yet running again: takes opportunistic only


@dataclass(frozen=True)
class QuotaLimits:
    """The quota tree as far as preemption needs it: per node key ("root/a"), its min, max
    and current usage, and for each leaf the keys of the leaf and its ancestors."""

    min: Mapping[str, Amounts] = field(default_factory=dict)
    max: Mapping[str, Amounts] = field(default_factory=dict)
    usage: Mapping[str, Amounts] = field(default_factory=dict)
    paths: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


class Outcome(StrEnum):
    FITS = "Fits"  # fits as things are (lazy preemption: placed where capacity is free)
    PREEMPT = "Preempt"
    NO_PLAN = "NoPlan"


@dataclass(frozen=True)
class Plan:
    outcome: Outcome
    reason: str
    victims: tuple[Running, ...] = ()  # in preemption order (``keep`` set: shrunk instead)
    decision: Decision | None = None  # where the preemptor goes (once the victims are gone)
