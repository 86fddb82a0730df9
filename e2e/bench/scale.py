"""The hub at the scale users outgrow one cluster for: 100 members x 200 nodes of mixed shapes,
10,000 pending PyTorchJobs of mixed sizes, 3 tenants under one ElasticQuotaTree.

The hub control plane is real (kube-apiserver, etcd); members have no API server: one load
generator process (:mod:`e2e.bench.members`) runs the agents' heartbeat, capacity report and
Work status code for all of them. The jobs are created while the hub is stopped, then the hub
(``python -m fleet.hub``) starts and is measured until every job is bound: its scheduling pass
(``fleet_scheduling_pass_seconds`` from its /metrics), decisions per second, RSS and CPU from
/proc, and its API writes per bound job from the API server's own ``apiserver_request_total``,
less the load generator's writes, which it counts itself.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.bench.members import CountingKube, Fleet
from e2e.bench.onfleet import cpu_seconds, say, writes
from e2e.bench.results import Result
from e2e.bench.webhooks import without_webhook
from e2e.jobs import seed_pytorchjob
from e2e.localfleet import HUB, LocalFleet
from e2e.localfleet.kwok import free_ports
from fleet.api.cluster import member_namespace
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

TENANTS = ("tenant-a", "tenant-b", "tenant-c")


def _buckets_of(histogram: str) -> re.Pattern[str]:
    return re.compile(rf'^{histogram}_bucket\{{le="([^"]+)"\}} ([0-9.e+]+)$')


BUCKET = _buckets_of("fleet_scheduling_pass_seconds")
CPU_BUCKET = _buckets_of("fleet_scheduling_pass_cpu_seconds")
PASS_SUM = re.compile(r'^fleet_scheduling_pass_seconds_sum ([0-9.e+]+)$')
PLACED = re.compile(r'^fleet_decisions_total\{result="placed"\} ([0-9.e+]+)$')
STATUSES = re.compile(r'^fleet_job_status_writes_total\{why="(\w+)"\} ([0-9.e+]+)$')


def job(name: str, tenant: str, rng: random.Random) -> dict[str, Any]:
    """A PyTorchJob of a mixed size: 1-8 GPUs per replica, 1-8 replicas, 15-45 s long."""
    per = rng.choice((1, 1, 2, 4, 8))
    workers = rng.choice((0, 0, 1, 1, 3, 7))
    body = seed_pytorchjob(name, tenant, run_for=f"{rng.randrange(15, 46)}s", gpus=per,
                           workers=workers or None, master=True)
    if not workers:
        del body["spec"]["pytorchReplicaSpecs"]["Worker"]
    for spec in body["spec"]["pytorchReplicaSpecs"].values():
        limits = spec["template"]["spec"]["containers"][0]["resources"]["limits"]
        limits.update({"cpu": "4", "memory": "16Gi"})
    return body


def register(hub: Kube, names: list[str]) -> None:
    """What ``kubectl fleet join`` writes on the hub for a member: its namespace and its
    MemberCluster (the agent identity is left out: the load generator uses the admin's)."""
    def one(name: str) -> None:
        hub.apply(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": member_namespace(name), "labels": {"fleet.sh/cluster": name}}},
            field_manager="fleet-join")
        hub.apply(r.MEMBERCLUSTERS, {"apiVersion": "fleet.sh/v1alpha1", "kind": "MemberCluster",
                                     "metadata": {"name": name,
                                                  "labels": {"fleet.sh/cluster": name}},
                                     "spec": {}}, field_manager="fleet-join")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, names))


def tenant_objects(gpus: int) -> list[tuple[r.Resource, dict[str, Any]]]:
    """Three tenants: each leaf owns its namespace, is guaranteed a sixth of the fleet's GPUs
    and may borrow up to half; the whole tree may use half of them at once. Each tenant's
    PropagationPolicy queues its PyTorchJobs as gangs."""
    share = gpus // 6
    children = [{"name": t, "namespaces": [t], "min": {"nvidia.com/gpu": share},
                 "max": {"nvidia.com/gpu": gpus // 2}} for t in TENANTS]
    out: list[tuple[r.Resource, dict[str, Any]]] = [(r.ELASTICQUOTATREES, {
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
        "metadata": {"name": "scale", "namespace": "kube-system"},
        "spec": {"root": {"name": "root", "min": {"nvidia.com/gpu": gpus // 2},
                          "max": {"nvidia.com/gpu": gpus // 2}, "children": children}}})]
    for tenant in TENANTS:
        out.append((r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": tenant}}))
        out.append((r.PROPAGATIONPOLICIES, queued_gangs(tenant)))
    return out


def queued_gangs(namespace: str) -> dict[str, Any]:
    """A PropagationPolicy queueing the namespace's PyTorchJobs as gangs."""
    return {"apiVersion": "policy.one.alibabacloud.com/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": "training", "namespace": namespace},
            "spec": {"suspension": {"scheduling": True},
                     "resourceSelectors": [{"apiVersion": "kubeflow.org/v1",
                                            "kind": "PyTorchJob"}],
                     "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided",
                                                         "customSchedulingType": "Gang"}}}}


def tenants(hub: Kube, gpus: int) -> None:
    for resource, body in tenant_objects(gpus):
        hub.apply(resource, body, field_manager="bench")


def create_jobs(hub: Kube, count: int, threads: int = 16) -> float:
    rng = random.Random(23)
    bodies = [job(f"job-{i:05d}", TENANTS[i % len(TENANTS)], rng) for i in range(count)]
    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda b: hub.create(r.PYTORCHJOBS, b), bodies))
    return time.monotonic() - started


class Bindings:
    """When each job was first seen bound (its placement annotation), from a watch on the
    hub's jobs: the bind is the hub's own write, so this is its decisions as they land."""

    def __init__(self, hub: Kube) -> None:
        self.hub = hub
        self.at: dict[str, float] = {}
        # a selector nothing matches: the list's version without listing 10,000 jobs (a
        # ``limit`` would not do: the client follows continue tokens)
        self.version = hub.list(r.PYTORCHJOBS, label_selector="fleet.sh/none=none")[1]

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                for _, body in self.hub.watch(r.PYTORCHJOBS, resource_version=self.version,
                                              timeout_seconds=30):
                    self.version = body["metadata"].get("resourceVersion", self.version)
                    meta = body["metadata"]
                    key = f"{meta.get('namespace')}/{meta.get('name')}"
                    if "fleet.sh/placement" in (meta.get("annotations") or {}):
                        self.at.setdefault(key, time.monotonic())
                    if stop.is_set():
                        return
            except errors.ApiError:
                stop.wait(0.5)  # the stream ended early: on from where it was

    def peak_rate(self, window: float = 10.0) -> float:
        times = sorted(self.at.values())
        best, first = 0, 0
        for last, when in enumerate(times):
            while when - times[first] > window:
                first += 1
            best = max(best, last - first + 1)
        return best / window


@dataclass
class Sample:
    at: float  # monotonic
    placed: float
    buckets: dict[float, float]
    rss: float  # MiB
    hwm: float  # MiB, the peak so far
    pass_sum: float = 0.0  # seconds spent in passes so far
    cpu_buckets: dict[float, float] = field(default_factory=dict)  # the passes' CPU time
    statuses: dict[str, float] = field(default_factory=dict)  # job statuses written, by why


@dataclass
class Monitor:
    """Samples the hub's /metrics and /proc every second while it runs."""

    pid: int
    port: int
    samples: list[Sample] = field(default_factory=list)

    def sample(self) -> Sample:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics",
                                      timeout=10).read().decode()
        buckets: dict[float, float] = {}
        cpu_buckets: dict[float, float] = {}
        placed = pass_sum = 0.0
        statuses: dict[str, float] = {}
        for line in text.splitlines():
            if match := BUCKET.match(line):
                buckets[float(match.group(1))] = float(match.group(2))
            elif match := CPU_BUCKET.match(line):
                cpu_buckets[float(match.group(1))] = float(match.group(2))
            elif match := PLACED.match(line):
                placed = float(match.group(1))
            elif match := PASS_SUM.match(line):
                pass_sum = float(match.group(1))
            elif match := STATUSES.match(line):
                statuses[match.group(1)] = float(match.group(2))
        status = dict(line.split(":", 1) for line in
                      Path(f"/proc/{self.pid}/status").read_text().splitlines() if ":" in line)
        return Sample(time.monotonic(), placed, buckets, mib(status["VmRSS"]),
                      mib(status["VmHWM"]), pass_sum, cpu_buckets, statuses)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.run_once()
            stop.wait(1.0)

    def run_once(self) -> None:
        try:
            self.samples.append(self.sample())
        except OSError:
            pass  # the hub is starting (no /metrics yet) or gone


def mib(field: str) -> float:
    return int(field.split(maxsplit=1)[0]) / 1024  # /proc's "123456 kB"


def quantile(buckets: dict[float, float], q: float) -> float:
    """As Prometheus's histogram_quantile: linear within the bucket the rank falls in."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    if not total:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        if buckets[bound] >= rank:
            if bound == float("inf"):
                return lower
            inside = buckets[bound] - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, buckets[bound]
    return lower


def bound_jobs(hub: Kube) -> tuple[int, int]:
    """(bound, JSON bytes of jobs and Works as the hub caches them, managedFields left out)."""
    jobs, _ = hub.list(r.PYTORCHJOBS)
    works, _ = hub.list(r.WORKS)
    size = 0
    for body in (*jobs, *works):
        body["metadata"].pop("managedFields", None)
        size += len(json.dumps(body))
    bound = sum(1 for j in jobs if "fleet.sh/placement" in (j["metadata"].get("annotations")
                                                          or {}))
    return bound, size


def run(workdir: Path, *, members: int = 100, nodes: int = 200, jobs: int = 10_000,
        limit: float = 900.0) -> list[Result]:
    port = free_ports(1)[0]
    fleet = LocalFleet(workdir, members={}, say=say, hub_args=("--metrics-port", str(port)))
    results: list[Result] = []
    sim: Fleet | None = None
    try:
        fleet.up(with_controllers=False)
        hub = fleet.client(HUB)
        names = [f"member{i:03d}" for i in range(members)]
        say(f"registering {members} members of {nodes} nodes each")
        register(hub, names)
        generator = CountingKube(str(fleet.kubeconfig(HUB)), pool=32)
        sim = Fleet(generator, names, nodes)
        sim.start()
        gpus = sim.gpus()
        without_webhook(hub, lambda: tenants(hub, gpus))
        deadline = time.monotonic() + 120
        while not sim.ready() and time.monotonic() < deadline:
            time.sleep(0.5)
        say(f"{members} members report {gpus} GPUs; creating {jobs} PyTorchJobs, 16 clients")
        create_seconds = without_webhook(hub, lambda: create_jobs(hub, jobs))
        raw_rate = jobs / create_seconds
        say(f"created in {create_seconds:.1f}s ({raw_rate:.0f}/s); starting the hub")
        before, generated_before = writes(hub), dict(generator.writes)
        cpu_before = cpu_seconds(fleet)
        fleet.start_hub()
        monitor = Monitor(fleet.pid("hub"), port)
        stop = threading.Event()
        bindings = Bindings(hub)
        threads = [threading.Thread(target=monitor.run, args=(stop,), daemon=True),
                   threading.Thread(target=bindings.run, args=(stop,), daemon=True)]
        for thread in threads:
            thread.start()
        elapsed = follow(monitor, bindings, sim, jobs, limit)
        time.sleep(5)  # the last binds' Works, events and statuses
        stop.set()
        threads[0].join()  # (the bindings' watch ends with its timeout: not waited for)
        monitor.run_once()  # the statuses written since its last look
        cpu = {k: v - cpu_before.get(k, 0.0) for k, v in cpu_seconds(fleet).items()}
        after, generated = writes(hub), dict(generator.writes)
        bound, cached_bytes = bound_jobs(hub)
        results += report(monitor.samples, bindings, before, after, generated_before,
                          generated, cpu, bound=bound, jobs=jobs, elapsed=elapsed,
                          raw_rate=raw_rate, cached_bytes=cached_bytes, members=members,
                          nodes=nodes)
    finally:
        if sim is not None:
            sim.close()
        fleet.down()
    return results


def follow(monitor: Monitor, bindings: Bindings, sim: Fleet, jobs: int, limit: float
           ) -> float:
    """Wait until the hub has bound every job (or ``limit`` seconds); the time it took."""
    started = time.monotonic()
    last = -1
    while time.monotonic() - started < limit:
        time.sleep(2)
        sample = monitor.samples[-1] if monitor.samples else None
        bound = len(bindings.at)
        if bound != last:
            passes = sample.buckets.get(float("inf"), 0.0) if sample else 0.0
            say(f"  {bound}/{jobs} bound after {passes:.0f} passes, {sim.started} started and "
                f"{sim.succeeded} succeeded on members, hub RSS "
                f"{sample.rss if sample else 0:.0f} MiB")
            last = bound
        if bound >= jobs:
            break
    return time.monotonic() - started


def report(samples: list[Sample], bindings: Bindings, before: dict[str, float],
           after: dict[str, float], generated_before: dict[str, int],
           generated: dict[str, int], cpu: dict[str, float],
           *, bound: int, jobs: int, elapsed: float, raw_rate: float, cached_bytes: int,
           members: int, nodes: int) -> list[Result]:
    scale = f"{members} members x {nodes} nodes, {jobs:,} jobs"
    last = samples[-1] if samples else Sample(0, 0, {}, 0, 0)
    passes = last.buckets.get(float("inf"), 0.0)
    p50, p99 = quantile(last.buckets, 0.5), quantile(last.buckets, 0.99)
    finite = [b for b in last.buckets if b != float("inf")]
    beyond = passes - last.buckets.get(max(finite), 0.0) if finite else 0.0
    tail = (f"; {beyond:.0f} passes took longer than the last bucket ({max(finite):.0f} s): "
            "the p99 is a lower bound" if beyond else "")
    hub_writes = {k: (after.get(k, 0.0) - before.get(k, 0.0))
                  - (generated.get(k, 0) - generated_before.get(k, 0)) for k in after}
    hub_writes = {k: v for k, v in hub_writes.items() if v > 0}
    total = sum(hub_writes.values())
    per_job = total / bound if bound else float("nan")
    statuses = sum(last.statuses.values())
    said = ", ".join(f"{why} {n / max(bound, 1):.2f}" for why, n in sorted(last.statuses.items()))
    breakdown = ", ".join(f"{k} {v / max(bound, 1):.2f}"
                          for k, v in sorted(hub_writes.items(), key=lambda kv: -kv[1])
                          if v / max(bound, 1) >= 0.005)
    hub_cpu = cpu.get("hub", 0.0)
    apiserver_cpu = sum(v for k, v in cpu.items()  # labelled by cluster: kube-apiserver@hub
                        if k.split("@")[0] == "kube-apiserver")
    thousands = max(bound, 1) / 1000
    rate = bindings.peak_rate()
    note_cpu = "CPU seconds meanwhile: " + ", ".join(
        f"{k} {v:.0f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]) if v >= 0.5)
    return [
        Result(f"scheduling pass p50, {scale}", p50 * 1000, "ms", "<= 100",
               note=f"{passes:.0f} passes in {elapsed:.0f} s, from the hub's "
                    "fleet_scheduling_pass_seconds (interpolated within buckets)"),
        Result(f"scheduling pass p99, {scale}", p99 * 1000, "ms", "<= 100",
               note=f"mean {1000 * last.pass_sum / max(passes, 1):.0f} ms{tail}; a pass "
                    "still running when the run ends is not counted"),
        Result(f"scheduling pass CPU p50, {scale}", quantile(last.cpu_buckets, 0.5) * 1000,
               "ms", "<= 100", note="the scheduling thread's own CPU time in a pass "
                                    "(fleet_scheduling_pass_cpu_seconds)"),
        Result(f"scheduling pass CPU p99, {scale}", quantile(last.cpu_buckets, 0.99) * 1000,
               "ms", "<= 100", note="the wall time's excess over it is the pass waiting for "
                                    "the interpreter (the hub's watches and writers) and the "
                                    "machine's cores (its API server)"),
        Result(f"decisions per second (peak 10 s), {scale}", rate, "jobs/s", "",
               raw_rate, "raw job create rate",
               note=f"{bound:,} of {jobs:,} bound in {elapsed:.0f} s "
                    f"({bound / elapsed:.1f}/s overall, quota and job durations included); "
                    f"{last.placed:.0f} placement decisions (a bind that meets a newer "
                    "version of its job is decided again)"),
        Result(f"hub RSS peak, {scale}", last.hwm, "MiB", "<= 300",
               cached_bytes / 2**20, "JSON of the jobs and Works it caches"),
        Result(f"hub RSS steady (end of run), {scale}", last.rss, "MiB", "<= 300",
               cached_bytes / 2**20, "JSON of the jobs and Works it caches"),
        Result(f"hub CPU seconds per 1,000 jobs, {scale}", hub_cpu / thousands, "s", "",
               apiserver_cpu / thousands, "kube-apiserver's", note=note_cpu),
        Result(f"hub API writes per bound job, {scale}", per_job, "writes", "",
               note=f"apiserver_request_total less the load generator's own writes; "
                    f"per job: {breakdown}"),
        Result(f"hub API writes to place a bound job, its statuses apart, {scale}",
               (total - statuses) / bound if bound else float("nan"), "writes", "<= 3",
               note=f"the bind, its Works, events and queue statuses; the job statuses the hub "
                    f"wrote are counted apart (fleet_job_status_writes_total), per bound job: "
                    f"{said} (reported: its members' reports mirrored, Running then "
                    f"Succeeded)"),
    ]
