"""A ledger of hub and member state, sampled while a scenario runs, checked against the
invariants of docs/architecture.md.

One thread per cluster lists what the checks need (hub: jobs, Works, the quota tree; member:
jobs and pods) every ``interval`` seconds, with a short client timeout so a frozen API server
only makes its snapshot stale. A checker combines the latest snapshots; a snapshot older than
``stale_after`` is left out of that round, so a member that cannot be seen is judged from the
moment it can be seen again (a partitioned member cannot remove anything; fencing is about
what it does when it returns).

Invariants (each violation names the job or object and what was seen):

- ``bound-twice``: a job has live Works (not being deleted, not evicting) on a cluster outside
  its placement, beyond ``settle`` seconds; or its placement changed more often than failovers
  and requeues were recorded (``FailedOver``/``Preempted`` events, requeue marks seen).
- ``two-clusters``: a job's pods run on two clusters, not all in its placement, beyond
  ``gang_grace`` seconds.
- ``orphan``: a member job or pod whose Work is gone from the hub, beyond ``orphan_grace``.
- ``quota``: usage derived from the hub's bindings (admitted, bound, not requeued, not
  finished), or a Queue's published ``used``, above ``max`` at any tree node, at any sample.
- ``pending``: a pod Pending on a member longer than ``pending_bound`` seconds while its
  cluster is seen.
- ``not-ended``/``wrong-end``: a job that did not end, or ended otherwise than its input says
  (Failed only when the user asked for a non-zero exit code).
- ``misreported``: the hub job shows a member failure or wait (its ``ReplicaFailure`` or
  ``Waiting`` condition) that none of its Works reports now, beyond ``settle`` seconds; with
  ``passing`` (a scenario whose members refuse pods only for causes that pass), any
  ``ReplicaFailure`` the hub shows for a member at all.
- ``no-cause``: a scenario meant to make a passing cause, and no job was told to wait for it.
- ``ended-term`` (with ``terms``): a Work created under a hub leader's term after a later term
  had begun, counted from the Work's own term mark and creation time against the hub Lease's
  terms as sampled (the host's clock, the API server's too: hubs may run with skewed ones).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from e2e.jobs import state
from e2e.localfleet import HUB, LocalFleet
from fleet.api.protocol import (
    ADMITTED_AT,
    CLUSTERS,
    EVICT_AFTER,
    FAILOVER_SINCE,
    HEALTHY,
    JOB_UID,
    PLACEMENT,
    PURGE_MODE,
    REPLICA_FAILURE,
    REQUEUE,
    TERM,
)
from fleet.api.quantity import canonical
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube
from fleet.hub.elastic import placed_demand
from fleet.hub.member_failures import SHOWN
from fleet.kinds import adapter_for

Body = dict[str, Any]
MAX_JOBS = "kube-queue/max-jobs"
JOB_NAME = "training.kubeflow.org/job-name"
TERMINAL = ("Succeeded", "Failed")
REQUEUE_REASONS = ("FailedOver", "Preempted")
BINDING = "ScheduleBindingSucceed"
# A Work's creation time has whole seconds and a new term is seen up to a sample late
TERM_SLACK = 2.0


@dataclass(frozen=True)
class Violation:
    kind: str
    subject: str
    detail: str
    at: float

    def __str__(self) -> str:
        return f"{self.kind} {self.subject}: {self.detail}"


@dataclass
class Snapshot:
    taken: float
    data: dict[str, Any]


@dataclass
class Limits:
    interval: float = 1.0
    stale_after: float = 6.0
    settle: float = 5.0
    gang_grace: float = 30.0
    orphan_grace: float = 45.0
    pending_bound: float = 120.0


@dataclass
class Ledger:
    fleet: LocalFleet
    namespaces: tuple[str, ...]
    limits: Limits = field(default_factory=Limits)
    samples: int = 0
    violations: dict[tuple[str, str], Violation] = field(default_factory=dict)
    kept_by_never: set[str] = field(default_factory=set)  # member jobs left by purgeMode Never
    terms: bool = False  # check the Works' leader terms against the hub Lease
    passing: bool = False  # the members refuse pods only for causes that pass

    def __post_init__(self) -> None:
        self._latest: dict[str, Snapshot] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._since: dict[tuple[str, str], float] = {}  # condition first seen
        self._placements: dict[str, str] = {}  # uid -> last placement seen
        self._changes: dict[str, int] = {}  # uid -> placement changes seen
        self._requeues_seen: dict[str, int] = {}  # uid -> requeue marks seen
        self._marked: set[str] = set()  # uids whose current requeue mark was counted
        self._names: dict[str, str] = {}  # uid -> namespace/name
        self.term_began: dict[str, float] = {}  # hub leader term -> wall time first seen
        self._clusters = [HUB, *self.fleet.members]

    # -- running ------------------------------------------------------------------------
    def start(self) -> Ledger:
        for cluster in self._clusters:
            thread = threading.Thread(target=self._sample_loop, args=(cluster,),
                                      name=f"ledger-{cluster}", daemon=True)
            thread.start()
            self._threads.append(thread)
        checker = threading.Thread(target=self._check_loop, name="ledger-check", daemon=True)
        checker.start()
        self._threads.append(checker)
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=40)

    def __enter__(self) -> Ledger:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _sample_loop(self, cluster: str) -> None:
        kube: Kube | None = None
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                if kube is None:
                    kube = Kube(str(self.fleet.kubeconfig(cluster)), timeout=4)
                data = self._read_hub(kube) if cluster == HUB else self._read_member(kube)
                with self._lock:
                    self._latest[cluster] = Snapshot(time.monotonic(), data)
            except (errors.ApiError, OSError, ValueError):
                pass  # unreachable or frozen: its last snapshot grows stale
            except Exception:  # a removed member's kubeconfig, a half-written object
                kube = None
            self._stop.wait(max(0.0, self.limits.interval - (time.monotonic() - started)))

    def _read_hub(self, kube: Kube) -> dict[str, Any]:
        works, _ = kube.list(r.WORKS)
        jobs: list[Body] = []
        for namespace in self.namespaces:
            jobs.extend(kube.list(r.PYTORCHJOBS, namespace)[0])
        tree = kube.get_or_none(r.ELASTICQUOTATREES, "elasticquotatree", "kube-system")
        queues = kube.list(r.QUEUES, "kube-queue")[0] if tree else []
        lease = kube.get_or_none(r.LEASES, "fleet-hub", "fleet-system") if self.terms else None
        return {"works": works, "jobs": jobs, "tree": tree, "queues": queues,
                "term": term_of(lease), "read": time.time()}

    def _read_member(self, kube: Kube) -> dict[str, Any]:
        jobs: list[Body] = []
        pods: list[Body] = []
        for namespace in self.namespaces:
            jobs.extend(kube.list(r.PYTORCHJOBS, namespace)[0])
            pods.extend(kube.list(r.PODS, namespace)[0])
        return {"jobs": jobs, "pods": pods}

    def _check_loop(self) -> None:
        while not self._stop.is_set():
            self._stop.wait(self.limits.interval)
            try:
                self.check_once()
            except Exception as exc:  # the ledger must keep watching whatever it meets
                self._violate("ledger", "checker", f"check failed: {exc!r}")

    # -- checking -----------------------------------------------------------------------
    def fresh(self) -> dict[str, Body]:
        now = time.monotonic()
        with self._lock:
            return {c: s.data for c, s in self._latest.items()
                    if now - s.taken <= self.limits.stale_after
                    and (c == HUB or c in self.fleet.members)}

    def check_once(self) -> None:
        seen = self.fresh()
        hub = seen.get(HUB)
        if hub is None:
            return
        self.samples += 1
        members = {c: d for c, d in seen.items() if c != HUB}
        jobs = {j["metadata"]["uid"]: j for j in hub["jobs"]}
        for uid, job in jobs.items():
            self._names[uid] = f"{job['metadata']['namespace']}/{job['metadata']['name']}"
        works_by_uid: dict[str, list[Body]] = {}
        for work in hub["works"]:
            works_by_uid.setdefault(work["spec"]["job"]["uid"], []).append(work)
        holding: set[tuple[str, str]] = set()
        holding |= self._check_placements(jobs, works_by_uid)
        holding |= self._check_members(jobs, works_by_uid, members)
        holding |= self._check_shown(jobs, works_by_uid)
        self._check_quota(hub)
        if self.terms:
            self._check_terms(hub)
        for key in list(self._since):  # conditions no longer seen start afresh next time
            if key not in holding:
                del self._since[key]

    def _held(self, key: tuple[str, str], grace: float, detail: str) -> tuple[str, str]:
        first = self._since.setdefault(key, time.monotonic())
        if time.monotonic() - first > grace:
            self._violate(key[0], key[1], f"{detail} for over {grace:.0f}s")
        return key

    def _check_placements(self, jobs: Mapping[str, Body],
                          works_by_uid: Mapping[str, list[Body]]) -> set[tuple[str, str]]:
        holding = set()
        for uid, job in jobs.items():
            annotations = job["metadata"].get("annotations") or {}
            placement = annotations.get(PLACEMENT) or ""
            if REQUEUE in annotations or FAILOVER_SINCE in annotations:
                if uid not in self._marked:
                    self._requeues_seen[uid] = self._requeues_seen.get(uid, 0) + 1
                    self._marked.add(uid)
            else:
                self._marked.discard(uid)
            last = self._placements.get(uid, "")
            if placement and last and placement != last:
                self._changes[uid] = self._changes.get(uid, 0) + 1
            if placement:
                self._placements[uid] = placement
            clusters = set(filter(None, (annotations.get(CLUSTERS) or "").split(",")))
            live = {w["spec"]["placement"]["cluster"] for w in works_by_uid.get(uid, [])
                    if not w["metadata"].get("deletionTimestamp")
                    and EVICT_AFTER not in (w["metadata"].get("annotations") or {})}
            if live - clusters:
                holding.add(self._held(
                    ("bound-twice", self._names[uid]), self.limits.settle,
                    f"live Works on {sorted(live)} while placed on {sorted(clusters)}"))
        return holding

    def _check_members(self, jobs: Mapping[str, Body], works_by_uid: Mapping[str, list[Body]],
                       members: Mapping[str, Body]) -> set[tuple[str, str]]:
        holding = set()
        running: dict[str, set[str]] = {}
        for cluster, data in members.items():
            uid_of = {}  # member job name -> hub job uid
            for job in data["jobs"]:
                meta = job["metadata"]
                uid = (meta.get("labels") or {}).get(JOB_UID, "")
                uid_of[(meta["namespace"], meta["name"])] = uid
                has_work = any(w["spec"]["placement"]["cluster"] == cluster
                               for w in works_by_uid.get(uid, []))
                if (meta.get("annotations") or {}).get(PURGE_MODE) == "Never" and \
                        not has_work and uid in jobs:
                    # failed over with purgeMode Never: Karmada and the seed leave the old
                    # copy to the user; it is no orphan, and its pods may wait for ever. (Once
                    # the hub job is deleted, its copies must go whatever the purge mode.)
                    self.kept_by_never.add(f"{cluster}:{meta['namespace']}/{meta['name']}")
                    uid_of[(meta["namespace"], meta["name"])] = ""
                    continue
                if not has_work:
                    holding.add(self._held(
                        ("orphan", f"{cluster}:{meta['namespace']}/{meta['name']}"),
                        self.limits.orphan_grace, "member job without a Work on the hub"))
            for pod in data["pods"]:
                meta = pod["metadata"]
                job_name = (meta.get("labels") or {}).get(JOB_NAME)
                if not job_name:
                    continue
                uid = uid_of.get((meta["namespace"], job_name))
                if uid == "" and f"{cluster}:{meta['namespace']}/{job_name}" in \
                        self.kept_by_never:
                    continue
                phase = (pod.get("status") or {}).get("phase")
                name = f"{cluster}:{meta['namespace']}/{meta['name']}"
                if uid is None and phase in ("Pending", "Running"):
                    holding.add(self._held(("orphan", name), self.limits.orphan_grace,
                                           "pod without its member job"))
                if phase == "Running" and uid:
                    running.setdefault(uid, set()).add(cluster)
                if phase == "Pending" and not meta.get("deletionTimestamp"):
                    holding.add(self._held(("pending", name), self.limits.pending_bound,
                                           "pod Pending"))
        for uid, clusters in running.items():
            job = jobs.get(uid)
            placed = set(filter(None, ((job or {}).get("metadata", {}).get("annotations") or {}
                                       ).get(CLUSTERS, "").split(",")))
            if len(clusters) > 1 and not clusters <= placed:
                holding.add(self._held(
                    ("two-clusters", self._names.get(uid, uid)), self.limits.gang_grace,
                    f"pods Running on {sorted(clusters)}, placed on {sorted(placed)}"))
        return holding

    def _check_shown(self, jobs: Mapping[str, Body],
                     works_by_uid: Mapping[str, list[Body]]) -> set[tuple[str, str]]:
        """The member failures and waits each hub job shows against its Works' health."""
        holding = set()
        for uid, job in jobs.items():
            reported = {str(c.get("reason")) for w in works_by_uid.get(uid, [])
                        for c in (w.get("status") or {}).get("conditions") or []
                        if c.get("type") == HEALTHY and c.get("status") == "False"}
            for condition in (job.get("status") or {}).get("conditions") or []:
                kind, reason = condition.get("type"), condition.get("reason")
                if condition.get("status") != "True" or reason not in SHOWN.get(kind, ()):
                    continue
                if reason not in reported:
                    holding.add(self._held(
                        ("misreported", self._names[uid]), self.limits.settle,
                        f"shows {kind} {reason} that none of its Works reports"))
                elif self.passing and kind == REPLICA_FAILURE:
                    holding.add(self._held(
                        ("misreported", self._names[uid]), 0.0,
                        f"shows a passing refusal as a failure: {reason}: "
                        f"{str(condition.get('message'))[:200]}"))
        return holding

    def _check_quota(self, hub: Body) -> None:
        tree = hub.get("tree")
        if not tree:
            return
        nodes = list(_walk(tree["spec"]["root"], ()))
        usage: dict[str, dict[str, int]] = {path: {} for path, _, _ in nodes}
        held: list[Body] = []
        for job in hub["jobs"]:
            annotations = job["metadata"].get("annotations") or {}
            adapter = adapter_for(job["apiVersion"], job["kind"])
            if ADMITTED_AT not in annotations or PLACEMENT not in annotations or \
                    REQUEUE in annotations or adapter.is_finished(job):
                continue
            held.append(job)
        for path, spec, namespaces in nodes:
            for job in held:
                if job["metadata"]["namespace"] not in namespaces:
                    continue
                adapter = adapter_for(job["apiVersion"], job["kind"])
                # what the job runs: an elastic one at its placed size, not its spec's
                charge = dict(placed_demand(job, adapter.demand("", job)).total)
                charge[MAX_JOBS] = 1
                for resource, amount in charge.items():
                    usage[path][resource] = usage[path].get(resource, 0) + amount
            for resource, limit in (spec.get("max") or {}).items():
                used = usage[path].get(resource, 0)
                if used > canonical(resource, limit):
                    self._violate("quota", f"{path} {resource}",
                                  f"bindings hold {used} > max {limit}")
        for queue in hub.get("queues") or []:
            status = queue.get("status") or {}
            for resource, used in (status.get("used") or {}).items():
                limit = (status.get("max") or {}).get(resource)
                if limit is not None and canonical(resource, used) > canonical(resource, limit):
                    self._violate("quota", f"Queue {queue['metadata']['name']} {resource}",
                                  f"published used {used} > max {limit}")

    def _check_terms(self, hub: Body) -> None:
        """No Work of a term that had ended when it was made (see the module's list)."""
        if hub["term"]:
            self.term_began.setdefault(hub["term"], hub["read"])
        for work in hub["works"]:
            meta = work["metadata"]
            term = (meta.get("annotations") or {}).get(TERM)
            created = _seconds(meta.get("creationTimestamp"))
            if not term or created is None or work["spec"]["job"]["uid"] not in self._names:
                continue  # not a Work of this scenario's jobs
            later = [began for other, began in self.term_began.items()
                     if _after(other, term) and began + TERM_SLACK < created]
            if later:
                self._violate("ended-term", meta["name"],
                              f"made under term {term} {created - min(later):.0f}s after a "
                              "later term began")

    def _violate(self, kind: str, subject: str, detail: str) -> None:
        key = (kind, subject)
        if key not in self.violations:
            self.violations[key] = Violation(kind, subject, detail, time.time())

    # -- the end of a scenario -------------------------------------------------------------
    def hub_jobs(self) -> dict[str, Body]:
        data = self.fresh().get(HUB)
        return {f"{j['metadata']['namespace']}/{j['metadata']['name']}": j
                for j in (data or {}).get("jobs", [])}

    def await_ends(self, expected: Mapping[str, str], timeout: float,
                   say: Callable[[str], None] = lambda _: None) -> None:
        """Wait until every job in ``expected`` (namespace/name -> Succeeded or Failed) has
        ended on the hub; a job that does not, or ends otherwise, is a violation."""
        deadline = time.monotonic() + timeout
        last_report = 0.0
        while True:
            jobs = self.hub_jobs()
            ended = {k: state(j) for k, j in jobs.items() if state(j) in TERMINAL}
            left = [k for k in expected if k not in ended]
            if not left or time.monotonic() > deadline:
                break
            if time.monotonic() - last_report > 30:
                say(f"{len(expected) - len(left)}/{len(expected)} jobs ended")
                last_report = time.monotonic()
            time.sleep(1)
        for key, wanted in expected.items():
            got = ended.get(key)
            if got is None:
                seen = jobs.get(key)
                self._violate("not-ended", key, "absent from the hub" if seen is None else
                              f"still {state(seen) or 'without a state'} after {timeout:.0f}s")
            elif got != wanted:
                self._violate("wrong-end", key, f"{got}, expected {wanted}")

    def requeues_recorded(self, hub: Kube) -> None:
        """Compare placement changes with the failovers and requeues recorded for each job."""
        counted: dict[str, int] = {}
        bindings: dict[str, int] = {}
        for namespace in self.namespaces:
            for event in hub.list(r.EVENTS, namespace)[0]:
                uid = (event.get("involvedObject") or {}).get("uid", "")
                if event.get("reason") in REQUEUE_REASONS:
                    counted[uid] = counted.get(uid, 0) + int(event.get("count") or 1)
                elif event.get("reason") == BINDING:
                    bindings[uid] = bindings.get(uid, 0) + int(event.get("count") or 1)
        for uid in set(self._changes) | set(bindings):
            allowed = max(counted.get(uid, 0), self._requeues_seen.get(uid, 0))
            changes = self._changes.get(uid, 0)
            if changes > allowed:
                self._violate("bound-twice", self._names.get(uid, uid),
                              f"placement changed {changes} time(s), {allowed} failover(s) "
                              "or requeue(s) recorded")
            # A hub that dies may lose an event, never send one twice: more binding events
            # than one per placement means two binds of one placement (identical or not).
            if bindings.get(uid, 0) > 1 + allowed:
                self._violate("bound-twice", self._names.get(uid, uid),
                              f"{bindings[uid]} {BINDING} events, {allowed} failover(s) or "
                              "requeue(s) recorded")

    def causes_made(self, hub: Kube, reason: str) -> int:
        """How many hub jobs were told to wait for ``reason`` (a scenario that means to
        make a cause checks it did: without it the run proves nothing)."""
        told = {(e.get("involvedObject") or {}).get("uid")
                for namespace in self.namespaces for e in hub.list(r.EVENTS, namespace)[0]
                if e.get("reason") == reason}
        if not told:
            self._violate("no-cause", reason, "no job was told to wait for it: the scenario "
                          "did not make its cause")
        return len(told)

    def drained(self) -> bool:
        """Whether no member holds a job or pod of the ledger's namespaces."""
        seen = self.fresh()
        return len(seen) == len(self._clusters) and not any(
            d["jobs"] or d["pods"] for c, d in seen.items() if c != HUB)

    def summary(self) -> list[Violation]:
        return sorted(self.violations.values(), key=lambda v: v.at)


def term_of(lease: Body | None) -> str:
    """A hub Lease's term as the hub writes it (``fleet.clients.leases.term_of``)."""
    if not lease:
        return ""
    spec = lease.get("spec") or {}
    return f"{lease['metadata'].get('uid', '')}:{int(spec.get('leaseTransitions') or 0)}"


def _after(term: str, than: str) -> bool:
    """Whether ``term`` began after ``than`` (the same Lease, more transitions)."""
    uid, _, count = term.rpartition(":")
    other_uid, _, other_count = than.rpartition(":")
    return uid == other_uid and count.isdigit() and other_count.isdigit() \
        and int(count) > int(other_count)


def _seconds(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def _walk(node: Mapping[str, Any], parent: tuple[str, ...]
          ) -> Iterable[tuple[str, Mapping[str, Any], set[str]]]:
    """(path, node, namespaces of its subtree) for every node of a tree spec."""
    path = (*parent, str(node.get("name", "")))
    below = list(node.get("children") or [])
    namespaces = set(node.get("namespaces") or [])
    out = [entry for child in below for entry in _walk(child, path)]
    for _, _, spaces in out:
        namespaces |= spaces
    yield "/".join(path), node, namespaces
    yield from out
