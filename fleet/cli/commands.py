"""The commands: each reads the hub (and for ``logs`` a member) and returns what to print.

Rows come from what the agents report in their Works, so they show each member's truth even
when the member itself is out of reach.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TextIO

from fleet.api import protocol
from fleet.api.cluster import HEARTBEAT_LEASE, member_namespace
from fleet.api.protocol import MIRROR_OF
from fleet.api.quantity import CPU, GPU, MEMORY, format_canonical
from fleet.cli import kinds, output
from fleet.cli.config import CliError, Target
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube
from fleet.kinds import job_state

Body = dict[str, Any]
QUEUE_NAMESPACE = "kube-queue"
LEADERS = ("master", "chief", "launcher")


# -- reading ------------------------------------------------------------------------------
def works_by_job(hub: Kube) -> dict[str, list[Body]]:
    works, _ = hub.list(r.WORKS)
    out: dict[str, list[Body]] = {}
    for work in works:
        out.setdefault(work["spec"]["job"]["uid"], []).append(work)
    for group in out.values():
        group.sort(key=lambda w: w["spec"]["placement"]["cluster"])
    return out


def list_jobs(hub: Kube, resource: r.Resource, namespace: str | None, name: str | None,
              selector: str | None) -> list[Body]:
    if name:
        if namespace is None:
            raise CliError("a resource cannot be retrieved by name across all namespaces")
        try:
            job = hub.get(resource, name, namespace)
        except errors.NotFound:
            raise CliError(f'{resource.plural}.{resource.group} "{name}" not found') from None
        job.setdefault("apiVersion", resource.api_version)
        job.setdefault("kind", resource.kind)
        return [job]
    jobs, _ = hub.list(resource, namespace, label_selector=selector)
    return sorted(jobs, key=lambda j: (j["metadata"].get("namespace", ""),
                                       j["metadata"]["name"]))


def find_job(target: Target, ref: Sequence[str]) -> Body:
    """``KIND NAME``, ``KIND/NAME`` or a bare ``NAME`` (looked for in every job kind)."""
    namespace = target.namespace()
    if namespace is None:
        raise CliError("a job is named within one namespace; drop -A and use -n")
    if len(ref) > 2:
        raise CliError(f"one job at a time: KIND/NAME, KIND NAME or NAME, not {' '.join(ref)}")
    if len(ref) == 2:
        kind, name = ref
    elif "/" in ref[0]:
        kind, name = ref[0].split("/", 1)
    else:
        kind, name = "", ref[0]
    hub = target.hub()
    if kind:
        return list_jobs(hub, kinds.job_resource(kind), namespace, name, None)[0]
    found = []
    for resource in r.JOB_KINDS:
        try:
            job = hub.get(resource, name, namespace)
        except errors.NotFound:
            continue
        job.setdefault("apiVersion", resource.api_version)
        job.setdefault("kind", resource.kind)
        found.append(job)
    if not found:
        raise CliError(f'no job "{name}" in namespace {namespace}')
    if len(found) > 1:
        which = ", ".join(output.name_of(j) for j in found)
        raise CliError(f'"{name}" names several jobs ({which}); say which: KIND/NAME')
    return found[0]


def replicas_text(replicas: Mapping[str, int]) -> str:
    return ",".join(f"{role}={count}" for role, count in sorted(replicas.items())) or "-"


# -- get ----------------------------------------------------------------------------------
def get_jobs(target: Target, resource: r.Resource, name: str | None, selector: str | None,
             fmt: str, multi: bool, now: datetime) -> str:
    namespace = target.namespace()
    hub = target.hub()
    jobs = list_jobs(hub, resource, namespace, name, selector)
    if fmt in ("json", "yaml", "name"):
        return output.objects(jobs, fmt, single=bool(name))
    works = works_by_job(hub)
    wide = fmt == "wide"
    prefix = ["NAMESPACE"] if namespace is None else []
    rows: list[list[str]] = []
    if multi:
        header = [*prefix, "NAME", "CLUSTER", "STATE", "AGE", "ADOPTION"] + (
            ["REPLICAS"] if wide else [])
        for job in jobs:
            meta = job["metadata"]
            lead = [meta["namespace"]] if prefix else []
            shares = works.get(meta["uid"], [])
            if not shares:  # not placed yet: queued or unschedulable, say so
                rows.append([*lead, meta["name"], "<none>", job_state(job),
                             output.age(meta.get("creationTimestamp"), now), "-"]
                            + (["-"] if wide else []))
            for work in shares:
                placement = work["spec"]["placement"]
                rows.append([*lead, meta["name"], placement["cluster"],
                             protocol.work_state(work),
                             output.age(meta.get("creationTimestamp"), now),
                             "Y" if protocol.is_applied(work) else "N"]
                            + ([replicas_text(placement.get("replicas") or {})] if wide else []))
        return output.table(header, rows)
    header = [*prefix, "NAME", "STATE", "CLUSTERS", "QUEUE", "AGE"] + (
        ["REASON", "MESSAGE"] if wide else [])
    for job in jobs:
        meta = job["metadata"]
        queue = protocol.queue_status(job)
        clusters = ",".join(w["spec"]["placement"]["cluster"] for w in works.get(meta["uid"], []))
        queued = f"{queue['name']}#{queue.get('position', '?')}" if queue.get("name") else "-"
        row = [*([meta["namespace"]] if prefix else []), meta["name"], job_state(job),
               clusters or "<none>", queued, output.age(meta.get("creationTimestamp"), now)]
        if wide:
            row += [str(queue.get("reason") or "-"), output.one_line(queue.get("message") or "-")]
        rows.append(row)
    return output.table(header, rows)


def get_pods(target: Target, selector: str | None, fmt: str, now: datetime) -> str:
    namespace = target.namespace()
    hub = target.hub()
    works, _ = hub.list(r.WORKS)
    wanted: set[str] | None = None
    if selector:
        wanted = {j["metadata"]["uid"] for resource in r.JOB_KINDS
                  for j in hub.list(resource, namespace, label_selector=selector)[0]}
    pods: list[tuple[Body, Mapping[str, Any]]] = []
    for work in sorted(works, key=lambda w: (w["spec"]["placement"]["cluster"],
                                             w["metadata"]["name"])):
        job = work["spec"]["job"]
        if namespace and job["namespace"] != namespace:
            continue
        if wanted is not None and job["uid"] not in wanted:
            continue
        for pod in protocol.reported_pods(work):
            pods.append((work, pod))
    if fmt in ("json", "yaml", "name"):
        return output.objects([_pod_object(w, p) for w, p in pods], fmt)
    prefix = ["NAMESPACE"] if namespace is None else []
    header = [*prefix, "NAME", "CLUSTER", "READY", "STATUS", "RESTARTS", "AGE"] + (
        ["NODE", "JOB", "ROLE"] if fmt == "wide" else [])
    rows = []
    for work, pod in pods:
        job = work["spec"]["job"]
        row = [*([job["namespace"]] if prefix else []), pod["name"],
               work["spec"]["placement"]["cluster"], "1/1" if pod.get("ready") else "0/1",
               pod_status(pod), str(pod.get("restarts", 0)), output.age(pod.get("startTime"), now)]
        if fmt == "wide":
            row += [pod.get("node") or "<none>", f"{job['kind'].lower()}/{job['name']}",
                    pod.get("role") or "-"]
        rows.append(row)
    return output.table(header, rows)


def _pod_object(work: Mapping[str, Any], pod: Mapping[str, Any]) -> Body:
    job = work["spec"]["job"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod["name"], "namespace": job["namespace"],
                         "labels": {protocol.CLUSTER_LABEL: work["spec"]["placement"]["cluster"]}},
            "status": dict(pod)}


def pod_status(pod: Mapping[str, Any]) -> str:
    phase = str(pod.get("phase") or "Pending")
    return {"Succeeded": "Completed", "Failed": "Error"}.get(phase, phase)


def get_queues(target: Target, name: str | None, selector: str | None, fmt: str) -> str:
    hub = target.hub()
    if name:
        try:
            queues = [hub.get(r.QUEUES, name, QUEUE_NAMESPACE)]
        except errors.NotFound:
            raise CliError(f'queues.scheduling.x-k8s.io "{name}" not found in '
                           f"{QUEUE_NAMESPACE}") from None
        queues[0].setdefault("apiVersion", r.QUEUES.api_version)
        queues[0].setdefault("kind", r.QUEUES.kind)
    else:
        queues = sorted(hub.list(r.QUEUES, QUEUE_NAMESPACE, label_selector=selector)[0],
                        key=lambda q: q["metadata"]["name"])
    if fmt in ("json", "yaml", "name"):
        return output.objects(queues, fmt, single=bool(name))
    header = ["NAME", "PENDING", "ADMITTED", "USAGE"] + (
        ["PATH", "MIN", "CELLS"] if fmt == "wide" else [])
    rows = []
    for queue in queues:
        status = queue.get("status") or {}
        row = [queue["metadata"]["name"], str(status.get("pending", 0)),
               str(status.get("admitted", 0)), status.get("usage") or "-"]
        if fmt == "wide":
            row += ["/".join((queue.get("spec") or {}).get("path") or []) or "-",
                    ",".join(f"{k}={v}" for k, v in (status.get("min") or {}).items()) or "-",
                    ",".join(f"{k}={v}" for k, v in (status.get("cells") or {}).items()) or "-"]
        rows.append(row)
    text = output.table(header, rows)
    waiting = pending_positions(queues, only_leaves=not name)
    if waiting:
        text += "\n\n" + output.table(["QUEUE", "POSITION", "JOB"], waiting)
    return text


def pending_positions(queues: Sequence[Mapping[str, Any]],
                      only_leaves: bool) -> list[list[str]]:
    """Waiting jobs in admission order, one row each. A parent node's list repeats its
    leaves' jobs, so when every queue is shown only the leaves' lists are."""
    paths = [tuple((q.get("spec") or {}).get("path") or []) for q in queues]
    rows = []
    for queue, path in zip(queues, paths, strict=True):
        is_parent = any(len(p) > len(path) and p[:len(path)] == path for p in paths)
        if only_leaves and is_parent:
            continue
        jobs = (queue.get("status") or {}).get("pendingJobs") or []
        rows += [[queue["metadata"]["name"], str(i), job] for i, job in enumerate(jobs, 1)]
    return rows


def get_clusters(target: Target, name: str | None, selector: str | None, fmt: str,
                 now: datetime) -> str:
    hub = target.hub()
    if name:
        try:
            clusters = [hub.get(r.MEMBERCLUSTERS, name)]
        except errors.NotFound:
            raise CliError(f'memberclusters.fleet.sh "{name}" not found') from None
    else:
        clusters = sorted(hub.list(r.MEMBERCLUSTERS, label_selector=selector)[0],
                          key=lambda c: c["metadata"]["name"])
    for cluster in clusters:
        cluster.setdefault("apiVersion", r.MEMBERCLUSTERS.api_version)
        cluster.setdefault("kind", r.MEMBERCLUSTERS.kind)
    if fmt in ("json", "yaml", "name"):
        return output.objects(clusters, fmt, single=bool(name))
    header = ["NAME", "READY", "NODES", "FREE-GPUS", "HEARTBEAT"] + (
        ["VERSION", "CAPACITY"] if fmt == "wide" else [])
    rows = []
    for cluster in clusters:
        status = cluster.get("status") or {}
        conditions = {c.get("type"): c for c in status.get("conditions") or []}
        ready = (conditions.get("Ready") or {}).get("status", "Unknown")
        row = [cluster["metadata"]["name"], ready,
               str(status.get("readyNodes", 0)), str(status.get("freeGpus", 0)),
               heartbeat_age(hub, cluster, now)]
        if fmt == "wide":
            stale = (conditions.get("CapacityStale") or {}).get("status") == "True"
            row += [status.get("kubernetesVersion") or "-", "Stale" if stale else "Fresh"]
        rows.append(row)
    return output.table(header, rows)


def heartbeat_age(hub: Kube, cluster: Mapping[str, Any], now: datetime) -> str:
    """Age of the newer of the agent's heartbeat Lease and its last status report."""
    name = cluster["metadata"]["name"]
    stamps = [(cluster.get("status") or {}).get("lastHeartbeatTime")]
    try:
        lease = hub.get(r.LEASES, HEARTBEAT_LEASE, member_namespace(name))
        stamps.append((lease.get("spec") or {}).get("renewTime"))
    except (errors.NotFound, errors.Forbidden):
        pass
    known = [s for s in stamps if s]
    return output.age(max(known, key=_instant), now) if known else "<never>"


def _instant(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def get_works(target: Target, name: str | None, selector: str | None, fmt: str,
              now: datetime) -> str:
    hub = target.hub()
    works = sorted(hub.list(r.WORKS, label_selector=selector)[0],
                   key=lambda w: (w["metadata"]["namespace"], w["metadata"]["name"]))
    namespace = target.namespace()
    works = [w for w in works if (name is None or w["metadata"]["name"] == name) and
             (namespace is None or target.namespace_flag is None or
              w["spec"]["job"]["namespace"] == namespace)]
    if fmt in ("json", "yaml", "name"):
        return output.objects(works, fmt, single=bool(name))
    rows = [[w["metadata"]["namespace"], w["metadata"]["name"],
             f"{w['spec']['job']['kind'].lower()}/{w['spec']['job']['namespace']}/"
             f"{w['spec']['job']['name']}", w["spec"]["placement"]["cluster"],
             "Y" if protocol.is_applied(w) else "N", protocol.work_state(w),
             output.age(w["metadata"].get("creationTimestamp"), now)] for w in works]
    return output.table(["NAMESPACE", "NAME", "JOB", "CLUSTER", "APPLIED", "STATE", "AGE"], rows)


# -- describe and why ---------------------------------------------------------------------
def why(target: Target, ref: Sequence[str], now: datetime) -> str:
    job = find_job(target, ref)
    return explain(job, works_by_job(target.hub()).get(job["metadata"]["uid"], []), now)


def explain(job: Mapping[str, Any], works: Sequence[Mapping[str, Any]], now: datetime) -> str:
    """One or a few lines: where the job runs, or why it waits."""
    meta = job["metadata"]
    label = output.name_of(job)
    state = job_state(job)
    queue = protocol.queue_status(job)
    if works:
        parts = []
        for work in works:
            placement = work["spec"]["placement"]
            pods = protocol.reported_pods(work)
            running = sum(1 for p in pods if p.get("phase") == "Running")
            parts.append(f"{placement['cluster']} ({replicas_text(placement.get('replicas') or {})}"
                         f"; {protocol.work_state(work, 'not applied yet')}, "
                         f"{running}/{len(pods)} pods running)")
        return f"{label} is {state}: placed on " + ", ".join(parts)
    if state in ("Succeeded", "Failed", "Completed"):
        return f"{label} is {state}"
    waited = output.age(meta.get("creationTimestamp"), now)
    return output.one_line(f"{label} {protocol.waiting_text(queue, waited)}")


def describe(target: Target, ref: Sequence[str], now: datetime) -> str:
    job = find_job(target, ref)
    hub = target.hub()
    meta = job["metadata"]
    works = works_by_job(hub).get(meta["uid"], [])
    lines = [f"Name:         {meta['name']}",
             f"Namespace:    {meta['namespace']}",
             f"Kind:         {job['kind']} ({job['apiVersion']})",
             f"State:        {job_state(job)}",
             f"Created:      {meta.get('creationTimestamp', '?')} "
             f"({output.age(meta.get('creationTimestamp'), now)} ago)"]
    queue = protocol.queue_status(job)
    if queue:
        lines.append("Queue:        " + (
            f"{queue['name']}, position {queue.get('position', '?')}" if queue.get("name")
            else "-"))
        lines.append(f"Waiting:      {queue.get('reason', '-')}: "
                     f"{output.one_line(queue.get('message') or '')}")
    lines.append(f"Why:          {explain(job, works, now)}")
    lines.append("Placement:")
    placement_rows = []
    for work in works:
        placement = work["spec"]["placement"]
        placement_rows.append([placement["cluster"],
                               replicas_text(placement.get("replicas") or {}),
                               "Y" if protocol.is_applied(work) else "N",
                               protocol.work_state(work), work["metadata"]["name"]])
    lines.append(_indent(output.table(["CLUSTER", "REPLICAS", "APPLIED", "STATE", "WORK"],
                                      placement_rows) if placement_rows else "<none>"))
    lines.append("Replicas:")
    pod_rows = []
    for work in works:
        for pod in protocol.reported_pods(work):
            pod_rows.append([pod["name"], pod.get("role") or "-",
                             work["spec"]["placement"]["cluster"], pod.get("node") or "<none>",
                             pod_status(pod), "1/1" if pod.get("ready") else "0/1",
                             str(pod.get("restarts", 0))])
    lines.append(_indent(output.table(["POD", "ROLE", "CLUSTER", "NODE", "STATUS", "READY",
                                       "RESTARTS"], pod_rows) if pod_rows else "<none>"))
    lines.append("Conditions:")
    conditions = (job.get("status") or {}).get("conditions") or []
    condition_rows = [[c.get("type", ""), c.get("status", ""), c.get("reason") or "-",
                       output.one_line(c.get("message") or "")[:100]] for c in conditions]
    lines.append(_indent(output.table(["TYPE", "STATUS", "REASON", "MESSAGE"], condition_rows)
                         if condition_rows else "<none>"))
    lines.append("Events:")
    lines.append(_indent(_events(hub, job, now)))
    return "\n".join(lines)


def _events(hub: Kube, job: Mapping[str, Any], now: datetime) -> str:
    meta = job["metadata"]
    try:
        events, _ = hub.list(r.EVENTS, meta["namespace"],
                             field_selector=f"involvedObject.uid={meta['uid']}")
    except errors.Forbidden:
        return "<not allowed to list events>"
    events.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    rows = [[e.get("type", ""), e.get("reason", ""),
             output.age(e.get("lastTimestamp") or e.get("eventTime"), now),
             output.one_line(e.get("message", ""))[:120]] for e in events[-20:]]
    return output.table(["TYPE", "REASON", "AGE", "MESSAGE"], rows) if rows else "<none>"


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


# -- logs ---------------------------------------------------------------------------------
def choose_pod(works: Sequence[Mapping[str, Any]], replica: str | None) -> tuple[str, Body]:
    """(cluster, pod summary) of ``replica`` (``worker-1``, ``master-0``): the pod whose name
    ends with it; by default the leader (master, chief, launcher), else the first pod."""
    candidates = [(w["spec"]["placement"]["cluster"], dict(p)) for w in works
                  for p in protocol.reported_pods(w)]
    if not candidates:
        raise CliError("the job has no pods reported by its members yet")
    if replica:
        wanted = replica.lower()
        for cluster, pod in candidates:
            if pod["name"].lower().endswith("-" + wanted):
                return cluster, pod
        names = ", ".join(sorted(p["name"] for _, p in candidates))
        raise CliError(f"no replica {replica!r} in the job; its pods: {names}")
    for cluster, pod in candidates:
        if (pod.get("role") or "").lower() in LEADERS:
            return cluster, pod
    return sorted(candidates, key=lambda c: c[1]["name"])[0]


def logs(target: Target, ref: Sequence[str], replica: str | None, container: str | None,
         follow: bool, tail: int | None, out: TextIO | None = None) -> None:
    out = out or sys.stdout  # looked up per call: a default bound at import misses redirection
    job = find_job(target, ref)
    works = works_by_job(target.hub()).get(job["metadata"]["uid"], [])
    if not works:
        raise CliError(f"{output.name_of(job)} is not placed on any member yet")
    cluster, pod = choose_pod(works, replica)
    namespace = job["metadata"]["namespace"]
    # A mirrored pod's log comes through the hub (its API server asks the member's agent),
    # as ``kubectl logs`` gets it: no member credentials needed. Else from the member.
    hub = target.hub()
    mirror = hub.get_or_none(r.PODS, pod["name"], namespace)
    source = hub if mirror is not None and (mirror["metadata"].get("labels") or {}).get(
        MIRROR_OF) == cluster else target.member(cluster)
    query = {"container": container, "follow": "true" if follow else None,
             "tailLines": tail}
    try:
        for chunk in _stream(source, pod["name"], namespace, query):
            out.write(chunk)
            out.flush()
    except errors.ApiError as exc:
        raise CliError(f"logs of pod {pod['name']} on {cluster}: "
                       f"{output.one_line(exc.message)}") from None


def _stream(member: Kube, pod: str, namespace: str,
            query: Mapping[str, object]) -> Iterator[str]:
    response = member.stream(r.PODS, pod, namespace, "log", query)
    try:
        for chunk in response.stream(4096, decode_content=True):
            yield chunk.decode(errors="replace")
    finally:
        response.release_conn()


# -- top ----------------------------------------------------------------------------------
def top_clusters(target: Target, now: datetime) -> str:
    hub = target.hub()
    clusters = sorted(hub.list(r.MEMBERCLUSTERS)[0], key=lambda c: c["metadata"]["name"])
    rows = []
    for cluster in clusters:
        capacity = (cluster.get("status") or {}).get("capacity") or {}
        total, free = capacity.get("allocatable") or {}, capacity.get("free") or {}
        rows.append([cluster["metadata"]["name"],
                     *(f"{format_canonical(res, int(free.get(res, 0)))}/"
                       f"{format_canonical(res, int(total.get(res, 0)))}"
                       for res in (GPU, CPU, MEMORY)),
                     str((cluster.get("status") or {}).get("readyNodes", 0)),
                     heartbeat_age(hub, cluster, now)])
    return output.table(["NAME", "GPU(FREE/TOTAL)", "CPU(FREE/TOTAL)", "MEMORY(FREE/TOTAL)",
                         "NODES", "HEARTBEAT"], rows)
