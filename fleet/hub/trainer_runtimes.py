"""The runtime a new TrainJob names, found in the hub's cache and written down as its snapshot.

Trainer v2.3 copies a TrainJob's runtime into a ConfigMap on its first reconcile (KEP-2599),
so that editing or deleting the runtime changes no job made from it. The hub's webhook does
the same at creation, into the TrainJob's ``fleet.sh/runtime`` annotation: the hub, its
simulator and the members then resolve the TrainJob from the job alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from fleet.api.trainer import (
    CLUSTER_RUNTIME,
    NAMESPACED_RUNTIME,
    TRAINER_GROUP,
    TRAINER_V1ALPHA1,
)
from fleet.clients.resources import CLUSTERTRAININGRUNTIMES, TRAININGRUNTIMES, Resource

Key = tuple[str, str, str]  # the cache's: (apiVersion/kind, namespace, name)
# A runtime's snapshot rides in an annotation of every TrainJob made from it (Kubernetes
# allows 256 KiB for all of them together; Trainer's own runtimes are a few KiB).
MAX_SNAPSHOT_BYTES = 128 * 1024


class RuntimeMissing(LookupError):
    """The runtime a TrainJob names does not exist (or is not one fleet can run)."""


class RuntimeRef(NamedTuple):
    """A TrainJob's runtime: where the hub's cache keeps it and where the API serves it."""

    kind: str
    namespace: str  # "" for a ClusterTrainingRuntime
    name: str

    @property
    def key(self) -> Key:
        return f"{TRAINER_V1ALPHA1}/{self.kind}", self.namespace, self.name

    @property
    def resource(self) -> Resource:
        return CLUSTERTRAININGRUNTIMES if self.kind == CLUSTER_RUNTIME else TRAININGRUNTIMES


def runtime_ref(trainjob: Mapping[str, Any]) -> RuntimeRef:
    """Where the TrainJob's runtime is (raises RuntimeMissing for a kind or group Trainer
    does not serve: its controller fails such a job with ``TrainingRuntimeNotSupported``)."""
    ref = (trainjob.get("spec") or {}).get("runtimeRef") or {}
    kind = ref.get("kind") or CLUSTER_RUNTIME
    group = ref.get("apiGroup") or TRAINER_GROUP
    if group != TRAINER_GROUP or kind not in (CLUSTER_RUNTIME, NAMESPACED_RUNTIME):
        raise RuntimeMissing(f"spec.runtimeRef: unsupported runtime: {kind}.{group}")
    namespace = ((trainjob.get("metadata") or {}).get("namespace") or "") \
        if kind == NAMESPACED_RUNTIME else ""
    return RuntimeRef(kind, namespace, str(ref.get("name") or ""))


def snapshot(trainjob: Mapping[str, Any],
             lookup: Callable[[RuntimeRef], Mapping[str, Any] | None]) -> str:
    """The annotation's value: the runtime's kind, name and spec, as JSON."""
    ref = runtime_ref(trainjob)
    runtime = lookup(ref)
    kind, namespace, name = ref
    if runtime is None:
        where = f" in namespace {namespace}" if namespace else ""
        raise RuntimeMissing(f'spec.runtimeRef.name: {kind} "{name}" not found{where}')
    text = json.dumps({"kind": kind, "name": name, "spec": runtime.get("spec") or {}},
                      separators=(",", ":"), sort_keys=True)
    if len(text) > MAX_SNAPSHOT_BYTES:
        raise RuntimeMissing(f"spec.runtimeRef.name: {kind} {name} is {len(text)} bytes as "
                             f"JSON, more than the {MAX_SNAPSHOT_BYTES} a TrainJob can carry")
    return text
