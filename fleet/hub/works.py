"""Works: deterministic names, and the manifest each member receives for its share."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from fleet.api import protocol as p
from fleet.api.protocol import (
    CLUSTERS,
    FAILOVER_AVOID,
    FAILOVER_SINCE,
    FINALIZER,
    JOB_GENERATION,
    JOB_UID,
    PLACEMENT,
    PREEMPTED_BY,
    PURGE_MODE,
    RESIZED,
    TOPOLOGY_PREFERRED,
    TOPOLOGY_REQUIRED,
    decode_placement,
    encode_placement,
    placement_dicts,
    share_domains,
    share_role_domains,
)
from fleet.kinds import adapter_for
from fleet.kinds.base import KindAdapter
from fleet.kinds.trainjob import TrainJobAdapter
from propagation.division import ClusterShare

Body = dict[str, Any]

# The protocol's names the hub's modules reach through this one (``w.PLACEMENT``).
__all__ = ["CLUSTERS", "FAILOVER_AVOID", "FAILOVER_SINCE", "FINALIZER", "JOB_GENERATION",
           "JOB_UID", "PLACEMENT", "PREEMPTED_BY", "PURGE_MODE", "RESIZED",
           "TOPOLOGY_PREFERRED", "TOPOLOGY_REQUIRED", "decode_placement",
           "encode_placement", "member_manifest", "outdated", "placement_dicts",
           "placement_of", "share_domains", "share_role_domains", "work_body", "work_name"]
# What a member copy does not carry: the hub's bookkeeping on the job, and kubectl's.
HUB_ANNOTATIONS = (*p.HUB_ONLY, "kubectl.kubernetes.io/last-applied-configuration")

MAX_NAME = 253


def placement_of(job: Mapping[str, Any]) -> tuple[ClusterShare, ...]:
    """A bound job's placement as the planner's shares (() for a job not bound)."""
    return tuple(ClusterShare(s["cluster"], tuple(s["replicas"].items()),
                              tuple((s.get("offsets") or {}).items()), tuple(s.get("nodes") or ()),
                              bool(s.get("copy")), share_domains(s), share_role_domains(s),
                              tuple(str(c) for c in s.get("cells") or ()))
                 for s in decode_placement(job))


def work_name(job: Mapping[str, Any]) -> str:
    """Deterministic for one job object, so a retried dispatch never creates a second Work."""
    meta = job["metadata"]
    try:
        prefix = adapter_for(job["apiVersion"], job["kind"]).work_prefix
    except KeyError:  # not a kind fleet runs
        prefix = job["kind"].lower()
    return p.bounded_name(f"{prefix}-{meta['namespace']}-{meta['name']}-{meta['uid'][:5]}",
                          MAX_NAME)


def member_manifest(job: Mapping[str, Any], adapter: KindAdapter, share: Mapping[str, Any],
                    placement: list[dict[str, Any]], name: str, as_is: Body | None = None
                    ) -> Body:
    """The job as one member runs it: its share of replicas (or ``as_is``: the job as the
    member's own controller takes it), hub bookkeeping removed."""
    meta = job["metadata"]
    body = as_is if as_is is not None else adapter.for_member(
        adapter.with_replicas(copy.deepcopy(dict(job)), share["replicas"]))
    # the job's own annotations and what the kind's share added (a JobSet's pods per role)
    annotations = {k: v for k, v in ((body.get("metadata") or {}).get("annotations")
                                     or {}).items() if k not in HUB_ANNOTATIONS}
    annotations.update(p.copy_marks(share["cluster"], name, share, placement,
                                    p.placement_generation(meta)))
    if as_is is not None and p.RUNTIME in (meta.get("annotations") or {}):
        annotations[p.RUNTIME] = meta["annotations"][p.RUNTIME]  # the hub reads its demand
    labels = {**((body.get("metadata") or {}).get("labels") or {}), **(meta.get("labels") or {})}
    labels[JOB_UID] = meta["uid"]
    body["metadata"] = {"name": meta["name"], "namespace": meta["namespace"],
                        "labels": labels, "annotations": annotations}
    body.pop("status", None)
    return body


def work_body(job: Mapping[str, Any], adapter: KindAdapter, share: Mapping[str, Any],
              placement: list[dict[str, Any]], deps: Sequence[Body] = (),
              phase: str = "", member_trainer: bool = False) -> Body:
    """The Work of one share; ``phase`` Reserve for a placement in reservation mode;
    ``member_trainer``: a TrainJob for the member's own Trainer, with its runtime."""
    meta = job["metadata"]
    name = work_name(job)
    as_is: Body | None = None
    if member_trainer and isinstance(adapter, TrainJobAdapter):
        as_is, runtime = adapter.for_member_trainer(job)
        deps = [runtime, *deps]
    tenant = p.tenant_label((meta.get("annotations") or {}).get(p.TENANT) or "")
    return {
        "apiVersion": p.API_VERSION,
        "kind": "Work",
        "metadata": {
            "name": name,
            "namespace": p.member_namespace(share["cluster"]),
            "labels": {JOB_UID: meta["uid"]},
            "annotations": {JOB_GENERATION: str(meta.get("generation", 1))},
            # set here, not by the agent: one write less per Work, and the agent can apply
            # the moment it sees the Work
            "finalizers": [p.AGENT_FINALIZER],
        },
        "spec": {
            "job": {"apiVersion": job["apiVersion"], "kind": job["kind"],
                    "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]},
            "placement": {"cluster": share["cluster"], "replicas": share["replicas"],
                          "offsets": share["offsets"], "nodes": share.get("nodes", []),
                          **({"domains": share["domains"]} if share.get("domains") else {}),
                          **({"roleDomains": share["roleDomains"]}
                             if share.get("roleDomains") else {}),
                          **({"tenant": tenant} if tenant else {}),
                          **({"cells": share["cells"]} if share.get("cells") else {}),
                          "generation": p.placement_generation(meta),
                          **({"phase": phase} if phase else {})},
            "manifests": [member_manifest(job, adapter, share, placement, name, as_is), *deps],
        },
    }


def dispatch_phase(job: Mapping[str, Any], works: Sequence[Mapping[str, Any]]) -> str:
    """The phase of a Work the hub completes for a recorded placement: Reserve while the
    placement is reserved and not committed yet, Commit once another Work is, else none."""
    if (job["metadata"].get("annotations") or {}).get(p.RESERVED_PLACEMENT) != "true":
        return ""
    committed = any(p.work_phase(wk) == p.PHASE_COMMIT for wk in works)
    return p.PHASE_COMMIT if committed else p.PHASE_RESERVE


def outdated(job: Mapping[str, Any], work: Mapping[str, Any]) -> bool:
    """Whether ``work`` was rendered from an older spec of ``job``."""
    carried = (work["metadata"].get("annotations") or {}).get(JOB_GENERATION)
    return carried != str(job["metadata"].get("generation", 1))


def succeeded_on_members(works: Sequence[Mapping[str, Any]]) -> bool:
    """Every share of the job reports it succeeded: its pods are done, so it holds no quota
    and is no one's victim, though its own status says so only once the hub has written
    it. (Only success: a failed share may yet be failed over, its quota still needed.)"""
    return bool(works) and all(p.work_state(work) == "Succeeded" for work in works)
