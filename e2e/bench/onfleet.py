"""Benchmarks on a local fleet (real API servers): hub throughput against the hub API server's
own write rate, API writes per admitted job as the API server counts them, hub memory with
10,000 pending jobs, and create-to-Running latency at a steady 20 jobs/s.

Members are simulated for the throughput phase (their MemberCluster status is written by the
benchmark, as an agent would), so that the hub alone is measured; the latency phase runs the
real agents.
"""

from __future__ import annotations

import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from e2e.bench import stages
from e2e.bench.results import Result
from e2e.bench.webhooks import without_webhook
from e2e.jobs import seed_pytorchjob
from e2e.localfleet import HUB, LocalFleet
from e2e.localfleet.nodes import NodeShape
from fleet.clients import resources as r
from fleet.clients.errors import Unreachable
from fleet.clients.kube import Kube

MEMBERS = ("member1", "member2", "member3")
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")
JOB_WRITES = ("pytorchjobs", "pytorchjobs/status", "works", "works/status", "events")
METRIC = re.compile(r'^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$')
CLUSTER_DIR = re.compile(r"/clusters/([^/\s]+)/")  # kwokctl's layout: .../clusters/<name>/...
PHASES = ("throughput", "latency", "memory")


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def small_job(name: str, namespace: str, run_for: str = "1h") -> dict[str, Any]:
    job = seed_pytorchjob(name, namespace, run_for=run_for, workers=1)
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["metadata"]["annotations"]["fleet.sh/sim-start-delay"] = "0s"
        limits = spec["template"]["spec"]["containers"][0]["resources"]["limits"]
        limits.pop("nvidia.com/gpu")
        limits.update({"cpu": "100m", "memory": "64Mi"})
    return job


def namespace(hub: Kube, name: str, policy: bool) -> None:
    hub.apply(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
              field_manager="bench")
    if policy:
        hub.apply(r.PROPAGATIONPOLICIES, {
            "apiVersion": "policy.one.alibabacloud.com/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": "bench", "namespace": name},
            "spec": {"resourceSelectors": [{"apiVersion": "kubeflow.org/v1",
                                            "kind": "PyTorchJob"}],
                     "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided",
                                                         "customSchedulingType": "Gang"}}}},
            field_manager="bench")


def fake_heartbeats(hub: Kube, stop: threading.Event) -> None:
    """Write each member's status as its agent would: 64 nodes x (96 cpu, 8 GPUs) free."""
    free = {"cpu": 96000, "memory": 768 * 2**30, "nvidia.com/gpu": 8, "pods": 110}
    while not stop.is_set():
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        for name in MEMBERS:
            hub.patch(r.MEMBERCLUSTERS, name, {"status": {
                "lastHeartbeatTime": now, "readyNodes": 64, "freeGpus": 512,
                "conditions": [{"type": "Ready", "status": "True", "reason": "Bench",
                                "lastTransitionTime": now}],
                "capacity": {"observedTime": now, "nodeGroups": [
                    {"count": 64, "allocatable": free, "free": free, "labels": {}}]},
            }}, subresource="status")
        stop.wait(2)


def writes(hub: Kube, exclude: tuple[str, ...] = ("memberclusters",)) -> dict[str, float]:
    """Mutating requests the hub API server has served, as its own metrics count them, by
    resource (and subresource)."""
    text = str(hub.raw("GET", "/metrics").get("text", ""))
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = METRIC.match(line)
        if not match:
            continue
        labels = dict(kv.split("=", 1) for kv in re.findall(r'(\w+="[^"]*")', match.group(1)))
        verb = labels.get("verb", "").strip('"')
        resource = labels.get("resource", "").strip('"')
        sub = labels.get("subresource", "").strip('"')
        if verb in WRITE_VERBS and resource not in exclude:
            key = f"{resource}/{sub}" if sub else resource
            out[key] = out.get(key, 0.0) + float(match.group(2))
    return out


WEBHOOK = re.compile(r'^apiserver_admission_webhook_admission_duration_seconds_(sum|count)'
                     r'\{([^}]*)\} ([0-9.e+]+)$')


def webhook_seconds(hub: Kube) -> dict[str, tuple[float, float]]:
    """Per admission webhook (by name), the seconds the hub API server has spent calling it
    and how many calls, from its own metrics."""
    text = str(hub.raw("GET", "/metrics").get("text", ""))
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        match = WEBHOOK.match(line)
        if match:
            name = re.search(r'name="([^"]*)"', match.group(2))
            spent = out.setdefault(name.group(1) if name else "?", [0.0, 0.0])
            spent[0 if match.group(1) == "sum" else 1] += float(match.group(3))
    return {k: (v[0], v[1]) for k, v in out.items()}


def settled_writes(hub: Kube, quiet: float = 3.0, timeout: float = 120.0) -> dict[str, float]:
    """The write counts once no job-caused write has happened for ``quiet`` seconds."""
    deadline = time.monotonic() + timeout
    last = writes(hub)
    still_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = writes(hub)
        if any(now.get(k, 0.0) != last.get(k, 0.0) for k in JOB_WRITES):
            last, still_since = now, time.monotonic()
        elif time.monotonic() - still_since >= quiet:
            return now
    return last


def per_job_writes(before: dict[str, float], after: dict[str, float], jobs: int
                   ) -> tuple[float, str]:
    """Writes per job in total and by resource, largest first."""
    spent = {k: (after.get(k, 0.0) - before.get(k, 0.0)) / jobs for k in after}
    shown = ", ".join(f"{k} {v:.2f}" for k, v in sorted(spent.items(), key=lambda kv: -kv[1])
                      if v >= 0.005)
    return sum(spent.values()), shown


def create_all(hub: Kube, jobs: list[dict[str, Any]], threads: int = 8) -> float:
    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda j: hub.create(r.PYTORCHJOBS, j), jobs))
    return time.monotonic() - started


def bound_count(hub: Kube, ns: str) -> int:
    jobs, _ = hub.list(r.PYTORCHJOBS, ns)
    return sum(1 for j in jobs if "fleet.sh/placement" in (j["metadata"].get("annotations") or {}))


def cpu_seconds(fleet: LocalFleet) -> dict[str, float]:
    """CPU time (user + system) each process of the local fleet has used so far: our own
    by name (``hub``, ``agent-member1``), control-plane ones (found by the fleet's work
    directory in their command lines) by program and cluster (``kube-apiserver@member1``)."""
    ours = {pid: name for name, pid in fleet.processes().items()}
    out: dict[str, float] = {}
    for pid, (_, _, cpu) in processes().items():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if pid in ours:
            label = ours[pid]
        elif any(str(fleet.workdir).encode() in arg for arg in argv):
            command = b" ".join(argv).decode(errors="replace")
            cluster = CLUSTER_DIR.search(command)
            label = Path(argv[0].decode()).name + (f"@{cluster.group(1)}" if cluster else "")
        else:
            continue
        out[label] = out.get(label, 0.0) + cpu
    return out


def processes() -> dict[int, tuple[str, int, float]]:
    """Every process now: its program's name, its parent's pid and the CPU seconds (user +
    system) it has used, by pid."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            text = (proc / "stat").read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        out[int(proc.name)] = (text[text.index("(") + 1:text.rindex(")")], int(fields[1]),
                               (int(fields[11]) + int(fields[12])) / ticks)
    return out


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run(workdir: Path, jobs: int = 1000, pending: int = 10_000,
        phases: tuple[str, ...] = PHASES, latency_jobs: int = 100) -> list[Result]:
    """The phases in order: ``throughput`` (hub alone, members simulated), ``latency`` (real
    agents), ``memory`` (pending jobs on the hub)."""
    fleet = LocalFleet(workdir, members={m: [NodeShape(4, 8)] for m in MEMBERS}, say=say)
    results: list[Result] = []
    try:
        fleet.up(with_controllers=False)
        hub = fleet.client(HUB)
        if "throughput" in phases:
            results += throughput(fleet, hub, jobs)
        else:
            fleet.start_hub()
        if "latency" in phases:
            for member in MEMBERS:
                fleet.start_agent(member)
            results += latency(fleet, hub, count=latency_jobs)
        if "memory" in phases:
            results += memory(fleet, hub, pending, jobs if "throughput" in phases else 0)
    finally:
        fleet.down()
    return results


def throughput(fleet: LocalFleet, hub: Kube, jobs: int) -> list[Result]:
    """Admission + division + dispatch of ``jobs`` queued while the hub was stopped, against
    the hub API server's raw write rate; writes per job. Leaves the hub running, the batch
    cleared."""
    stop = threading.Event()
    beat = threading.Thread(target=fake_heartbeats, args=(hub, stop), daemon=True)
    beat.start()

    say(f"baseline: the hub API server's raw write rate, {jobs} PyTorchJobs, 8 clients")
    namespace(hub, "raw", policy=False)
    raw_seconds = without_webhook(hub, lambda: create_all(
        hub, [small_job(f"raw-{i}", "raw") for i in range(jobs)]))
    raw_rate = jobs / raw_seconds
    with ThreadPoolExecutor(8) as pool:  # gone before the hub starts: no writes for them
        list(pool.map(lambda i: hub.delete(r.PYTORCHJOBS, f"raw-{i}", "raw"), range(jobs)))

    say(f"queueing {jobs} PyTorchJobs while the hub is stopped")
    namespace(hub, "bench", policy=True)
    without_webhook(hub, lambda: create_all(
        hub, [small_job(f"job-{i}", "bench") for i in range(jobs)]))
    before = writes(hub)
    fleet.start_hub()
    started = time.monotonic()
    last = -1
    while (done := bound_count(hub, "bench")) < jobs:
        if done != last:
            say(f"  {done}/{jobs} bound")
            last = done
        time.sleep(0.5)
    elapsed = time.monotonic() - started
    rate = jobs / elapsed
    say(f"all {jobs} bound in {elapsed:.1f}s")
    after = settled_writes(hub)  # events and statuses trail the last binding
    per_job, breakdown = per_job_writes(before, after, jobs)
    # What a job costs: writes to the job, its Works and its events. The rest comes with
    # time or once: leader-election renewals (the hub's every 3.3 s, the controller
    # manager's every 2 s) and the hub's start-up (webhook configurations, its namespace).
    caused = sum(after.get(k, 0.0) - before.get(k, 0.0) for k in JOB_WRITES) / jobs
    others = {k: after[k] - before.get(k, 0.0) for k in after
              if k not in JOB_WRITES and after[k] > before.get(k, 0.0)}
    results = [
        Result("hub write rate while dispatching", per_job * rate, "writes/s", "",
               raw_rate, "raw write rate",
               note="the budget asks >= 50 % of the API server's own write rate"),
        Result("hub API raw write rate (baseline)", raw_rate, "writes/s", "",
               note=f"{jobs} PyTorchJob creates from 8 client threads"),
        Result("admission+division+dispatch, 1,000 jobs, 3 members", rate, "jobs/s",
               ">= 100", raw_rate, "raw write rate",
               note="from hub start (incl. its initial list) to the last job bound"),
        Result("hub API writes per admitted job (API server count)", caused, "writes",
               "<= 4", note="apiserver_request_total, mutating verbs on jobs, their "
               f"status, Works and events; per job: {breakdown}; besides them in the run "
               f"(all: {per_job:.3f} per job): " + ", ".join(
                   f"{k} {v:.0f}" for k, v in sorted(others.items()))),
    ]

    say("clearing the batch")
    stop.set()
    beat.join()
    works, _ = hub.list(r.WORKS)
    with ThreadPoolExecutor(8) as pool:  # no agent ran them: release them as one would
        list(pool.map(lambda wk: hub.patch(r.WORKS, wk["metadata"]["name"], {
            "metadata": {"finalizers": None}}, wk["metadata"]["namespace"]), works))
        list(pool.map(lambda i: hub.delete(r.PYTORCHJOBS, f"job-{i}", "bench"),
                      range(jobs)))
    while hub.list(r.PYTORCHJOBS, "bench", limit=1)[0]:
        time.sleep(0.5)
    return results


def memory(fleet: LocalFleet, hub: Kube, pending: int, bound: int) -> list[Result]:
    say(f"memory: {pending} jobs pending on the hub")
    namespace(hub, "pending", policy=False)
    pid = fleet.pid("hub")
    idle = rss_mib(pid)
    batch = 1000
    for start in range(0, pending, batch):
        create_all(hub, [small_job(f"p-{i}", "pending")
                         for i in range(start, min(pending, start + batch))], threads=8)
        created = min(pending, start + batch)
        say(f"  {created}/{pending} created, hub RSS {rss_mib(pid):.0f} MiB")
    time.sleep(10)
    return [Result("hub RSS with 10,000 pending jobs", rss_mib(pid), "MiB", "<= 300",
                   idle, "hub RSS before them",
                   note=f"plus {bound} bound jobs and {bound} raw ones in its cache")]


@dataclass
class PodTimes:
    """When the bench's watches saw each job's pods on its member (the bench's clock): the
    first pod, every pod bound to a node (the member's scheduler), every pod Running (kwok's
    simulated start; the kubelet on a real node)."""

    pods: dict[str, dict[str, tuple[str, bool]]] = field(default_factory=dict)
    first: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def saw(self, kind: str, pod: dict[str, Any], expected: int = 2) -> None:
        job = pod["metadata"]["labels"].get("training.kubeflow.org/job-name", "")
        now = time.monotonic()
        with self.lock:
            pods = self.pods.setdefault(job, {})
            if kind == "DELETED":
                pods.pop(pod["metadata"]["name"], None)
                return
            pods[pod["metadata"]["name"]] = ((pod.get("status") or {}).get("phase", ""),
                                             bool((pod.get("spec") or {}).get("nodeName")))
            self.first.setdefault(job, now)
            if len(pods) < expected:
                return
            if all(node for _, node in pods.values()):
                self.bound.setdefault(job, now)
            if all(phase == "Running" for phase, _ in pods.values()):
                self.running.setdefault(job, now)


def watch_pods(member: Kube, namespace: str, times: PodTimes, stop: threading.Event) -> None:
    """Follow the pods of ``namespace`` (a watch, not polling: listing every pod every
    100 ms costs the machine a core)."""
    version = member.list(r.PODS, namespace, limit=1)[1]
    while not stop.is_set():
        try:
            for kind, pod in member.watch(r.PODS, namespace, resource_version=version,
                                          timeout_seconds=5):
                version = pod["metadata"].get("resourceVersion", version)
                if kind != "BOOKMARK":
                    times.saw(kind, pod)
                if stop.is_set():
                    return
        except Unreachable:  # the server ended the stream early: watch on from where it was
            continue


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


@dataclass(frozen=True)
class Run:
    """One timed stream of job creates: create -> every pod Running, per job, and what every
    process of the fleet spent meanwhile."""

    samples: list[float]
    missing: int
    times: PodTimes
    cpu: dict[str, float]

    def quantile(self, q: float) -> float:
        return percentile(self.samples, q)

    @property
    def note(self) -> str:
        return "watching member pods" + (f"; {self.missing} jobs not Running within 60 s"
                                         if self.missing else "")

    def cpu_per_job(self) -> float:
        return sum(self.cpu.values()) / max(1, len(self.samples) + self.missing)


def timed_creates(fleet: LocalFleet, create: Kube, namespace: str, prefix: str, count: int,
                  rate: float) -> Run:
    """Create ``count`` small PyTorchJobs in ``namespace`` through ``create`` (the hub, or a
    member directly) at a steady ``rate``; wait until every one's pods run on some member."""
    times = PodTimes()
    stop = threading.Event()
    watchers = [threading.Thread(target=watch_pods, args=(fleet.client(m), namespace, times,
                                                          stop), daemon=True)
                for m in MEMBERS]
    for watcher in watchers:
        watcher.start()
    time.sleep(1)  # the watches are open before the first create
    created: dict[str, float] = {}
    cpu_before = cpu_seconds(fleet)
    start = time.monotonic()
    for i in range(count):
        time.sleep(max(0.0, start + i / rate - time.monotonic()))
        name = f"{prefix}-{i}"
        created[name] = time.monotonic()
        create.create(r.PYTORCHJOBS, small_job(name, namespace))
    end = time.monotonic() + 60
    while len(times.running) < count and time.monotonic() < end:
        time.sleep(0.2)
    stop.set()
    cpu = {k: v - cpu_before.get(k, 0.0) for k, v in cpu_seconds(fleet).items()}
    samples = [times.running[n] - created[n] for n in times.running if n in created]
    return Run(samples, count - len(samples), times, cpu)


@dataclass(frozen=True)
class HubWrites:
    """The hub's job-caused writes per job over a run of creates, until the jobs run."""

    by_resource: dict[str, float]
    reports: float  # the agents' Work status reports, per job

    def result(self, name: str) -> Result:
        return Result(name, sum(self.by_resource.values()), "writes", "",
                      note="the hub's writes to the jobs, their status, Works and events, "
                           "real agents: " + ", ".join(
                               f"{k} {v:.2f}" for k, v in sorted(self.by_resource.items())
                               if v > 0) + "; besides them, the agents' Work status reports "
                           f"{self.reports:.2f}")


def hub_writes(hub: Kube, before: dict[str, float], jobs: int) -> HubWrites:
    """Once they settle: the bench's own creates and the agents' reports are not the hub's."""
    spent = {k: (v - before.get(k, 0.0)) / jobs for k, v in settled_writes(hub).items()
             if k in JOB_WRITES}
    spent["pytorchjobs"] = spent.get("pytorchjobs", 0.0) - 1.0
    reports = spent.pop("works/status", 0.0)
    return HubWrites(spent, reports)


def direct_baseline(fleet: LocalFleet, count: int, rate: float) -> Run:
    """The same jobs created on member1 itself, no hub: what the member's job controller (the
    agent's, standing in for the Kubeflow operator), scheduler and API server take alone on
    this machine. Removed afterwards, so the fleet's runs start from the same state."""
    member = fleet.client(MEMBERS[0])
    namespace(member, "direct", policy=False)
    say(f"latency baseline: {count} jobs at {rate:.0f} jobs/s created on {MEMBERS[0]} directly")
    run = timed_creates(fleet, member, "direct", "direct", count, rate)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: member.delete(r.PYTORCHJOBS, f"direct-{i}", "direct"),
                      range(count)))
    deadline = time.monotonic() + 120
    while member.list(r.PODS, "direct", limit=1)[0] and time.monotonic() < deadline:
        time.sleep(0.5)
    return run


def latency(fleet: LocalFleet, hub: Kube, count: int = 100, rate: float = 20.0,
            light_rate: float = 5.0) -> list[Result]:
    """Hub create -> every pod Running on its member, at a steady ``rate`` jobs/s, against
    the same jobs created on a member directly; where the time goes, per stage, from the
    processes' own stage histograms; what every process of the fleet spent per job and what
    that asks of this machine's cores; then the same at ``light_rate``, which this machine
    keeps up with."""
    namespace(hub, "latency", policy=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # agents report capacity before we start the clock
        clusters, _ = hub.list(r.MEMBERCLUSTERS)
        if all((c.get("status") or {}).get("readyNodes") for c in clusters):
            break
        time.sleep(0.5)
    time.sleep(10)  # the agents' start-up (lists, first reports) is not what is measured
    direct = direct_baseline(fleet, count, rate)
    say(f"latency: {count} jobs at {rate:.0f} jobs/s through the hub")
    hub_url = fleet.metrics_url("hub")
    agent_urls = [fleet.metrics_url(f"agent-{m}") for m in MEMBERS]
    stages_before = stages.scrape([hub_url, *agent_urls])
    passes_before = stages.scrape([hub_url], "fleet_scheduling_pass_seconds")
    writes_before = writes(hub)
    run = timed_creates(fleet, hub, "latency", "lat", count, rate)
    time.sleep(1)  # the last stages observed after the bench's watch saw the pods run
    written = hub_writes(hub, writes_before, count)
    spent = stages.since(stages.scrape([hub_url, *agent_urls]), stages_before)
    passes = stages.since(stages.scrape([hub_url], "fleet_scheduling_pass_seconds"),
                          passes_before).get("", {})
    alone = "the same jobs created on the member directly"
    per_second = f"{rate:.0f} jobs/s"
    results = [Result(f"create -> all pods Running, p50, {per_second}", run.quantile(0.5), "s",
                      "", direct.quantile(0.5), alone, note=f"{run.note}; {alone}: {direct.note}"),
               Result(f"create -> all pods Running, p99, {per_second}", run.quantile(0.99),
                      "s", "<= 2", direct.quantile(0.99), alone, note=run.note),
               Result(f"CPU seconds per job, every process, {per_second}", run.cpu_per_job(),
                      "s", "", direct.cpu_per_job(), alone),
               Result(f"CPU demanded at {per_second}", run.cpu_per_job() * rate, "cores", "",
                      float(os.cpu_count() or 1), "this machine's cores",
                      note="a ratio above 1: the machine cannot keep up, jobs queue for CPU"),
               written.result(f"hub API writes per job, create -> Running, {per_second}")]
    for stage in stages.STAGES:
        buckets = spent.get(stage, {})
        where = "hub" if stage in stages.HUB_STAGES else "agents"
        for q in (0.5, 0.99):
            results.append(Result(
                f"stage {stage} p{round(q * 100)}", stages.quantile(q, buckets), "s", "",
                note=f"fleet_stage_seconds of the {where}, {stages.count(buckets):.0f} "
                     "observations, read off the buckets"))
    for q in (0.5, 0.99):  # what a job created mid-pass waits for before the next
        results.append(Result(f"hub scheduling pass p{round(q * 100)}",
                              stages.quantile(q, passes), "s", "",
                              note=f"fleet_scheduling_pass_seconds, {stages.count(passes):.0f} "
                                   "passes during the run"))
    # The member's side after our pods are created, as the bench's watches see it.
    times = run.times
    member_split = [("member scheduler (first pod -> all bound)", times.first, times.bound),
                    ("pod start (all bound -> all Running)", times.bound, times.running)]
    for label, since, until in member_split:
        gaps = [until[n] - since[n] for n in until if n in since]
        for q in (0.5, 0.99):
            results.append(Result(f"member {label} p{round(q * 100)}", percentile(gaps, q),
                                  "s", "", note="the bench's pod watches"))
    total = sum(run.cpu.values())
    for process, seconds in sorted(run.cpu.items(), key=lambda kv: -kv[1]):
        results.append(Result(f"CPU seconds per job: {process}", seconds / count, "s", "",
                              total / count, "all processes"))
    light = max(1, count // 2)
    say(f"latency: {light} jobs at {light_rate:.0f} jobs/s through the hub")
    writes_before = writes(hub)
    slow = timed_creates(fleet, hub, "latency", "light", light, light_rate)
    results.append(hub_writes(hub, writes_before, light).result(
        f"hub API writes per job, create -> Running, {light_rate:.0f} jobs/s"))
    for q in (0.5, 0.99):
        results.append(Result(
            f"create -> all pods Running, p{round(q * 100)}, {light_rate:.0f} jobs/s",
            slow.quantile(q), "s", "<= 2" if q == 0.99 else "",
            note=slow.note + f"; {count} jobs of the run before still running"))
    return results
