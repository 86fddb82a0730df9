"""The trace paper's fragmentation study (Weng et al., ATC'23, behind ``openb_pod_list_*``):
inflate a workload by sampling its pods and placing them one at a time, without departures,
until the fleet is full; at each fill level report the share of GPUs left unallocated.

The fleet is the whole node inventory dealt round-robin into member clusters. For every pod
the hub decides the cluster with gang division (``propagation.divide``, node-aware or summed
fit, the pod's accepted GPU models as a required node label); then the member's scheduler
places it on a node of that cluster (best fit, GPU models honoured). In summed mode the hub
may choose a cluster on which the pod then fits no node: it is counted as arrived but not
allocated, which is what the measure sees.

GPU sharing as the paper counts it: a pod with ``gpu_milli`` < 1000 takes that share of one
GPU (best fit among the node's GPUs with room); pods with several GPUs take whole, wholly
free GPUs. A GPU is unallocated only while wholly free. The hub's view of a node carries its
wholly free GPUs (``nvidia.com/gpu``) and the largest free share of any one GPU
(``SHARE``), which is exact for one pod at a time; summed mode sums both over the cluster.

Fragmented share (the paper's F(M)): for each GPU pod shape m of the workload, weighted by its
frequency, the free GPU capacity m cannot use: all of a node's free GPU capacity when m fits
no way on the node (cpu, memory, model or GPUs), else the free part of the GPUs m cannot use
(partly used GPUs for whole-GPU pods, GPUs with less than its share free for sharing ones).
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fleet.sim.gangs import model_requirement
from fleet.sim.members import GPU, MODEL_LABEL
from fleet.sim.trace import Node, Pod
from propagation.division import divide
from propagation.resources import Resources
from propagation.views import ClusterView, FitMode, JobDemand, NodeGroup, PlacementRules, Role

SHARE = "fleet.sim/gpu-share-milli"  # largest free share of one GPU on the node (view only)
WHOLE = 1000
MODES = (FitMode.NODE_AWARE, FitMode.SUMMED)


@dataclass(frozen=True)
class StudyConfig:
    clusters: int = 4
    repeats: int = 1  # sampled workloads per variant; both modes see the same samples
    seed: int = 2023
    give_up: int = 200  # the fleet is full after this many arrivals in a row fail
    max_fill: float = 1.1  # never sample beyond this much arrived demand (bounds a run)
    step: float = 0.1  # fill levels reported: step, 2 step, ... up to the stop
    shapes: int = 40  # most frequent GPU pod shapes in the fragmentation measure

    def __post_init__(self) -> None:
        bounds = {"clusters": (self.clusters, 1, 64), "repeats": (self.repeats, 1, 50),
                  "give_up": (self.give_up, 1, 100_000), "shapes": (self.shapes, 1, 1000)}
        for name, (value, low, high) in bounds.items():
            if not low <= value <= high:
                raise ValueError(f"study {name} must be within [{low}, {high}], not {value}")
        if not 0.1 <= self.max_fill <= 5 or not 0.01 <= self.step <= 1:
            raise ValueError("study max_fill must be within [0.1, 5] and step within "
                             "[0.01, 1]")


@dataclass
class Point:
    """The fleet at one fill level (arrived GPU demand / fleet GPUs)."""

    fill: float
    unallocated: float  # wholly free GPUs / all GPUs
    fragmented: float  # F(M) / all GPU capacity
    allocated: float  # GPU capacity taken (shares counted as their fraction) / all
    failed: int  # arrivals so far that got no node


@dataclass
class Curve:
    mode: FitMode
    points: list[Point] = field(default_factory=list)
    arrivals: int = 0
    failed: int = 0
    hub_misses: int = 0  # the hub chose a cluster on which the pod then fit no node
    stop: str = ""


class NodeState:
    __slots__ = ("cpu", "gpus", "memory", "model")

    def __init__(self, node: Node) -> None:
        self.cpu, self.memory, self.model = node.cpu, node.memory, node.model
        self.gpus = [WHOLE] * node.gpus  # free milli per GPU

    def key(self) -> tuple[int, int, int, int, str]:
        whole = self.gpus.count(WHOLE)
        return (self.cpu, self.memory, whole, max(self.gpus, default=0), self.model)

    def fit(self, pod: Pod) -> list[int] | None:
        """The GPUs (indexes) the pod would take here, or None when it does not fit."""
        if pod.cpu > self.cpu or pod.memory > self.memory:
            return None
        if pod.models and self.model not in pod.models:
            return None
        if not pod.gpus:
            return []
        if pod.gpu_milli < WHOLE:
            room = [(free, i) for i, free in enumerate(self.gpus) if free >= pod.gpu_milli]
            return [min(room)[1]] if room else None
        whole = [i for i, free in enumerate(self.gpus) if free == WHOLE]
        return whole[:pod.gpus] if len(whole) >= pod.gpus else None

    def take(self, pod: Pod, gpus: list[int]) -> None:
        self.cpu -= pod.cpu
        self.memory -= pod.memory
        for i in gpus:
            self.gpus[i] -= pod.gpu_milli

    def free_after(self, pod: Pod, gpus: list[int]) -> tuple[int, int]:
        """Best fit: the node left with the least free GPU capacity, then cpu."""
        return (sum(self.gpus) - pod.gpu_milli * len(gpus), self.cpu - pod.cpu)


class Member:
    """One member cluster: its nodes, and the hub's view of them kept up to date."""

    def __init__(self, name: str, nodes: Sequence[Node]) -> None:
        self.name = name
        self.nodes = [NodeState(n) for n in nodes]
        self.groups: Counter[tuple[int, int, int, int, str]] = Counter(
            n.key() for n in self.nodes)
        self._view: ClusterView | None = None

    def view(self) -> ClusterView:
        if self._view is None:
            self._view = ClusterView(self.name, True, node_groups=tuple(
                NodeGroup(count, _free(key), ((MODEL_LABEL, key[4]),))
                for key, count in sorted(self.groups.items()) if count))
        return self._view

    def place(self, pod: Pod) -> int | None:
        """The member's scheduler: best fit among the nodes the pod fits; returns the GPU
        capacity (milli) taken, None when the pod fits no node."""
        best: tuple[tuple[int, int], int, list[int]] | None = None
        for index, node in enumerate(self.nodes):
            gpus = node.fit(pod)
            if gpus is None:
                continue
            score = node.free_after(pod, gpus)
            if best is None or score < best[0]:
                best = (score, index, gpus)
        if best is None:
            return None
        node = self.nodes[best[1]]
        self.groups[node.key()] -= 1
        node.take(pod, best[2])
        self.groups[node.key()] += 1
        self._view = None
        return pod.gpu_milli * len(best[2])


@functools.lru_cache(maxsize=65536)
def _free(key: tuple[int, int, int, int, str]) -> Resources:
    cpu, memory, whole, share, _ = key
    return Resources.of({"cpu": cpu, "memory": memory, GPU: whole, SHARE: share})


def request(pod: Pod) -> Resources:
    amounts = {"cpu": pod.cpu, "memory": pod.memory}
    if pod.gpus and pod.gpu_milli < WHOLE:
        amounts[SHARE] = pod.gpu_milli
    elif pod.gpus:
        amounts[GPU] = pod.gpus
    return Resources.of(amounts)


@dataclass(frozen=True)
class Shape:
    cpu: int
    memory: int
    gpus: int
    gpu_milli: int
    models: tuple[str, ...]


def shapes_of(pods: Sequence[Pod], limit: int) -> tuple[list[tuple[Shape, float]], float]:
    """The ``limit`` most frequent GPU pod shapes with their weights (summing to 1), and the
    share of GPU pods they cover."""
    counts = Counter(Shape(p.cpu, p.memory, p.gpus, p.gpu_milli, p.models)
                     for p in pods if p.gpus)
    if not counts:
        return [], 0.0
    top = sorted(counts.items(), key=lambda item: (-item[1], repr(item[0])))[:limit]
    kept = sum(n for _, n in top)
    return [(shape, n / kept) for shape, n in top], kept / sum(counts.values())


def _unusable(shape: Shape, cpu: int, memory: int, model: str,
              gpus: tuple[int, ...]) -> int:
    """Free GPU milli on a node that pods of ``shape`` cannot use (the paper's F_n(m))."""
    free = sum(gpus)
    if shape.cpu > cpu or shape.memory > memory or (shape.models and model not in
                                                    shape.models):
        return free
    if shape.gpu_milli < WHOLE:
        usable = sum(g for g in gpus if g >= shape.gpu_milli)
        return free - usable
    whole = sum(1 for g in gpus if g == WHOLE)
    if whole < shape.gpus:
        return free
    return free - whole * WHOLE


def measure(members: Sequence[Member], shapes: Sequence[tuple[Shape, float]],
            total_gpus: int) -> tuple[float, float, float]:
    """Unallocated, fragmented and allocated shares of the fleet's GPUs."""
    states = Counter((n.cpu, n.memory, n.model, tuple(sorted(n.gpus)))
                     for m in members for n in m.nodes)
    wholly_free = fragmented = free = 0.0
    for (cpu, memory, model, gpus), count in states.items():
        wholly_free += count * gpus.count(WHOLE)
        free += count * sum(gpus)
        fragmented += count * sum(w * _unusable(s, cpu, memory, model, gpus)
                                  for s, w in shapes)
    capacity = total_gpus * WHOLE
    return (wholly_free / total_gpus, fragmented / capacity, 1 - free / capacity)


def run_curve(nodes: Sequence[Node], pods: Sequence[Pod], mode: FitMode, config: StudyConfig,
              repeat: int, variant: str,
              progress: Callable[[float], None] | None = None) -> Curve:
    """Sample pods (seeded, with replacement) onto an empty fleet until it is full."""
    members = [Member(f"c{i}", nodes[i::config.clusters]) for i in range(config.clusters)]
    total_gpus = sum(n.gpus for n in nodes)
    shapes, _ = shapes_of(pods, config.shapes)
    rng = random.Random(f"{config.seed}/{variant}/{repeat}")
    rules = PlacementRules(fit_mode=mode)
    curve = Curve(mode)
    arrived = 0.0
    taken, capacity = 0, total_gpus * WHOLE
    level, in_a_row = config.step, 0
    while True:
        if arrived >= config.max_fill * total_gpus:
            curve.stop = f"arrived demand reached {config.max_fill:.0%} of the fleet's GPUs"
            break
        if in_a_row >= config.give_up:
            curve.stop = f"{config.give_up} arrivals in a row found no node"
            break
        pod = pods[rng.randrange(len(pods))]
        curve.arrivals += 1
        arrived += pod.gpu_demand
        role = Role("pod", 1, request(pod), node_requirements=model_requirement(pod.models))
        decision = divide(JobDemand(pod.name, (role,)), [m.view() for m in members], rules)
        placed = None
        if decision.placed:
            member = members[int(decision.shares[0].cluster[1:])]
            placed = member.place(pod)
            curve.hub_misses += placed is None
        if placed is not None:
            taken += placed
            in_a_row = 0
        else:
            in_a_row += 1
            curve.failed += 1
        while arrived >= level * total_gpus - 1e-9:
            unallocated, fragmented, allocated = measure(members, shapes, total_gpus)
            curve.points.append(Point(round(level, 6), unallocated, fragmented, allocated,
                                      curve.failed))
            level += config.step
            if progress:
                progress(min(1.0, level / config.max_fill))
        if taken >= capacity:
            curve.stop = "every GPU allocated"
            break
    return curve


@dataclass
class VariantResult:
    variant: str
    description: str
    curves: dict[FitMode, list[Curve]]
    shape_coverage: float

    def levels(self) -> list[float]:
        """Fill levels any run reached; a run that stopped earlier (its fleet full to it)
        keeps its final state at the higher levels (``carried`` says so)."""
        return sorted({p.fill for cs in self.curves.values() for c in cs for p in c.points})

    def carried(self, mode: FitMode, fill: float) -> bool:
        return any(not c.points or c.points[-1].fill < fill for c in self.curves[mode])

    def mean(self, mode: FitMode, fill: float, attribute: str) -> float:
        values = []
        for curve in self.curves[mode]:
            at = [p for p in curve.points if p.fill <= fill]
            if at:
                values.append(float(getattr(at[-1], attribute)))
        return sum(values) / len(values) if values else float("nan")


def study(nodes: Sequence[Node], pods: Sequence[Pod], variant: str, description: str,
          config: StudyConfig, progress: Callable[[str, float], None] | None = None,
          ) -> VariantResult:
    curves: dict[FitMode, list[Curve]] = {mode: [] for mode in MODES}
    for repeat in range(config.repeats):
        for mode in MODES:
            label = f"{variant} {mode.value} #{repeat + 1}"
            show = (lambda f, label=label: progress(label, f)) if progress else None
            curves[mode].append(run_curve(nodes, pods, mode, config, repeat, variant, show))
    return VariantResult(variant, description, curves, shapes_of(pods, config.shapes)[1])

