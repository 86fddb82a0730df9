"""Reading a trace in the Alibaba GPU 2023 (openb) format, and deriving what it lacks.

Every pod-list variant is read (``openb_pod_list_*.csv``); columns a variant lacks get a
stated default: no ``gpu_spec`` means any GPU model, no ``gpu_milli`` means whole GPUs, no
``creation_time`` means arrival in file order on a synthetic clock (one pod a second), and
without ``deletion_time`` there are no run times to replay (the fragmentation study needs
none). A malformed row stops the reader with one line naming the file, line and column.

Deterministic rules for the replay (printed with every report):
* nodes are dealt round-robin, in file order, into ``clusters`` member clusters;
* a pod's run time is ``deletion_time - scheduled_time`` (``- creation_time`` for pods the
  production scheduler never placed); GPU shares (``gpu_milli`` < 1000) count as whole GPUs;
* a gang is a run of pods in creation order with equal requests (GPU models included)
  created within ``window`` seconds of its first pod, at most ``max_gang`` pods; it lasts as
  long as its longest pod;
* a gang's tenant is ``sha256(first pod name) mod tenants`` (with a tenant seed s > 0,
  ``sha256("s:" + first pod name)``: another draw of the same workload, to measure noise);
* priority by qos: Guaranteed 3, LS 2, Burstable 1, BE 0.
"""

from __future__ import annotations

import csv
import hashlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

PRIORITY = {"Guaranteed": 3, "LS": 2, "Burstable": 1, "BE": 0}
# The trace the repository carries (data/traces/alibaba-gpu-2023/SOURCE.md: its source and
# licence).
DEFAULT_TRACE = Path(__file__).resolve().parents[2] / "data" / "traces" / "alibaba-gpu-2023"
NODE_FILE = "openb_node_list_gpu_node.csv"
POD_GLOB = "openb_pod_list_*.csv"
DEFAULT_PODS = "openb_pod_list_default.csv"
MAX_ROWS = 1_000_000  # a bound on what one file may hold
MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


class TraceError(ValueError):
    """A trace file that cannot be read: the message names the file, line and column."""


@dataclass(frozen=True)
class Node:
    name: str
    cpu: int  # millicores
    memory: int  # bytes
    gpus: int
    model: str


@dataclass(frozen=True)
class Pod:
    name: str
    cpu: int  # millicores
    memory: int  # bytes
    gpus: int  # num_gpu
    gpu_milli: int  # share of each GPU, 1000 = whole; only one-GPU pods share
    models: tuple[str, ...]  # GPU models the pod accepts; empty: any
    qos: str
    created: float  # seconds; file order on a synthetic clock when the file has no times
    duration: float | None  # None when the file has no deletion times

    @property
    def gpu_demand(self) -> float:
        """GPUs the pod asks for, a share counting as its fraction of one GPU."""
        return self.gpus * self.gpu_milli / 1000


@dataclass(frozen=True)
class PodList:
    path: Path
    pods: tuple[Pod, ...]
    timed: bool  # creation times from the file (False: file order, one pod a second)
    durations: bool  # run times from the file
    constrained: bool  # the file has a gpu_spec column

    @property
    def name(self) -> str:
        return self.path.stem.removeprefix("openb_pod_list_")

    def describe(self) -> str:
        with_spec = sum(1 for p in self.pods if p.models)
        gpu_pods = sum(1 for p in self.pods if p.gpus)
        shared = sum(1 for p in self.pods if p.gpus and p.gpu_milli < 1000)
        times = ("creation times from the file" if self.timed
                 else "no timestamps: arrivals in file order, one a second (synthetic clock)")
        spec = (f"{with_spec} of {gpu_pods} GPU pods constrain the GPU model" if self.constrained
                else "no gpu_spec column: any GPU model")
        return (f"{self.path.name}: {len(self.pods)} pods ({gpu_pods} with GPUs, {shared} "
                f"sharing one); {spec}; {times}")


@dataclass(frozen=True)
class Gang:
    name: str
    tenant: str
    arrival: float
    duration: float
    replicas: int
    cpu: int
    memory: int
    gpus: int  # per replica
    priority: int
    models: tuple[str, ...] = ()  # accepted GPU models; empty: any


@dataclass(frozen=True)
class Trace:
    nodes: tuple[Node, ...]
    gangs: tuple[Gang, ...]
    rules: str


# -- reading ----------------------------------------------------------------------------

def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """The file's rows with their line numbers; a missing file or column is a TraceError."""
    try:
        handle = path.open(newline="")
    except OSError as error:
        raise TraceError(f"{path}: cannot open ({error.strerror or error})") from None
    with handle:
        reader = csv.DictReader(handle)
        try:
            header = reader.fieldnames or []
        except (csv.Error, UnicodeDecodeError) as error:
            raise TraceError(f"{path}:1: unreadable header ({error})") from None
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(f"{path}:1: no column {missing[0]!r} (the header has "
                             f"{', '.join(header) or 'nothing'})")
        count = 0
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except (csv.Error, UnicodeDecodeError) as error:
                raise TraceError(f"{path}:{reader.line_num}: unreadable row ({error})") from None
            count += 1
            if count > MAX_ROWS:
                raise TraceError(f"{path}:{reader.line_num}: more than {MAX_ROWS:,} rows")
            if None in row or any(v is None for v in row.values()):
                raise TraceError(f"{path}:{reader.line_num}: expected {len(header)} columns")
            yield reader.line_num, row


def _field(path: Path, line: int, row: dict[str, str]) -> Callable[..., int]:
    def integer(column: str, low: int, high: int, default: int | None = None) -> int:
        text = row.get(column, "")
        if text == "" and default is not None:
            return default
        try:
            value = int(text)
        except ValueError:
            raise TraceError(f"{path}:{line}: column {column!r}: {text!r} is not an "
                             "integer") from None
        if not low <= value <= high:
            raise TraceError(f"{path}:{line}: column {column!r}: {value} is outside "
                             f"[{low}, {high}]")
        return value
    return integer


def read_nodes(path: Path, inventory: float = 1.0) -> tuple[Node, ...]:
    """The node list, keeping every k-th node when ``inventory`` < 1."""
    every = max(1, round(1 / inventory)) if 0 < inventory < 1 else 1
    nodes = []
    for i, (line, row) in enumerate(_rows(path, ("sn", "cpu_milli", "memory_mib", "gpu",
                                                 "model"))):
        if i % every:
            continue
        value = _field(path, line, row)
        model = row["model"]
        if not MODEL.fullmatch(model):
            raise TraceError(f"{path}:{line}: column 'model': {model!r} is not a GPU model name")
        nodes.append(Node(row["sn"], value("cpu_milli", 0, 10**7),
                          value("memory_mib", 0, 2**32) * 2**20, value("gpu", 0, 64), model))
    if not nodes:
        raise TraceError(f"{path}: no nodes")
    return tuple(nodes)


def read_pods(path: Path) -> PodList:
    """One pod-list variant; columns it lacks get the defaults the module doc states."""
    pods = []
    timed = durations = constrained = False
    for index, (line, row) in enumerate(_rows(path, ("name", "cpu_milli", "memory_mib",
                                                     "num_gpu"))):
        if index == 0:
            timed = "creation_time" in row
            durations = timed and "deletion_time" in row
            constrained = "gpu_spec" in row
        value = _field(path, line, row)
        gpus = value("num_gpu", 0, 64)
        milli = value("gpu_milli", 0, 1000, default=1000) if gpus else 0
        if gpus and milli == 0:
            raise TraceError(f"{path}:{line}: column 'gpu_milli': 0 for a pod with "
                             f"{gpus} GPUs")
        if gpus > 1:
            milli = 1000  # only one-GPU pods share a GPU: several GPUs are whole ones
        models = tuple(sorted({m for m in row.get("gpu_spec", "").split("|") if m}))
        for model in models:
            if not MODEL.fullmatch(model):
                raise TraceError(f"{path}:{line}: column 'gpu_spec': {model!r} is not a GPU "
                                 "model name (expected models separated by '|')")
        created = float(value("creation_time", 0, 10**10)) if timed else float(index)
        duration = None
        if durations:
            deleted = value("deletion_time", 0, 10**10)
            started = value("scheduled_time", 0, 10**10, default=int(created))
            duration = max(1.0, deleted - float(started))
        pods.append(Pod(row["name"], value("cpu_milli", 0, 10**7),
                        value("memory_mib", 0, 2**32) * 2**20, gpus, milli, models,
                        row.get("qos", ""), created, duration))
    if not pods:
        raise TraceError(f"{path}: no pods")
    return PodList(path, tuple(pods), timed, durations, constrained)


def variants(directory: Path, extra: tuple[Path, ...] = ()) -> list[Path]:
    """Every pod-list variant in the trace folder (default first), then ``extra`` files."""
    found = sorted(directory.glob(POD_GLOB), key=lambda p: (p.name != DEFAULT_PODS, p.name))
    return found + [p for p in extra if p.resolve() not in {f.resolve() for f in found}]


# -- the replay's gangs -----------------------------------------------------------------

def load(directory: Path, *, pods: Path | None = None, tenants: int = 4, window: float = 10.0,
         max_gang: int = 8, limit: int | None = None, load_factor: float = 0.0,
         inventory: float = 1.0, tenant_seed: int = 0) -> Trace:
    nodes = read_nodes(directory / NODE_FILE, inventory)
    every = max(1, round(1 / inventory)) if 0 < inventory < 1 else 1
    pod_list = read_pods(pods or directory / DEFAULT_PODS)
    if not pod_list.durations:
        raise TraceError(f"{pod_list.path}: no creation_time and deletion_time columns: no run "
                         "times to replay")
    rows = sorted(pod_list.pods, key=lambda p: (p.created, p.name))
    if limit:
        rows = rows[:limit]
    gangs: list[Gang] = []
    current: list[Pod] = []

    def flush() -> None:
        if not current:
            return
        first = current[0]
        salted = f"{tenant_seed}:{first.name}" if tenant_seed else first.name
        tenant = int(hashlib.sha256(salted.encode()).hexdigest(), 16) % tenants
        gangs.append(Gang(first.name, f"tenant-{tenant}", first.created,
                          max(p.duration or 1.0 for p in current), len(current), first.cpu,
                          first.memory, first.gpus, PRIORITY.get(first.qos, 0), first.models))
        current.clear()

    for pod in rows:
        if current and (_shape(pod) != _shape(current[0]) or len(current) >= max_gang or
                        pod.created - current[0].created > window):
            flush()
        current.append(pod)
    flush()
    gangs, speedup = _compress(gangs, sum(n.gpus for n in nodes), load_factor)
    constrained = sum(1 for g in gangs if g.models)
    rules = (f"{len(nodes)} nodes (every {every}th of the inventory) dealt round-robin into "
             f"member clusters; {len(rows)} pods of {pod_list.path.name} "
             f"grouped into {len(gangs)} gangs (equal requests and GPU models, created within "
             f"{window:.0f}s, <= {max_gang} pods; {constrained} accept only some GPU models); "
             f"tenants by sha256({f'{tenant_seed}:' if tenant_seed else ''}name) mod "
             f"{tenants}; GPU shares as whole "
             f"GPUs; priority by qos" + (f"; arrivals {speedup:.1f}x faster (run times kept)"
                                         if speedup > 1 else ""))
    return Trace(nodes, tuple(gangs), rules)


def _compress(gangs: list[Gang], total_gpus: int, target: float) -> tuple[list[Gang], float]:
    """Speed arrivals up until the offered GPU-seconds are ``target`` times what the
    inventory can serve over the arrival span: the raw trace loads it far below 1%."""
    if not gangs or target <= 0:
        return gangs, 1.0
    first = min(g.arrival for g in gangs)
    span = max(g.arrival for g in gangs) - first
    if span <= 0 or not any(g.gpus for g in gangs):
        return gangs, 1.0

    def load(speedup: float) -> float:  # GPU load within the compressed arrival window
        window = span / speedup
        return sum(g.replicas * g.gpus * min(g.duration, window) for g in gangs) / (
            total_gpus * window)

    low, high = 1.0, 1e7
    if load(low) >= target:
        return gangs, 1.0
    for _ in range(60):  # load grows with the speed-up: bisect for the target
        mid = (low * high) ** 0.5
        low, high = (mid, high) if load(mid) < target else (low, mid)
    speedup = high
    return [Gang(g.name, g.tenant, first + (g.arrival - first) / speedup, g.duration, g.replicas,
                 g.cpu, g.memory, g.gpus, g.priority, g.models) for g in gangs], speedup


def _shape(pod: Pod) -> tuple[int, int, int, tuple[str, ...]]:
    return (pod.cpu, pod.memory, pod.gpus, pod.models)
