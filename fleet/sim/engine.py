"""The simulation: member clusters of real node shapes, the quota engine and gang division
deciding on a virtual clock, and each member's scheduler placing replicas node by node.

In node-aware (and reservation) mode the hub's decision is made on the same node-level state
the member schedules on, so a gang it places always starts. In summed mode the hub sees only
each member's summed free capacity; replicas that then fit no node wait on the member while
the ones placed hold their GPUs: a stranded gang, as peers do it. Reservation mode differs
from node-aware only when member-local workloads race the hub for nodes; the trace has none,
so its figures equal node-aware's (reported, not assumed).
"""

from __future__ import annotations

import heapq
import itertools
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from fleet.sim.trace import Gang, Node, Trace
from propagation.division import divide
from propagation.resources import Resources
from propagation.views import (
    ClusterView,
    FitMode,
    JobDemand,
    NodeGroup,
    NodeLabelIn,
    PlacementRules,
    Role,
)
from quota.amounts import MAX_JOBS
from quota.engine import AdmissionPass, Holding, Job, QueuePolicy
from quota.tree import QuotaNode

GPU = "nvidia.com/gpu"
MODEL_LABEL = "nvidia.com/gpu.product"  # the GPU model label (NVIDIA GPU feature discovery)
SCAN_WINDOW = 50  # a pass stops after this many waiting gangs in a row (bounds its cost)


@dataclass(frozen=True)
class Scenario:
    name: str
    fit: str = "NodeAware"  # NodeAware, Summed or Reservation
    queue_policy: QueuePolicy = QueuePolicy.PRIORITY
    borrowing: bool = True


@dataclass
class Outcome:
    scenario: Scenario
    delays: dict[str, list[float]] = field(default_factory=dict)  # tenant -> start - arrival
    unstarted: int = 0
    stranded: int = 0
    preempted: int = 0
    gpu_seconds: float = 0.0  # GPUs allocated (held) integrated over time
    useful_gpu_seconds: float = 0.0  # GPUs of started gangs only
    span: float = 0.0
    total_gpus: int = 0
    timeline: list[tuple[float, float]] = field(default_factory=list)

    @property
    def allocation(self) -> float:
        return self.gpu_seconds / (self.total_gpus * self.span) if self.span else 0.0

    @property
    def useful_allocation(self) -> float:
        return self.useful_gpu_seconds / (self.total_gpus * self.span) if self.span else 0.0

    def all_delays(self) -> list[float]:
        return [d for ds in self.delays.values() for d in ds]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Running:
    gang: Gang
    cluster: int
    placed: list[int]  # node index of each placed replica
    started: float | None  # None while stranded (replicas still waiting on the member)


class Simulation:
    def __init__(self, trace: Trace, scenario: Scenario, clusters: int = 4,
                 tenants: tuple[str, ...] = (), nodes: tuple[Node, ...] | None = None,
                 progress: Callable[[float], None] | None = None) -> None:
        self.trace, self.scenario = trace, scenario
        chosen = nodes if nodes is not None else trace.nodes
        self.members: list[list[list[int]]] = [[] for _ in range(clusters)]  # free per node
        self.models: list[list[str]] = [[] for _ in range(clusters)]  # GPU model per node
        for i, node in enumerate(chosen):
            self.members[i % clusters].append([node.cpu, node.memory, node.gpus])
            self.models[i % clusters].append(node.model)
        self.total_gpus = sum(n.gpus for n in chosen)
        names = tenants or tuple(sorted({g.tenant for g in trace.gangs}))
        share = self.total_gpus // max(1, len(names))
        self.tree = QuotaNode("root", min={GPU: self.total_gpus}, max={GPU: self.total_gpus},
                              children=tuple(QuotaNode(
                                  t, min={GPU: share},
                                  max={GPU: self.total_gpus if scenario.borrowing else share,
                                       MAX_JOBS: 10**9}, namespaces=(t,)) for t in names))
        self.progress = progress
        self.seq = itertools.count(10**9)  # event order among equal times
        self.admission = AdmissionPass(self.tree, [], [], {
            f"root/{t}": scenario.queue_policy for t in names})
        self.outcome = Outcome(scenario, {t: [] for t in names}, total_gpus=self.total_gpus)
        self.views = [self.view(i) for i in range(clusters)]

    # -- state ------------------------------------------------------------------------
    def view(self, index: int) -> ClusterView:
        groups: dict[tuple[int, int, int, str], int] = {}
        for free, model in zip(self.members[index], self.models[index], strict=True):
            key = (free[0], free[1], free[2], model)
            groups[key] = groups.get(key, 0) + 1
        return ClusterView(f"c{index}", True, node_groups=tuple(
            NodeGroup(n, Resources.of({"cpu": c, "memory": m, GPU: g}), ((MODEL_LABEL, model),))
            for (c, m, g, model), n in sorted(groups.items())))

    def place(self, index: int, gang: Gang, count: int) -> list[int]:
        """The member's scheduler: best fit (least GPUs left) for up to ``count`` replicas,
        on nodes of a GPU model the gang accepts."""
        placed = []
        models = self.models[index]
        for _ in range(count):
            best, best_left = -1, None
            for n, free in enumerate(self.members[index]):
                if gang.models and models[n] not in gang.models:
                    continue
                if free[0] >= gang.cpu and free[1] >= gang.memory and free[2] >= gang.gpus:
                    left = (free[2] - gang.gpus, free[0] - gang.cpu)
                    if best_left is None or left < best_left:
                        best, best_left = n, left
            if best < 0:
                break
            free = self.members[index][best]
            free[0] -= gang.cpu
            free[1] -= gang.memory
            free[2] -= gang.gpus
            placed.append(best)
        return placed

    def free(self, run: Running) -> None:
        for n in run.placed:
            free = self.members[run.cluster][n]
            free[0] += run.gang.cpu
            free[1] += run.gang.memory
            free[2] += run.gang.gpus
        self.views[run.cluster] = self.view(run.cluster)

    # -- the run ----------------------------------------------------------------------
    def run(self) -> Outcome:
        gangs = sorted(self.trace.gangs, key=lambda g: (g.arrival, g.name))
        events: list[tuple[float, int, str, str]] = []
        by_name = {g.name: g for g in gangs}
        for seq, gang in enumerate(gangs):
            heapq.heappush(events, (gang.arrival, seq, "arrive", gang.name))
        seq = len(gangs)
        pending: dict[str, Gang] = {}
        running: dict[str, Running] = {}
        admitted_at: dict[str, str] = {}
        start = gangs[0].arrival if gangs else 0.0
        end = max((g.arrival for g in gangs), default=0.0)
        clock, allocated, useful = start, 0, 0
        done = 0
        while events:
            now, _, kind, name = heapq.heappop(events)
            # allocation is measured over the arrival window, not the drain after it
            window = max(0.0, min(now, end) - min(clock, end))
            self.outcome.gpu_seconds += allocated * window
            self.outcome.useful_gpu_seconds += useful * window
            clock = now
            if kind == "arrive":
                pending[name] = by_name[name]
            elif kind == "finish" and name in running and running[name].started is not None:
                run = running.pop(name)
                self.free(run)
                allocated -= run.gang.gpus * run.gang.replicas
                useful -= run.gang.gpus * run.gang.replicas
                self.admission.release([Holding(self.job(run.gang),
                                                admitted_at.pop(name, ""))])
                done += 1
                more, started_now = self.retry_stranded(run.cluster, running, now, events)
                allocated += more
                useful += started_now
            placed_gpus, started_gpus, seq = self.schedule(pending, running, admitted_at, now,
                                                           events, seq)
            allocated += placed_gpus
            useful += started_gpus
            if now <= end:  # the plot shows the arrival window, not the drain after it
                self.outcome.timeline.append((now, allocated / max(1, self.total_gpus)))
            if self.progress and done % 200 == 0:
                self.progress(min(1.0, (now - start) / max(1.0, end - start)))
        self.outcome.span = end - start
        self.outcome.unstarted = len(pending) + sum(1 for r in running.values()
                                                    if r.started is None)
        return self.outcome

    def retry_stranded(self, cluster: int, running: dict[str, Running], now: float,
                       events: list[tuple[float, int, str, str]]) -> tuple[int, int]:
        """Freed capacity on a member first goes to its stranded gangs' waiting replicas:
        returns the GPUs newly placed and the GPUs of gangs that could start."""
        placed = started = 0
        for run in sorted(running.values(), key=lambda r: r.gang.arrival):
            if run.cluster != cluster or run.started is not None:
                continue
            more = self.place(cluster, run.gang, run.gang.replicas - len(run.placed))
            run.placed += more
            placed += run.gang.gpus * len(more)
            self.views[cluster] = self.view(cluster)
            if len(run.placed) == run.gang.replicas:
                run.started = now
                self.outcome.delays[run.gang.tenant].append(now - run.gang.arrival)
                heapq.heappush(events, (now + run.gang.duration, next(self.seq), "finish",
                                        run.gang.name))
                started += run.gang.gpus * run.gang.replicas
        return placed, started

    def job(self, gang: Gang) -> Job:
        return Job(gang.name, gang.tenant, {GPU: gang.gpus * gang.replicas}, gang.priority,
                   f"{gang.arrival:015.3f}")

    def schedule(self, pending: dict[str, Gang], running: dict[str, Running],
                 admitted_at: dict[str, str], now: float,
                 events: list[tuple[float, int, str, str]], seq: int) -> tuple[int, int, int]:
        if not pending:
            return 0, 0, seq
        jobs = {name: self.job(g) for name, g in pending.items()}
        admission = self.admission
        admission.next_pass(list(jobs.values()))
        mode = FitMode.SUMMED if self.scenario.fit == "Summed" else FitMode.NODE_AWARE
        rules = PlacementRules(fit_mode=mode)
        views = self.views
        placed_gpus = started_gpus = misses = 0
        for job in admission.candidates():
            if misses >= SCAN_WINDOW:
                break
            gang = pending[job.key]
            verdict = admission.check(job)
            if verdict.fits and verdict.victims:
                for victim in verdict.victims:  # preempt whole gangs, requeue them
                    run = running.pop(victim.job.key)
                    self.free(run)
                    placed_gpus -= run.gang.gpus * len(run.placed)
                    if run.started is not None:
                        started_gpus -= run.gang.gpus * run.gang.replicas
                    pending[run.gang.name] = run.gang
                    self.outcome.preempted += 1
                admission.release(verdict.victims)
                views[:] = [self.view(i) for i in range(len(self.members))]
            if not verdict.fits:
                admission.wait(job)
                misses += 1
                continue
            demand = JobDemand(job.key, (Role("Worker", gang.replicas, Resources.of(
                {"cpu": gang.cpu, "memory": gang.memory, GPU: gang.gpus}),
                node_requirements=model_requirement(gang.models)),))
            decision = divide(demand, views, rules)
            if not decision.placed:
                admission.wait(job)
                misses += 1
                continue
            misses = 0
            index = int(decision.shares[0].cluster[1:])
            nodes = self.place(index, gang, gang.replicas)
            views[index] = self.view(index)
            admission.admit(job, f"{now:015.3f}")
            admitted_at[gang.name] = f"{now:015.3f}"
            del pending[gang.name]
            placed_gpus += gang.gpus * len(nodes)
            started = len(nodes) == gang.replicas
            running[gang.name] = Running(gang, index, nodes, now if started else None)
            if started:
                started_gpus += gang.gpus * gang.replicas
                self.outcome.delays[gang.tenant].append(now - gang.arrival)
                heapq.heappush(events, (now + gang.duration, next(self.seq), "finish",
                                        gang.name))
            else:
                self.outcome.stranded += 1
        return placed_gpus, started_gpus, seq


def model_requirement(models: tuple[str, ...]) -> tuple[NodeLabelIn, ...]:
    """A pod's accepted GPU models as the required node label the division honours."""
    return (NodeLabelIn(MODEL_LABEL, models),) if models else ()


def summary(values: list[float]) -> tuple[float, float, float]:
    return (percentile(values, 0.5), percentile(values, 0.9), percentile(values, 0.99))


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def progress_bar(label: str) -> Callable[[float], None]:
    last = [-1]

    def show(fraction: float) -> None:
        step = int(fraction * 20)
        if step != last[0]:
            last[0] = step
            print(f"\r[simulate] {label:<32} [{'#' * step}{'.' * (20 - step)}] "
                  f"{step * 5:3d}%", end="", file=sys.stderr, flush=True)
    return show
