"""Simulated members for the scale bench: one process stands in for many agents.

Each simulated member has 200 nodes of mixed shapes but no API server. What the hub sees of it
is written by the agent's own code: its :class:`~member_agent.reporter.Reporter` renews the
heartbeat Lease and applies the grouped capacity report, and its Work status reporter
(:class:`~member_agent.works.status.StatusReporter`) builds and writes the Works' status. The
member's job controller is the agent's pure reconcile
(``member_agent.controllers.reconcile.decide``); only the member's scheduler and kubelet are
simulated here: a pod is bound to the first node it fits, runs after ``START_DELAY`` and exits
0 after the job's ``fleet.sh/sim-duration``.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import random
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from fleet.api.protocol import AGENT_FINALIZER
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.informer import DELETED, Informer
from fleet.clients.kube import Kube
from fleet.kinds.base import pod_request
from member_agent.controllers.kind import Observed
from member_agent.controllers.kubeflow import PYTORCH
from member_agent.controllers.reconcile import decide
from member_agent.controllers.runtime import key_of, observe
from member_agent.reporter import Reporter
from member_agent.state import MemberState
from member_agent.works.sync import WorkSync

log = logging.getLogger(__name__)
Body = dict[str, Any]
GPU = "nvidia.com/gpu"
START_DELAY = 1.0  # seconds from a Work's arrival to its pods running
# (GPU model, GPUs, cores, GiB) of the node shapes a member mixes
SHAPES = (("NVIDIA-A100-SXM4-80GB", 8, 96, 768), ("NVIDIA-H100-80GB-HBM3", 8, 192, 2048),
          ("NVIDIA-A10", 4, 64, 256), ("NVIDIA-L40S", 2, 48, 384), ("Tesla-T4", 1, 32, 128),
          ("", 0, 64, 256))


class CountingKube(Kube):
    """The hub client of the load generator, counting its own writes by resource, so that
    the hub's writes can be told from the simulated agents' in the API server's counts."""

    def __init__(self, kubeconfig: str, **kwargs: Any) -> None:
        super().__init__(kubeconfig, **kwargs)
        self.writes: dict[str, int] = {}
        self._count_lock = threading.Lock()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        if method in ("POST", "PUT", "PATCH", "DELETE"):
            with self._count_lock:
                key = resource_of(path)
                self.writes[key] = self.writes.get(key, 0) + 1
        return super()._call(method, path, **kwargs)


def resource_of(path: str) -> str:
    """``works/status`` of ``/apis/fleet.sh/v1alpha1/namespaces/n/works/w/status``: the
    resource and subresource as ``apiserver_request_total`` labels them."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    parts = parts[2:] if parts[0] == "api" else parts[3:]
    if len(parts) > 2 and parts[0] == "namespaces":
        parts = parts[2:]
    return "/".join(parts[:1] + parts[2:3])


class MemberAPI:
    """What the agent's reporter asks of its member's API server: health and version."""

    def raw(self, method: str, path: str, body: object = None) -> Body:
        return {"gitVersion": "v1.31.0-simulated"} if path == "/version" else {}


Shape = tuple[str, int, int, int]


def nodes_of(cluster: str, count: int, rng: random.Random,
             shapes: tuple[Shape, ...] = SHAPES) -> list[Body]:
    """``count`` Ready nodes; each member favours some shapes (weights drawn per member)."""
    weights = [rng.random() ** 2 + 0.05 for _ in shapes]
    nodes = []
    for i in range(count):
        model, gpus, cpu, memory = rng.choices(shapes, weights)[0]
        labels = {"kubernetes.io/hostname": f"{cluster}-n{i}",
                  "topology.kubernetes.io/zone": f"zone-{i % 3}"}
        amounts = {"cpu": str(cpu), "memory": f"{memory}Gi", "pods": "110"}
        if gpus:
            labels["nvidia.com/gpu.product"] = model
            amounts[GPU] = str(gpus)
        nodes.append({"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": f"{cluster}-n{i}", "labels": labels},
                      "status": {"allocatable": amounts, "capacity": amounts,
                                 "conditions": [{"type": "Ready", "status": "True"}]}})
    return nodes


def seconds(duration: str, default: float = 30.0) -> float:
    """A Go duration such as ``45s``, ``1m30s`` or ``500ms``."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    parts = re.findall(r"([0-9.]+)(ms|h|m|s)", duration or "")
    return sum(float(n) * units[u] for n, u in parts) if parts else default


def hub_job(work: Body) -> str:
    """The hub job a Work carries a share of, as ``namespace/name``."""
    job = work["spec"]["job"]
    return f"{job.get('namespace')}/{job.get('name')}"


def member_uid(work: Body) -> str:
    """The uid of the member job a Work made (each placement's job is a new object)."""
    return f"member-{work['metadata']['uid']}"


def stamp(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Member:
    name: str
    hub: Kube
    nodes: list[Body]
    state: MemberState = field(default_factory=MemberState)

    def __post_init__(self) -> None:
        api = cast(Kube, MemberAPI())
        self.reporter = Reporter(self.hub, api, self.name, self.state)
        self.sync = WorkSync(self.hub, api, self.name, self.state)
        self.free: dict[str, dict[str, int]] = {}
        for node in self.nodes:
            self.state.put_node(node, deleted=False)
            self.free[node["metadata"]["name"]] = dict(pod_request(
                {"spec": {"containers": [{"resources": {"requests": node["status"][
                    "allocatable"]}}]}}))
        self.state.synced.set()
        self.lock = threading.Lock()  # the nodes' free capacity
        # A job's changes one at a time, as a controller's work queue runs a key: a job's
        # start and its end (the timeline runs them on a pool) reconciled side by side,
        # the older status could land last, and the job never finished.
        self.jobs = threading.RLock()
        self.stopping: set[str] = set()  # member job uids whose Work is being purged
        # Member job uids whose Work was purged: never applied after (the timeline's pool
        # may run a Work's first sight after its deletion's, which the agent, applying
        # only a Work it holds, never does; the job then ran here with no Work to say so,
        # and the hub ran it again)
        self.purged: set[str] = set()

    # -- the member's job controller, scheduler and kubelet ---------------------------
    def apply(self, work: Body) -> float | None:
        """The agent applied the Work: the member job exists and its pods are created and
        bound; returns how long the job runs (None: the Work is purged already)."""
        with self.jobs:
            if member_uid(work) in self.purged:
                return None
            return self._apply(work)

    def _apply(self, work: Body) -> float | None:
        # Copies of the levels written to, not deep ones: a deep copy of each manifest and
        # pod was the load generator's largest cost (16 % of its CPU), which Kueue's runner,
        # marking workloads finished, does not pay.
        shipped = work["spec"]["manifests"][0]
        manifest = {**shipped, "metadata": {**shipped["metadata"]}}
        manifest["metadata"]["uid"] = member_uid(work)
        manifest["metadata"]["creationTimestamp"] = stamp(time.time())
        self.sync.book.record(work)
        self.state.stores.put_job(key_of(manifest), manifest)
        pods = self.reconcile(manifest)
        for pod in pods:
            self.bind(pod)
        self.reconcile(manifest)
        template = next(iter(manifest["spec"]["pytorchReplicaSpecs"].values()))["template"]
        annotations = (template.get("metadata") or {}).get("annotations") or {}
        return seconds(annotations.get("fleet.sh/sim-duration", "30s"))

    def reconcile(self, job: Body) -> list[Body]:
        """One pass of the agent's PyTorchJob controller; returns the pods it creates."""
        key = key_of(job)
        current, pods = self.state.stores.read(key)
        if current is None:
            return []
        decision = decide(PYTORCH, current, [observe(p, PYTORCH) for p in pods],
                          Observed(datetime.now(UTC)))
        if decision.status is not None:
            self.state.stores.put_job(key, {**current, "status": decision.status})
        created = []
        for made in decision.create:
            pod = {**made, "metadata": {**made["metadata"]}, "spec": {**made["spec"]}}
            pod["metadata"]["uid"] = f"{job['metadata']['uid']}-{pod['metadata']['name']}"
            pod["metadata"]["creationTimestamp"] = stamp(time.time())
            pod["status"] = {"phase": "Pending"}
            created.append(pod)
            self.put_pod(pod)
        return created

    def put_pod(self, pod: Body) -> None:
        self.state.put_pod(pod, deleted=False)

    def bind(self, pod: Body) -> None:
        """First fit, as a simple scheduler would; an unplaceable pod stays Pending."""
        need = dict(pod_request(pod))
        with self.lock:
            for node, free in self.free.items():
                if all(free.get(k, 0) >= v for k, v in need.items()):
                    for k, v in need.items():
                        free[k] -= v
                    pod["spec"]["nodeName"] = node
                    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
                    break
            else:
                pod["status"]["conditions"] = [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "0/200 nodes are available: insufficient resources"}]
        self.put_pod(pod)

    def run_pods(self, job: Body, phase: str) -> None:
        """The job's bound pods start (``Running``) or exit 0 (``Succeeded``)."""
        with self.jobs:
            self._run_pods(job, phase)

    def _run_pods(self, job: Body, phase: str) -> None:
        key = key_of(job)
        _, pods = self.state.stores.read(key)
        now = stamp(time.time())
        for seen in pods:
            if not seen["spec"].get("nodeName"):
                continue
            pod = {**seen}  # (its status is replaced whole)
            container = pod["spec"]["containers"][0]["name"]
            if phase == "Running":
                pod["status"] = {**pod["status"], "phase": "Running", "startTime": now,
                                 "conditions": [{"type": "PodScheduled", "status": "True"},
                                                {"type": "Ready", "status": "True"}],
                                 "containerStatuses": [{"name": container, "ready": True,
                                                        "restartCount": 0,
                                                        "state": {"running": {
                                                            "startedAt": now}}}]}
            else:
                pod["status"] = {**pod["status"], "phase": "Succeeded",
                                 "conditions": [{"type": "PodScheduled", "status": "True"},
                                                {"type": "Ready", "status": "False"}],
                                 "containerStatuses": [{"name": container, "ready": False,
                                                        "restartCount": 0,
                                                        "state": {"terminated": {
                                                            "exitCode": 0,
                                                            "finishedAt": now}}}]}
                with self.lock:
                    free = self.free[pod["spec"]["nodeName"]]
                    for k, v in pod_request(pod).items():
                        free[k] += v
            self.put_pod(pod)
        current, _ = self.state.stores.read(key)
        if current is not None:
            self.reconcile(current)

    def forget(self, work: Body) -> None:
        """The hub deleted the Work: its last state is reported (as the agent does), then
        the member job goes and the agent's finalizer with it."""
        with self.jobs:  # from now on its pods never end well (the job is being stopped)
            self.stopping.add(member_uid(work))
        self.sync.status.report([work["metadata"]["name"]])
        with self.jobs:
            self._purge(work)
            self.purged.add(member_uid(work))
            self.stopping.discard(member_uid(work))
        finalizers = [f for f in work["metadata"].get("finalizers") or []
                      if f != AGENT_FINALIZER]
        try:  # (not under the lock: the other jobs' starts and ends do not wait for it)
            self.hub.patch(r.WORKS, work["metadata"]["name"], {"metadata": {
                "resourceVersion": work["metadata"]["resourceVersion"],
                "finalizers": finalizers}}, work["metadata"]["namespace"])
        except (errors.NotFound, errors.Conflict):
            pass

    def _purge(self, work: Body) -> None:
        name = work["metadata"]["name"]
        manifest = work["spec"]["manifests"][0]
        key = key_of(manifest)
        current, pods = self.state.stores.read(key)
        ours = current is not None and current["metadata"]["uid"] == member_uid(work)
        for pod in pods if ours else ():  # (not a later placement's: it came first)
            if pod["spec"].get("nodeName") and pod["status"].get("phase") != "Succeeded":
                with self.lock:
                    free = self.free[pod["spec"]["nodeName"]]
                    for k, v in pod_request(pod).items():
                        free[k] += v
            self.state.put_pod(pod, deleted=True)
        if ours:
            self.state.stores.put_job(key, None)
        self.sync.book.drop(name)
        self.sync.status.forget(name, wholly=True)


class Timeline:
    """Callbacks at given times, run by a small pool (one thread keeps the clock)."""

    def __init__(self, workers: int) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="sim")

    def at(self, when: float, action: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._seq), action))
            self._cond.notify()

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            with self._cond:
                while self._heap and self._heap[0][0] <= time.monotonic():
                    _, _, action = heapq.heappop(self._heap)
                    self.pool.submit(_guarded, action)
                wait = self._heap[0][0] - time.monotonic() if self._heap else 0.5
                self._cond.wait(min(0.5, max(0.0, wait)))


def _guarded(action: Callable[[], None]) -> None:
    try:
        action()
    except Exception:  # one simulated member's failure must not stop the others
        log.exception("simulated member action failed")


class Fleet:
    """Every simulated member, their agents' loops, and one watch on all Works."""

    def __init__(self, hub: CountingKube, names: list[str], nodes: int, seed: int = 17,
                 heartbeat: float = 2.0, shapes: tuple[Shape, ...] = SHAPES,
                 start_delay: float = START_DELAY,
                 on_succeeded: Callable[[str, int], None] | None = None) -> None:
        rng = random.Random(seed)
        self.hub, self.heartbeat, self.start_delay = hub, heartbeat, start_delay
        # told (hub job, the Work's resourceVersion) when a Work reports its share succeeded
        self.on_succeeded = on_succeeded
        self.members = {n: Member(n, hub, nodes_of(n, nodes, rng, shapes)) for n in names}
        self.by_namespace = {m.sync.namespace: m for m in self.members.values()}
        self.timeline = Timeline(8)
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.succeeded = 0
        self.started = 0
        # Per hub job ("namespace/name"), when (monotonic) its Work was first seen here, its
        # pods ran, they ended, and the report saying so was written: where a job's time
        # between its bind and its end on the hub goes.
        self.trace: dict[str, dict[str, float]] = defaultdict(dict)
        # Per hub job, how often its pods ran to success here: more than once, the job was
        # run twice (an invariant: never)
        self.successes: dict[str, int] = defaultdict(int)

    def gpus(self) -> int:
        return sum(int(n["status"]["allocatable"].get(GPU, "0"))
                   for m in self.members.values() for n in m.nodes)

    def start(self) -> None:
        for target in (self._agents, self._works, self._statuses, self.timeline.run):
            thread = threading.Thread(target=target, args=(self.stop,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def close(self, timeout: float = 60.0) -> None:
        """Stop every loop and wait for what they were sending (the hub's API server goes
        next: a request still under way would fail against it)."""
        self.stop.set()
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.timeline.pool.shutdown(wait=True, cancel_futures=True)

    def ready(self) -> bool:
        return all(m.reporter.sent is not None for m in self.members.values())

    # -- the agents' loops -------------------------------------------------------------
    def _agents(self, stop: threading.Event) -> None:
        """Heartbeat and capacity report of every member every ``heartbeat`` seconds (each
        report is applied only when it changed, or every 30 s, as the agent does)."""
        with ThreadPoolExecutor(8, thread_name_prefix="agent") as pool:
            while not stop.is_set():
                started = time.monotonic()
                list(pool.map(self._beat, self.members.values()))
                stop.wait(max(0.0, self.heartbeat - (time.monotonic() - started)))

    @staticmethod
    def _beat(member: Member) -> None:
        try:
            member.reporter.heartbeat()
            member.reporter.report()
        except errors.ApiError as exc:
            log.warning("%s: heartbeat failed: %s", member.name, exc)

    def _statuses(self, stop: threading.Event) -> None:
        """Work status of the Works whose jobs changed, by each agent's own reporter loop
        (the member caches mark them, as on a member)."""
        loops = []
        for member in self.members.values():
            member.sync.status.written = functools.partial(self._reported, member)
            loop = threading.Thread(target=member.sync.status.run, args=(stop,), daemon=True)
            loop.start()
            loops.append(loop)
        stop.wait()
        for member in self.members.values():
            member.sync.status.mark()  # wake it to stop
        for loop in loops:
            loop.join(5)

    def _reported(self, member: Member, name: str) -> None:
        work = member.sync.book.get(name)
        times = self.trace.get(hub_job(work)) if work is not None else None
        if times is not None and "done" in times:
            times.setdefault("reported", time.monotonic())

    def _works(self, stop: threading.Event) -> None:
        def seen(kind: str, work: Body) -> None:
            if kind != DELETED:
                self._seen(work)
                if self.on_succeeded is not None and \
                        (work.get("status") or {}).get("state") == "Succeeded":
                    self.on_succeeded(hub_job(work),
                                   int(work["metadata"].get("resourceVersion") or 0))

        Informer(self.hub, r.WORKS, handle=seen, keep=False).run(stop)

    def _seen(self, work: Body) -> None:
        member = self.by_namespace.get(work["metadata"]["namespace"])
        if member is None:
            return
        name = work["metadata"]["name"]
        known = member.sync.book.get(name) is not None
        if known:
            member.sync.book.update(work)
        if work["metadata"].get("deletionTimestamp"):
            self.timeline.at(time.monotonic(), lambda: member.forget(work))
        elif not known:
            self.trace[hub_job(work)].setdefault("seen", time.monotonic())
            member.sync.book.record(work)  # claimed now: a MODIFIED before the apply is no new Work
            self.timeline.at(time.monotonic(), lambda: self._run(member, work))

    def _run(self, member: Member, work: Body) -> None:
        duration = member.apply(work)
        if duration is None:
            return
        job = work["spec"]["manifests"][0]
        self.started += 1

        def running() -> None:
            current, _ = member.state.stores.read(key_of(job))
            if current is not None and current["metadata"]["uid"] == member_uid(work):
                member.run_pods(current, "Running")
                self.trace[hub_job(work)].setdefault("running", time.monotonic())

        def done() -> None:
            with member.jobs:  # (a purge's report comes before or after, never in between)
                current, _ = member.state.stores.read(key_of(job))
                if current is None or current["metadata"]["uid"] != member_uid(work) \
                        or member_uid(work) in member.stopping:
                    return
                member.run_pods(current, "Succeeded")
            self.trace[hub_job(work)].setdefault("done", time.monotonic())
            self.succeeded += 1
            self.successes[hub_job(work)] += 1

        now = time.monotonic()
        self.timeline.at(now + self.start_delay, running)
        self.timeline.at(now + self.start_delay + duration, done)
