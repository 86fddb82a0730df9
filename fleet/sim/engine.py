"""The simulation: member clusters of real node shapes, the hub's own planner
(:func:`planner.plan_pass`: quota admission and gang division) deciding on a virtual clock,
and each member's scheduler placing replicas node by node. The simulator builds the
planner's view from its simulated members and applies the planner's intents to them; it
makes no decision of its own, so what it reports is what the hub would decide.

With priority preemption on (as the hub runs it), the simulated members report their nodes by
name and the running gangs' replicas on them, so the planner's preemption intents name the
victims whose removal frees nodes for the preemptor; the simulator requeues them (their place
in the queue kept: it is their priority and arrival) and carries the capacity held for the
preemptor from one pass to the next, as the hub's shell does.

In node-aware (and reservation) mode the hub's decision is made on the same node-level state
the member schedules on, so a gang it places always starts. In summed mode the hub sees only
each member's summed free capacity; replicas that then fit no node wait on the member while
the ones placed hold their GPUs: a stranded gang, as peers do it. Reservation mode differs
from node-aware only when member-local workloads race the hub for nodes; the trace has none,
so its figures equal node-aware's (reported, not assumed).

With elastic gangs (``Scenario.elastic``), a gang of two or more replicas may run from half
of them: the planner's ``Grow`` and ``Shrink`` intents resize it in place. Its work is fixed
(replicas × the trace's duration), so it runs longer at a smaller size, and a resize moves its
end.
"""

from __future__ import annotations

import heapq
import itertools
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from fleet.sim.gangs import GangViews
from fleet.sim.members import GPU, Members, cluster_name, node_name
from fleet.sim.trace import Gang, Node, Trace
from planner import PassView, plan_pass
from planner.intents import Bind, Grow, Preempt, Requeue, Resize, Shrink
from planner.preempting import may_plan
from planner.view import Hold, PolicyView, PreemptionView, QuotaView, TimedJob
from preemption.model import Pod
from preemption.model import Running as Victim
from propagation.fit import Domain
from propagation.resources import Resources
from propagation.views import ClusterView, FitMode, PlacementRules
from quota.amounts import MAX_JOBS
from quota.cells import Cells, deal, guarantees
from quota.engine import QueuePolicy
from quota.tree import QuotaNode, leaves_by_namespace

__all__ = ["GPU", "Event", "Outcome", "Running", "Scenario", "Simulation", "node_name"]
RACK_SIZE = 8  # nodes per rack, with a topology scenario
MAX_PASSES_AT_ONCE = 8  # passes at one instant (each preemption frees quota for the next)


def stamp(seconds: float) -> str:
    """A simulated time as the text the planner compares (never parses): sortable."""
    return f"{seconds:015.3f}"


@dataclass(frozen=True)
class Scenario:
    name: str
    fit: str = "NodeAware"  # NodeAware, Summed or Reservation
    queue_policy: QueuePolicy = QueuePolicy.PRIORITY
    borrowing: bool = True
    preemption: bool = False  # priority preemption, as the hub plans it (planner/preempting)
    # Tenants whose gangs are opportunistic (HiveD's priority -1: no quota, idle GPUs only);
    # the others share the fleet's GPUs as equal guarantees (their quota min).
    opportunistic: tuple[str, ...] = ()
    # Backfill: each gang's runtime (the trace's duration: a perfect estimate) is known, so
    # the first gang that does not fit is reserved and shorter ones run before it.
    backfill: bool = False
    # Gangs of two or more replicas are elastic PyTorchJobs (half to all of their replicas).
    elastic: bool = False
    # Members' nodes in racks of RACK_SIZE (blocks of four racks) unless "", and gangs of two
    # or more replicas that must ("required") or should ("preferred") keep to one rack, or
    # not ("any").
    topology: str = ""


@dataclass
class Outcome:
    scenario: Scenario
    delays: dict[str, list[float]] = field(default_factory=dict)  # tenant -> time queued
    by_gang: dict[str, float] = field(default_factory=dict)  # gang name -> time queued
    ended: dict[str, float] = field(default_factory=dict)  # gang name -> when it finished
    unstarted: int = 0
    stranded: int = 0
    preempted: int = 0  # victims: reclaimed for quota or preempted by priority
    gpu_seconds: float = 0.0  # GPUs allocated (held) integrated over time
    useful_gpu_seconds: float = 0.0  # GPUs of started gangs only
    span: float = 0.0
    total_gpus: int = 0
    timeline: list[tuple[float, float]] = field(default_factory=list)
    guarantees: dict[str, int] = field(default_factory=dict)  # tenant -> quota min GPUs
    tenant_gpu_seconds: dict[str, float] = field(default_factory=dict)
    tenant_preempted: dict[str, int] = field(default_factory=dict)  # victims per tenant
    priority_preemptions: int = 0  # Preempt intents carried out
    grown: int = 0  # elastic gangs grown (Grow intents carried out)
    multi_started: int = 0  # gangs of two or more replicas started
    multi_in_one_rack: int = 0  # ... of which every replica ran in one rack
    tenant_shrunk: dict[str, int] = field(default_factory=dict)  # Shrink intents per tenant

    @property
    def allocation(self) -> float:
        return self.gpu_seconds / (self.total_gpus * self.span) if self.span else 0.0

    @property
    def useful_allocation(self) -> float:
        return self.useful_gpu_seconds / (self.total_gpus * self.span) if self.span else 0.0

    def tenant_allocation(self, tenant: str) -> float:
        """The tenant's GPUs held, as a share of the fleet's, over the arrival window."""
        seconds = self.tenant_gpu_seconds.get(tenant, 0.0)
        return seconds / (self.total_gpus * self.span) if self.span else 0.0

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
    finish: int = -1  # the sequence number of its finish event (a requeued run's is stale)
    size: int = 0  # replicas it was bound (or last resized) to run (0: the whole gang)
    domains: tuple[Domain, ...] = ()  # the topology domains its share keeps to
    work_left: float = 0.0  # replica-seconds of work left, as of ``since`` (once started)
    since: float = 0.0
    tenant: str = ""  # whose nodes its replicas keep to (the bind's)

    def __post_init__(self) -> None:
        self.size = self.size or self.gang.replicas


Event = tuple[float, int, str, str]


class Simulation:
    def __init__(self, trace: Trace, scenario: Scenario, clusters: int = 4,
                 tenants: tuple[str, ...] = (), nodes: tuple[Node, ...] | None = None,
                 progress: Callable[[float], None] | None = None,
                 time_text: Callable[[float], str] = stamp) -> None:
        self.trace, self.scenario = trace, scenario
        self.members = Members(nodes if nodes is not None else trace.nodes, clusters,
                               RACK_SIZE if scenario.topology else 0)
        self.total_gpus = self.members.total_gpus
        names = tenants or tuple(sorted({g.tenant for g in trace.gangs}))
        self.tree = quota_tree(names, fleet_capacity(
            nodes if nodes is not None else trace.nodes), scenario)
        self.progress = progress
        if scenario.preemption:  # each tenant's cells, dealt from the nodes as they start
            self.members.cells = Cells(deal(self.members.cell_nodes(), guarantees(self.tree)))
        self.seq = itertools.count(10**9)  # event order among equal times
        self.queue_policies = {f"root/{t}": scenario.queue_policy for t in names}
        mode = FitMode.SUMMED if scenario.fit == "Summed" else FitMode.NODE_AWARE
        self.policy = PolicyView("simulated", PlacementRules(fit_mode=mode), queues=True)
        self.time_text = time_text
        leaves = {ns: leaf.key for ns, leaf in leaves_by_namespace(self.tree).items()}
        self.gangs = GangViews(self.policy, time_text, scenario.opportunistic, leaves,
                               runtimes=scenario.backfill, elastic=scenario.elastic,
                               topology=scenario.topology)
        # The lowest priority a job can have (the hub's: its lowest PriorityClass, or 0).
        self.floor = min(0, *(self.gangs.priority(g) for g in trace.gangs)) \
            if trace.gangs else 0
        # What the last plan left for the next pass (the hub's shell keeps the same).
        self.holds: dict[str, Hold] = {}
        self.retry_at: dict[str, float] = {}
        self.queued_since: dict[str, float] = {}  # gang -> when it last started to wait
        self.waited: dict[str, float] = {}  # gang -> time queued before its current run
        self.held = dict.fromkeys(names, 0)  # tenant -> GPUs its gangs hold now
        self.useful = 0  # GPUs of started gangs now
        self.outcome = Outcome(scenario, {t: [] for t in names}, total_gpus=self.total_gpus,
                               guarantees={c.name: c.min[GPU] for c in self.tree.children},
                               tenant_gpu_seconds=dict.fromkeys(names, 0.0),
                               tenant_preempted=dict.fromkeys(names, 0),
                               tenant_shrunk=dict.fromkeys(names, 0))

    @property
    def views(self) -> list[ClusterView]:
        return self.members.views

    def place(self, index: int, gang: Gang, count: int, domains: tuple[Domain, ...] = (),
              tenant: str = "") -> list[int]:
        placed = self.members.place(index, gang, count, domains, tenant)
        self.held[gang.tenant] += gang.gpus * len(placed)
        return placed

    def free(self, run: Running) -> None:
        self.members.release(run.cluster, run.gang, run.placed, run.tenant)
        self.held[run.gang.tenant] -= run.gang.gpus * len(run.placed)
        if run.started is not None:
            self.useful -= run.gang.gpus * run.size

    # -- the run ----------------------------------------------------------------------
    def run(self) -> Outcome:
        gangs = sorted(self.trace.gangs, key=lambda g: (g.arrival, g.name))
        events: list[Event] = []
        by_name = {g.name: g for g in gangs}
        for seq, gang in enumerate(gangs):
            heapq.heappush(events, (gang.arrival, seq, "arrive", gang.name))
        pending: dict[str, Gang] = {}
        running: dict[str, Running] = {}
        admitted_at: dict[str, str] = {}
        start = gangs[0].arrival if gangs else 0.0
        end = max((g.arrival for g in gangs), default=0.0)
        clock = start
        done = 0
        out = self.outcome
        while events:
            now, seq, kind, name = heapq.heappop(events)
            # allocation is measured over the arrival window, not the drain after it
            window = max(0.0, min(now, end) - min(clock, end))
            if window:
                for tenant, gpus in self.held.items():
                    out.tenant_gpu_seconds[tenant] += gpus * window
                out.gpu_seconds += sum(self.held.values()) * window
                out.useful_gpu_seconds += self.useful * window
            clock = now
            if kind == "arrive":
                pending[name] = by_name[name]
                self.queued_since[name] = now
            elif kind == "finish" and name in running and running[name].finish == seq:
                run = running.pop(name)
                self.free(run)
                admitted_at.pop(name, None)
                out.by_gang[name] = self.waited.pop(name, 0.0)
                out.ended[name] = now
                out.delays[run.gang.tenant].append(out.by_gang[name])
                done += 1
                self.retry_stranded(run.cluster, running, now, events)
            self.schedule(pending, running, admitted_at, now, events)
            if now <= end:  # the plot shows the arrival window, not the drain after it
                out.timeline.append((now, sum(self.held.values()) / max(1, self.total_gpus)))
            if self.progress and done % 200 == 0:
                self.progress(min(1.0, (now - start) / max(1.0, end - start)))
        out.span = end - start
        out.unstarted = len(pending) + sum(1 for r in running.values() if r.started is None)
        return out

    def started(self, run: Running, now: float, events: list[Event]) -> None:
        """Every replica of the gang is placed: it runs, and its finish is due."""
        run.started = now
        self.useful += run.gang.gpus * run.size
        self.waited[run.gang.name] = self.waited.get(run.gang.name, 0.0) + now - \
            self.queued_since.pop(run.gang.name, now)
        run.work_left, run.since = run.gang.duration * run.gang.replicas, now
        if run.size >= 2:
            self.outcome.multi_started += 1
            racks = {self.members.topology(n) for n in run.placed}
            self.outcome.multi_in_one_rack += len(racks) == 1
        self.due(run, now, events)

    def due(self, run: Running, now: float, events: list[Event]) -> None:
        """Its finish at its size: any earlier finish event is stale."""
        run.finish = next(self.seq)
        heapq.heappush(events, (now + run.work_left / run.size, run.finish, "finish",
                                run.gang.name))

    def resize(self, run: Running, intent: Resize, now: float, events: list[Event]) -> None:
        """A started elastic gang grown or shrunk in place: the member adds replicas where
        they fit best, or removes its highest ones; the work left is spread over the new
        size."""
        if isinstance(intent, Grow):
            added = self.place(run.cluster, run.gang, intent.after - len(run.placed),
                               run.domains, run.tenant)
            run.placed += added
            self.outcome.grown += 1
        else:
            going = run.placed[intent.after:]
            self.members.release(run.cluster, run.gang, going, run.tenant)
            self.held[run.gang.tenant] -= run.gang.gpus * len(going)
            del run.placed[intent.after:]
            self.outcome.tenant_shrunk[run.gang.tenant] += 1
        if run.started is not None:
            run.work_left -= run.size * (now - run.since)
            run.since = now
            self.useful += run.gang.gpus * (len(run.placed) - run.size)
        run.size = len(run.placed)
        if run.started is not None:
            self.due(run, now, events)

    def retry_stranded(self, cluster: int, running: dict[str, Running], now: float,
                       events: list[Event]) -> None:
        """Freed capacity on a member first goes to its stranded gangs' waiting replicas."""
        for run in sorted(running.values(), key=lambda r: r.gang.arrival):
            if run.cluster != cluster or run.started is not None:
                continue
            run.placed += self.place(cluster, run.gang, run.size - len(run.placed),
                                     run.domains, run.tenant)
            if len(run.placed) == run.size:
                self.started(run, now, events)

    def pass_view(self, pending: dict[str, Gang], running: dict[str, Running],
                  admitted_at: dict[str, str], now: float) -> PassView:
        """What the hub would see now: the waiting gangs, the members' free nodes (reported
        at once: nothing is assumed), the quota held by the running ones and, with
        preemption, the running gangs' replicas on their nodes."""
        holdings = tuple(self.gangs.holding(run.gang, admitted_at[name], run.size)
                         for name, run in running.items())
        members = {view.name: view for view in self.views}
        jobs = tuple(self.gangs.job(g) for g in pending.values())
        if self.scenario.elastic:  # the running ones that may grow
            jobs += tuple(self.gangs.bound(run.gang, run.cluster, run.placed, admitted_at[name],
                                           run.domains)
                          for name, run in running.items()
                          if run.started is not None and run.size < run.gang.replicas)
        preemption = None
        if self.scenario.preemption:
            victims: tuple[Victim, ...] = ()
            if may_plan(jobs, self.floor, self.retry_at, now):
                victims = tuple(self.gangs.victim(run.gang, run.cluster, run.placed,
                                                  admitted_at[name], run.domains)
                                for name, run in running.items())
            preemption = PreemptionView(victims, self.floor, self.holds, self.retry_at)
        return PassView(now, self.time_text(now), jobs, members, members,
                        quota=QuotaView(self.tree, holdings, self.queue_policies),
                        preemption=preemption,
                        timed=self.timed(running) if self.scenario.backfill else (),
                        cells=self.members.cells)

    def timed(self, running: dict[str, Running]) -> tuple[TimedJob, ...]:
        """Started gangs, their ends known (a stranded one holds its nodes for as long as
        nobody can say), each replica on the node the member put it."""
        return tuple(TimedJob(self.gangs.key(run.gang), run.started, run.gang.duration, tuple(
            Pod(cluster_name(run.cluster), node_name(run.cluster, n), Resources.of(
                {"cpu": run.gang.cpu, "memory": run.gang.memory, GPU: run.gang.gpus}))
            for n in run.placed)) for run in running.values() if run.started is not None)

    def schedule(self, pending: dict[str, Gang], running: dict[str, Running],
                 admitted_at: dict[str, str], now: float, events: list[Event]) -> None:
        """Passes of the hub's planner at ``now``, its intents applied to the simulated
        members; a pass that preempts is followed by another (the claimant's quota is free
        once its victims are requeued), as the hub's next pass would follow it."""
        for _ in range(MAX_PASSES_AT_ONCE):
            if not pending and not self.scenario.elastic:
                break
            plan = plan_pass(self.pass_view(pending, running, admitted_at, now))
            self.holds, self.retry_at = dict(plan.holds), dict(plan.retry_at)
            preempted, names = False, self.gangs.names
            going: list[str] = []  # priority victims: they leave once the binds are placed
            for intent in plan.intents:
                if isinstance(intent, Requeue):
                    self.requeue(names[intent.job], pending, running, admitted_at, now)
                    preempted = True
                elif isinstance(intent, Preempt):
                    for key, _why in intent.victims:
                        self.gangs.preempted_by[names[key]] = intent.job
                        going.append(names[key])
                    self.outcome.priority_preemptions += 1
                    preempted = True
                elif isinstance(intent, Bind):
                    self.start(pending.pop(names[intent.job]), intent, running,
                               admitted_at, now, events)
                elif isinstance(intent, Grow | Shrink):
                    self.resize(running[names[intent.job]], intent, now, events)
            # The victims' pods terminate after this pass's binds are on their nodes, as on
            # a member: the capacity they free is the preemptor's (held by the planner).
            for name in going:
                self.requeue(name, pending, running, admitted_at, now)
            if not preempted:
                break

    def requeue(self, name: str, pending: dict[str, Gang], running: dict[str, Running],
                admitted_at: dict[str, str], now: float) -> None:
        """A victim leaves its nodes and waits in its queue again, where its priority and
        arrival put it (the time it ran is lost: it starts over)."""
        run = running.pop(name)
        self.free(run)
        pending[name] = run.gang
        admitted_at.pop(name, None)
        self.queued_since[name] = now
        self.gangs.requeued_at[name] = now
        self.outcome.preempted += 1
        self.outcome.tenant_preempted[run.gang.tenant] += 1

    def start(self, gang: Gang, bind: Bind, running: dict[str, Running],
              admitted_at: dict[str, str], now: float, events: list[Event]) -> None:
        """The member's scheduler places the bound gang's replicas."""
        index = int(bind.shares[0].cluster[1:])
        size = sum(n for _, n in bind.shares[0].replicas)  # an elastic gang: as admitted
        domains = bind.shares[0].domains  # the agent pins the pods there
        nodes = self.place(index, gang, size, domains, bind.tenant)
        admitted_at[gang.name] = bind.admitted_at
        self.gangs.preempted_by.pop(gang.name, None)
        self.gangs.requeued_at.pop(gang.name, None)
        run = Running(gang, index, nodes, None, size=size, domains=domains, tenant=bind.tenant)
        running[gang.name] = run
        if len(nodes) == size:
            self.started(run, now, events)
        else:
            self.outcome.stranded += 1


def quota_tree(tenants: tuple[str, ...], capacity: Mapping[str, int],
               scenario: Scenario) -> QuotaNode:
    """One leaf per tenant: the guaranteed ones share the fleet's GPUs, CPU and memory
    equally (their min, the same slice of each as a private cluster of their guarantee
    holds; their max the whole fleet when borrowing), the opportunistic ones hold no
    guarantee. A resource left out of a leaf's min would count as borrowed from its first
    millicore, so every tenant would look like a borrower and lose its jobs to reclaims."""
    guaranteed = [t for t in tenants if t not in scenario.opportunistic]
    share = {r: amount // max(1, len(guaranteed)) for r, amount in capacity.items()}
    none = dict.fromkeys(capacity, 0)
    return QuotaNode("root", min=dict(capacity), max=dict(capacity), children=tuple(QuotaNode(
        t, min=share if t in guaranteed else none,
        max={**(capacity if scenario.borrowing or t not in guaranteed else share),
             MAX_JOBS: 10**9}, namespaces=(t,)) for t in tenants))


def fleet_capacity(nodes: Iterable[Node]) -> dict[str, int]:
    """What a fleet of ``nodes`` holds, by the resource names the quota tree uses."""
    listed = list(nodes)
    return {GPU: sum(n.gpus for n in listed), "cpu": sum(n.cpu for n in listed),
            "memory": sum(n.memory for n in listed)}


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
