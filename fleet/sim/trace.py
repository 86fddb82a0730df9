"""Reading a trace in the Alibaba GPU 2023 (openb) format, and deriving what it lacks.

Deterministic rules (printed with every report):
* nodes are dealt round-robin, in file order, into ``clusters`` member clusters;
* a pod's run time is ``deletion_time - scheduled_time`` (``- creation_time`` for pods the
  production scheduler never placed); GPU shares (``gpu_milli`` < 1000) count as whole GPUs;
* a gang is a run of pods in creation order with equal requests created within ``window``
  seconds of its first pod, at most ``max_gang`` pods; it lasts as long as its longest pod;
* a gang's tenant is ``sha256(first pod name) mod tenants``;
* priority by qos: Guaranteed 3, LS 2, Burstable 1, BE 0.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from pathlib import Path

PRIORITY = {"Guaranteed": 3, "LS": 2, "Burstable": 1, "BE": 0}


@dataclass(frozen=True)
class Node:
    name: str
    cpu: int  # millicores
    memory: int  # bytes
    gpus: int
    model: str


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


@dataclass(frozen=True)
class Trace:
    nodes: tuple[Node, ...]
    gangs: tuple[Gang, ...]
    rules: str


def load(directory: Path, *, tenants: int = 4, window: float = 10.0, max_gang: int = 8,
         limit: int | None = None, load_factor: float = 0.0, inventory: float = 1.0) -> Trace:
    every = max(1, round(1 / inventory)) if inventory < 1 else 1
    nodes = tuple(
        Node(row["sn"], int(row["cpu_milli"]), int(row["memory_mib"]) * 2**20, int(row["gpu"]),
             row["model"])
        for i, row in enumerate(csv.DictReader((directory / "openb_node_list_gpu_node.csv").open()))
        if i % every == 0)
    rows = list(csv.DictReader((directory / "openb_pod_list_default.csv").open()))
    rows.sort(key=lambda r: (int(r["creation_time"]), r["name"]))
    if limit:
        rows = rows[:limit]
    gangs: list[Gang] = []
    current: list[dict[str, str]] = []

    def flush() -> None:
        if not current:
            return
        first = current[0]
        durations = [_duration(r) for r in current]
        tenant = int(hashlib.sha256(first["name"].encode()).hexdigest(), 16) % tenants
        gangs.append(Gang(first["name"], f"tenant-{tenant}", float(first["creation_time"]),
                          max(durations), len(current), int(first["cpu_milli"]),
                          int(first["memory_mib"]) * 2**20, int(first["num_gpu"]),
                          PRIORITY.get(first["qos"], 0)))
        current.clear()

    for row in rows:
        if current and (_shape(row) != _shape(current[0]) or len(current) >= max_gang or
                        float(row["creation_time"]) - float(current[0]["creation_time"]) > window):
            flush()
        current.append(row)
    flush()
    gangs, speedup = _compress(gangs, sum(n.gpus for n in nodes), load_factor)
    rules = (f"{len(nodes)} nodes (every {every}th of the inventory) dealt round-robin into "
             f"member clusters; {len(rows)} pods "
             f"grouped into {len(gangs)} gangs (equal requests, created within {window:.0f}s, "
             f"<= {max_gang} pods); tenants by sha256(name) mod {tenants}; GPU shares as whole "
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
                 g.cpu, g.memory, g.gpus, g.priority) for g in gangs], speedup


def _shape(row: dict[str, str]) -> tuple[str, str, str]:
    return (row["cpu_milli"], row["memory_mib"], row["num_gpu"])


def _duration(row: dict[str, str]) -> float:
    start = row["scheduled_time"] or row["creation_time"]
    return max(1.0, float(row["deletion_time"]) - float(start))
