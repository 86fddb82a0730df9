"""The hub side of Kube Queue semantics: from cached objects to the quota engine's inputs, and
from its state back to Queue objects.

Usage is derived from durable state only: a job holds quota while it is bound (its placement
annotation), was admitted through a queue (its ``fleet.sh/admitted-at`` annotation) and is
not finished, so a restarted hub rebuilds usage and order exactly from what it lists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleet.api.protocol import ADMITTED_BY, QUOTA_TREE_LABEL, REQUEUED_AT
from fleet.api.quantity import format_canonical
from fleet.hub import dispatch
from fleet.hub import works as w
from fleet.hub.cache import Body, Snapshot
from fleet.hub.interning import FrozenDict
from fleet.hub.memo import Memo
from fleet.hub.quota_views import quota_node
from fleet.kinds import adapter_for
from fleet.kinds.deps import priority_class_manifest, priority_class_names
from propagation.jobkey import JobKey
from propagation.views import JobDemand
from quota.amounts import MAX_JOBS
from quota.engine import Holding, Job, QueuePolicy
from quota.queues import queue_names, waiting_below
from quota.tree import QuotaNode, walk

ADMITTED_AT = dispatch.ADMITTED_AT
REQUEUE = dispatch.REQUEUE
QUEUE_NAMESPACE = "kube-queue"
TREE_NAMESPACE = "kube-system"


def priority_of(job: Mapping[str, Any], classes: Mapping[str, int]) -> int:
    """T9k ``scheduler.t9kScheduler.priority``; else the highest PriorityClass that the
    job's run policy or pod templates name; else the global default class; else 0. A
    negative value makes the job opportunistic (:mod:`quota.priority`)."""
    spec = job.get("spec") or {}
    t9k = ((spec.get("scheduler") or {}).get("t9kScheduler") or {}).get("priority")
    if t9k is not None:
        return int(t9k)
    if not classes:
        return 0  # no PriorityClass on the hub: nothing to look up in the templates
    values = [classes[n] for n in _class_names(job) if n in classes]
    if values:
        return max(values)
    return classes.get("", 0)  # "" holds the globalDefault class's value


# The PriorityClasses a job names, by what they are read from: its spec and annotations (a
# TrainJob's runtime, a JobSet share's counts). A cached job's are interned, one object each
# while unchanged, kept with the answer so that their ids are never reused meanwhile. Reading
# them walks every pod template, and a busy pass asked again for each job a status change
# brought back (a twelfth of its time at 10,000 jobs).
CLASS_NAMES: Memo[tuple[int, int, str, str], tuple[object, object, tuple[str, ...]]] = \
    Memo(kept=20_000)


def _class_names(job: Mapping[str, Any]) -> tuple[str, ...]:
    def read() -> tuple[str, ...]:
        adapter = adapter_for(job["apiVersion"], job["kind"])
        return tuple(priority_class_names(job, [role.template for role in adapter.roles(job)]))

    spec, annotations = job.get("spec"), job["metadata"].get("annotations")
    if not isinstance(spec, FrozenDict) or not isinstance(annotations, FrozenDict | None):
        return read()  # (a plain dict may be changed in place)
    key = (id(spec), id(annotations), job["apiVersion"], job["kind"])
    return CLASS_NAMES.get(key, lambda: (spec, annotations, read()))[2]


def missing_priority_class(job: Mapping[str, Any], classes: Mapping[str, int]) -> str:
    """Why the job cannot be placed for a PriorityClass it names that the hub lacks ("" when
    it lacks none): every member would refuse its pods, as the API server refuses a pod
    naming an unknown class. Said as a wait, not a refusal: the class may come later."""
    missing = [n for n in _class_names(job) if n not in classes]
    if not missing:
        return ""
    return (f"priorityClassName: PriorityClass {missing[0]!r} does not exist on the hub; "
            "the job waits until it is created")


def priority_class_manifests(job: Mapping[str, Any], snap: Snapshot) -> list[Body]:
    """The hub's PriorityClasses that the job names, as its Works carry them to members
    (a member without them would refuse every pod of the job)."""
    names = _class_names(job)
    if not names:
        return []
    bodies = {b["metadata"]["name"]: b for b in snap.priority_classes.values()}
    return [priority_class_manifest(bodies[n]) for n in names if n in bodies]


def priority_classes(snap: Snapshot) -> dict[str, int]:
    out: dict[str, int] = {}
    for body in snap.priority_classes.values():
        out[body["metadata"]["name"]] = int(body.get("value", 0))
        if body.get("globalDefault"):
            out[""] = int(body.get("value", 0))
    return out


def active_tree(snap: Snapshot) -> tuple[Body, QuotaNode] | None:
    """The one ElasticQuotaTree in kube-system (the webhook refuses a second one)."""
    for (_, namespace, _), body in sorted(snap.quota_trees.items()):
        if namespace == TREE_NAMESPACE and not body["metadata"].get("deletionTimestamp"):
            return body, _parsed_tree(body)
    return None


_PARSED: dict[tuple[str, str], QuotaNode] = {}  # the last trees parsed, by uid and version


def _parsed_tree(body: Body) -> QuotaNode:
    """The tree's nodes, parsed once per version: each pass, each bind and each queue
    report read it, and parsing it was about 7 % of the hub's time in Kueue's bench."""
    meta = body["metadata"]
    key = (str(meta.get("uid", "")), str(meta.get("resourceVersion", "")))
    if not all(key):  # (a tree the API server did not serve: nothing names its version)
        return quota_node(body["spec"]["root"])
    node = _PARSED.get(key)
    if node is None:
        node = quota_node(body["spec"]["root"])
        if len(_PARSED) >= 4:
            _PARSED.clear()
        _PARSED[key] = node
    return node


def as_quota_job(job: Mapping[str, Any], classes: Mapping[str, int], demand: JobDemand
                 ) -> Job:
    meta = job["metadata"]
    return Job(JobKey.of_body(job), meta["namespace"], dict(demand.total),
               priority_of(job, classes), meta.get("creationTimestamp", ""),
               (meta.get("annotations") or {}).get(REQUEUED_AT) or "")


def holding(job: Mapping[str, Any], classes: Mapping[str, int],
            demand_of: Callable[[Mapping[str, Any]], JobDemand],
            works: Sequence[Mapping[str, Any]] = ()) -> Holding | None:
    """The quota ``job`` holds, if it does: bound after its queue admitted it, not being
    preempted or failed over (its quota is already released then), not finished, nor
    reported succeeded by every member (``works``: its Works)."""
    annotations = job["metadata"].get("annotations") or {}
    if ADMITTED_AT not in annotations or w.PLACEMENT not in annotations:
        return None
    if REQUEUE in annotations:
        return None
    if adapter_for(job["apiVersion"], job["kind"]).is_finished(job) or \
            w.succeeded_on_members(works):
        return None
    return Holding(as_quota_job(job, classes, demand_of(job)), annotations[ADMITTED_AT])


def with_admitted(status: Body, job: Mapping[str, Any]) -> Body:
    """A bound job's status with its ``Admitted`` condition: which quota admitted it, and
    when (from its marks: no write of its own, it goes with the job's first status). It goes
    first, as it came first: kubectl's STATE column is the last condition."""
    annotations = job["metadata"].get("annotations") or {}
    by, at = annotations.get(ADMITTED_BY), annotations.get(ADMITTED_AT)
    if not by or not at:
        return status
    said = {"type": "Admitted", "status": "True", "reason": "QuotaAdmitted",
            "message": f"admitted by quota {by}", "lastTransitionTime": at,
            "lastUpdateTime": at}
    kept = [c for c in status.get("conditions") or [] if c.get("type") != "Admitted"]
    return {**status, "conditions": [said, *kept]}


def queue_policies(snap: Snapshot, names: Mapping[tuple[str, ...], str]) -> dict[str, QueuePolicy]:
    by_name = {key[2]: body for key, body in snap.queues.items() if key[1] == QUEUE_NAMESPACE}
    out = {}
    for path, name in names.items():
        policy = ((by_name.get(name) or {}).get("spec") or {}).get("queuePolicy")
        out["/".join(path)] = QueuePolicy(policy) if policy else QueuePolicy.PRIORITY
    return out


@dataclass(frozen=True)
class QueueState:
    name: str
    path: tuple[str, ...]
    body: Body  # the Queue object to apply (spec) and its status


def queue_objects(tree: Body, root: QuotaNode, usage: Mapping[str, Mapping[str, int]],
                  pending: Mapping[str, Sequence[str]],
                  cells: Mapping[str, Mapping[str, int]] | None = None,
                  counts: Mapping[str, int] | None = None) -> list[QueueState]:
    """One Queue per tree node; ``pending`` maps a leaf path to its first waiting jobs in
    order, ``counts`` to how many wait in all (as many as listed when not given), ``cells``
    a leaf to how many nodes of each member its guarantee owns."""
    names = queue_names(p.path for p in walk(root))
    tree_ref = f"{tree['metadata']['namespace']}/{tree['metadata']['name']}"
    out = []
    for placed in walk(root):
        key = placed.key
        used = usage.get(key, {})
        waiting, count = waiting_below(placed, pending, counts)
        admitted = used.get(MAX_JOBS, 0)
        summary = ", ".join(
            f"{_short(r)} {format_canonical(r, used.get(r, 0))}/{format_canonical(r, m)}"
            for r, m in sorted(placed.node.max.items()))
        status = {
            "min": {r: format_canonical(r, v) for r, v in sorted(placed.node.min.items())},
            "max": {r: format_canonical(r, v) for r, v in sorted(placed.node.max.items())},
            "used": {r: format_canonical(r, v) for r, v in sorted(used.items()) if v},
            "pending": count, "admitted": admitted, "usage": summary,
            "pendingJobs": waiting[:50],
        }
        owned = (cells or {}).get(key)
        if owned:
            status["cells"] = dict(sorted(owned.items()))
        out.append(QueueState(names[placed.path], placed.path, {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "Queue",
            "metadata": {"name": names[placed.path], "namespace": QUEUE_NAMESPACE,
                         "labels": {QUOTA_TREE_LABEL: tree["metadata"]["name"]}},
            "spec": {"tree": tree_ref, "path": list(placed.path)},
            "status": status,
        }))
    return out


def _short(resource: str) -> str:
    return {"kube-queue/max-jobs": "jobs", "nvidia.com/gpu": "gpu"}.get(resource, resource)
