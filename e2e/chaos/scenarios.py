"""The chaos scenarios: each drives real jobs through one fault on a local fleet, measures how
long the fleet takes to bind and run a fresh job after the fault is repaired (recovery), and
hands the ledger's violations back.

Every run gets its own namespace (``chaos-<scenario>-<run>``) with a gang PropagationPolicy,
and ends by waiting for its jobs to end, deleting them and waiting for the members to drain, so
orphans are looked for after every run too.
"""

from __future__ import annotations

import contextlib
import importlib
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from e2e.chaos import faults
from e2e.chaos.ledger import JOB_NAME, Ledger, Limits, Violation
from e2e.jobs import seed_pytorchjob, state
from e2e.localfleet import HUB, LocalFleet
from fleet import onboarding
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

Body = dict[str, Any]
PURGE_MODES = ("Immediately", "Graciously", "Never")
HUB_LEASE_SECONDS = 10  # fleet.clients.leases.LeaderElector's default


@dataclass
class RunResult:
    violations: list[Violation] = field(default_factory=list)
    recovery: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: str = ""


@dataclass
class Context:
    fleet: LocalFleet
    seed: int
    short: bool
    say: Callable[[str], None] = print
    # restarts control-plane processes that die (started with the fleet, shared by runs)
    components: faults.Supervisor | None = None

    @property
    def hub(self) -> Kube:
        return self.fleet.client(HUB)


@dataclass
class Run:
    """One run of a scenario: its namespace, its ledger and the jobs it expects to end."""

    ctx: Context
    namespace: str
    limits: Limits = field(default_factory=Limits)
    expected: dict[str, str] = field(default_factory=dict)
    result: RunResult = field(default_factory=RunResult)
    probes: int = 0
    terms: bool = False  # the ledger checks Works against the hub leader's terms
    passing: bool = False  # members refuse pods only for causes that pass (the ledger checks)
    others: tuple[str, ...] = ()  # more namespaces the run's jobs go to

    def __post_init__(self) -> None:
        self.ledger = Ledger(self.ctx.fleet, self.namespaces, self.limits, terms=self.terms,
                             passing=self.passing)

    @property
    def namespaces(self) -> tuple[str, ...]:
        return (self.namespace, *self.others)

    # -- set-up ----------------------------------------------------------------------
    def policy(self, *, toleration: int | None = None, purge: str = "Immediately",
               cluster: str | None = None, namespace: str = "") -> None:
        hub = self.ctx.hub
        namespace = namespace or self.namespace
        if hub.get_or_none(r.NAMESPACES, namespace) is None:
            hub.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": namespace}})
        placement: Body = {"replicaScheduling": {"replicaSchedulingType": "Divided",
                                                 "customSchedulingType": "Gang"}}
        if cluster:
            placement["clusterAffinity"] = {"clusterNames": [cluster]}
        spec: Body = {"resourceSelectors": [{"apiVersion": "kubeflow.org/v1",
                                             "kind": "PyTorchJob"}], "placement": placement}
        if toleration is not None:
            spec["failover"] = {"application": {
                "decisionConditions": {"tolerationSeconds": toleration}, "purgeMode": purge,
                **({"gracePeriodSeconds": 10} if purge == "Graciously" else {})}}
        hub.apply(r.PROPAGATIONPOLICIES, {
            "apiVersion": "policy.one.alibabacloud.com/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": "gang", "namespace": namespace}, "spec": spec},
            field_manager="chaos")

    def submit(self, name: str, *, run_for: str = "2s", gpus: int = 1, workers: int = 0,
               exit_code: int = 0, patch: Callable[[Body], None] | None = None,
               namespace: str = "") -> None:
        namespace = namespace or self.namespace
        job = seed_pytorchjob(name, namespace, run_for=run_for, exit_code=exit_code,
                              gpus=gpus, workers=workers)
        for spec in job["spec"]["pytorchReplicaSpecs"].values():
            spec["restartPolicy"] = "Never"
        if patch:
            patch(job)
        for attempt in range(30):  # the hub's API server may be down for a moment
            try:
                self.ctx.hub.create(r.PYTORCHJOBS, job)
                break
            except errors.AlreadyExists:
                break
            except errors.ApiError:
                time.sleep(min(2.0, 0.2 * (attempt + 1)))
        else:
            raise RuntimeError(f"could not create {name}")
        self.expected[f"{namespace}/{name}"] = "Failed" if exit_code else "Succeeded"

    def stream(self, prefix: str, count: int, per_second: float, **kwargs: Any
               ) -> threading.Thread:
        def run() -> None:
            for i in range(count):
                self.submit(f"{prefix}-{i}", **kwargs)
                time.sleep(1 / per_second)
        thread = threading.Thread(target=run, name=f"stream-{prefix}", daemon=True)
        thread.start()
        return thread

    def probe(self, timeout: float = 180) -> float:
        """Seconds until a fresh job is bound and Running (or done) on the hub."""
        self.probes += 1
        name = f"probe-{self.probes}"
        started = time.monotonic()
        self.submit(name, run_for="1s")
        while time.monotonic() - started < timeout:
            try:
                job = self.ctx.hub.get_or_none(r.PYTORCHJOBS, name, self.namespace)
            except errors.ApiError:
                job = None
            if job and state(job) in ("Running", "Succeeded", "Failed"):
                elapsed = time.monotonic() - started
                self.result.recovery.append(elapsed)
                return elapsed
            time.sleep(0.2)
        self.result.notes.append(f"{name} not Running after {timeout:.0f}s")
        return timeout

    # -- the end ---------------------------------------------------------------------
    def finish(self, end_timeout: float = 300,
               after_delete: Callable[[], None] | None = None, cause: str = "") -> RunResult:
        self.ledger.await_ends(self.expected, end_timeout, self.ctx.say)
        hub = self.ctx.hub
        if cause:
            self.result.notes.append(f"{self.ledger.causes_made(hub, cause)} job(s) waited "
                                     f"for {cause}")
        try:
            self.ledger.requeues_recorded(hub)
        except errors.ApiError as exc:
            self.result.notes.append(f"events not read: {exc}")
        for namespace in self.namespaces:
            for job in hub.list(r.PYTORCHJOBS, namespace)[0]:
                try:
                    hub.delete(r.PYTORCHJOBS, job["metadata"]["name"], namespace)
                except errors.NotFound:
                    pass
        if after_delete:
            after_delete()
        deadline = time.monotonic() + self.limits.orphan_grace + 30
        while time.monotonic() < deadline and not (
                not any(hub.list(r.PYTORCHJOBS, ns)[0] for ns in self.namespaces)
                and self.ledger.drained()):
            time.sleep(1)
        if not self.ledger.drained():
            left = [f"{c}:{j['metadata']['name']}" for c, d in self.ledger.fresh().items()
                    if c != HUB for j in d["jobs"]]
            self.result.notes.append(f"members still hold {left[:10]} after clean-up")
        self.ledger.stop()
        self.result.violations = self.ledger.summary()
        return self.result

    def __enter__(self) -> Run:
        self.ledger.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.ledger.stop()


def _components(ctx: Context) -> faults.Supervisor:
    if ctx.components is None:
        ctx.components = faults.Supervisor(ctx.fleet).start()
    return ctx.components


def _ns(scenario: str, run: int) -> str:
    return f"chaos-{scenario}-{run}-{int(time.time()) % 100000}"


# -- 1. the hub SIGKILLed during a stream ---------------------------------------------------

def hub_kill(ctx: Context, run: int) -> RunResult:
    jobs, kills = (100, 3) if ctx.short else (1000, 20)
    with Run(ctx, _ns("hubkill", run)) as chaos:
        chaos.policy()
        rate = 10.0
        streaming = chaos.stream("job", jobs, rate, run_for="1s")
        span = jobs / rate
        rng = random.Random(ctx.seed + run)
        for k in range(kills):
            time.sleep(max(1.0, span / (kills + 1) * rng.uniform(0.5, 1.0)))
            ctx.fleet.stop_process("hub", signal.SIGKILL)
            ctx.fleet.start_hub()
            ctx.say(f"hub killed and restarted ({k + 1}/{kills})")
            chaos.probe()
        streaming.join()
        return chaos.finish(end_timeout=600 if not ctx.short else 300)


# -- 2. split brain: the leader frozen past its lease ----------------------------------------

def split_brain(ctx: Context, run: int) -> RunResult:
    ctx.fleet.start_hub("hub-2")
    try:
        with Run(ctx, _ns("split", run)) as chaos:
            chaos.policy()
            for i in range(20):
                chaos.submit(f"before-{i}", run_for="2s")
            leader = _wait_for(lambda: faults.hub_leader(ctx.fleet, ("hub", "hub-2")), 60)
            faults.signal_process(ctx.fleet, leader, signal.SIGSTOP)
            ctx.say(f"{leader} frozen")
            streaming = chaos.stream("during", 20, 2.0, run_for="2s")
            time.sleep(HUB_LEASE_SECONDS + 5)
            faults.signal_process(ctx.fleet, leader, signal.SIGCONT)
            ctx.say(f"{leader} thawed")
            chaos.probe()
            for i in range(20):  # the thawed leader acts on its stale view right now
                chaos.submit(f"after-{i}", run_for="2s")
            streaming.join()
            return chaos.finish()
    finally:
        ctx.fleet.stop_process("hub-2")


# -- 2b. leadership: passes longer than the lease, skewed clocks, leaders frozen mid-pass ---

LEADER_SKEWS = {"hub": -30.0, "hub-2": 30.0}  # each replica's wall clock off the host's, s


def leadership(ctx: Context, run: int) -> RunResult:
    """Two hub replicas whose clocks are 60 s apart, each holding every plan that binds for
    longer than the lease before writing it; the leader is frozen at random moments (most
    land between a plan and its writes) for longer than the lease. A leader renews on its own
    thread, so long passes alone must not move the lease; a frozen one must lose it, and what
    it writes after the thaw under its ended term must be refused: no job bound twice, no
    Work made under an ended term (the ledger's ``ended-term``), and no more takeovers than
    freezes."""
    pause = HUB_LEASE_SECONDS + 2
    ctx.fleet.stop_process("hub")
    since = faults.log_sizes(ctx.fleet, tuple(LEADER_SKEWS))
    for name, offset in LEADER_SKEWS.items():
        ctx.fleet.start_hub(name, {**faults.skewed_clock(offset),
                                   "FLEET_CHAOS_PASS_PAUSE_SECONDS": str(pause)})
    freezes = 1 if ctx.short else 3
    try:
        with Run(ctx, _ns("leader", run), terms=True) as chaos:
            chaos.policy()
            streaming = chaos.stream("job", 20 if ctx.short else 40, 1.0, run_for="2s")
            rng = random.Random(ctx.seed + run)
            for _ in range(freezes):
                time.sleep(rng.uniform(2.0, pause))
                leader = _wait_for(lambda: faults.hub_leader(ctx.fleet, tuple(LEADER_SKEWS),
                                                             since), 60)
                faults.signal_process(ctx.fleet, leader, signal.SIGSTOP)
                ctx.say(f"{leader} frozen past its lease")
                time.sleep(HUB_LEASE_SECONDS + 3)
                faults.signal_process(ctx.fleet, leader, signal.SIGCONT)
            streaming.join()
            chaos.probe(timeout=300)
            result = chaos.finish(end_timeout=600)
            takeovers = max(0, len(chaos.ledger.term_began) - 1)
            result.notes.append(f"{takeovers} takeovers for {freezes} freezes")
            if takeovers > freezes + 1:
                result.violations.append(Violation(
                    "lease-flap", chaos.namespace,
                    f"{takeovers} takeovers for {freezes} freezes: passes moved the lease",
                    time.monotonic()))
            return result
    finally:
        for name in LEADER_SKEWS:
            ctx.fleet.stop_process(name)
        ctx.fleet.start_hub()


# -- 3. the active agent killed mid-apply --------------------------------------------------------

def agent_kill(ctx: Context, run: int) -> RunResult:
    member = "member1"
    ctx.fleet.start_agent(member, "standby")
    try:
        with Run(ctx, _ns("agent", run)) as chaos:
            chaos.policy(cluster=member)
            leader = _wait_for(lambda: faults.agent_leader(ctx.fleet, member), 60)
            for i in range(30):
                chaos.submit(f"job-{i}", run_for="2s")
            time.sleep(0.5)  # Works arriving: the agent is applying them
            ctx.fleet.stop_process(leader, signal.SIGKILL)
            ctx.say(f"{leader} killed mid-apply")
            chaos.probe()
            if leader == f"agent-{member}":
                ctx.fleet.start_agent(member)
            else:
                ctx.fleet.start_agent(member, "standby")
            return chaos.finish()
    finally:
        ctx.fleet.stop_process(f"agent-{member}-standby")
        if f"agent-{member}" not in ctx.fleet.processes():
            ctx.fleet.start_agent(member)


# -- 4. a member's API server frozen, then thawed; killed, then restarted --------------------

def member_down(ctx: Context, run: int) -> RunResult:
    limits = Limits(gang_grace=30, orphan_grace=45)
    with Run(ctx, _ns("member", run), limits) as chaos:
        chaos.policy(toleration=5)
        for i in range(6):
            chaos.submit(f"job-{i}", run_for="90s", gpus=4)  # still running when it returns
        _wait_for(lambda: any(_running_on(chaos, c) for c in ctx.fleet.members), 240)
        time.sleep(3)  # let the rest start too, then take down the member running most
        member = max(sorted(ctx.fleet.members), key=lambda c: _running_count(chaos, c))
        chaos.result.notes.append(f"{member} taken down with "
                                  f"{_running_count(chaos, member)} pods running")
        down_for = 30.0  # > heartbeat timeout 15s + toleration 5s: its jobs fail over
        if run % 2 == 0:
            ctx.fleet.kill_component(member, "kube-apiserver", signal.SIGSTOP)
            time.sleep(down_for)
            ctx.fleet.kill_component(member, "kube-apiserver", signal.SIGCONT)
            chaos.result.notes.append("frozen and thawed")
        else:
            _components(ctx).kill_and_restart(member, "kube-apiserver", down_for=down_for)
            chaos.result.notes.append("killed and restarted")
        chaos.probe()
        return chaos.finish()


def _running_count(chaos: Run, cluster: str) -> int:
    data = chaos.ledger.fresh().get(cluster) or {}
    return sum((p.get("status") or {}).get("phase") == "Running" for p in data.get("pods", []))


def _running_on(chaos: Run, cluster: str) -> bool:
    data = chaos.ledger.fresh().get(cluster) or {}
    return any((p.get("status") or {}).get("phase") == "Running" for p in data.get("pods", []))


# -- 5. the hub's API server frozen while members run jobs -------------------------------------

def hub_frozen(ctx: Context, run: int) -> RunResult:
    with Run(ctx, _ns("hubfrozen", run)) as chaos:
        chaos.policy()
        for i in range(10):
            chaos.submit(f"job-{i}", run_for="15s")
        _wait_for(lambda: _running_on(chaos, "member1") or _running_on(chaos, "member2"), 120)
        ctx.fleet.kill_component(HUB, "kube-apiserver", signal.SIGSTOP)
        time.sleep(20)  # the members' jobs run to their end meanwhile
        ctx.fleet.kill_component(HUB, "kube-apiserver", signal.SIGCONT)
        chaos.probe()
        return chaos.finish()


# -- 6. the hub's etcd restarted ----------------------------------------------------------------

def hub_etcd(ctx: Context, run: int) -> RunResult:
    with Run(ctx, _ns("etcd", run)) as chaos:
        chaos.policy()
        streaming = chaos.stream("job", 30, 5.0, run_for="2s")
        time.sleep(2)
        _components(ctx).kill_and_restart(HUB, "etcd", down_for=3)
        ctx.say("hub etcd killed and restarted")
        chaos.probe()
        streaming.join()
        return chaos.finish()


# -- 7. application failover under each purge mode ----------------------------------------------

def failover(ctx: Context, run: int) -> RunResult:
    """A gang that cannot be scheduled where it was first placed (a node selector only the
    other member's nodes satisfy; the hub does not read node selectors), or whose containers
    crash-loop there, stays unhealthy past tolerationSeconds and is moved. Per Karmada and the
    seed: Immediately removes the old copy before the new one is created; Graciously creates
    the new one and removes the old once the new one runs or gracePeriodSeconds pass; Never
    leaves the old copy to the user."""
    mode = PURGE_MODES[run % len(PURGE_MODES)]
    limits = Limits(gang_grace=30, orphan_grace=45)
    with Run(ctx, _ns(f"failover-{mode.lower()}", run), limits) as chaos:
        chaos.policy(toleration=5, purge=mode)
        for i in range(3):
            # each job selects a node label no node has yet; once bound, the nodes of the
            # other members get it: it cannot be scheduled where it was placed, only there
            label = f"chaos.fleet.sh/{chaos.namespace}-{i}"[:63]

            def pin(job: Body, label: str = label) -> None:
                for spec in job["spec"]["pytorchReplicaSpecs"].values():
                    spec["template"]["spec"]["nodeSelector"] = {label: "yes"}
            chaos.submit(f"pinned-{i}", run_for="3s", patch=pin)
            name = f"pinned-{i}"
            placed = _wait_for(partial(_clusters_of, ctx.hub, chaos.namespace, name), 120)
            for cluster in ctx.fleet.members:
                if cluster not in placed:
                    _label_nodes(ctx.fleet, cluster, label)
        # and one whose pods crash-loop where it was placed (as a kubelet reports a container
        # it keeps restarting); on the member it moves to they run and end
        chaos.submit("crashing", run_for="25s")
        placed = _wait_for(partial(_clusters_of, ctx.hub, chaos.namespace, "crashing"), 120)
        _wait_for(partial(_crash_loop, ctx.fleet, placed[0], chaos.namespace, "crashing"), 120)
        chaos.probe()
        moved: list[Body] = []

        def user_cleans_up() -> None:
            moved.extend(e for e in ctx.hub.list(r.EVENTS, chaos.namespace)[0]
                         if e.get("reason") == "FailedOver")
            for left in sorted(chaos.ledger.kept_by_never):  # the user's to remove; the
                # copies of the deleted jobs' last placements are the agents' to remove
                cluster, key = left.split(":", 1)
                namespace, name = key.split("/", 1)
                ctx.fleet.client(cluster).delete(r.PYTORCHJOBS, name, namespace)

        result = chaos.finish(end_timeout=150, after_delete=user_cleans_up)
        result.notes.append(f"purgeMode {mode}: {len(moved)} failover(s); old copies left to "
                            f"the user: {sorted(chaos.ledger.kept_by_never)}")
        return result


def _clusters_of(hub: Kube, namespace: str, name: str) -> list[str]:
    job = hub.get_or_none(r.PYTORCHJOBS, name, namespace) or {}
    text = ((job.get("metadata") or {}).get("annotations") or {}).get("fleet.sh/clusters", "")
    return [c for c in text.split(",") if c]


def _crash_loop(fleet: LocalFleet, cluster: str, namespace: str, job: str) -> bool | None:
    """Once the job's pods run on ``cluster``, report each as its kubelet reports a container
    it keeps restarting; None until they run."""
    member = fleet.client(cluster)
    pods = [p for p in member.list(r.PODS, namespace)[0]
            if (p["metadata"].get("labels") or {}).get(JOB_NAME) == job]
    if not pods or any((p.get("status") or {}).get("phase") != "Running" for p in pods):
        return None
    for pod in pods:
        statuses = [{"name": c["name"], "image": c.get("image", ""), "ready": False,
                     "restartCount": 3, "started": False,
                     "state": {"waiting": {"reason": "CrashLoopBackOff",
                                           "message": "back-off 40s restarting failed container"}}}
                    for c in pod["spec"]["containers"]]
        member.patch(r.PODS, pod["metadata"]["name"], {"status": {"containerStatuses": statuses}},
                     namespace, subresource="status")
    return True


def _label_nodes(fleet: LocalFleet, cluster: str, label: str) -> None:
    member = fleet.client(cluster)
    for node in member.list(r.NODES)[0]:
        member.patch(r.NODES, node["metadata"]["name"], {"metadata": {"labels": {label: "yes"}}})


# -- 8. a member removed (unjoin) with jobs on it ----------------------------------------------

def unjoin(ctx: Context, run: int) -> RunResult:
    member = "member2"
    with Run(ctx, _ns("unjoin", run)) as chaos:
        chaos.policy(toleration=5)
        for i in range(12):  # 48 GPUs: the tightest fit fills member1, the rest go here
            chaos.submit(f"job-{i}", run_for="30s", gpus=4)
        _wait_for(lambda: _running_on(chaos, member), 240)
        onboarding.unjoin(ctx.hub, member)
        ctx.say(f"{member} unjoined with jobs on it")
        chaos.probe()
        result = chaos.finish()
    # back for the next run: wait for its namespace to go, then join again
    ctx.fleet.stop_process(f"agent-{member}")
    _wait_for(lambda: ctx.hub.get_or_none(r.NAMESPACES, f"fleet-member-{member}") is None
              or None, 120)
    ctx.fleet.join(member, ctx.fleet.members[member])
    ctx.fleet.start_agent(member)
    return result


# -- 9. the leading hub Pod killed --------------------------------------------------------------

def hub_pod_kill(ctx: Context, run: int) -> RunResult:
    """The hub as shipped (a Deployment of two replicas, one leading) loses its leader during
    a stream of jobs: even runs delete the leader's Pod with grace 0 (the Deployment makes a
    new one), odd runs SIGKILL its container (the kubelet restarts it). The other replica
    takes the Lease and the jobs keep flowing."""
    if not ctx.fleet.runs_pods:
        return RunResult(skipped="the hub runs as host processes on this fleet (real nodes "
                                 "run it as Pods: FLEET_NODES=real)")
    jobs, kills = (30, 1) if ctx.short else (300, 5)
    with Run(ctx, _ns("hubpod", run)) as chaos:
        chaos.policy()
        rate = 5.0
        streaming = chaos.stream("job", jobs, rate, run_for="1s")
        rng = random.Random(ctx.seed + run)
        for k in range(kills):
            time.sleep(max(2.0, jobs / rate / (kills + 1) * rng.uniform(0.5, 1.0)))
            leader = ctx.fleet.hub_leader_pod()
            if run % 2 == 0:
                ctx.fleet.delete_hub_pod(leader, grace=0)
            else:
                ctx.fleet.kill_container(HUB, leader)
            ctx.say(f"leading hub Pod {leader} killed ({k + 1}/{kills})")
            chaos.probe()
            ctx.fleet.wait_hub_pods_ready()  # two replicas again before the next kill
        streaming.join()
        return chaos.finish()


# -- 10. fuzzed input ------------------------------------------------------------------------------

def fuzz(ctx: Context, run: int) -> RunResult:
    """The seeded fuzzer (``e2e/chaos/fuzz.py``) throws invalid and hostile objects at the
    hub; afterwards every process still runs and a fresh job still goes through."""
    try:
        fuzzer = importlib.import_module("e2e.chaos.fuzz")
    except ModuleNotFoundError:
        return RunResult(skipped="e2e/chaos/fuzz.py is not there (the fuzzer is written "
                                 "apart and merged separately)")
    count = 500 if ctx.short else 10_000
    with Run(ctx, _ns("fuzz", run)) as chaos:
        chaos.policy()
        outcome = fuzzer.run(ctx.fleet, seed=ctx.seed + run, count=count, say=ctx.say)
        problems = _fuzz_problems(outcome)
        alive = ctx.fleet.processes()
        chaos.probe()
        result = chaos.finish()
        result.violations += [Violation("fuzz", str(i), str(p), time.time())
                              for i, p in enumerate(problems)]
        dead = [name for name, pid in alive.items() if not faults.alive(pid)]
        result.violations += [Violation("crash", name, "process exited during fuzzing",
                                        time.time()) for name in dead]
        result.notes.append(f"{count} fuzzed objects")
        return result


# -- 11. passing causes on members: refusals that lift by themselves -----------------------
# Each job must end once its cause passes (within the 5 minutes of ``finish``), and the hub
# must show the wait as Waiting, never as a ReplicaFailure (the ledger's ``passing`` check).

def fresh_namespaces(ctx: Context, run: int) -> RunResult:
    """Jobs streamed each into a namespace of its own while the members'
    kube-controller-managers are down, so no new namespace has its default ServiceAccount
    yet (as under load, for longer): the jobs wait for it and run once it comes."""
    count, down = (6, 20.0) if ctx.short else (12, 30.0)
    base = _ns("freshns", run)
    components = _components(ctx)
    with Run(ctx, base, passing=True,
             others=tuple(f"{base}-{i}" for i in range(count))) as chaos:
        chaos.policy()
        for namespace in chaos.others:
            chaos.policy(namespace=namespace)
        downs = [threading.Thread(target=components.kill_and_restart,
                                  args=(member, "kube-controller-manager", down), daemon=True)
                 for member in ctx.fleet.members]
        for thread in downs:
            thread.start()
        time.sleep(1)
        for i, namespace in enumerate(chaos.others):
            chaos.submit(f"job-{i}", namespace=namespace, run_for="2s")
            time.sleep(down / count / 2)
        for thread in downs:
            thread.join()
        ctx.say("kube-controller-managers back")
        chaos.probe()
        return chaos.finish(cause="ServiceAccountNotReady")


MEMBER_QUOTA = "chaos-gpus"


def member_quota(ctx: Context, run: int) -> RunResult:
    """A ResourceQuota on each member holding two GPUs of the run's namespace, and a burst of
    one-GPU jobs the hub places by the members' free GPUs (it does not read their quotas):
    the quota is full while they come, so most wait (the quota full now, each pod within its
    hard limit) and run as it drains."""
    jobs = 8 if ctx.short else 16
    with Run(ctx, _ns("memberquota", run), passing=True) as chaos:
        chaos.policy()
        for member in ctx.fleet.members:
            kube = ctx.fleet.client(member)
            _member_namespace(kube, chaos.namespace)
            kube.apply(r.RESOURCEQUOTAS, {
                "apiVersion": "v1", "kind": "ResourceQuota",
                "metadata": {"name": MEMBER_QUOTA, "namespace": chaos.namespace},
                "spec": {"hard": {"requests.nvidia.com/gpu": "2"}}}, field_manager="chaos")
        for i in range(jobs):
            chaos.submit(f"job-{i}", run_for="3s")

        def drop_quotas() -> None:
            for member in ctx.fleet.members:
                with contextlib.suppress(errors.NotFound):
                    ctx.fleet.client(member).delete(r.RESOURCEQUOTAS, MEMBER_QUOTA,
                                                    chaos.namespace)
        return chaos.finish(after_delete=drop_quotas, cause="MemberQuotaFull")


def member_webhook_down(ctx: Context, run: int) -> RunResult:
    """An admission webhook on each member (failurePolicy Fail) that cannot be called for
    30 s while jobs stream in: the members refuse their pods with a server error naming the
    webhook; the jobs wait and run once it answers again (here: once it is removed)."""
    jobs, down = (6, 30.0) if ctx.short else (12, 30.0)
    with Run(ctx, _ns("webhook", run), passing=True) as chaos:
        chaos.policy()
        name = f"{chaos.namespace}-down"
        for member in ctx.fleet.members:
            kube = ctx.fleet.client(member)
            _member_namespace(kube, chaos.namespace)
            kube.apply(r.VALIDATINGWEBHOOKCONFIGURATIONS, _unreachable_webhook(
                name, chaos.namespace), field_manager="chaos")
        began = time.monotonic()
        streaming = chaos.stream("job", jobs, jobs / down, run_for="2s")
        time.sleep(max(0.0, down - (time.monotonic() - began)))
        for member in ctx.fleet.members:
            ctx.fleet.client(member).delete(r.VALIDATINGWEBHOOKCONFIGURATIONS, name)
        ctx.say("member webhooks answer again")
        streaming.join()
        chaos.probe()
        return chaos.finish(cause="MemberAdmissionUnavailable")


def _member_namespace(kube: Kube, namespace: str) -> None:
    """The run's namespace on a member made ahead of its jobs (the agent would make it)."""
    with contextlib.suppress(errors.AlreadyExists):
        kube.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": namespace}})


def _unreachable_webhook(name: str, namespace: str) -> Body:
    """A webhook on pod creation in ``namespace`` whose server does not answer (a port
    nothing listens on): with failurePolicy Fail the API server refuses every such pod."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration", "metadata": {"name": name},
        "webhooks": [{
            "name": "down.chaos.fleet.sh", "failurePolicy": "Fail", "sideEffects": "None",
            "admissionReviewVersions": ["v1"], "timeoutSeconds": 2,
            "clientConfig": {"url": "https://127.0.0.1:9/validate"},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"]}]}]}


def _fuzz_problems(outcome: object) -> list[str]:
    """What the fuzzer's report lists as wrong: rejections naming no field, accepted objects
    no controller answered, errors, tracebacks in the logs, memory over its bound, and a valid
    job that did not succeed afterwards."""
    if getattr(outcome, "ok", True):
        return []
    found = [f"{name}: {item}" for name in ("unnamed", "unhandled", "errors", "tracebacks",
                                            "over_rss")
             for item in getattr(outcome, name, None) or []]
    final = getattr(outcome, "final_job", "Succeeded")
    if final != "Succeeded":
        found.append(f"a valid job afterwards: {final or 'not run'}")
    return found or [str(getattr(outcome, "summary", lambda: outcome)())]


def _wait_for(check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = check()
        except (errors.ApiError, OSError):
            found = None
        if found:
            return found
        time.sleep(0.5)
    raise TimeoutError(f"timed out after {timeout:.0f}s")


@dataclass(frozen=True)
class Scenario:
    name: str
    run: Callable[[Context, int], RunResult]
    full: int  # runs for ``make chaos``
    short: int = 1  # runs in CI's short lane
    pods: bool = False  # needs the hub and agents as Pods (a fleet with real nodes)


SCENARIOS = (
    Scenario("hub-kill", hub_kill, full=1),  # one run: 20 kills during a 1,000-job stream
    Scenario("split-brain", split_brain, full=5),
    Scenario("leadership", leadership, full=10),
    Scenario("agent-kill", agent_kill, full=5),
    Scenario("member-down", member_down, full=6, short=2),  # 3 freeze/thaw + 3 kill/restart
    Scenario("hub-apiserver-frozen", hub_frozen, full=5),
    Scenario("hub-etcd-restart", hub_etcd, full=5),
    Scenario("failover", failover, full=15, short=3),  # 5 of each purge mode
    Scenario("unjoin", unjoin, full=5),
    Scenario("fuzz", fuzz, full=1),  # one run of 10,000 objects
    Scenario("hub-pod-kill", hub_pod_kill, full=4, pods=True),  # 2 Pod deletes, 2 SIGKILLs
    Scenario("fresh-namespaces", fresh_namespaces, full=10),
    Scenario("member-quota", member_quota, full=10),
    Scenario("member-webhook-down", member_webhook_down, full=10),
)
