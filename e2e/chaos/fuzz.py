"""Seeded mutations of fleet's objects: the inputs of the fuzzer (``e2e.chaos.fuzz``) and of
the unit tests that push malformed jobs through the hub's adapters and the agent's reconcile.

Every object is an example from ``examples/`` or a template of a kind, with one to three
mutations at random paths: a value of the wrong type, a negative or huge number, a field
deleted or emptied, unicode, a 1 MiB string, random bytes, a duplicated list entry, a value
nested hundreds or thousands of levels deep (so deep that the objects need the recursion
limit ``fleet.nesting`` gives the hub: ``fuzzed`` raises it). The same seed gives the same
objects, so a failure replays from the seed the fuzzer prints.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import random
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fleet import nesting

Body = dict[str, Any]
Path_ = tuple[str | int, ...]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MIB = 1 << 20

HUGE_NUMBERS = (4611686018427387904, 2**63 - 1, 2**64, 10**30, 2**31, 10_001, 100_000)
HUGE_QUANTITIES = ("1e30", "1E", "2Ei", "1e999999999", "99999999999999999999", "1e18", "1.5e19")
UNICODE = ("ünïcödé", "名前", "🚀🔥", "\u202eevil", "a\u0000b", "ǅ" * 40, "é" * 300)
# Past fleet's bound, past Python's default recursion limit, and near what an API server
# stores (with the object's own levels and a review's envelope, under Go's 10,000).
DEEP_LEVELS = (70, 1_500, 9_000)
PATH_LEVELS = 32  # deeper than any field of the examples and templates


@dataclass(frozen=True)
class Mutation:
    kind: str  # the mutation class
    path: Path_

    def describe(self) -> str:
        return f"{self.kind} at {dotted(self.path)}"


@dataclass(frozen=True)
class Fuzzed:
    index: int
    source: str  # example file (and document) or template name
    body: Body
    mutations: tuple[Mutation, ...]

    def describe(self) -> str:
        return f"#{self.index} {self.source}: " + "; ".join(m.describe() for m in self.mutations)


def dotted(path: Path_) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _container(name: str, gpu: int = 0) -> Body:
    resources = {"limits": {"nvidia.com/gpu": gpu}} if gpu else {
        "requests": {"cpu": "100m", "memory": "64Mi"}}
    return {"name": name, "image": "busybox", "command": ["true"], "resources": resources}


def _template(name: str) -> Body:
    return {"metadata": {"annotations": {"fleet.sh/sim-duration": "1s"}},
            "spec": {"containers": [_container(name)]}}


def templates() -> dict[str, Body]:
    """One small valid object of every kind fleet serves on the hub."""
    return {
        "PyTorchJob": {
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure",
                           "template": _template("pytorch")},
                "Worker": {"replicas": 2, "template": _template("pytorch")}},
                "runPolicy": {"backoffLimit": 3, "activeDeadlineSeconds": 600,
                              "ttlSecondsAfterFinished": 60, "cleanPodPolicy": "All"}}},
        "TFJob": {
            "apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {},
            "spec": {"tfReplicaSpecs": {
                "Chief": {"replicas": 1, "template": _template("tensorflow")},
                "PS": {"replicas": 1, "template": _template("tensorflow")},
                "Worker": {"replicas": 2, "template": _template("tensorflow")}},
                "successPolicy": "AllWorkers"}},
        "JAXJob": {
            "apiVersion": "kubeflow.org/v1", "kind": "JAXJob", "metadata": {},
            "spec": {"jaxReplicaSpecs": {
                "Worker": {"replicas": 2, "template": _template("jax")}}}},
        "PaddleJob": {
            "apiVersion": "kubeflow.org/v1", "kind": "PaddleJob", "metadata": {},
            "spec": {"paddleReplicaSpecs": {
                "Master": {"replicas": 1, "template": _template("paddle")},
                "Worker": {"replicas": 2, "template": _template("paddle")}},
                "elasticPolicy": {"minReplicas": 1, "maxReplicas": 3}}},
        "XGBoostJob": {
            "apiVersion": "kubeflow.org/v1", "kind": "XGBoostJob", "metadata": {},
            "spec": {"xgbReplicaSpecs": {
                "Master": {"replicas": 1, "template": _template("xgboost")},
                "Worker": {"replicas": 2, "restartPolicy": "ExitCode",
                           "template": _template("xgboost")}}}},
        "KubeflowMPIJob": {
            "apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "metadata": {},
            "spec": {"slotsPerWorker": 1, "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": _template("launcher")},
                "Worker": {"replicas": 2, "template": _template("worker")}},
                "runPolicy": {"cleanPodPolicy": "Running"}}},
        "T9kMPIJob": {
            "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "MPIJob", "metadata": {},
            "spec": {"worker": {"replicas": 2, "extraMPIArgs": ["-N", "2"],
                                "cmd": ["./run", "1"], "template": _template("mpi-worker")},
                     "mca": {"btl": "^openib"}, "mpiHome": "/usr/local",
                     "ssh": {"sshdPath": "/usr/sbin/sshd"},
                     "runPolicy": {"cleanUpWorkers": True, "backoffLimit": 2},
                     "scheduler": {"t9kScheduler": {"queue": "default", "priority": 50}},
                     "runMode": {"debug": {"enabled": False, "replicaSpecs": [
                         {"type": "worker", "command": ["sleep", "inf"]}]}}}},
        "TensorFlowTrainingJob": {
            "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
            "metadata": {},
            "spec": {"replicaSpecs": [
                {"type": "chief", "replicas": 1, "template": _template("tensorflow")},
                {"type": "worker", "replicas": 2, "restartPolicy": "OnFailure",
                 "template": _template("tensorflow")}],
                "runPolicy": {"backoffLimit": 1, "cleanUpPolicy": "All"},
                "runMode": {"pause": {"enabled": False, "resumeSpecs": [
                    {"type": "worker", "skipInitContainer": True}]}}}},
        "JobSet": {
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {},
            "spec": {"replicatedJobs": [
                {"name": "driver", "template": {"spec": {"template": _template("main")}}},
                {"name": "workers", "replicas": 2, "dependsOn": [
                    {"name": "driver", "status": "Ready"}],
                 "template": {"spec": {"parallelism": 2, "completions": 2, "backoffLimit": 1,
                                       "template": _template("main")}}}],
                "successPolicy": {"operator": "All", "targetReplicatedJobs": ["driver"]},
                "failurePolicy": {"maxRestarts": 1}, "network": {"subdomain": "fuzz"}}},
        "TrainJob": {
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {},
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "trainer": {"numNodes": 2, "command": ["torchrun", "train.py"],
                                 "env": [{"name": "A", "value": "b"}],
                                 "resourcesPerNode": {"limits": {"cpu": "1"}}},
                     "runtimePatches": [{"manager": "fuzz", "trainingRuntimeSpec": {
                         "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
                             "spec": {"template": {"spec": {
                                 "nodeSelector": {"zone": "a"}}}}}}]}}}}]}},
        "PropagationPolicy": {
            "apiVersion": "policy.one.alibabacloud.com/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {},
            "spec": {"resourceSelectors": [{"apiVersion": "kubeflow.org/v1",
                                            "kind": "PyTorchJob", "name": "nothing-else"}],
                     "priority": 5,
                     "placement": {"clusterAffinity": {"clusterNames": ["member1"]},
                                   "clusterTolerations": [{"key": "k", "operator": "Exists",
                                                           "tolerationSeconds": 30}],
                                   "spreadConstraints": [{"spreadByField": "cluster",
                                                          "minGroups": 1, "maxGroups": 2}],
                                   "replicaScheduling": {"replicaSchedulingType": "Divided",
                                                         "customSchedulingType": "Gang"}},
                     "failover": {"application": {"decisionConditions": {
                         "tolerationSeconds": 60}, "purgeMode": "Immediately"}}}},
        "ClusterPropagationPolicy": {
            "apiVersion": "policy.one.alibabacloud.com/v1alpha1",
            "kind": "ClusterPropagationPolicy", "metadata": {},
            "spec": {"resourceSelectors": [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
                                            "namespace": "nowhere"}],
                     "placement": {"replicaScheduling": {
                         "replicaSchedulingType": "Divided",
                         "replicaDivisionPreference": "Weighted",
                         "weightPreference": {"staticWeightList": [
                             {"targetCluster": {"clusterNames": ["member1"]}, "weight": 2}]}}}}},
        "ElasticQuotaTree": {
            "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
            "metadata": {"namespace": "kube-system"},
            "spec": {"root": {"name": "root", "max": {"cpu": 100, "nvidia.com/gpu": 64},
                              "min": {"cpu": 100, "nvidia.com/gpu": 64},
                              "children": [{"name": "a", "min": {"cpu": 10},
                                            "max": {"cpu": 50}, "namespaces": ["fuzz-a"]}]}}},
    }


def sources() -> list[tuple[str, Body]]:
    """Every example document of a kind fleet serves (not HiveD's, nor Kubernetes' own
    PriorityClasses and Namespaces, whose decoding is not ours to test) and every template."""
    served = {(t["apiVersion"], t["kind"]) for t in templates().values()}
    out: list[tuple[str, Body]] = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        out += [(f"{path.name}[{i}]", d) for i, d in enumerate(docs)
                if (d.get("apiVersion"), d.get("kind")) in served]
    out += sorted(templates().items())
    return out


def paths(node: Any, prefix: Path_ = ()) -> Iterator[Path_]:
    """Every path below ``node`` (maps and lists included) up to ``PATH_LEVELS`` long, but
    apiVersion, kind and the object's identity, which the fuzzer sets itself (and not into
    a deep mutation's levels: listing each of them would take time square in its depth)."""
    if prefix in (("apiVersion",), ("kind",), ("metadata", "name"),
                  ("metadata", "namespace")) or len(prefix) > PATH_LEVELS:
        return
    if prefix:
        yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from paths(value, (*prefix, i))


def _get(body: Any, path: Path_) -> Any:
    for part in path:
        body = body[part]
    return body


def _random_bytes(rng: random.Random) -> str:
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))).decode("latin-1")


def nested_value(levels: int, innermost: Any) -> Any:
    """``innermost`` inside ``levels`` single-key maps (built without recursion)."""
    for _ in range(levels):
        innermost = {"a": innermost}
    return innermost


def _wrong_type(rng: random.Random, value: Any) -> Any:
    choices: list[Any] = ["text", 7, -1.5, True, None, ["a", 1], {"k": "v"}]
    return rng.choice([c for c in choices if type(c) is not type(value)])


def mutate_once(rng: random.Random, body: Body) -> Mutation:
    """One mutation of ``body`` in place, at a random path."""
    candidates = list(paths(body))
    if not candidates:
        return Mutation("none", ())
    path = rng.choice(candidates)
    parent, last = _get(body, path[:-1]), path[-1]
    value = parent[last]
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    classes = ["wrong-type", "delete", "empty", "unicode", "huge-string", "random-bytes",
               "huge-number", "negative", "huge-quantity", "duplicate", "unknown-field", "deep"]
    weights = [3, 3, 2, 1, 1, 1, 3 + 6 * numeric, 2 + 6 * numeric, 2, 1, 1, 1]
    kind = rng.choices(classes, weights)[0]
    if kind == "wrong-type":
        parent[last] = _wrong_type(rng, value)
    elif kind == "delete":
        del parent[last]
    elif kind == "empty":
        parent[last] = type(value)() if isinstance(value, str | list | dict) else 0
    elif kind == "unicode":
        parent[last] = rng.choice(UNICODE)
    elif kind == "huge-string":
        parent[last] = "x" * MIB
    elif kind == "random-bytes":
        parent[last] = _random_bytes(rng)
    elif kind == "huge-number":
        parent[last] = rng.choice(HUGE_NUMBERS)
    elif kind == "negative":
        parent[last] = -abs(value) if numeric and value else -rng.choice((1, 5, 2**40))
    elif kind == "huge-quantity":
        parent[last] = rng.choice(HUGE_QUANTITIES)
    elif kind == "deep":
        parent[last] = nested_value(rng.choice(DEEP_LEVELS), value)
    elif kind == "duplicate":
        if isinstance(value, list) and value:
            value.append(copy.deepcopy(rng.choice(value)))
        elif isinstance(value, dict):
            value[rng.choice(("Worker", "Chief", "worker", "x"))] = copy.deepcopy(
                next(iter(value.values()), {}))
        else:
            parent[last] = [value, value]
    elif isinstance(value, dict):
        value[rng.choice(("extra", "replicas", "type", "command"))] = _wrong_type(rng, None)
    else:
        parent[last] = {"unexpected": value}
    return Mutation(kind, path)


def fuzzed(seed: int, count: int, *, name_prefix: str = "fuzz",
           namespace: str = "fuzz") -> Iterator[Fuzzed]:
    """``count`` mutated objects, the same for the same seed; sources taken in turn."""
    nesting.allow_api_depth()  # walking, copying and sending the deepest of them
    rng = random.Random(seed)
    pool = sources()
    for index in range(count):
        source, original = pool[index % len(pool)]
        body = copy.deepcopy(original)
        body.setdefault("metadata", {})
        mutations = tuple(mutate_once(rng, body) for _ in range(rng.choice((1, 1, 2, 3))))
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            meta = body["metadata"] = {}
        meta["name"] = f"{name_prefix}-{index}"
        if body.get("kind") == "ElasticQuotaTree":
            meta.setdefault("namespace", "kube-system")
        elif body.get("kind") != "ClusterPropagationPolicy":
            meta["namespace"] = namespace
        yield Fuzzed(index, source, body, mutations)


# -- applying them for real ---------------------------------------------------------------

JOB_KINDS = {("kubeflow.org/v1", "PyTorchJob"), ("kubeflow.org/v1", "TFJob"),
             ("kubeflow.org/v1", "MPIJob"), ("kubeflow.org/v1", "JAXJob"),
             ("kubeflow.org/v1", "PaddleJob"), ("kubeflow.org/v1", "XGBoostJob"),
             ("batch.tensorstack.dev/v1beta1", "MPIJob"),
             ("batch.tensorstack.dev/v1beta1", "TensorFlowTrainingJob")}
# A field path in the API server's or the webhook's message: spec.x, spec[...], metadata.y.
FIELD_PATH = re.compile(r"\b(spec|metadata)(\.[A-Za-z]|\[|:)")
# The API server refuses some requests as a whole, before any field is read: three 1 MiB
# strings exceed its request limit, two deep mutations its JSON decoder's 10,000 levels.
WHOLE_REQUEST = ("Request entity too large", "exceeded max depth")
NAMESPACE = "fuzz"
POLICY = "fuzz-all"  # sends every job in the fuzz namespace to the members


@dataclass
class Report:
    seed: int
    count: int
    rejected: int = 0
    accepted: int = 0
    handled: int = 0  # accepted jobs that showed a condition or phase within the bound
    unnamed: list[str] = field(default_factory=list)  # rejections naming no field
    unhandled: list[str] = field(default_factory=list)  # accepted jobs that showed nothing
    errors: list[str] = field(default_factory=list)  # API errors other than rejections
    tracebacks: list[str] = field(default_factory=list)
    peak_rss_mib: dict[str, float] = field(default_factory=dict)
    over_rss: list[str] = field(default_factory=list)
    final_job: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not (self.unnamed or self.unhandled or self.errors or self.tracebacks
                    or self.over_rss) and self.final_job == "Succeeded"

    def summary(self) -> str:
        lines = [
            f"fuzz seed {self.seed}: {self.count} objects in {self.seconds:.0f}s: "
            f"{self.rejected} rejected, {self.accepted} accepted ({self.handled} jobs handled)",
            f"peak RSS MiB: {json.dumps(self.peak_rss_mib, sort_keys=True)}",
            f"valid job afterwards: {self.final_job or 'not run'}",
        ]
        for title, items in (("rejected naming no field", self.unnamed),
                             ("accepted jobs without a condition", self.unhandled),
                             ("API errors", self.errors), ("tracebacks in logs", self.tracebacks),
                             ("memory over the bound", self.over_rss)):
            if items:
                lines.append(f"{title} ({len(items)}):")
                lines += [f"  {item[:600]}" for item in items[:10]]
        lines.append("OK" if self.ok else f"FAILED (replay: --seed {self.seed} "
                                           f"--count {self.count})")
        return "\n".join(lines)


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` from /proc (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class LogWatch:
    """New ``Traceback`` lines in the hub's and agents' logs since the last look."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.offsets: dict[Path, int] = {}

    def new_tracebacks(self) -> list[str]:
        found = []
        from e2e.localfleet import component_log

        for path in sorted(self.logs.glob("*.log")):
            if not component_log(path.name):
                continue
            with path.open("rb") as handle:
                handle.seek(self.offsets.get(path, 0))
                text = handle.read().decode(errors="replace")
                self.offsets[path] = handle.tell()
            for line in text.splitlines():
                if "Traceback" in line:
                    found.append(f"{path.name}: {line[:400]}")
        return found


def _policy() -> Body:
    kinds = sorted(JOB_KINDS)
    return {"apiVersion": "policy.one.alibabacloud.com/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": POLICY, "namespace": NAMESPACE},
            "spec": {"resourceSelectors": [{"apiVersion": a, "kind": k} for a, k in kinds],
                     "priority": -1,  # any fuzzed policy that matches wins, as it should
                     "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided",
                                                         "customSchedulingType": "Gang"}}}}


def _shown(body: Body) -> bool:
    """A job shows what happens to it: a condition or a phase in its status."""
    status = body.get("status") or {}
    return bool(status.get("conditions") or status.get("phase"))


class Fuzzer:
    """Applies fuzzed objects to a local fleet's hub in batches and checks each outcome, the
    controllers' logs and their memory (see :func:`run`)."""

    def __init__(self, fleet: Any, report: Report, *, settle_seconds: float,
                 rss_bound_mib: float) -> None:
        from fleet.clients import resources

        self.fleet, self.report = fleet, report
        self.hub = fleet.client("hub")
        self.r = resources
        self.settle_seconds, self.rss_bound_mib = settle_seconds, rss_bound_mib
        self.logs = LogWatch(fleet.workdir / "logs")
        self.logs.new_tracebacks()  # what earlier tests logged is theirs

    def prepare(self, timeout: float = 180) -> None:
        """The fuzz namespaces and policy, once every member reports ready nodes (else no
        accepted job would reach an agent, and the run would prove nothing about them)."""
        deadline = time.monotonic() + timeout
        while True:
            members, _ = self.hub.list(self.r.MEMBERCLUSTERS)
            ready = {m["metadata"]["name"]: (m.get("status") or {}).get("readyNodes") or 0
                     for m in members}
            if ready and all(ready.values()):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"members without ready nodes after {timeout:.0f}s: {ready}")
            time.sleep(1)
        for namespace in (NAMESPACE, "fuzz-a"):
            if self.hub.get_or_none(self.r.NAMESPACES, namespace) is None:
                self.hub.create(self.r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": namespace}})
        self.hub.apply(self.r.PROPAGATIONPOLICIES, _policy(), field_manager="fuzz")

    def create(self, item: Fuzzed) -> tuple[Fuzzed, Body | None, str]:
        """The object as created, or the API server's message ("!..." for a failure that is
        not a rejection)."""
        from fleet.clients import errors

        resource = self.r.for_kind(item.body["apiVersion"], item.body["kind"])
        try:
            return item, self.hub.create(resource, item.body), ""
        except errors.ApiError as exc:
            if exc.status in (400, 403, 409, 413, 422):
                return item, None, exc.message
            return item, None, f"!{exc}"

    def delete(self, body: Body) -> None:
        resource = self.r.for_kind(body["apiVersion"], body["kind"])
        self.hub.delete(resource, body["metadata"]["name"], body["metadata"].get("namespace"))

    def classify(self, results: Sequence[tuple[Fuzzed, Body | None, str]]
                 ) -> list[tuple[Fuzzed, Body]]:
        accepted = []
        for item, created, message in results:
            if created is not None:
                self.report.accepted += 1
                accepted.append((item, created))
            elif message.startswith("!"):
                self.report.errors.append(f"{item.describe()}: {message[1:]}")
            else:
                self.report.rejected += 1
                if not (FIELD_PATH.search(message)
                        or any(whole in message for whole in WHOLE_REQUEST)):
                    self.report.unnamed.append(f"{item.describe()}: {message}")
        return accepted

    def await_shown(self, accepted: Sequence[tuple[Fuzzed, Body]]) -> None:
        """Every accepted job shows a condition or phase within ``settle_seconds``."""
        waiting = {b["metadata"]["uid"]: (i, b) for i, b in accepted
                   if (b["apiVersion"], b["kind"]) in JOB_KINDS}
        deadline = time.monotonic() + self.settle_seconds
        while waiting and time.monotonic() < deadline:
            for uid, (_, body) in list(waiting.items()):
                resource = self.r.for_kind(body["apiVersion"], body["kind"])
                current = self.hub.get_or_none(resource, body["metadata"]["name"], NAMESPACE)
                if current is None or current["metadata"]["uid"] != uid or _shown(current):
                    self.report.handled += 1
                    del waiting[uid]
            if waiting:
                time.sleep(0.5)
        self.report.unhandled += [f"{item.describe()}: status {body.get('status')}"
                                  for item, body in waiting.values()]

    def check_processes(self) -> None:
        for name, pid in self.fleet.component_pids().items():
            if not name.startswith(("hub", "agent")):
                continue
            mib = rss_mib(pid)
            peak = self.report.peak_rss_mib
            peak[name] = round(max(peak.get(name, 0), mib), 1)
            if mib > self.rss_bound_mib:
                self.report.over_rss.append(f"{name}: {mib:.0f} MiB > "
                                            f"{self.rss_bound_mib:.0f} MiB")
        self.report.tracebacks += self.logs.new_tracebacks()


def run(fleet: Any, seed: int, count: int, *, batch: int = 50, settle_seconds: float = 60,
        rss_bound_mib: float = 600, say: Any = print) -> Report:
    """Apply ``count`` fuzzed objects to ``fleet``'s hub in batches of ``batch`` (jobs go on
    to the members), check each outcome, the controllers' logs and memory, delete what was
    accepted; then run one valid PyTorchJob to Succeeded."""
    from concurrent.futures import ThreadPoolExecutor

    report = Report(seed, count)
    started = time.monotonic()
    fuzz = Fuzzer(fleet, report, settle_seconds=settle_seconds, rss_bound_mib=rss_bound_mib)
    fuzz.prepare()
    say(f"fuzz: seed {seed}, {count} objects (replay: python -m e2e.chaos.fuzz --seed {seed} "
        f"--count {count})")
    items = fuzzed(seed, count, namespace=NAMESPACE)  # lazily: some hold 1 MiB strings
    with ThreadPoolExecutor(8, thread_name_prefix="fuzz") as pool:
        for start in range(0, count, batch):
            chunk = list(itertools.islice(items, batch))
            accepted = fuzz.classify(list(pool.map(fuzz.create, chunk)))
            fuzz.await_shown(accepted)
            list(pool.map(fuzz.delete, [b for _, b in accepted]))
            fuzz.check_processes()
            say(f"fuzz: {start + len(chunk)}/{count} applied, {report.rejected} rejected, "
                f"{report.accepted} accepted, {len(report.tracebacks)} tracebacks, "
                f"RSS MiB {json.dumps(report.peak_rss_mib, sort_keys=True)}")
    report.final_job = _valid_job_runs(fleet, say)
    fuzz.check_processes()
    report.seconds = time.monotonic() - started
    return report


def _valid_job_runs(fleet: Any, say: Any, timeout: float = 240) -> str:
    """The seed's PyTorchJob, applied after the fuzzing, runs to Succeeded: its state."""
    from fleet.clients import resources as r

    hub = fleet.client("hub")
    job = next(d for d in yaml.safe_load_all((EXAMPLES / "pytorchjob.yaml").read_text()) if d)
    job["metadata"] = {"name": "fuzz-valid", "namespace": NAMESPACE}
    hub.apply(r.PYTORCHJOBS, job, field_manager="fuzz")
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        body = hub.get(r.PYTORCHJOBS, "fuzz-valid", NAMESPACE)
        conditions = [c["type"] for c in (body.get("status") or {}).get("conditions") or []
                      if c.get("status") == "True"]
        state = conditions[-1] if conditions else ""
        if state in ("Succeeded", "Failed"):
            break
        time.sleep(1)
    say(f"fuzz: the valid PyTorchJob afterwards: {state or 'no state'}")
    hub.delete(r.PYTORCHJOBS, "fuzz-valid", NAMESPACE)
    return state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=None, help="replays a run (default random)")
    parser.add_argument("--count", type=int, default=500, help="objects to apply")
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--rss-bound-mib", type=float, default=600)
    parser.add_argument("--workdir", type=Path, default=None,
                        help="use the local fleet running there (default: start one)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"fuzz seed: {seed}", flush=True)
    from e2e.localfleet import LocalFleet

    if args.workdir is not None:
        report = run(LocalFleet(args.workdir), seed, args.count, batch=args.batch,
                     rss_bound_mib=args.rss_bound_mib)
    else:
        with tempfile.TemporaryDirectory(prefix="fleet-fuzz-") as tmp:
            fleet = LocalFleet(Path(tmp))
            try:
                fleet.up()
                report = run(fleet, seed, args.count, batch=args.batch,
                             rss_bound_mib=args.rss_bound_mib)
            finally:
                fleet.down()
    print(report.summary(), flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
