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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from e2e.bench.results import Result
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
    """CPU time (user + system) each kind of process of the local fleet has used so far: our
    own processes by name, control-plane ones (found by the fleet's work directory in their
    command lines) by program, summed over clusters."""
    ticks = os.sysconf("SC_CLK_TCK")
    ours = {pid: re.sub(r"-member\d+$", "", name) for name, pid in fleet.processes().items()}
    out: dict[str, float] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(proc.name)
        if pid in ours:
            label = ours[pid]
        elif any(str(fleet.workdir).encode() in arg for arg in argv):
            label = Path(argv[0].decode()).name
        else:
            continue
        out[label] = out.get(label, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return out


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run(workdir: Path, jobs: int = 1000, pending: int = 10_000) -> list[Result]:  # noqa: PLR0915
    fleet = LocalFleet(workdir, members={m: [NodeShape(4, 8)] for m in MEMBERS}, say=say)
    results: list[Result] = []
    try:
        fleet.up(with_controllers=False)
        hub = fleet.client(HUB)
        stop = threading.Event()
        beat = threading.Thread(target=fake_heartbeats, args=(hub, stop), daemon=True)
        beat.start()

        say(f"baseline: the hub API server's raw write rate, {jobs} PyTorchJobs, 8 clients")
        namespace(hub, "raw", policy=False)
        raw_seconds = create_all(hub, [small_job(f"raw-{i}", "raw") for i in range(jobs)])
        raw_rate = jobs / raw_seconds
        with ThreadPoolExecutor(8) as pool:  # gone before the hub starts: no writes for them
            list(pool.map(lambda i: hub.delete(r.PYTORCHJOBS, f"raw-{i}", "raw"), range(jobs)))

        say(f"queueing {jobs} PyTorchJobs while the hub is stopped")
        namespace(hub, "bench", policy=True)
        create_all(hub, [small_job(f"job-{i}", "bench") for i in range(jobs)])
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
        results += [
            Result("hub write rate while dispatching", per_job * rate, "writes/s", "",
                   raw_rate, "raw write rate",
                   note="DESIGN asks >= 50 % of the API server's own write rate"),
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

        say("clearing the batch; starting the real agents for the latency run")
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
        for member in MEMBERS:
            fleet.start_agent(member)
        results += latency(fleet, hub)

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
        results.append(Result("hub RSS with 10,000 pending jobs", rss_mib(pid), "MiB", "<= 300",
                              idle, "hub RSS before them",
                              note=f"plus {jobs} bound jobs and {jobs} raw ones in its cache"))
    finally:
        fleet.down()
    return results


def stage_times(hub: Kube, members: dict[str, Kube], ns: str) -> str:
    """Where the time goes, per job: hub job created -> its Work created (admitted, divided,
    dispatched) -> the member's job created (the agent applied it) -> its first pod created
    (the member controller) -> its last pod started (member scheduler and kubelet)."""
    def stamp(body: dict[str, Any], path: tuple[str, ...]) -> float | None:
        value: Any = body
        for key in path:
            value = (value or {}).get(key)
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None

    jobs = {j["metadata"]["name"]: stamp(j, ("metadata", "creationTimestamp"))
            for j in hub.list(r.PYTORCHJOBS, ns)[0]}
    works = {w["spec"]["job"]["name"]: stamp(w, ("metadata", "creationTimestamp"))
             for w in hub.list(r.WORKS)[0] if w["spec"]["job"]["namespace"] == ns}
    applied: dict[str, float | None] = {}
    first_pod: dict[str, float] = {}
    last_start: dict[str, float] = {}
    for member in members.values():
        for job in member.list(r.PYTORCHJOBS, ns)[0]:
            applied[job["metadata"]["name"]] = stamp(job, ("metadata", "creationTimestamp"))
        for pod in member.list(r.PODS, ns)[0]:
            name = pod["metadata"]["labels"].get("training.kubeflow.org/job-name", "")
            made, started = (stamp(pod, ("metadata", "creationTimestamp")),
                             stamp(pod, ("status", "startTime")))
            if made is not None:
                first_pod[name] = min(first_pod.get(name, made), made)
            if started is not None:
                last_start[name] = max(last_start.get(name, started), started)
    chain: list[tuple[str, dict[str, float | None], dict[str, float]]] = [
        ("divide+dispatch", jobs, _known(works)), ("agent apply", works, _known(applied)),
        ("controller", dict(applied), first_pod), ("schedule+start", dict(first_pod), last_start)]
    parts = []
    for label, before, after in chain:
        gaps = sorted(b - a for n, a in before.items()
                      if a is not None and (b := after.get(n)) is not None)
        if gaps:
            parts.append(f"{label} {gaps[len(gaps) // 2]:.0f} s")
    return ", ".join(parts)


def _known(times: dict[str, float | None]) -> dict[str, float]:
    return {k: v for k, v in times.items() if v is not None}


def watch_running(member: Kube, running: dict[str, float], stop: threading.Event) -> None:
    """Record when each job of namespace ``latency`` first has both its pods Running (a
    watch, not polling: listing every pod every 100 ms costs the machine a core)."""
    phases: dict[str, dict[str, str]] = {}
    version = member.list(r.PODS, "latency", limit=1)[1]
    while not stop.is_set():
        try:
            for kind, pod in member.watch(r.PODS, "latency", resource_version=version,
                                          timeout_seconds=5):
                version = pod["metadata"].get("resourceVersion", version)
                if kind == "BOOKMARK":
                    continue
                job = pod["metadata"]["labels"].get("training.kubeflow.org/job-name", "")
                pods = phases.setdefault(job, {})
                if kind == "DELETED":
                    pods.pop(pod["metadata"]["name"], None)
                else:
                    pods[pod["metadata"]["name"]] = (pod.get("status") or {}).get("phase", "")
                if job not in running and len(pods) == 2 and set(pods.values()) == {"Running"}:
                    running[job] = time.monotonic()
                if stop.is_set():
                    return
        except Unreachable:  # the server ended the stream early: watch on from where it was
            continue


def latency(fleet: LocalFleet, hub: Kube, count: int = 100, rate: float = 20.0) -> list[Result]:
    """Hub create -> every pod Running on its member, at a steady ``rate`` jobs/s."""
    namespace(hub, "latency", policy=True)
    members = {m: fleet.client(m) for m in MEMBERS}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # agents report capacity before we start the clock
        clusters, _ = hub.list(r.MEMBERCLUSTERS)
        if all((c.get("status") or {}).get("readyNodes") for c in clusters):
            break
        time.sleep(0.5)
    time.sleep(10)  # the agents' start-up (lists, first reports) is not what is measured
    say(f"latency: {count} jobs at {rate:.0f} jobs/s")
    created: dict[str, float] = {}
    running: dict[str, float] = {}
    stop = threading.Event()

    watchers = [threading.Thread(target=watch_running, args=(m, running, stop), daemon=True)
                for m in members.values()]
    for watcher in watchers:
        watcher.start()
    cpu_before = cpu_seconds(fleet)
    start = time.monotonic()
    for i in range(count):
        time.sleep(max(0.0, start + i / rate - time.monotonic()))
        name = f"lat-{i}"
        created[name] = time.monotonic()
        hub.create(r.PYTORCHJOBS, small_job(name, "latency"))
    end = time.monotonic() + 60
    while len(running) < count and time.monotonic() < end:
        time.sleep(0.2)
    stop.set()
    cpu = {k: v - cpu_before.get(k, 0.0) for k, v in cpu_seconds(fleet).items()}
    samples = sorted(running[n] - created[n] for n in running)
    stages = stage_times(hub, members, "latency")
    missing = count - len(samples)
    p50 = samples[len(samples) // 2] if samples else float("nan")
    p99 = samples[min(len(samples) - 1, int(0.99 * len(samples)))] if samples else float("nan")
    note = "watching member pods; CPU seconds spent meanwhile: " + ", ".join(
        f"{k} {v:.0f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]) if v >= 0.5)
    if missing:
        note += f"; {missing} jobs not Running within 60 s"
    if stages:
        note += "; stage p50s from API timestamps (1 s resolution): " + stages
    return [Result("create -> all pods Running, p50, 20 jobs/s", p50, "s", "", note=note),
            Result("create -> all pods Running, p99, 20 jobs/s", p99, "s", "<= 2", note=note)]
