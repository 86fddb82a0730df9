"""Building the pure packages' frozen views from the objects in the hub's cache.

This is where the clock enters: a member is ready only while its agent's heartbeat is fresh.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from fleet.api.cluster import MemberCluster
from fleet.api.policy import (
    CustomSchedulingType,
    LabelSelector,
    PropagationPolicySpec,
    ReplicaDivisionPreference,
    ReplicaSchedulingType,
)
from fleet.api.protocol import REPORTED_NODE_LABELS
from fleet.api.quantity import GPU
from propagation.matching import JobIdentity, PolicyRef, Selector
from propagation.resources import Resources
from propagation.views import (
    Affinity,
    ClusterView,
    DivisionPreference,
    FitMode,
    NodeGroup,
    PlacementRules,
    SchedulingType,
    Taint,
    Toleration,
)
from quota.cells import CellNode

Body = Mapping[str, Any]
GPU_MODEL_LABEL = REPORTED_NODE_LABELS[0]  # nodes of one model are one shape of cells


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def heartbeat_of(body: Body, lease: Body | None) -> datetime | None:
    """The agent's last sign of life: its Lease's renewal, or its last status report."""
    times = [parse_time((body.get("status") or {}).get("lastHeartbeatTime")),
             parse_time(((lease or {}).get("spec") or {}).get("renewTime"))]
    known = [t for t in times if t is not None]
    return max(known) if known else None


_PARSED: dict[str, tuple[Body, str | None, MemberCluster, tuple[NodeGroup, ...]]] = {}
MAX_PARSED = 10_000  # members whose last parsed MemberCluster is kept


def _parsed(body: Body) -> tuple[MemberCluster, tuple[NodeGroup, ...]]:
    """The MemberCluster and its node groups, parsed once per object and resourceVersion: a
    hundred members' reports of a few dozen groups each took a tenth of a pass to validate.
    (By the dict's identity alone, a job was once bound onto a member whose newer report
    showed it full: some path renews a cached body in place.)"""
    meta = body.get("metadata") or {}
    name, version = meta.get("name", ""), meta.get("resourceVersion")
    known = _PARSED.get(name)
    if known is not None and known[0] is body and known[1] == version:
        return known[2], known[3]
    cluster = MemberCluster.model_validate(body)
    status = cluster.status
    capacity = status.capacity if status else None
    label_sets = capacity.label_sets if capacity else []
    groups = tuple(
        NodeGroup(g.count, Resources.of(g.free), tuple(sorted(g.all_labels(label_sets).items())),
                  tuple(g.nodes))
        for g in (capacity.node_groups if capacity else [])
    )
    if len(_PARSED) >= MAX_PARSED and name not in _PARSED:
        _PARSED.pop(next(iter(_PARSED)))
    _PARSED[name] = (body, version, cluster, groups)
    return cluster, groups


_CELL_NODES: dict[str, tuple[Body, str | None, tuple[CellNode, ...]]] = {}


def cell_nodes(body: Body) -> tuple[CellNode, ...]:
    """A member's named nodes as cells are dealt (``quota.cells``): each node's GPUs and its
    shape (its GPU model and allocatable amounts). Read once per report (as ``_parsed``);
    the same tuple while they stay the same, so the pass compares the fleet's nodes by
    identity."""
    meta = body.get("metadata") or {}
    name, version = str(meta.get("name", "")), meta.get("resourceVersion")
    known = _CELL_NODES.get(name)
    if known is not None and known[0] is body and known[1] == version:
        return known[2]
    nodes = _cell_nodes(body)
    if known is not None and known[2] == nodes:
        nodes = known[2]
    if len(_CELL_NODES) >= MAX_PARSED and name not in _CELL_NODES:
        _CELL_NODES.pop(next(iter(_CELL_NODES)))
    _CELL_NODES[name] = (body, version, nodes)
    return nodes


def _cell_nodes(body: Body) -> tuple[CellNode, ...]:
    cluster, _ = _parsed(body)
    capacity = cluster.status.capacity if cluster.status else None
    if capacity is None:
        return ()
    name = str((body.get("metadata") or {}).get("name", ""))
    out = []
    for group in capacity.node_groups:
        model = group.all_labels(capacity.label_sets).get(GPU_MODEL_LABEL, "")
        shape = (model, *sorted(group.allocatable.items()))
        gpus = group.allocatable.get(GPU, 0)
        out += [CellNode(name, node, gpus, shape) for node in group.nodes[: group.count]]
    # by name: a report groups nodes by what is free on them, so its order changes with every
    # bind, and the deal (whose inputs are compared from pass to pass) would be redone
    return tuple(sorted(out, key=lambda node: node.name))


def cluster_view(body: Body, now: datetime, heartbeat_timeout: float,
                 lease: Body | None = None, capacity_stale_after: float = 90.0, *,
                 heard: datetime | None = None, reported: datetime | None = None
                 ) -> ClusterView:
    """A member as the planner sees it. ``heard`` and ``reported``: when the hub itself last
    saw the agent's heartbeat and its capacity report change, on the hub's clock (the hub's
    cache keeps them); without them the agent's own timestamps are read, as a tool outside
    the hub does."""
    cluster, groups = _parsed(body)
    status = cluster.status
    ready, reason, stale = True, "", ""
    heartbeat = heard or heartbeat_of(body, lease)
    observed = reported or parse_time(status.capacity.observed_time
                                      if status and status.capacity else None)
    if observed is not None and (now - observed).total_seconds() > capacity_stale_after:
        stale = f"capacity report {(now - observed).total_seconds():.0f}s old"
    if heartbeat is None:
        ready, reason = False, "no heartbeat from its agent yet"
    elif (age := (now - heartbeat).total_seconds()) > heartbeat_timeout:
        ready, reason = False, f"agent heartbeat {age:.0f}s old"
    elif status and any(c.type == "Ready" and c.status != "True" for c in status.conditions):
        ready, reason = False, "Ready condition is not True"
    return ClusterView(
        name=cluster.metadata.name,
        ready=ready,
        labels=tuple(sorted(cluster.metadata.labels.items())),
        taints=tuple(Taint(t.key, t.value or "", t.effect.value) for t in cluster.spec.taints),
        node_groups=groups,
        not_ready_reason=reason,
        stale_reason=stale,
        topology_levels=tuple(status.capacity.topology_levels
                              if status and status.capacity else ()),
        reservation=bool(cluster.spec.reservation),
    )


def _affinity(selector: LabelSelector | None, names: Sequence[str] = (),
              exclude: Sequence[str] = ()) -> Affinity:
    return Affinity(
        cluster_names=tuple(names),
        exclude=tuple(exclude),
        match_labels=tuple(sorted(selector.match_labels.items())) if selector else (),
        match_expressions=tuple(
            (e.key, e.operator, tuple(e.values)) for e in selector.match_expressions
        ) if selector else (),
    )


def policy_ref(body: Body) -> PolicyRef:
    spec = PropagationPolicySpec.model_validate(body.get("spec", {}))
    meta = body.get("metadata", {})
    return PolicyRef(
        namespace=meta.get("namespace") or "",
        name=meta.get("name", ""),
        priority=spec.priority or 0,
        selectors=tuple(
            Selector(s.api_version, s.kind, s.namespace or "", s.name or "",
                     _affinity(s.label_selector) if s.label_selector else None)
            for s in spec.resource_selectors
        ),
    )


def placement_rules(body: Body, default_fit: FitMode) -> PlacementRules:
    spec = PropagationPolicySpec.model_validate(body.get("spec", {}))
    placement = spec.placement
    affinity = placement.cluster_affinity if placement else None
    scheduling = placement.replica_scheduling if placement else None
    max_clusters = 1
    for constraint in (placement.spread_constraints if placement else []):
        if (constraint.spread_by_field or "cluster") == "cluster" and constraint.max_groups:
            max_clusters = max(max_clusters, constraint.max_groups)
    return PlacementRules(
        affinity=_affinity(affinity.label_selector if affinity else None,
                           affinity.cluster_names if affinity else (),
                           affinity.exclude if affinity else ()),
        tolerations=tuple(
            Toleration(t.key or "", t.operator or "Equal", t.value or "",
                       t.effect.value if t.effect else "")
            for t in (placement.cluster_tolerations if placement else [])
        ),
        gang=bool(scheduling and scheduling.custom_scheduling_type is CustomSchedulingType.GANG),
        max_clusters=max_clusters,
        scheduling_type=SchedulingType.DUPLICATED
        if scheduling and scheduling.replica_scheduling_type is ReplicaSchedulingType.DUPLICATED
        else SchedulingType.DIVIDED,
        fit_mode=default_fit,
        preference=DivisionPreference.WEIGHTED
        if scheduling and scheduling.replica_division_preference
        is ReplicaDivisionPreference.WEIGHTED else DivisionPreference.AGGREGATED,
        static_weights=tuple(
            (_affinity(item.target_cluster.label_selector, item.target_cluster.cluster_names,
                       item.target_cluster.exclude), item.weight)
            for item in (scheduling.weight_preference.static_weight_list
                         if scheduling and scheduling.weight_preference else [])
        ),
    )


def job_identity(body: Body) -> JobIdentity:
    meta = body.get("metadata", {})
    return JobIdentity(
        api_version=body.get("apiVersion", ""),
        kind=body.get("kind", ""),
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        labels=tuple(sorted((meta.get("labels") or {}).items())),
    )
