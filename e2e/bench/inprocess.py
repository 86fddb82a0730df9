"""Benchmarks of the pure parts, in this process: division latency, quota admission, and the
size of an agent's capacity report."""

from __future__ import annotations

import json
import random
import statistics
import time

from e2e.bench.results import Result
from fleet.api.protocol import DEFAULT_TOPOLOGY_LEVELS as TOPOLOGY_LEVELS
from member_agent.capacity import grouped, node_free, wire
from propagation.division import divide
from propagation.resources import Resources
from propagation.spent import with_assumed
from propagation.views import ClusterView, FitMode, JobDemand, NodeGroup, PlacementRules, Role
from quota.amounts import MAX_JOBS
from quota.engine import AdmissionPass, Job
from quota.tree import QuotaNode

GPU = "nvidia.com/gpu"


def fleet_of(clusters: int, nodes: int, seed: int = 7) -> list[ClusterView]:
    """``clusters`` members of ``nodes`` nodes, partly used, as agents would group them."""
    rng = random.Random(seed)
    out = []
    for c in range(clusters):
        free: dict[tuple[int, int], int] = {}
        for _ in range(nodes):
            gpus = rng.choice((0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 8))
            cpu = rng.choice((16000, 32000, 64000, 96000))
            free[(gpus, cpu)] = free.get((gpus, cpu), 0) + 1
        groups = tuple(NodeGroup(n, Resources.of({GPU: g, "cpu": cpu, "memory": 512 * 2**30}))
                       for (g, cpu), n in sorted(free.items()))
        out.append(ClusterView(f"member{c}", True, node_groups=groups))
    return out


def jobs(count: int, seed: int = 11) -> list[JobDemand]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        per = rng.choice((1, 1, 2, 4, 8))
        workers = rng.choice((1, 2, 3, 7, 15))
        out.append(JobDemand(f"j{i}", (
            Role("Master", 1, Resources.of({GPU: per, "cpu": 4000}), True),
            Role("Worker", workers, Resources.of({GPU: per, "cpu": 4000})),
        )))
    return out


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def division_latency(clusters: int, nodes: int = 200, decisions: int = 400) -> list[Result]:
    """Division as a pass does it: each job against the views the decisions before it left
    (a placement's requests are taken out of the clusters it chose, as the hub assumes them).
    Timed in this thread's CPU time, so that other processes on a shared machine do not
    count; the summed mode, in the same run, is the baseline."""
    sample = jobs(decisions)
    timings: dict[FitMode, list[float]] = {FitMode.NODE_AWARE: [], FitMode.SUMMED: []}
    placed: dict[FitMode, int] = {}
    for mode in (FitMode.SUMMED, FitMode.NODE_AWARE):
        views = {v.name: v for v in fleet_of(clusters, nodes)}
        rules = PlacementRules(fit_mode=mode, max_clusters=2)
        placed[mode] = 0
        for job in sample:
            started = time.thread_time()
            decision = divide(job, list(views.values()), rules)
            timings[mode].append((time.thread_time() - started) * 1000)
            for share in decision.shares:
                counts = dict(share.replicas)
                views[share.cluster] = with_assumed(views[share.cluster], [
                    role.request for role in job.roles for _ in range(counts.get(role.name, 0))])
            placed[mode] += decision.placed
    aware, summed = timings[FitMode.NODE_AWARE], timings[FitMode.SUMMED]
    shape = f"{clusters} clusters x {nodes} nodes"
    return [
        Result(f"division p50, {shape}", percentile(aware, 0.5), "ms", "",
               percentile(summed, 0.5), "summed mode"),
        Result(f"division p99, {shape}", percentile(aware, 0.99), "ms",
               "<= 1" if clusters == 100 else "", percentile(summed, 0.99), "summed mode",
               note=f"CPU time; mean {statistics.mean(aware):.3f} ms over {decisions} mixed "
                    f"gangs, {placed[FitMode.NODE_AWARE]} placed as they came"),
    ]


def quota_tree(cohorts: int = 5, leaves: int = 6) -> QuotaNode:
    children = []
    for c in range(cohorts):
        kids = tuple(QuotaNode(f"q{c}-{i}", min={GPU: 20}, max={GPU: 100, MAX_JOBS: 10_000},
                               namespaces=(f"ns-{c}-{i}",)) for i in range(leaves))
        children.append(QuotaNode(f"cohort{c}", min={GPU: 20 * leaves}, max={GPU: 400},
                                  children=kids))
    return QuotaNode("root", min={GPU: 600}, max={GPU: 600}, children=tuple(children))


def admission_pass(root: QuotaNode, queued: list[Job]) -> tuple[float, int]:
    """One pass of the quota engine over ``queued`` as the hub drives it (a job that would
    reclaim waits), in this thread's CPU time; (seconds, jobs admitted)."""
    started = time.thread_time()
    admission = AdmissionPass(root, [], queued)
    admitted = 0
    for job in admission.candidates():
        verdict = admission.check(job)
        if verdict.fits and not verdict.victims:
            admission.admit(job, "t")
            admitted += 1
        else:
            admission.wait(job)
    return time.thread_time() - started, admitted


def admission_throughput(count: int = 1000) -> Result:
    """The quota engine alone: 1,000 queued jobs on a tree of 5 x 6 leaves."""
    rng = random.Random(3)
    queued = [Job(f"PyTorchJob/ns-{rng.randrange(5)}-{rng.randrange(6)}/j{i}",
                  "", {GPU: rng.choice((1, 2, 4, 8))}, rng.randrange(3), f"{i:08d}")
              for i in range(count)]
    queued = [Job(j.key, j.key.split("/")[1], j.request, j.priority, j.created) for j in queued]
    elapsed, admitted = admission_pass(quota_tree(), queued)
    return Result("quota admission (engine), 1,000 jobs, 5x6 leaves", count / elapsed, "jobs/s",
                  ">= 10000",
                  note=f"{admitted} admitted, {count - admitted} left waiting for quota; CPU time")


def admission_borrowing(baseline: Result, count: int = 2000) -> Result:
    """The quota engine as the scale bench drives it: 3 tenant leaves, each guaranteed a sixth
    of the tree and borrowing up to half, jobs of 1-64 GPUs; past a leaf's min every check asks
    whether a job of another leaf waits within its guarantee."""
    rng = random.Random(3)
    queued = []
    for i in range(count):
        tenant = "abc"[i % 3]
        size = rng.choice((1, 1, 2, 4, 8)) * (1 + rng.choice((0, 0, 1, 1, 3, 7)))
        queued.append(Job(f"PyTorchJob/{tenant}/j{i}", tenant, {GPU: size}, 0, f"{i:08d}"))
    gpus = int(count * 9.6 * 0.8)  # the tree holds about 40 % of the jobs at once
    leaves = tuple(QuotaNode(t, min={GPU: gpus // 6}, max={GPU: gpus // 2}, namespaces=(t,))
                   for t in "abc")
    root = QuotaNode("root", min={GPU: gpus // 2}, max={GPU: gpus // 2}, children=leaves)
    elapsed, admitted = admission_pass(root, queued)
    return Result(f"quota admission (engine), {count:,} jobs, 3 tenants borrowing",
                  count / elapsed, "jobs/s", ">= 10000", baseline.value, "5x6 leaves, no borrowing",
                  note=f"{admitted} admitted; CPU time")


def capacity_report(count: int = 5000, seed: int = 5, racks: int = 0) -> list[Result]:
    """An agent's report for ``count`` nodes of mixed shapes (GPU models and counts, zones)
    with busy pods on them, against one entry per node in the same run; with ``racks``, the
    nodes are spread over that many racks of 5 blocks (topology labels the report keeps)."""
    rng = random.Random(seed)
    shapes = [("NVIDIA-A100-SXM4-80GB", 8, 96), ("NVIDIA-H100-80GB-HBM3", 8, 192),
              ("NVIDIA-A10", 4, 64), ("NVIDIA-T4", 1, 32), ("", 0, 64), ("NVIDIA-L40S", 2, 48)]
    nodes, pods = [], []
    for i in range(count):
        # (with racks, a rack holds one kind of node, as racks are bought)
        model, gpus, cpu = shapes[(i * racks // count if racks else i) % len(shapes)]
        labels = {"topology.kubernetes.io/zone": f"zone-{i % 3}"}
        if racks:
            rack = i * racks // count  # racks of neighbouring nodes, a block in one zone
            labels.update({TOPOLOGY_LEVELS[0]: f"block-{rack % 5}",
                           TOPOLOGY_LEVELS[1]: f"rack-{rack}",
                           "topology.kubernetes.io/zone": f"zone-{rack % 5 % 3}"})
        if model:
            labels["nvidia.com/gpu.product"] = model
        allocatable = {"cpu": str(cpu), "memory": f"{cpu * 8}Gi", "pods": "110"}
        if gpus:
            allocatable["nvidia.com/gpu"] = str(gpus)
        nodes.append({"metadata": {"name": f"node-{i:05d}", "labels": labels},
                      "status": {"allocatable": allocatable,
                                 "conditions": [{"type": "Ready", "status": "True"}]}})
        for p in range(rng.randrange(4)):  # training pods and daemons of odd sizes
            request = {"cpu": f"{rng.randrange(100, 16000)}m",
                       "memory": f"{rng.randrange(64, 65536)}Mi"}
            if gpus and p == 0:
                request["nvidia.com/gpu"] = str(rng.choice([g for g in (1, 2, 4, 8) if g <= gpus]))
            pods.append({"metadata": {"name": f"p{i}-{p}"},
                         "spec": {"nodeName": f"node-{i:05d}", "containers": [
                             {"name": "c", "resources": {"requests": request}}]},
                         "status": {"phase": "Running"}})
    started = time.perf_counter()
    groups, levels = grouped(nodes, pods)
    elapsed = (time.perf_counter() - started) * 1000
    label_sets, wired = wire(groups)  # as the agent's report carries them
    report = json.dumps({"labelSets": label_sets, "nodeGroups": wired})
    per_node = json.dumps([{"node": name, "allocatable": a, "free": f}
                           for name, (a, f) in node_free(nodes, pods).items()])
    size = f"{count:,} nodes of {len(shapes)} shapes in 3 zones" + (
        f", {racks} racks" if racks else "")
    return [
        Result(f"capacity report bytes, {size}", len(report), "bytes", "",
               baseline=len(per_node), baseline_name="one entry per node",
               note=f"{len(groups)} groups" + (
                   f"; levels kept: {', '.join(levels)}" if racks else "")),
        Result(f"capacity report build time, {size}", elapsed, "ms", ""),
    ]


def run(short: bool = False) -> list[Result]:
    """Every in-process benchmark; ``short``: small sizes (CI's lane: it must not break)."""
    results = []
    for clusters in (3, 10) if short else (3, 10, 100):
        print(f"[bench] division latency, {clusters} clusters x 200 nodes", flush=True)
        results += division_latency(clusters, decisions=40 if short else 400)
    print("[bench] quota admission engine", flush=True)
    engine = admission_throughput(100 if short else 1000)
    results += [engine, admission_borrowing(engine, 200 if short else 2000)]
    nodes = 500 if short else 5000
    print(f"[bench] capacity report at {nodes:,} nodes", flush=True)
    results += capacity_report(nodes)
    results += capacity_report(nodes, racks=125)
    return results
