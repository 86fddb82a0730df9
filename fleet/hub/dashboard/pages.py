"""The dashboard's views, computed from what the leader's last pass saw.

Each function reads a :class:`~fleet.hub.cache.Snapshot` (frozen), the members' views and the
pass's queue report, and returns one JSON document (:mod:`fleet.hub.dashboard.payloads`). No
clock, no API: ``now`` is the pass's, and a member's heartbeat age is judged by when this hub
last heard it (the snapshot's monotonic stamps), as the scheduler judges it.

Everything a page lists is bounded (:data:`MAX_JOBS_SHOWN`, :data:`MAX_WAITING_SHOWN`), so a
request costs one walk of the cache at most, whatever the fleet's size.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from fleet.api import protocol as p
from fleet.api.quantity import GPU, format_canonical
from fleet.hub import queueing as q
from fleet.hub.cache import Snapshot
from fleet.hub.dashboard import payloads as pl
from fleet.hub.pass_view import leaf_queue_names
from fleet.hub.views import parse_time
from fleet.kinds import job_state
from planner.intents import QueueReport
from propagation.jobkey import JobKey
from propagation.views import ClusterView
from quota.queues import queue_names, waiting_below
from quota.tree import walk

Body = Mapping[str, Any]
MAX_JOBS_SHOWN = 500  # rows of the jobs page; the rest are counted
MAX_WAITING_SHOWN = 50  # waiting jobs listed per queue, as the Queue objects list them
GPU_MODEL = "nvidia.com/gpu.product"
ENDED = ("Succeeded", "Failed", "Completed")


# -- members ------------------------------------------------------------------------------
def members(snap: Snapshot, views: Sequence[ClusterView], cells: Mapping[str, Mapping[str, int]]
            ) -> pl.Members:
    """Each member as the hub knows it: capacity by shape, heartbeat, conditions, cells (by
    the name of the queue that owns them)."""
    tree = q.active_tree(snap)
    queue_name = leaf_queue_names(tree[1]) if tree else {}
    bodies = {b["metadata"]["name"]: b for b in snap.clusters.values()}
    shares: dict[str, int] = {}
    for (_, evicting), works in snap.works_by_job.items():
        for work in works:
            if not evicting:
                cluster = work["spec"]["placement"]["cluster"]
                shares[cluster] = shares.get(cluster, 0) + 1
    out = []
    for view in sorted(views, key=lambda v: v.name):
        body = bodies.get(view.name) or {}
        status = body.get("status") or {}
        capacity = status.get("capacity") or {}
        heard = snap.heard.get(view.name)
        out.append(pl.Member(
            name=view.name, ready=view.ready, stale=not view.ready or bool(view.stale_reason),
            reason=view.not_ready_reason or view.stale_reason,
            heartbeatAgeSeconds=None if heard is None else round(max(0.0, snap.taken - heard), 1),
            shapes=shapes(capacity), gpus=member_gpus(capacity),
            cells={queue_name.get(leaf, leaf): owned[view.name]
                   for leaf, owned in sorted(cells.items()) if owned.get(view.name)},
            works=shares.get(view.name, 0),
            conditions=[condition(c) for c in status.get("conditions") or []]))
    return pl.Members(members=out)


def shapes(capacity: Body) -> list[pl.Shape]:
    """The member's node groups summed by shape: GPU model and allocatable amounts."""
    label_sets = capacity.get("labelSets") or []
    summed: dict[tuple[str, int, int, int], list[int]] = {}
    for group in capacity.get("nodeGroups") or []:
        labels = dict(group.get("labels") or {})
        index = group.get("labelSet")
        if isinstance(index, int) and 0 <= index < len(label_sets):
            labels = {**label_sets[index], **labels}
        allocatable, free = group.get("allocatable") or {}, group.get("free") or {}
        key = (str(labels.get(GPU_MODEL, "")), int(allocatable.get(GPU, 0)),
               int(allocatable.get("cpu", 0)), int(allocatable.get("memory", 0)))
        count = int(group.get("count", 1))
        sums = summed.setdefault(key, [0, 0, 0, 0])
        sums[0] += count
        sums[1] += count * int(free.get(GPU, 0))
        sums[2] += count * int(free.get("cpu", 0))
        sums[3] += count * int(free.get("memory", 0))
    out = []
    for (model, gpus, cpu, memory), (nodes, free_gpus, free_cpu, free_memory) in sorted(
            summed.items(), key=lambda kv: (-kv[0][1], kv[0][0], -kv[0][2])):
        name = f"{model or 'GPU'} ×{gpus}" if gpus else "cpu-only"
        out.append(pl.Shape(
            name=name, gpuModel=model, nodes=nodes, gpusPerNode=gpus,
            gpus=pl.Room(total=gpus * nodes, free=free_gpus),
            cpu=pl.Room(total=cpu * nodes, free=free_cpu),
            memory=pl.Room(total=memory * nodes, free=free_memory)))
    return out


def member_gpus(capacity: Body) -> pl.Amounts:
    total = int((capacity.get("allocatable") or {}).get(GPU, 0))
    free = int((capacity.get("free") or {}).get(GPU, 0))
    held = int((capacity.get("reserved") or {}).get(GPU, 0))
    return pl.Amounts(total=total, free=free, held=held, used=max(0, total - free - held))


def condition(c: Body) -> pl.Condition:
    return pl.Condition(type=str(c.get("type", "")), status=str(c.get("status", "")),
                        reason=str(c.get("reason") or ""), message=str(c.get("message") or ""))


# -- queues -------------------------------------------------------------------------------
def queues(snap: Snapshot, report: QueueReport | None, now: datetime) -> pl.Queues:
    """The ElasticQuotaTree as the Queues it publishes: each node's quota and use, and each
    leaf's first waiting jobs in the order the last pass would admit them."""
    tree = q.active_tree(snap)
    if tree is None:
        return pl.Queues(tree="", queues=[])
    body, root = tree
    names = queue_names(placed.path for placed in walk(root))
    usage = report.usage if report else {}
    out = []
    for placed in walk(root):
        key, node = placed.key, placed.node
        used = usage.get(key, {})
        waiting, count = waiting_below(placed, report.pending, report.waiting) if report \
            else ([], 0)
        gpu_min, gpu_max, gpu_used = (int(node.min.get(GPU, 0)), int(node.max.get(GPU, 0)),
                                      int(used.get(GPU, 0)))
        out.append(pl.QueueNode(
            name=names[placed.path], path=list(placed.path), depth=len(placed.path) - 1,
            leaf=node.is_leaf, namespaces=list(node.namespaces),
            min=_shown(node.min), max=_shown(node.max), used=_shown(used),
            gpus={"min": gpu_min, "max": gpu_max, "used": gpu_used,
                  "borrowed": max(0, gpu_used - gpu_min)},
            waitingCount=count,
            waiting=[waiting_job(snap, JobKey(key), i, now)
                     for i, key in enumerate(waiting[:MAX_WAITING_SHOWN], 1)]))
    meta = body["metadata"]
    return pl.Queues(tree=f"{meta['namespace']}/{meta['name']}", queues=out)


def waiting_job(snap: Snapshot, key: JobKey, position: int, now: datetime) -> pl.WaitingJob:
    body = _job_by_name(snap, key) or {}
    meta = body.get("metadata") or {}
    queue = p.queue_status(body)
    created = parse_time(meta.get("creationTimestamp"))
    return pl.WaitingJob(
        position=position, job=f"{key.namespace}/{key.name}", kind=str(body.get("kind", "")),
        uid=str(meta.get("uid", "")), reason=str(queue.get("reason") or "Queued"),
        message=str(queue.get("message") or ""),
        waitedSeconds=None if created is None else max(0.0, (now - created).total_seconds()))


def _shown(amounts: Mapping[str, int]) -> dict[str, str]:
    return {r: format_canonical(r, v) for r, v in sorted(amounts.items()) if v}


# -- jobs ---------------------------------------------------------------------------------
def jobs(snap: Snapshot, *, text: str = "", state: str = "", queue: str = "",
         limit: int = MAX_JOBS_SHOWN) -> pl.Jobs:
    """Jobs matching the filters (a name or namespace containing ``text``, a state, a
    queue), newest first, at most ``limit`` of them listed."""
    text, limit = text.lower(), max(1, min(limit, MAX_JOBS_SHOWN))
    matching: list[pl.JobRow] = []
    states: dict[str, int] = {}
    for body in snap.jobs.values():
        row = job_row(body)
        states[row["state"]] = states.get(row["state"], 0) + 1
        if text and text not in row["name"].lower() and text not in row["namespace"].lower():
            continue
        if (state and row["state"] != state) or (queue and row["queue"] != queue):
            continue
        matching.append(row)
    matching.sort(key=lambda r: (r["created"], r["namespace"], r["name"]), reverse=True)
    return pl.Jobs(total=len(matching), shown=min(limit, len(matching)),
                   jobs=matching[:limit], states=dict(sorted(states.items())))


def job_row(body: Body) -> pl.JobRow:
    meta = body["metadata"]
    annotations = meta.get("annotations") or {}
    queue = p.queue_status(body)
    position = queue.get("position")
    return pl.JobRow(
        uid=str(meta.get("uid", "")), kind=str(body.get("kind", "")),
        namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
        state=job_state(body), queue=str(queue.get("name") or ""),
        position=position if isinstance(position, int) else None,
        reason=str(queue.get("reason") or ""),
        clusters=[c for c in str(annotations.get(p.CLUSTERS) or "").split(",") if c],
        created=str(meta.get("creationTimestamp") or ""))


def job(snap: Snapshot, uid: str, events: Iterable[Body] = ()) -> pl.JobDetail | None:
    """One job: its gang across members (which replicas where, their pods), its timeline
    from its own stamps, its Works' and the events about it, and its conditions."""
    key = snap.job_keys.get(uid)
    body = snap.jobs.get(key) if key else None
    if body is None:
        return None
    row = job_row(body)
    works = [*snap.works_by_job.get((uid, False), ())]
    shares = [share(work, row) for work in sorted(
        works, key=lambda w: w["spec"]["placement"]["cluster"])]
    status = body.get("status") or {}
    return pl.JobDetail(
        job=row, message=_summary(row, p.queue_status(body), shares), shares=shares,
        timeline=timeline(body, works, events),
        conditions=[condition(c) for c in status.get("conditions") or []])


def share(work: Body, row: pl.JobRow) -> pl.Share:
    placement = work["spec"]["placement"]
    ref = f"{row['kind'].lower()}/{row['name']}"
    pods = [pl.Pod(name=str(pod.get("name", "")), role=str(pod.get("role") or ""),
                   node=str(pod.get("node") or ""), phase=str(pod.get("phase") or "Pending"),
                   ready=bool(pod.get("ready")), restarts=int(pod.get("restarts") or 0),
                   logs=f"kubectl fleet logs {ref} -n {row['namespace']} "
                        f"-r {_replica(pod)}")
            for pod in p.reported_pods(work)]
    return pl.Share(cluster=str(placement["cluster"]), work=str(work["metadata"]["name"]),
                    replicas=dict(placement.get("replicas") or {}), applied=p.is_applied(work),
                    state=p.work_state(work), pods=pods)


def _replica(pod: Body) -> str:
    """The ``-r`` of ``kubectl fleet logs``: the role and index, from the pod's name."""
    name, role = str(pod.get("name", "")), str(pod.get("role") or "")
    index = name.rsplit("-", 1)[-1]
    return f"{role}-{index}" if role and index.isdigit() else name


def timeline(body: Body, works: Sequence[Body], events: Iterable[Body]) -> list[pl.Moment]:
    meta = body["metadata"]
    annotations = meta.get("annotations") or {}
    moments = [pl.Moment(time=str(meta.get("creationTimestamp") or ""), what="Created",
                         detail="", source="job")]
    if annotations.get(q.ADMITTED_AT):
        moments.append(pl.Moment(time=str(annotations[q.ADMITTED_AT]), what="Admitted",
                                 detail=f"by {annotations.get(p.ADMITTED_BY) or 'its queue'}",
                                 source="job"))
    if annotations.get(p.REQUEUED_AT):
        preempted = annotations.get(p.PREEMPTED_BY)
        moments.append(pl.Moment(
            time=str(annotations[p.REQUEUED_AT]), what="Requeued",
            detail=" ".join(filter(None, (str(annotations.get(p.REQUEUE) or ""),
                                          f"(preempted by {preempted})" if preempted else ""))),
            source="job"))
    if annotations.get(p.FAILOVER_SINCE):
        avoid = annotations.get(p.FAILOVER_AVOID)
        moments.append(pl.Moment(time=str(annotations[p.FAILOVER_SINCE]), what="FailingOver",
                                 detail=f"away from {avoid}" if avoid else "", source="job"))
    for work in works:
        sent = (work["metadata"].get("annotations") or {}).get(p.DISPATCHED_AT)
        if sent:
            moments.append(pl.Moment(time=str(sent), what="Dispatched",
                                     detail=f"to {work['spec']['placement']['cluster']}",
                                     source="work"))
    for c in (body.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Admitted" and annotations.get(q.ADMITTED_AT):
            continue  # said above, with the queue that admitted it
        if c.get("status") == "True" and c.get("lastTransitionTime"):
            moments.append(pl.Moment(time=str(c["lastTransitionTime"]),
                                     what=str(c.get("type", "")),
                                     detail=str(c.get("reason") or ""), source="job"))
    for event in events:
        when = event.get("lastTimestamp") or event.get("eventTime") or \
            (event.get("metadata") or {}).get("creationTimestamp")
        count = int(event.get("count") or 1)
        moments.append(pl.Moment(time=str(when or ""), what=str(event.get("reason", "")),
                                 detail=str(event.get("message", "")) +
                                 (f" (×{count})" if count > 1 else ""), source="event"))
    moments.sort(key=lambda m: _sortable(m["time"]))
    return moments


def _sortable(stamp: str) -> str:
    """RFC 3339 stamps of whole and fractional seconds sort as text once their zone is
    one spelling and their fraction one width."""
    when = parse_time(stamp) if stamp else None
    return when.isoformat(timespec="microseconds") if when else ""


def _summary(row: pl.JobRow, queue: Body, shares: Sequence[pl.Share]) -> str:
    if shares:
        return f"{row['state']} on " + ", ".join(
            f"{s['cluster']} ({', '.join(f'{r}={n}' for r, n in sorted(s['replicas'].items()))})"
            for s in shares)
    if row["state"] in ENDED:
        return row["state"]
    return p.waiting_text(queue)


# -- shared -------------------------------------------------------------------------------
def _job_by_name(snap: Snapshot, key: JobKey) -> Body | None:
    found = snap.named.get(key)
    return snap.jobs.get(found) if found else None


def overview(snap: Snapshot, views: Sequence[ClusterView], report: QueueReport | None
             ) -> tuple[int, int, int, int, pl.Amounts]:
    """Members, ready members, jobs, waiting jobs, and the fleet's GPUs."""
    total = free = held = 0
    for body in snap.clusters.values():
        gpus = member_gpus((body.get("status") or {}).get("capacity") or {})
        total, free, held = total + gpus["total"], free + gpus["free"], held + gpus["held"]
    waiting = sum(report.waiting.get(leaf, len(keys)) for leaf, keys in report.pending.items()) \
        if report else 0
    return (len(views), sum(1 for v in views if v.ready), len(snap.jobs), waiting,
            pl.Amounts(total=total, free=free, held=held, used=max(0, total - free - held)))
