"""The simulation: member clusters of real node shapes, the hub's own planner
(:func:`planner.plan_pass`: quota admission and gang division) deciding on a virtual clock,
and each member's scheduler placing replicas node by node. The simulator builds the
planner's view from its simulated members and applies the planner's intents to them; it
makes no decision of its own, so what it reports is what the hub would decide.

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
from planner import PassView, plan_pass
from planner.intents import Bind, Requeue
from planner.view import JobView, PolicyView, QuotaView, Stage, TimedJob
from preemption.model import Pod
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
from quota.engine import Holding, Job, QueuePolicy
from quota.tree import QuotaNode

GPU = "nvidia.com/gpu"
MODEL_LABEL = "nvidia.com/gpu.product"  # the GPU model label (NVIDIA GPU feature discovery)
SCAN_WINDOW = 50  # a pass stops after this many waiting gangs in a row (bounds its cost)
MAX_PASSES_AT_ONCE = 8  # passes at one instant (each preemption frees quota for the next)
KIND = "PyTorchJob"  # the kind a gang is named as, as the hub keys jobs


def stamp(seconds: float) -> str:
    """A simulated time as the text the planner compares (never parses): sortable."""
    return f"{seconds:015.3f}"


@dataclass(frozen=True)
class Scenario:
    name: str
    fit: str = "NodeAware"  # NodeAware, Summed or Reservation
    queue_policy: QueuePolicy = QueuePolicy.PRIORITY
    borrowing: bool = True
    # Backfill: each gang's runtime (the trace's duration: a perfect estimate) is known, so
    # the first gang that does not fit is reserved and shorter ones run before it.
    backfill: bool = False


@dataclass
class Outcome:
    scenario: Scenario
    delays: dict[str, list[float]] = field(default_factory=dict)  # tenant -> start - arrival
    by_gang: dict[str, float] = field(default_factory=dict)  # gang name -> start - arrival
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
                 progress: Callable[[float], None] | None = None,
                 time_text: Callable[[float], str] = stamp) -> None:
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
        self.queue_policies = {f"root/{t}": scenario.queue_policy for t in names}
        mode = FitMode.SUMMED if scenario.fit == "Summed" else FitMode.NODE_AWARE
        self.policy = PolicyView("simulated", PlacementRules(fit_mode=mode), queues=True)
        self.time_text = time_text
        self._job_views: dict[str, JobView] = {}
        self._gangs: dict[str, str] = {}  # job key -> gang name
        self.outcome = Outcome(scenario, {t: [] for t in names}, total_gpus=self.total_gpus)
        self.views = [self.view(i) for i in range(clusters)]

    # -- state ------------------------------------------------------------------------
    def view(self, index: int) -> ClusterView:
        groups: dict[tuple[int, int, int, str], int] = {}
        for free, model in zip(self.members[index], self.models[index], strict=True):
            key = (free[0], free[1], free[2], model)
            groups[key] = groups.get(key, 0) + 1
        view = ClusterView(f"c{index}", True, node_groups=tuple(
            NodeGroup(n, Resources.of({"cpu": c, "memory": m, GPU: g}), ((MODEL_LABEL, model),))
            for (c, m, g, model), n in sorted(groups.items())))
        return named_nodes(view, self.members[index], self.models[index]) \
            if self.scenario.backfill else view

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
                admitted_at.pop(name, None)
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
                self.outcome.by_gang[run.gang.name] = now - run.gang.arrival
                heapq.heappush(events, (now + run.gang.duration, next(self.seq), "finish",
                                        run.gang.name))
                started += run.gang.gpus * run.gang.replicas
        return placed, started

    def key(self, gang: Gang) -> str:
        """The gang's job key, as the hub would name a PyTorchJob in the tenant's namespace."""
        return f"{KIND}/{gang.tenant}/{gang.name}"

    def job_view(self, gang: Gang) -> JobView:
        """The gang as the planner sees a waiting job (built once per gang)."""
        view = self._job_views.get(gang.name)
        if view is None:
            key, created = self.key(gang), self.time_text(gang.arrival)
            demand = JobDemand(key, (Role("Worker", gang.replicas, Resources.of(
                {"cpu": gang.cpu, "memory": gang.memory, GPU: gang.gpus}),
                node_requirements=model_requirement(gang.models)),))
            view = JobView(key, gang.name, created, Stage.WAITING, demand, policy=self.policy,
                           quota=Job(key, gang.tenant, dict(demand.total), gang.priority,
                                     created), priority=gang.priority,
                           runtime=gang.duration if self.scenario.backfill else None)
            self._job_views[gang.name] = view
            self._gangs[key] = gang.name
        return view

    def quota_job(self, gang: Gang) -> Job:
        job = self.job_view(gang).quota
        assert job is not None  # every simulated gang is queued
        return job

    def pass_view(self, pending: dict[str, Gang], running: dict[str, Running],
                  admitted_at: dict[str, str], now: float) -> PassView:
        """What the hub would see now: the waiting gangs, the members' free nodes (reported
        at once: nothing is assumed), and the quota held by the running ones."""
        holdings = tuple(Holding(self.quota_job(run.gang), admitted_at[name])
                         for name, run in running.items())
        members = {view.name: view for view in self.views}
        # No priority preemption (``preemption=None``): the planner frees a victim's pods on
        # the nodes they run on, and the simulated members report their nodes by shape, not
        # by name; the trace's priorities act through quota admission and reclaim only.
        return PassView(now, self.time_text(now),
                        tuple(self.job_view(g) for g in pending.values()), members, members,
                        quota=QuotaView(self.tree, holdings, self.queue_policies),
                        scan_window=SCAN_WINDOW,
                        timed=self.timed(running) if self.scenario.backfill else ())

    def timed(self, running: dict[str, Running]) -> tuple[TimedJob, ...]:
        """Started gangs, their ends known (a stranded one holds its nodes for as long as
        nobody can say), each replica on the node the member put it."""
        return tuple(TimedJob(self.key(run.gang), run.started, run.gang.duration, tuple(
            Pod(f"c{run.cluster}", node_name(run.cluster, n), Resources.of(
                {"cpu": run.gang.cpu, "memory": run.gang.memory, GPU: run.gang.gpus}))
            for n in run.placed)) for run in running.values() if run.started is not None)

    def schedule(self, pending: dict[str, Gang], running: dict[str, Running],
                 admitted_at: dict[str, str], now: float,
                 events: list[tuple[float, int, str, str]], seq: int) -> tuple[int, int, int]:
        """Passes of the hub's planner at ``now``, its intents applied to the simulated
        members; a pass that preempts is followed by another (the claimant's quota is free
        once its victims are requeued), as the hub's next pass would follow it."""
        placed_gpus = started_gpus = 0
        for _ in range(MAX_PASSES_AT_ONCE):
            if not pending:
                break
            plan = plan_pass(self.pass_view(pending, running, admitted_at, now))
            preempted = False
            for intent in plan.intents:
                if isinstance(intent, Requeue):
                    run = running.pop(self._gangs[intent.job])
                    self.free(run)
                    placed_gpus -= run.gang.gpus * len(run.placed)
                    if run.started is not None:
                        started_gpus -= run.gang.gpus * run.gang.replicas
                    pending[run.gang.name] = run.gang
                    admitted_at.pop(run.gang.name, None)
                    self.outcome.preempted += 1
                    preempted = True
                elif isinstance(intent, Bind):
                    placed, started = self.start(pending.pop(self._gangs[intent.job]),
                                                 intent, running, admitted_at, now, events)
                    placed_gpus += placed
                    started_gpus += started
            if not preempted:
                break
        return placed_gpus, started_gpus, seq

    def start(self, gang: Gang, bind: Bind, running: dict[str, Running],
              admitted_at: dict[str, str], now: float,
              events: list[tuple[float, int, str, str]]) -> tuple[int, int]:
        """The member's scheduler places the bound gang's replicas; the GPUs placed and
        those of a gang that could start."""
        index = int(bind.shares[0].cluster[1:])
        nodes = self.place(index, gang, gang.replicas)
        self.views[index] = self.view(index)
        admitted_at[gang.name] = bind.admitted_at
        started = len(nodes) == gang.replicas
        running[gang.name] = Running(gang, index, nodes, now if started else None)
        if not started:
            self.outcome.stranded += 1
            return gang.gpus * len(nodes), 0
        self.outcome.delays[gang.tenant].append(now - gang.arrival)
        self.outcome.by_gang[gang.name] = now - gang.arrival
        heapq.heappush(events, (now + gang.duration, next(self.seq), "finish", gang.name))
        return gang.gpus * len(nodes), gang.gpus * gang.replicas


def node_name(cluster: int, node: int) -> str:
    return f"c{cluster}-n{node}"


def named_nodes(view: ClusterView, free: list[list[int]], models: list[str]) -> ClusterView:
    """``view`` with each group naming its nodes (backfill frees a gang's nodes by name)."""
    names: dict[tuple[int, int, int, str], list[str]] = {}
    cluster = int(view.name[1:])
    for n, (node, model) in enumerate(zip(free, models, strict=True)):
        names.setdefault((node[0], node[1], node[2], model), []).append(node_name(cluster, n))
    return ClusterView(view.name, True, node_groups=tuple(
        NodeGroup(g.count, g.free, g.labels, tuple(names[(
            g.free.get("cpu", 0), g.free.get("memory", 0), g.free.get(GPU, 0), g.labels[0][1])]))
        for g in view.node_groups))


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
