"""The hub's scheduling pass at the scale bench's size, in this process: 100 members x 200
nodes, 10,000 pending PyTorchJobs of 3 tenants borrowing under one ElasticQuotaTree.

The hub's own :class:`~fleet.hub.scheduler.Scheduler` runs its passes (snapshot -> view ->
plan -> write) on a cache filled as its watches would fill it, the members' capacity reports
written by the agent's own reporter code, the jobs as the scale bench creates them. Its writes
go to :class:`MemoryKube`, an in-memory stand-in for the API server (merge patches, the
resourceVersion guard, status subresources), which counts them; what it writes comes back
into the cache as the watches would bring it. Members never report, so every bound job's Work
stays assumed, as between two capacity reports. No API server, no network: minutes of the
20-minute scale run in seconds, and cProfile-able (``python -m e2e.bench.passes --profile``).
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import itertools
import pstats
import random
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from e2e.bench import dashboard
from e2e.bench.inprocess import percentile
from e2e.bench.members import Member, nodes_of
from e2e.bench.results import Result
from e2e.bench.scale import TENANTS, job, mib, tenant_objects
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube
from fleet.hub.cache import Cache
from fleet.hub.dispatch import Dispatcher
from fleet.hub.scheduler import Scheduler, Settings

Body = dict[str, Any]
STORES = {r.PYTORCHJOBS.plural: "jobs", r.WORKS.plural: "works",
          r.MEMBERCLUSTERS.plural: "clusters", r.QUEUES.plural: "queues"}
# What a write to a job's objects is, for the writes a job costs
WRITE_KINDS = {"pytorchjobs": "bind", "works": "work", "events": "event",
               "pytorchjobs/status": "status"}
WALK_IN = "walk-in"  # a namespace outside the quota tree: its jobs bind at their first look


def _job_of(key: str, body: Mapping[str, Any], name: str) -> str:
    """The job a write is for ("": not a job's)."""
    if key in ("pytorchjobs", "pytorchjobs/status"):
        return name or str(body.get("metadata", {}).get("name", ""))
    if key == "works":
        return str(((body.get("spec") or {}).get("job") or {}).get("name", ""))
    if key == "events":
        return str((body.get("involvedObject") or {}).get("name", ""))
    return ""


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


class MemoryKube:
    """The API server calls the hub's writer makes, on objects in memory, each write counted
    by resource (and subresource) as ``apiserver_request_total`` would count it."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.objects: dict[tuple[str, str, str], Body] = {}
        self.writes: dict[str, int] = {}
        self.by_job: dict[str, dict[str, int]] = {}  # job name -> writes by kind (WRITE_KINDS)
        self.version = itertools.count(10_000)
        self._lock = threading.Lock()

    def put(self, resource: r.Resource, body: Body) -> Body:
        """An object that exists before the hub starts (no write counted)."""
        meta = body["metadata"]
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("resourceVersion", str(next(self.version)))
        meta.setdefault("generation", 1)
        self.objects[(resource.plural, meta.get("namespace") or "", meta["name"])] = body
        return body

    def _count(self, resource: r.Resource, subresource: str | None,
               body: Mapping[str, Any] | None = None, name: str = "") -> None:
        key = resource.plural + (f"/{subresource}" if subresource else "")
        self.writes[key] = self.writes.get(key, 0) + 1
        job = _job_of(key, body or {}, name)
        if job:
            counts = self.by_job.setdefault(job, {})
            counts[WRITE_KINDS[key]] = counts.get(WRITE_KINDS[key], 0) + 1

    def _stored(self, resource: r.Resource, body: Body) -> Body:
        body["metadata"]["resourceVersion"] = str(next(self.version))
        meta = body["metadata"]
        key = (resource.plural, meta.get("namespace") or "", meta["name"])
        store = STORES.get(resource.plural)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self.objects.pop(key, None)  # its last finalizer went: gone, as the watch says
            if store is not None:
                self.cache.remove(store, body)
            return copy.deepcopy(body)
        self.objects[key] = body
        if store is not None:
            self.cache.upsert(store, body)  # as the watch would bring it back
        return copy.deepcopy(body)

    def _find(self, resource: r.Resource, name: str, namespace: str | None) -> Body:
        found = self.objects.get((resource.plural, namespace or "", name))
        if found is None:
            raise errors.NotFound(404, "NotFound", f"{resource.plural} {name}")
        return found

    def get(self, resource: r.Resource, name: str, namespace: str | None = None,
            subresource: str | None = None) -> Body:
        with self._lock:
            return copy.deepcopy(self._find(resource, name, namespace))

    def get_or_none(self, resource: r.Resource, name: str,
                    namespace: str | None = None) -> Body | None:
        try:
            return self.get(resource, name, namespace)
        except errors.NotFound:
            return None

    def create(self, resource: r.Resource, body: Mapping[str, Any],
               namespace: str | None = None, subresource: str | None = None,
               name: str | None = None) -> Body:
        with self._lock:
            self._count(resource, subresource, body)
            made = copy.deepcopy(dict(body))
            meta = made["metadata"]
            if "generateName" in meta and "name" not in meta:
                meta["name"] = f"{meta['generateName']}{next(self.version)}"
            if (resource.plural, meta.get("namespace") or "", meta["name"]) in self.objects:
                raise errors.AlreadyExists(409, "AlreadyExists", meta["name"])
            meta.setdefault("uid", f"uid-{resource.plural}-{meta['name']}")
            meta.setdefault("generation", 1)
            meta.setdefault("creationTimestamp", stamp(time.time()))  # as the API server
            return self._stored(resource, made)

    def patch(self, resource: r.Resource, name: str, patch: Any,
              namespace: str | None = None, *, subresource: str | None = None,
              content_type: str = "") -> Body:
        with self._lock:
            self._count(resource, subresource, name=name)
            current = self._find(resource, name, namespace)
            wanted = (patch.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != current["metadata"]["resourceVersion"]:
                raise errors.Conflict(409, "Conflict", name)
            patch = {k: v for k, v in patch.items() if (k == "status") == bool(subresource)}
            return self._stored(resource, merge(current, patch))

    def replace(self, resource: r.Resource, body: Mapping[str, Any],
                subresource: str | None = None) -> Body:
        with self._lock:
            self._count(resource, subresource, body)
            meta = body["metadata"]
            current = self._find(resource, meta["name"], meta.get("namespace"))
            if meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise errors.Conflict(409, "Conflict", meta["name"])
            new = copy.deepcopy(dict(current))
            if subresource == "status":
                new["status"] = copy.deepcopy(body.get("status"))
            else:
                new = {**copy.deepcopy(dict(body)), "status": current.get("status")}
            return self._stored(resource, new)

    def apply(self, resource: r.Resource, body: Mapping[str, Any], *, field_manager: str,
              subresource: str | None = None, force: bool = True,
              dry_run: bool = False) -> Body:
        with self._lock:
            self._count(resource, subresource, body)
            meta = body["metadata"]
            key = (resource.plural, meta.get("namespace") or "", meta["name"])
            current = self.objects.get(key) or {"metadata": {"uid": f"uid-{meta['name']}"}}
            return self._stored(resource, merge(current, dict(body)))

    def delete(self, resource: r.Resource, name: str, namespace: str | None = None,
               **_: Any) -> bool:
        """Gone at once, or marked deleting while finalizers remain; the cache told either
        way, as the watch would (else the hub deletes the same Works on every pass)."""
        with self._lock:
            self._count(resource, None, name=name)
            found = self.objects.get((resource.plural, namespace or "", name))
            if found is None:
                return False
            if not found["metadata"].get("deletionTimestamp"):
                found = copy.deepcopy(found)
                found["metadata"]["deletionTimestamp"] = stamp(time.time())
            self._stored(resource, found)
            return True


def stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def scale_hub(members: int = 100, nodes: int = 200, jobs: int = 10_000,
              seed: int = 17) -> tuple[Scheduler, MemoryKube]:
    """A hub (its scheduler, cache and writer) with the scale bench's objects in its cache."""
    # The members never report here, yet their agents would heartbeat all along: the hub
    # judges freshness by when it heard them on its cache's clock, which stands still.
    cache = Cache(clock=lambda: 0.0)
    kube = MemoryKube(cache)
    now = time.time()
    rng = random.Random(seed)
    gpus = 0
    for i in range(members):
        name = f"member{i:03d}"
        member = Member(name, Kube.__new__(Kube), nodes_of(name, nodes, rng))
        gpus += sum(int(n["status"]["allocatable"].get("nvidia.com/gpu", "0"))
                    for n in member.nodes)
        status = {**member.reporter.capacity(), "lastHeartbeatTime": stamp(now + 3600),
                  "conditions": [{"type": "Ready", "status": "True"}]}
        status["capacity"]["observedTime"] = stamp(now + 3600)  # fresh for the whole run
        cache.upsert("clusters", kube.put(r.MEMBERCLUSTERS, {
            "apiVersion": "fleet.sh/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": name, "labels": {"fleet.sh/cluster": name}},
            "spec": {}, "status": status}))
    stores = {r.ELASTICQUOTATREES.plural: "quotatrees",
              r.PROPAGATIONPOLICIES.plural: "policies"}
    for resource, body in tenant_objects(gpus):
        if resource.plural in stores:
            cache.upsert(stores[resource.plural], kube.put(resource, body))
    walk_in = copy.deepcopy(next(b for res, b in tenant_objects(gpus)
                                 if res is r.PROPAGATIONPOLICIES))
    walk_in["metadata"]["namespace"] = WALK_IN
    walk_in["spec"].pop("suspension")  # no queue: placed at its first look
    cache.upsert("policies", kube.put(r.PROPAGATIONPOLICIES, walk_in))
    made = random.Random(23)
    for i in range(jobs):
        body = job(f"job-{i:05d}", TENANTS[i % len(TENANTS)], made)
        body["metadata"]["creationTimestamp"] = stamp(now - jobs / 100 + i // 100)
        cache.upsert("jobs", kube.put(r.PYTORCHJOBS, body))
    scheduler = Scheduler(cache, Dispatcher(kube),  # type: ignore[arg-type]
                          None,  # type: ignore[arg-type]
                          Settings(resync_seconds=0.0))
    return scheduler, kube


def settle(scheduler: Scheduler, timeout: float = 60.0) -> None:
    """Wait until the writer's background binds, statuses and events are written (the next
    pass sees them; the writes are counted)."""
    deadline = time.monotonic() + timeout
    events = scheduler.writer.dispatcher.events
    while (scheduler.writer.inflight() or scheduler.writer.writing() or not events.drained()) \
            and time.monotonic() < deadline:
        time.sleep(0.005)


def finish(kube: MemoryKube, count: int) -> None:
    """The ``count`` longest running jobs succeed: their Works report it, as agents would
    (not counted as the hub's writes); the hub mirrors it and their quota frees."""
    with kube._lock:  # the writer's event senders create objects meanwhile
        running = [work for key, work in kube.objects.items()
                   if key[0] == r.WORKS.plural and not (work.get("status") or {}).get("state")]
    running.sort(key=lambda work: int(work["metadata"]["resourceVersion"]))
    for work in running[:count]:
        done = copy.deepcopy(work)
        done["status"] = {"state": "Succeeded", "jobStatus": {
            "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded",
                            "message": "finished", "lastTransitionTime": stamp(time.time())}],
            "completionTime": stamp(time.time())}}
        with kube._lock:
            kube._stored(r.WORKS, done)


def run_passes(scheduler: Scheduler, kube: MemoryKube, passes: int, finished: int = 0
               ) -> tuple[list[float], list[int], int]:
    """``passes`` passes, each timed in the pass thread's CPU time (the background writers
    not counted), ``finished`` jobs succeeding after each; per pass its seconds and the
    jobs it bound, and the writes in all."""
    timings: list[float] = []
    bound: list[int] = []
    before = sum(kube.writes.values())
    scheduler.collector.start()  # as the hub's scheduling loop does
    try:
        for _ in range(passes):
            finish(kube, finished)
            placed = kube.writes.get("works", 0)
            started = time.thread_time()
            scheduler.pass_once()
            timings.append(time.thread_time() - started)
            settle(scheduler)
            bound.append(kube.writes.get("works", 0) - placed)
    finally:
        scheduler.collector.stop()
    return timings, bound, sum(kube.writes.values()) - before


def walk_in(kube: MemoryKube, count: int, seed: int = 29, start: int = 0) -> list[str]:
    """``count`` new jobs in a namespace no quota covers, as the watch would bring them
    (numbered from ``start``)."""
    made, now = random.Random(seed + start), time.time()
    names = []
    for i in range(start, start + count):
        body = job(f"walk-in-{i:03d}", WALK_IN, made)
        body["metadata"]["creationTimestamp"] = stamp(now)
        kube.cache.upsert("jobs", kube.put(r.PYTORCHJOBS, body))
        names.append(body["metadata"]["name"])
    return names


def per_job(kube: MemoryKube, names: list[str]) -> tuple[float, str]:
    """The writes ``names`` cost, per job, and by kind."""
    kinds: dict[str, int] = {}
    for name in names:
        for kind, count in kube.by_job.get(name, {}).items():
            kinds[kind] = kinds.get(kind, 0) + count
    n = max(len(names), 1)
    return sum(kinds.values()) / n, ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(kinds.items()))


def pass_latency(members: int = 100, nodes: int = 200, jobs: int = 10_000,
                 passes: int = 20, finished: int = 200, first_look: int = 64) -> list[Result]:
    """The first pass (cold: every job parsed, the backlog it can bind bound) is reported
    apart; the passes after it find the quota tree nearly full, ``finished`` jobs succeeding
    before each (the scale bench's steady state: a few admissions a pass, thousands waiting
    behind them). Then ``first_look`` jobs arrive in a namespace no quota covers, placed at
    their first look: what such a job costs in writes."""
    scheduler, kube = scale_hub(members, nodes, jobs)
    cold, cold_bound, _ = run_passes(scheduler, kube, 1, 0)
    bound_cold = {n for n, k in kube.by_job.items() if k.get("work")}
    timings, bound, _ = run_passes(scheduler, kube, passes, finished)
    steady_bound = sorted({n for n, k in kube.by_job.items() if k.get("work")} - bound_cold)
    waited, waited_kinds = per_job(kube, steady_bound)
    rss, peak = rss_mib()  # (before the backlog below binds more than the steady passes)
    shown = dashboard.views(scheduler, f"{members} members x {nodes} nodes, {jobs:,} jobs")
    # The backlog first binds what it can (a pass binds at most its oldest 32, and the
    # arrivals are the newest): they arrive once it binds no more, three passes in a row.
    idle = 0
    for _ in range(400):
        idle = 0 if run_passes(scheduler, kube, 1, 0)[1][0] else idle + 1
        if idle == 3:
            break
    # In groups a pass can bind whole: a job past a pass's binds waits for the next, and
    # is told so (a status write), so it is not bound at its first look.
    arrivals: list[str] = []
    group = scheduler.settings.max_binds_per_pass or first_look
    for start in range(0, first_look, group):
        arrivals += walk_in(kube, min(group, first_look - start), start=start)
        for _ in range(10):
            run_passes(scheduler, kube, 1, 0)
            if all(kube.by_job.get(n, {}).get("work") for n in arrivals):
                break
    run_passes(scheduler, kube, 2, 0)  # what the passes after the bind write for them too
    placed = [n for n in arrivals if kube.by_job.get(n, {}).get("work")]
    at_first_look, first_look_kinds = per_job(kube, placed) if placed else (float("nan"), "")
    scale = f"{members} members x {nodes} nodes, {jobs:,} jobs"
    ms = [t * 1000 for t in timings]
    note = (f"CPU time of the pass thread (its own writes to an in-memory API server "
            f"included, the background binds and statuses not), {passes} passes after the "
            f"first, {finished} jobs finishing before each, {sum(bound) / passes:.0f} bound "
            f"a pass")
    return [
        Result(f"process RSS after the passes, in process, {scale}", rss, "MiB", "<= 300",
               note=f"peak {peak:.0f} MiB; the hub's cache, views and writer plus the "
                    "in-memory API server's copy of every object (not the hub's: about a "
                    "fifth of it), no kopf, no API client"),
        Result(f"first scheduling pass (cold), in process, {scale}", cold[0] * 1000, "ms", "",
               note=f"every job parsed once; bound {cold_bound[0]:,}"),
        Result(f"scheduling pass p50, in process, {scale}", percentile(ms, 0.5), "ms",
               "<= 100", note=note),
        Result(f"scheduling pass p99, in process, {scale}", percentile(ms, 0.99), "ms",
               "<= 100", note=f"the slowest of {passes} passes"),
        Result(f"hub writes per job bound at its first look, in process, {scale}",
               at_first_look, "writes", "<= 3",
               note=f"{len(placed)} of {first_look} jobs outside the quota tree placed: "
                    f"{first_look_kinds or 'none'}"),
        Result(f"hub writes per job bound after waiting, in process, {scale}", waited,
               "writes", "", note=f"{len(steady_bound):,} jobs bound in the steady passes: "
               f"{waited_kinds} (status: its waiting statuses and the one that tells it it "
               f"no longer waits)"),
        *shown,
    ]


def rss_mib() -> tuple[float, float]:
    """This process's resident memory now and at its peak, in MiB (Linux)."""
    status = dict(line.split(":", 1) for line in
                  Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return mib(status["VmRSS"]), mib(status["VmHWM"])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m e2e.bench.passes", description=__doc__)
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--passes", type=int, default=12)
    parser.add_argument("--finish", type=int, default=200,
                        help="jobs that succeed before each pass")
    parser.add_argument("--profile", action="store_true", help="cProfile the passes")
    parser.add_argument("--warm", type=int, default=0,
                        help="passes run before the ones timed (and profiled)")
    args = parser.parse_args()
    started = time.perf_counter()
    scheduler, kube = scale_hub(args.members, args.nodes, args.jobs)
    print(f"built in {time.perf_counter() - started:.1f} s")
    run_passes(scheduler, kube, args.warm, args.finish)
    profile = cProfile.Profile() if args.profile else None
    if profile is not None:
        profile.enable()
    timings, bound, written = run_passes(scheduler, kube, args.passes, args.finish)
    if profile is not None:
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(45)
    for i, (t, b) in enumerate(zip(timings, bound, strict=True)):
        print(f"pass {i}: {t * 1000:.0f} ms CPU, {b} Works written")
    print(f"writes {written} for {sum(bound)} Works: {kube.writes}")
    print("RSS {:.0f} MiB, peak {:.0f} MiB".format(*rss_mib()))


if __name__ == "__main__":
    main()
