"""Works: deterministic names, and the manifest each member receives for its share."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from fleet.api.cluster import (
    AGENT_FINALIZER,
    PLACEMENT_GENERATION,
    member_namespace,
    placement_generation,
)
from fleet.kinds.base import KindAdapter
from propagation.division import ClusterShare

Body = dict[str, Any]

PLACEMENT = "fleet.sh/placement"
CLUSTERS = "fleet.sh/clusters"
FINALIZER = "fleet.sh/dispatch"
JOB_UID = "fleet.sh/job-uid"
WORK = "fleet.sh/work"
OFFSETS = "fleet.sh/replica-offsets"
PURGE_MODE = "fleet.sh/purge-mode"
FAILOVER_SINCE = "fleet.sh/failover-since"
# The clusters a job failed over from: its next placement avoids them (as Karmada's scheduler
# avoids a cluster its binding is being evicted from); cleared by the next bind.
FAILOVER_AVOID = "fleet.sh/failover-avoid"
# The job that preempted this one (a bound job's victim): kept until it is bound again, and
# while it is there the job preempts nobody itself (no cascades).
PREEMPTED_BY = "fleet.sh/preempted-by"
WORLD = "fleet.sh/world"
JOB_GENERATION = "fleet.sh/job-generation"  # the hub job's spec generation a Work carries
HUB_ANNOTATIONS = (PLACEMENT, CLUSTERS, "kubectl.kubernetes.io/last-applied-configuration",
                   "fleet.sh/admitted-at", "fleet.sh/requeue", FAILOVER_SINCE, FAILOVER_AVOID,
                   PREEMPTED_BY)

_PREFIX = {
    ("kubeflow.org/v1", "PyTorchJob"): "pytorchjob",
    ("kubeflow.org/v1", "TFJob"): "tfjob",
    ("kubeflow.org/v1", "MPIJob"): "mpijob",
    ("batch.tensorstack.dev/v1beta1", "MPIJob"): "t9k-mpijob",
    ("batch.tensorstack.dev/v1beta1", "TensorFlowTrainingJob"): "t9k-tfjob",
}
MAX_NAME = 253


def work_name(job: Mapping[str, Any]) -> str:
    """Deterministic for one job object, so a retried dispatch never creates a second Work."""
    meta = job["metadata"]
    prefix = _PREFIX.get((job["apiVersion"], job["kind"]), job["kind"].lower())
    name = f"{prefix}-{meta['namespace']}-{meta['name']}-{meta['uid'][:5]}"
    if len(name) > MAX_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:10]
        name = f"{name[: MAX_NAME - 11].rstrip('-.')}-{digest}"
    return name


def encode_placement(shares: tuple[ClusterShare, ...]) -> str:
    return json.dumps([
        {"cluster": s.cluster, "replicas": dict(s.replicas), "offsets": dict(s.offsets),
         "nodes": list(s.nodes), **({"copy": True} if s.copy else {})} for s in shares
    ], separators=(",", ":"))


def decode_placement(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    text = (job.get("metadata", {}).get("annotations") or {}).get(PLACEMENT)
    if not text:
        return []
    decoded: list[dict[str, Any]] = json.loads(text)
    return decoded


def member_manifest(job: Mapping[str, Any], adapter: KindAdapter, share: Mapping[str, Any],
                    placement: list[dict[str, Any]], name: str) -> Body:
    """The job as one member runs it: its share of replicas, hub bookkeeping removed."""
    meta = job["metadata"]
    body = adapter.with_replicas(copy.deepcopy(dict(job)), share["replicas"])
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if k not in HUB_ANNOTATIONS}
    annotations[WORK] = f"{member_namespace(share['cluster'])}/{name}"
    annotations[PLACEMENT_GENERATION] = str(placement_generation(meta))  # the agent's fence
    if len(placement) > 1 and not share.get("copy"):  # a split gang: peers across clusters
        annotations[OFFSETS] = json.dumps(share["offsets"], separators=(",", ":"))
        annotations[WORLD] = json.dumps(placement, separators=(",", ":"))
    labels = dict(meta.get("labels") or {})
    labels[JOB_UID] = meta["uid"]
    body["metadata"] = {"name": meta["name"], "namespace": meta["namespace"],
                        "labels": labels, "annotations": annotations}
    body.pop("status", None)
    return body


def work_body(job: Mapping[str, Any], adapter: KindAdapter, share: Mapping[str, Any],
              placement: list[dict[str, Any]], deps: Sequence[Body] = ()) -> Body:
    meta = job["metadata"]
    name = work_name(job)
    return {
        "apiVersion": "fleet.sh/v1alpha1",
        "kind": "Work",
        "metadata": {
            "name": name,
            "namespace": member_namespace(share["cluster"]),
            "labels": {JOB_UID: meta["uid"]},
            "annotations": {JOB_GENERATION: str(meta.get("generation", 1))},
            # set here, not by the agent: one write less per Work, and the agent can apply
            # the moment it sees the Work
            "finalizers": [AGENT_FINALIZER],
        },
        "spec": {
            "job": {"apiVersion": job["apiVersion"], "kind": job["kind"],
                    "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]},
            "placement": {"cluster": share["cluster"], "replicas": share["replicas"],
                          "offsets": share["offsets"], "nodes": share.get("nodes", []),
                          "generation": placement_generation(meta)},
            "manifests": [member_manifest(job, adapter, share, placement, name), *deps],
        },
    }


def outdated(job: Mapping[str, Any], work: Mapping[str, Any]) -> bool:
    """Whether ``work`` was rendered from an older spec of ``job``."""
    carried = (work["metadata"].get("annotations") or {}).get(JOB_GENERATION)
    return carried != str(job["metadata"].get("generation", 1))
