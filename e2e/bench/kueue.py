"""Kueue's scheduler scalability test, run by Kueue and by fleet in the same bench run.

Kueue's side is Kueue's own: the runner and minimalkueue of ``test/performance/scheduler``,
built from the module pinned in ``e2e/toolchain/kueue/go.mod`` (``build-kueue.sh``), with the
generator configuration read from the module cache. It reports wall time (minimalkueue's life),
average time to admission per workload class and the ClusterQueues' average CPU usage.

fleet's side runs the same configuration end to end. Each cohort becomes a parent of an
ElasticQuotaTree (min and max: its queues' nominal quotas summed) and each ClusterQueue a
leaf owning one namespace (min: the nominal quota, max: nominal plus borrowing limit); each
workload is a one-replica PyTorchJob asking for the workload's CPUs, at the workload's priority
(a PriorityClass per class), created at the configuration's intervals by one thread per
workload set as Kueue's generator does (sleep, then create). The hub (``python -m fleet.hub``,
webhooks on) places them on simulated members (:mod:`e2e.bench.members`: the agents' own
reporter, Work status and PyTorchJob reconcile code, far more CPU than the quota) where each
runs for the workload's runtime counted from Running. Time to admission is measured as
Kueue's runner measures its own (its recorder): from the job's first event on the bench's
watch to the first event showing it bound (quota admitted and placed, the placement the hub
writes on the job), so that neither the create request nor the watch's lag is in either
side's figure; from the create request to bound is said too. Wall time runs from the hub's
start to the last job seen finished on the hub.

Client rate limits: fleet's hub has none; minimalkueue sets 50 QPS / burst 100 in code, so the
side by side runs ``minimalkueue-unlimited`` (the same program with that limit removed, see
``build-kueue.sh``) unless told to run it as shipped as well.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import signal
import subprocess
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import Any

import yaml

from e2e.bench import stages
from e2e.bench.members import CountingKube, Fleet
from e2e.bench.onfleet import (
    cpu_seconds,
    per_job_writes,
    processes,
    say,
    webhook_seconds,
    writes,
)
from e2e.bench.results import Result
from e2e.bench.scale import queued_gangs, register
from e2e.bench.webhooks import without_webhook
from e2e.jobs import seed_pytorchjob
from e2e.localfleet import HUB, LocalFleet
from e2e.localfleet.kwok import Binaries
from fleet.api.protocol import PLACEMENT, REQUEUE, placement_generation
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

REPO = Path(__file__).resolve().parents[2]
CONFIG = "test/performance/scheduler/configs/{name}/generator.yaml"
CPU_NODE = (("", 0, 64, 256),)  # (GPU model, GPUs, cores, GiB): CPU-only nodes
START_DELAY = 0.1  # seconds from a Work's arrival to its pod running on a simulated member


@dataclass(frozen=True)
class Workload:
    klass: str
    runtime: float  # seconds
    priority: int
    request: int  # CPUs


@dataclass(frozen=True)
class WorkloadSet:
    count: int
    interval: float  # seconds slept before each creation
    workloads: tuple[Workload, ...]


@dataclass(frozen=True)
class Config:
    """Kueue's generator configuration with one cohort class and one queue class (its
    baseline and large-scale configurations are)."""

    cohorts: int
    queues: int  # per cohort
    nominal: int
    borrowing: int
    sets: tuple[WorkloadSet, ...]

    @property
    def jobs(self) -> int:
        return self.cohorts * self.queues * sum(s.count * len(s.workloads) for s in self.sets)

    @property
    def classes(self) -> dict[str, Workload]:
        return {w.klass: w for s in self.sets for w in s.workloads}

    def queue_names(self) -> list[tuple[str, str]]:
        """(cohort, queue) names, as Kueue's generator names its ClusterQueues."""
        return [(f"cohort-{c}", f"cq-0-{q}-cohort-{c}")
                for c in range(self.cohorts) for q in range(self.queues)]


def read_config(text: str, scale: float = 1.0) -> Config:
    """The generator file; ``scale`` shrinks every workload set's count (at least 1)."""
    data = yaml.safe_load(text)
    (cohort,) = data["cohorts"]
    (queue,) = cohort["queuesSets"]
    sets = tuple(WorkloadSet(
        count=max(1, round(int(s["count"]) * scale)),
        interval=int(s["creationIntervalMs"]) / 1000,
        workloads=tuple(Workload(w["className"], int(w["runtimeMs"]) / 1000,
                                 int(w["priority"]), int(w["request"]))
                        for w in s["workloads"])) for s in queue["workloadsSets"])
    return Config(int(cohort["count"]), int(queue["count"]), int(queue["nominalQuota"]),
                  int(queue["borrowingLimit"]), sets)


def scaled_text(text: str, scale: float) -> str:
    """The generator file with every workload set's count scaled as :func:`read_config`
    does, for Kueue's runner."""
    data = yaml.safe_load(text)
    for cohort in data["cohorts"]:
        for queue in cohort["queuesSets"]:
            for workload_set in queue["workloadsSets"]:
                workload_set["count"] = max(1, round(int(workload_set["count"]) * scale))
    return str(yaml.safe_dump(data))


# -- Kueue's side ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """One side's figures: wall seconds, average seconds to admission per class, average CPU
    usage over the queues (fraction of their summed nominal quota), evictions, CPU seconds of
    the scheduler's process."""

    wall: float
    admission: dict[str, float]
    usage: float
    evictions: int
    cpu: float
    unfinished: int = 0
    # fleet only: seconds from bound to finished as the hub's watch shows them, beyond the
    # job's runtime (Work to the member, its report back, the job's status written), of
    # the jobs never evicted
    overhead: float = 0.0
    peak: float = 0.0  # the most any cohort held at once, as a fraction of its max
    twice: int = 0  # jobs whose pods ran to success more than once on the members
    # CPU seconds of every process of the side during the run, by program: both sides
    # share the machine's cores with their API server, so the sum is what the run cost
    processes: dict[str, float] = field(default_factory=dict)


def kueue_binaries() -> Path:
    out = subprocess.run(["bash", str(REPO / "e2e" / "toolchain" / "build-kueue.sh")],
                         check=True, stdout=subprocess.PIPE, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def run_kueue(workdir: Path, generator: Path, binary: str) -> Outcome:
    """Kueue's runner with ``binary`` (``minimalkueue`` or ``minimalkueue-unlimited``)."""
    binaries = kueue_binaries()
    module = (binaries / "kueue-module-dir").read_text().strip()
    out = workdir / binary
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PROJECT_DIR": module + "/",
           "KUBEBUILDER_ASSETS": str(Binaries.build(REPO).directory)}
    say(f"Kueue: runner with {binary}, {generator.name}; its log in {out / 'runner.log'}")
    with open(out / "runner.log", "w") as log:
        runner = subprocess.Popen([str(binaries / "runner"), "--crds",
                                   f"{module}/config/components/crd/bases", "--generatorConfig",
                                   str(generator), "--minimalKueue", str(binaries / binary),
                                   "--o", str(out), "--timeout", "60m"],
                                  env=env, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        try:
            spent = descendants_cpu(runner)
        finally:
            if runner.poll() is None:  # interrupted: neither it nor its API server left running
                stop(runner)
        if runner.returncode:
            raise subprocess.CalledProcessError(runner.returncode, "runner")
    say(f"Kueue ({binary}): CPU seconds during the run: " + ", ".join(
        f"{k} {v:.1f}" for k, v in sorted(spent.items(), key=lambda kv: -kv[1])))
    summary = yaml.safe_load((out / "summary.yaml").read_text())
    stats = yaml.safe_load((out / f"{binary}.stats.yaml").read_text())
    queues = summary["clusterQueueClasses"]
    usage = sum(q["cpuAverageUsage"] for q in queues.values()) / sum(
        q["nominalQuota"] for q in queues.values())
    classes = summary["workloadClasses"]
    return Outcome(wall=stats["wallMs"] / 1000,
                   admission={k: v["averageTimeToAdmissionMs"] / 1000
                              for k, v in classes.items()},
                   usage=usage, evictions=sum(v["totalEvictions"] for v in classes.values()),
                   cpu=(stats["userMs"] + stats["sysMs"]) / 1000, processes=spent)


def stop(runner: subprocess.Popen[bytes], grace: float = 60.0) -> None:
    """Stop Kueue's runner as Ctrl-C does: it then stops envtest's API server and etcd, which
    run in process groups of their own (killed, the runner left them running). Killed with
    its group only when it does not stop within ``grace`` seconds."""
    runner.send_signal(signal.SIGINT)
    try:
        runner.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait()


def descendants_cpu(root: subprocess.Popen[bytes], every: float = 0.5,
                    from_: str = "minimalkueue") -> dict[str, float]:
    """Until ``root`` exits, the CPU seconds each of its descendants and itself has used
    since a process named ``from_...`` started (Kueue's wall time is minimalkueue's life: the
    API server's start and the CRDs' install before it are not counted), summed by program
    name. Read every ``every`` seconds, as the processes (envtest's API server and etcd,
    minimalkueue) are gone by the end: what one spent after the last look, or before the
    first look after ``from_`` started, is not counted (at most ``every`` each)."""
    first: dict[int, float] | None = None  # each process's CPU when counting began
    last: dict[int, tuple[str, float]] = {}
    while True:
        done = root.poll() is not None
        now = processes()
        family = {root.pid}
        for pid in sorted(now):  # (a child's pid is most often above its parent's)
            chain: list[int] = []
            at = pid
            while at in now and at not in family and at > 1 and len(chain) < 64:
                chain.append(at)
                at = now[at][1]
            if at in family:
                family.update(chain)
        ours = {pid: (now[pid][0], now[pid][2]) for pid in family if pid in now}
        if first is None and any(name.startswith(from_) for name, _ in ours.values()):
            first = {pid: cpu for pid, (_, cpu) in ours.items()}
        if first is not None:
            last.update(ours)
        if done:
            break
        time.sleep(every)
    out: dict[str, float] = {}
    for pid, (name, cpu) in last.items():
        out[name] = out.get(name, 0.0) + cpu - (first or {}).get(pid, 0.0)
    return out


# -- fleet's side ---------------------------------------------------------------------------
def hub_objects(config: Config) -> list[tuple[r.Resource, dict[str, Any]]]:
    """The ElasticQuotaTree, a namespace and queued PropagationPolicy per queue, and a
    PriorityClass per workload class."""
    parents: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for cohort, queue in config.queue_names():
        parents[cohort].append({"name": queue, "namespaces": [queue],
                                "min": {"cpu": config.nominal},
                                "max": {"cpu": config.nominal + config.borrowing}})
    whole = config.nominal * config.queues
    total = whole * config.cohorts
    out: list[tuple[r.Resource, dict[str, Any]]] = [(r.ELASTICQUOTATREES, {
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
        "metadata": {"name": "kueue-baseline", "namespace": "kube-system"},
        "spec": {"root": {"name": "root", "min": {"cpu": total}, "max": {"cpu": total},
                          "children": [{"name": c, "min": {"cpu": whole},
                                        "max": {"cpu": whole}, "children": leaves}
                                       for c, leaves in parents.items()]}}})]
    for klass, workload in config.classes.items():
        out.append((r.PRIORITYCLASSES, {
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": f"kueue-{klass}"}, "value": workload.priority}))
    for _, queue in config.queue_names():
        out.append((r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": queue}}))
        out.append((r.PROPAGATIONPOLICIES, queued_gangs(queue)))
    return out


def job_of(name: str, namespace: str, workload: Workload) -> dict[str, Any]:
    """A one-replica PyTorchJob asking for the workload's CPUs at its class's priority."""
    body = seed_pytorchjob(name, namespace, run_for=f"{round(workload.runtime * 1000)}ms",
                           workers=0)
    body["metadata"]["labels"] = {"kueue-bench/class": workload.klass}
    template = body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    template["spec"]["priorityClassName"] = f"kueue-{workload.klass}"
    cpu = {"cpu": str(workload.request)}
    template["spec"]["containers"][0]["resources"] = {"requests": cpu, "limits": cpu}
    return body


@dataclass
class Ledger:
    """Each job's class, size and times (monotonic): created, first bound, last bound,
    finished; and how often a bound job lost its placement (an eviction)."""

    klass: dict[str, str] = field(default_factory=dict)
    size: dict[str, int] = field(default_factory=dict)
    created: dict[str, float] = field(default_factory=dict)
    create_seconds: list[float] = field(default_factory=list)  # each create request's
    first_seen: dict[str, float] = field(default_factory=dict)  # by the bench's own watch
    first_bound: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    held: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    finished: dict[str, float] = field(default_factory=dict)
    evictions: int = 0
    evicted: set[str] = field(default_factory=set)
    # placement generation each job lost its placement at: placed again at the same one, the
    # requeue was taken back (its members had reported it succeeded): no eviction
    lost_at: dict[str, int] = field(default_factory=dict)
    # What held quota when, replayed in the API server's order (its resourceVersions: one
    # order over jobs and Works, whichever watch delivered first): (version, job, what).
    moves: list[tuple[int, str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def seen(self, body: dict[str, Any], now: float) -> None:
        meta = body["metadata"]
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        marks = meta.get("annotations") or {}
        placed = PLACEMENT in marks and REQUEUE not in marks  # a requeued job holds no quota
        done = any(c.get("type") in ("Succeeded", "Failed") and c.get("status") == "True"
                   for c in (body.get("status") or {}).get("conditions") or [])
        version = int(meta.get("resourceVersion") or 0)
        generation = placement_generation(meta)
        with self.lock:
            self.first_seen.setdefault(key, now)
            self.moves.append((version, key, BOUND if placed else UNBOUND))
            if done:
                self.moves.append((version, key, DONE))
            if placed and self.lost_at.pop(key, None) == generation:
                self.evictions -= 1  # completed, not evicted
            if placed and key not in self.bound and key not in self.finished:
                self.bound[key] = now
                self.first_bound.setdefault(key, now)
            elif not placed and key in self.bound and key not in self.finished:
                self.held[key] += now - self.bound.pop(key)
                self.evictions += 1
                self.evicted.add(key)
                self.lost_at[key] = generation
            if done and key not in self.finished:
                self.finished[key] = now
                if key in self.bound:
                    self.held[key] += now - self.bound.pop(key)

    def succeeded(self, key: str, version: int) -> None:
        """A Work of the job reports it succeeded (the members' word, by the Works' watch;
        the hub releases the job's quota then; the bench's jobs have one Work each)."""
        with self.lock:
            self.moves.append((version, key, SUCCEEDED))

    def cohort_peaks(self, limit: int | None = None) -> dict[str, int]:
        """The most CPUs each cohort's jobs held at once: a job holds from its bind to its
        eviction, its finish on the hub or its members' report that it succeeded, whichever
        comes first. When a cohort first holds more than ``limit``, says which jobs held it
        and each one's moves (an over-commit, or the ledger's misreading of one)."""
        use: dict[str, int] = defaultdict(int)
        peaks: dict[str, int] = defaultdict(int)
        holding: set[str] = set()
        over: set[str] = set()  # released for the placement it holds (done or succeeded)
        told: set[str] = set()
        with self.lock:
            moves = sorted(self.moves, key=lambda m: (m[0], m[2] == BOUND))
        for _, key, what in moves:  # (at one version, releases first)
            cohort = key.split("/", 1)[0].rsplit("-cohort-", 1)[-1]
            if what == BOUND and key not in holding and key not in over:
                holding.add(key)
                use[cohort] += self.size.get(key, 0)
                peaks[cohort] = max(peaks[cohort], use[cohort])
                if limit is not None and use[cohort] > limit and cohort not in told:
                    told.add(cohort)
                    self._tell_over(cohort, use[cohort], holding, moves)
                continue
            if what == UNBOUND:
                over.discard(key)  # placed again later, it holds again
            elif what in (DONE, SUCCEEDED):
                over.add(key)
            if what != BOUND and key in holding:
                holding.discard(key)
                use[cohort] -= self.size.get(key, 0)
        return dict(peaks)

    def _tell_over(self, cohort: str, held: int, holding: set[str],
                   moves: list[tuple[int, str, str]]) -> None:
        mine = sorted(k for k in holding if k.rsplit("-cohort-", 1)[-1] == cohort)
        say(f"fleet: cohort {cohort} held {held} CPUs; its holders and their moves "
            "(resourceVersion, what):")
        for key in mine:
            # a run of one state said once (the watch repeats it with each version)
            runs = groupby(((v, w) for v, k, w in moves if k == key), key=itemgetter(1))
            said = [f"{next(run)[0]} {what}" for what, run in runs]
            say(f"  {key} ({self.size.get(key, 0)}): " + ", ".join(said))


BOUND, UNBOUND, DONE, SUCCEEDED = "bound", "unbound", "done", "succeeded"


def watch_jobs(hub: Kube, ledger: Ledger, stop: threading.Event) -> None:
    version = hub.list(r.PYTORCHJOBS, label_selector="fleet.sh/none=none")[1]
    while not stop.is_set():
        try:
            for _, body in hub.watch(r.PYTORCHJOBS, resource_version=version,
                                     timeout_seconds=30):
                version = body["metadata"].get("resourceVersion", version)
                ledger.seen(body, time.monotonic())
                if stop.is_set():
                    return
        except errors.ApiError:
            stop.wait(0.5)


def create_set(hub: Kube, ledger: Ledger, namespace: str, index: int,
               workload_set: WorkloadSet, stop: threading.Event) -> None:
    """As Kueue's generator: sleep the interval, then create, ``count`` times."""
    for step in range(workload_set.count):
        for workload in workload_set.workloads:
            if stop.wait(workload_set.interval):
                return
            name = f"{workload.klass}-{index}-{step}"
            key = f"{namespace}/{name}"
            with ledger.lock:
                ledger.klass[key], ledger.size[key] = workload.klass, workload.request
                ledger.created[key] = time.monotonic()
            started = time.monotonic()
            hub.create(r.PYTORCHJOBS, job_of(name, namespace, workload))
            with ledger.lock:
                ledger.create_seconds.append(time.monotonic() - started)


def run_fleet(workdir: Path, config: Config, *, members: int = 3, nodes: int = 20,
              limit: float = 3600.0) -> Outcome:
    fleet = LocalFleet(workdir, members={}, say=say)
    sim: Fleet | None = None
    stop = threading.Event()
    try:
        fleet.up(with_controllers=False)
        hub = fleet.client(HUB)
        names = [f"member{i}" for i in range(1, members + 1)]
        register(hub, names)
        ledger = Ledger()
        sim = Fleet(CountingKube(str(fleet.kubeconfig(HUB)), pool=32), names, nodes,
                    shapes=CPU_NODE, start_delay=START_DELAY, on_succeeded=ledger.succeeded)
        sim.start()
        without_webhook(hub, lambda: [hub.apply(res, body, field_manager="bench")
                                      for res, body in hub_objects(config)])
        deadline = time.monotonic() + 120
        while not sim.ready() and time.monotonic() < deadline:
            time.sleep(0.5)
        watcher = threading.Thread(target=watch_jobs, args=(hub, ledger, stop), daemon=True)
        watcher.start()
        cpu_before = {**cpu_seconds(fleet), LOAD: load_cpu()}
        writes_before, webhooks_before = writes(hub), webhook_seconds(hub)
        say(f"fleet: the hub starts; {config.jobs:,} jobs in {len(config.queue_names())} "
            f"queues, {len(config.sets)} workload sets each, created as Kueue's generator "
            f"does, on {members} simulated members")
        started = time.monotonic()
        fleet.start_hub()
        queues = config.queue_names()
        threads = len(queues) * len(config.sets)
        # A connection for each creator: with fewer, the client opens (and the API server
        # shakes hands for) a new TLS connection for most creates, which Kueue's runner, one
        # HTTP/2 connection, never does.
        creating = Kube(str(fleet.kubeconfig(HUB)), pool=threads)
        with ThreadPoolExecutor(threads, thread_name_prefix="create") as pool:
            creators = [pool.submit(create_set, creating, ledger, queue, index, workload_set,
                                    stop)
                        for _, queue in queues
                        for index, workload_set in enumerate(config.sets)]
            follow(ledger, config.jobs, started, limit)
            stop.set()
            for creator in creators:
                creator.result()
        creating.close()
        spent = say_where_it_went(fleet, hub, sim, ledger, config, cpu_before, writes_before,
                                  webhooks_before)
        twice = sorted(k for k, n in sim.successes.items() if n > 1)
        if twice:
            say(f"fleet: {len(twice)} jobs ran to success more than once: "
                + ", ".join(twice[:10]))
        return outcome(ledger, config, started, spent, twice=len(twice))
    finally:
        stop.set()
        if sim is not None:
            sim.close()
        fleet.down()


def say_where_it_went(fleet: LocalFleet, hub: Kube, sim: Fleet, ledger: Ledger, config: Config,
                      cpu_before: dict[str, float], writes_before: dict[str, float],
                      webhooks_before: dict[str, tuple[float, float]]) -> dict[str, float]:
    """Where the run's time and work went: every process's CPU, a job's way once bound, the
    create requests and the admission webhook, the hub's steps, the API writes per job (the
    simulated agents' apart). Returns every process's CPU seconds."""
    spent = {k: v - cpu_before.get(k, 0.0)
             for k, v in {**cpu_seconds(fleet), LOAD: load_cpu()}.items()}
    say("fleet: CPU seconds during the run: " + ", ".join(
        f"{k} {v:.1f}" for k, v in sorted(spent.items(), key=lambda kv: -kv[1])))
    say("fleet: a job's way from bound to finished (never evicted), mean seconds: "
        + ", ".join(f"{k} {v:.2f}" for k, v in segments(ledger, sim.trace).items()))
    took = sorted(ledger.create_seconds) or [0.0]
    say(f"fleet: a create request took {sum(took) / len(took):.3f} s on average, p99 "
        f"{took[int(len(took) * 0.99)]:.3f} s (the hub's admission webhook included)")
    with ledger.lock:
        lag = sorted(ledger.first_seen[k] - ledger.created[k]
                     for k in ledger.first_seen if k in ledger.created) or [0.0]
    say(f"fleet: created -> seen by the bench's own watch: p50 {lag[len(lag) // 2]:.3f} s, "
        f"p99 {lag[int(len(lag) * 0.99)]:.3f} s")
    for name, (seconds, calls) in webhook_seconds(hub).items():
        before_seconds, before_calls = webhooks_before.get(name, (0.0, 0.0))
        if calls > before_calls:
            say(f"fleet: webhook {name}: {calls - before_calls:.0f} calls, "
                f"{(seconds - before_seconds) / (calls - before_calls):.3f} s each")
    spent_stages = stages.scrape([fleet.metrics_url("hub")])
    say("fleet: the hub's steps, p50 / p99 seconds: " + ", ".join(
        f"{stage} {stages.quantile(0.5, spent_stages[stage]):.2f} / "
        f"{stages.quantile(0.99, spent_stages[stage]):.2f}"
        for stage in stages.HUB_STAGES if stage in spent_stages))
    told = stages.counters(fleet.metrics_url("hub"), "fleet_job_status_writes", "why")
    say("fleet: job statuses the hub wrote per job, by what they say: " + ", ".join(
        f"{why} {count / config.jobs:.2f}" for why, count in sorted(told.items())))
    total, shown = per_job_writes(writes_before, writes(hub), config.jobs)
    say(f"fleet: {total:.1f} API writes per job, every client's (the jobs' creation "
        f"included): {shown}")
    _, agents = per_job_writes({}, {k: float(v) for k, v in sim.hub.writes.items()},
                               config.jobs)
    say(f"fleet: of which the simulated agents': {agents}")
    return spent


LOAD = "load generator (creators, simulated members, watch)"


def load_cpu() -> float:
    """This process's CPU seconds: the bench's creators, simulated members and watch."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def follow(ledger: Ledger, jobs: int, started: float, limit: float) -> None:
    last = -1
    while time.monotonic() - started < limit:
        time.sleep(2)
        with ledger.lock:
            created, bound, done = len(ledger.created), len(ledger.first_bound), len(
                ledger.finished)
        if done != last:
            say(f"  fleet: {created:,} created, {bound:,} bound, {done:,} finished "
                f"after {time.monotonic() - started:.0f}s")
            last = done
        if done >= jobs:
            return


SEGMENTS = (("bound", "seen"), ("seen", "running"), ("running", "done"),
            ("done", "reported"), ("reported", "finished"))


def segments(ledger: Ledger, trace: dict[str, dict[str, float]]) -> dict[str, float]:
    """Mean seconds of each step from bound (the hub's watch) to finished (the same watch),
    through the simulated member (its Work seen, pods running, ended, reported)."""
    spent: dict[str, list[float]] = defaultdict(list)
    with ledger.lock:
        for key, at in ledger.finished.items():
            if key in ledger.evicted or key not in ledger.first_bound:
                continue
            times = {**trace.get(key, {}), "bound": ledger.first_bound[key], "finished": at}
            for start, end in SEGMENTS:
                if start in times and end in times:
                    spent[f"{start}->{end}"].append(times[end] - times[start])
    return {k: sum(v) / len(v) for k, v in spent.items()}


def outcome(ledger: Ledger, config: Config, started: float, spent: dict[str, float],
            twice: int = 0) -> Outcome:
    peaks = ledger.cohort_peaks(limit=config.nominal * config.queues)
    with ledger.lock:
        end = max(ledger.finished.values(), default=time.monotonic())
        wall = end - started
        waits: dict[str, list[float]] = defaultdict(list)
        requested: dict[str, list[float]] = defaultdict(list)
        for key, at in ledger.first_bound.items():
            waits[ledger.klass[key]].append(at - ledger.first_seen.get(key, at))
            requested[ledger.klass[key]].append(at - ledger.created[key])
        used = sum(ledger.size[key] * held for key, held in ledger.held.items())
        unfinished = config.jobs - len(ledger.finished)
        peak = max(peaks.values(), default=0) / (config.nominal * config.queues)
        beyond = [at - ledger.first_bound[key] - config.classes[ledger.klass[key]].runtime
                  for key, at in ledger.finished.items()
                  if key in ledger.first_bound and key not in ledger.evicted]
    say("fleet: average seconds from the create request to bound: " + ", ".join(
        f"{k} {sum(v) / len(v):.1f}" for k, v in sorted(requested.items())))
    quota = config.nominal * config.queues * config.cohorts
    return Outcome(wall=wall, admission={k: sum(v) / len(v) for k, v in waits.items()},
                   usage=used / (quota * wall) if wall else 0.0, evictions=ledger.evictions,
                   cpu=spent.get("hub", 0.0), processes=spent, unfinished=unfinished,
                   overhead=sum(beyond) / len(beyond) if beyond else 0.0, peak=peak,
                   twice=twice)


# -- side by side ----------------------------------------------------------------------------
def run(workdir: Path, *, config_name: str = "baseline", scale: float = 1.0,
        variants: tuple[str, ...] = ("minimalkueue-unlimited",), members: int = 3
        ) -> list[Result]:
    """fleet and each of Kueue's ``variants`` (none: fleet alone) on the configuration."""
    module = Path((kueue_binaries() / "kueue-module-dir").read_text().strip())
    text = (module / CONFIG.format(name=config_name)).read_text()
    config = read_config(text, scale)
    generator = workdir / "generator.yaml"
    generator.write_text(scaled_text(text, scale))
    theirs = {v: run_kueue(workdir / "kueue", generator, v) for v in variants}
    ours = run_fleet(workdir / "fleet", config, members=members)
    what = f"Kueue's {config_name} configuration, {config.jobs:,} jobs"
    say(f"side by side, {what}:")
    for name, side in (("fleet", ours), *theirs.items()):
        say(f"  {name:24} wall {side.wall:7.1f} s  admission " + ", ".join(
            f"{k} {v:.1f} s" for k, v in sorted(side.admission.items()))
            + f"  usage {100 * side.usage:.1f} %  evictions {side.evictions}"
            f"  CPU {side.cpu:.0f} s (every process {sum(side.processes.values()):.0f} s)"
            + (f"  UNFINISHED {side.unfinished}" if side.unfinished else ""))
    baseline = theirs.get(variants[0]) if variants else None

    def beside(name: str, value: float, kueue: float, unit: str, required: bool) -> Result:
        """fleet's figure with Kueue's from this run as its baseline (and its budget when
        the issue requires fleet to do at least as well)."""
        if baseline is None:
            return Result(name, value, unit, "")
        return Result(name, value, unit, f"<= {kueue:.1f}" if required else "", kueue,
                      f"Kueue, {variants[0]}, same run")

    kueue = baseline or Outcome(0.0, {}, 0.0, 0, 0.0)
    results = [beside(f"wall time, {what}, fleet", ours.wall, kueue.wall, "s", True)]
    for klass in sorted(config.classes, key=lambda k: -config.classes[k].request):
        results.append(beside(f"average time to admission, {klass}, {what}, fleet",
                              ours.admission.get(klass, float("nan")),
                              kueue.admission.get(klass, 0.0), "s", True))
    results.append(beside(f"average quota usage, {what}, fleet", 100 * ours.usage,
                          100 * kueue.usage, "%", False))
    results.append(beside(f"scheduler CPU seconds, {what}, fleet's hub", ours.cpu,
                          kueue.cpu, "s", False))
    every = beside(f"CPU seconds of every process, {what}, fleet",
                   sum(ours.processes.values()), sum(kueue.processes.values()), "s", False)
    results.append(dataclasses.replace(every, note="each side's during its run (Kueue's: "
                                       "minimalkueue's life), its API server's included"))
    results.append(Result(f"bound -> finished beyond the runtime, {what}, fleet",
                          ours.overhead, "s", ""))
    results.append(Result(f"jobs run to success more than once, {what}, fleet", ours.twice,
                          "jobs", "<= 0", note="on the simulated members"))
    results.append(Result(f"most quota a cohort held at once, of its max, {what}, fleet",
                          100 * ours.peak, "%", "<= 100",
                          note="as the hub's watch shows bound, unfinished jobs"))
    results.extend(Result(f"wall time, {what}, Kueue, {name}", side.wall, "s", "")
                   for name, side in theirs.items() if name != variants[0])
    if ours.unfinished:
        results.append(Result(f"jobs unfinished at the limit, {what}, fleet",
                              ours.unfinished, "jobs", "<= 0"))
    return results
