"""Frozen views of what the hub knows, as the pure decisions take them."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from enum import StrEnum

from propagation.resources import Resources


@dataclass(frozen=True, slots=True)
class NodeLabelIn:
    """A replica may run only on nodes whose label ``key`` has one of ``values``: a pod's
    required node affinity with operator In (a nodeSelector is the one-value case)."""

    key: str
    values: tuple[str, ...]

    def admits(self, labels: tuple[tuple[str, str], ...]) -> bool:
        return any(k == self.key and v in self.values for k, v in labels)

    def __str__(self) -> str:
        return f"{self.key} in [{', '.join(self.values)}]"


def admits_all(requirements: tuple[NodeLabelIn, ...],
               labels: tuple[tuple[str, str], ...]) -> bool:
    return all(r.admits(labels) for r in requirements)


@dataclass(frozen=True, slots=True)
class Role:
    """One replica type of a job: how many replicas and what each one requests."""

    name: str
    replicas: int
    request: Resources
    leader: bool = False  # master, launcher or chief: goes with the largest share
    node_requirements: tuple[NodeLabelIn, ...] = ()  # all must hold on a replica's node
    # The topology this role's replicas keep to on each member (its pod template's
    # annotation, Kueue's pod-set topology); the job's own request covers every role.
    topology: TopologyRequest | None = None

    @property
    def total(self) -> Resources:
        return self.request.scaled(self.replicas)


HOSTNAME_LEVEL = "kubernetes.io/hostname"  # the node itself (as fleet.api.protocol names it)


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """The gang packs within one domain of ``level`` (a node label key, e.g. a rack) on each
    member: ``required`` or it waits; else preferred, over as few domains as it can."""

    level: str
    required: bool = True

    def __str__(self) -> str:
        return f"{'required' if self.required else 'preferred'} topology {self.level}"


@dataclass(frozen=True, slots=True)
class JobDemand:
    key: str  # "<kind>/<namespace>/<name>", unique on the hub
    roles: tuple[Role, ...]
    topology: TopologyRequest | None = None

    # Every replica's request summed; computed once (quota, division and the hub's views
    # each ask, for every waiting job). A field, not a cached property: a demand has slots.
    total: Resources = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        out = Resources()
        for role in self.roles:
            out = out + role.total
        object.__setattr__(self, "total", out)

    @property
    def replicas(self) -> int:
        return sum(role.replicas for role in self.roles)


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """``count`` nodes that each have ``free`` available; ``nodes`` names them when known."""

    count: int
    free: Resources
    labels: tuple[tuple[str, str], ...] = ()
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True)
class ClusterView:
    name: str
    ready: bool
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[Taint, ...] = ()
    node_groups: tuple[NodeGroup, ...] = ()
    not_ready_reason: str = ""
    stale_reason: str = ""  # alive, but its capacity report is too old to place work on
    # The node labels of its topology levels, top level first (the node's hostname last,
    # when reported); node groups carry their values, but for the hostname's.
    topology_levels: tuple[str, ...] = ()
    reservation: bool = False  # reservation mode: a placement here is reserved, then committed

    @functools.cached_property
    def free(self) -> Resources:
        """Summed free capacity (computed once: views are frozen)."""
        return Resources.of(self.free_amounts)

    @functools.cached_property
    def free_amounts(self) -> dict[str, int]:
        """The summed free capacity as a plain dict, for lookups in the hot path of division
        (do not change it: it is shared by everything that reads this view)."""
        out: dict[str, int] = {}
        for group in self.node_groups:
            for name, amount in group.free.items_:
                out[name] = out.get(name, 0) + amount * group.count
        return out

    @functools.cached_property
    def packings(self) -> dict[tuple[object, ...], object]:
        """Packings of replica lists into this view's nodes, by replicas and mode: a view is
        frozen, so a packing once done holds for every later job of the same shape (most jobs
        of a pass share a few shapes, and most clusters are unchanged from one decision to
        the next). Filled by :mod:`propagation.division`."""
        return {}


class FitMode(StrEnum):
    NODE_AWARE = "NodeAware"  # every replica must fit on one node (default)
    SUMMED = "Summed"  # the job's total must fit the cluster's summed free capacity


class SchedulingType(StrEnum):
    DIVIDED = "Divided"
    DUPLICATED = "Duplicated"


@dataclass(frozen=True)
class Affinity:
    cluster_names: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()  # key, operator, values


class DivisionPreference(StrEnum):
    AGGREGATED = "Aggregated"  # as few clusters as possible
    WEIGHTED = "Weighted"  # by static weights, or by available replicas


@dataclass(frozen=True)
class PlacementRules:
    """The placement part of the governing policy, already defaulted."""

    affinity: Affinity = field(default_factory=Affinity)
    tolerations: tuple[Toleration, ...] = ()
    gang: bool = True
    max_clusters: int = 1  # > 1 only when spreadConstraints allow a split
    scheduling_type: SchedulingType = SchedulingType.DIVIDED
    fit_mode: FitMode = FitMode.NODE_AWARE
    preference: DivisionPreference = DivisionPreference.AGGREGATED
    static_weights: tuple[tuple[Affinity, int], ...] = ()  # empty: weigh by available replicas
