"""The controller machinery around the pure core: caches fed by watches, a de-duplicating work
queue, and the shell that carries a reconcile's decision out.

kopf delivers job and pod events (``handlers``); they land in :class:`Stores` and queue the
job's key. Worker threads take keys one at a time (a key is never reconciled twice at once),
read the job and its pods from the stores and the few other objects a kind needs, call the
pure :func:`reconcile.decide`, and write.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fleet import jobkeys
from fleet.api.protocol import MEMBER_WAITING_REASONS, RUN_ATTEMPT, RUN_VARIANT, copy_work
from fleet.clients import errors, events
from fleet.clients import resources as r
from fleet.clients.kube import Kube
from fleet.onboarding import installed_by_fleet
from member_agent.controllers import core, tensorboard
from member_agent.controllers.gang import PODGROUPS, Gang, Scheduler, choose
from member_agent.controllers.jobset import JOBSET, JOBSET_NAME
from member_agent.controllers.kind import JobKind, Observed, owner
from member_agent.controllers.kubeflow import PYTORCH, TF
from member_agent.controllers.kubeflow_frameworks import JAX, PADDLE, XGBOOST
from member_agent.controllers.kubeflow_mpi import KUBEFLOW_MPI
from member_agent.controllers.reconcile import Decision, check, decide, invalid
from member_agent.controllers.t9k import T9K_GROUP, TENSORFLOW
from member_agent.controllers.t9k_mpi import T9K_MPI
from member_agent.member_failures import Refusal, classify
from propagation.jobkey import JobKey, kind_key

log = logging.getLogger(__name__)


class PodsRefused(Exception):
    """The member refused pods of a job (its quota, an admission policy, a ServiceAccount
    not made yet): recorded as a FailedCreatePod event and on the job's Work, retried with
    backoff, never logged as the agent's own failure. ``passing``: for a cause the member
    lifts by itself, whose retries back off no further than ``PASSING_RETRY_SECONDS``."""

    def __init__(self, message: object, *, passing: bool) -> None:
        super().__init__(message)
        self.passing = passing


# A job waiting for a passing cause (a full quota draining, a webhook coming back) is tried
# at least this often: the member says nothing when the cause passes.
PASSING_RETRY_SECONDS = 30.0


Body = dict[str, Any]
COMPONENT = "fleet-agent"

KINDS: dict[str, JobKind] = {kind.key: kind for kind in (PYTORCH, TF, TENSORFLOW, KUBEFLOW_MPI,
                                                          JAX, PADDLE, XGBOOST,
                                                          T9K_MPI, JOBSET)}
FIELD_MANAGER = "fleet-job-controller"


def key_of(body: Mapping[str, Any]) -> JobKey:
    return JobKey.of_body(body)


def controller_of(pod: Mapping[str, Any]) -> JobKey | None:
    """The job controlling ``pod``, if one of our kinds does."""
    meta = pod["metadata"]
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            key = kind_key(ref.get("apiVersion", ""), ref.get("kind", ""))
            if key in KINDS:
                return JobKey(f"{key}/{meta['namespace']}/{ref['name']}")
    return None


@dataclass
class Stores:
    jobs: dict[JobKey, Body] = field(default_factory=dict)
    pods: dict[JobKey, dict[str, Body]] = field(default_factory=dict)
    boards: dict[JobKey, Body] = field(default_factory=dict)  # TensorBoard Deployments
    # the member's last refusal of a job's pod, until a reconcile creates its pods (read by
    # the Work status reporter into the Work's health)
    refusals: dict[JobKey, Refusal] = field(default_factory=dict)
    # the member's ServiceAccounts (namespace, name), and the jobs whose pods wait for one
    accounts: set[tuple[str, str]] = field(default_factory=set)
    awaiting: dict[tuple[str, str], set[JobKey]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # told of every change to a job, its pods or its refusal (the Work status reporter)
    listeners: list[Callable[[JobKey], None]] = field(default_factory=list)

    def _changed(self, key: JobKey) -> None:
        for listener in self.listeners:
            listener(key)

    def put_job(self, key: JobKey, body: Mapping[str, Any] | None) -> None:
        with self.lock:
            if body is None:
                self.jobs.pop(key, None)
                self.refusals.pop(key, None)
                for account in [a for a, keys in self.awaiting.items() if key in keys]:
                    self.awaiting[account].discard(key)
                    if not self.awaiting[account]:
                        del self.awaiting[account]
            else:
                self.jobs[key] = copy.deepcopy(dict(body))
        self._changed(key)

    def _trainer_run(self, pod: Mapping[str, Any]) -> JobKey | None:
        """The TrainJob a pod of the member's own Trainer runs for a Work, if any: its JobSet
        (whose Jobs own the pod) is named as the TrainJob."""
        name = (pod["metadata"].get("labels") or {}).get(JOBSET_NAME)
        if not name:
            return None
        key = JobKey.of(r.TRAINJOBS.group, r.TRAINJOBS.kind, pod["metadata"]["namespace"], name)
        with self.lock:
            return key if key in self.jobs else None

    def put_pod(self, body: Mapping[str, Any], deleted: bool) -> JobKey | None:
        """Keeps the pod of a job of ours as given and returns that job's key. Pods come in
        through ``MemberState.put_pod``, which hands over a copy of its own."""
        key = controller_of(body) or self._trainer_run(body)
        if key is None:
            return None
        name = body["metadata"]["name"]
        with self.lock:
            pods = self.pods.setdefault(key, {})
            if deleted:
                pods.pop(name, None)
            else:
                pods[name] = dict(body)
        self._changed(key)
        return key

    def put_board(self, body: Mapping[str, Any], deleted: bool) -> JobKey | None:
        key = controller_of(body)
        if key is not None:
            with self.lock:
                if deleted:
                    self.boards.pop(key, None)
                else:
                    self.boards[key] = copy.deepcopy(dict(body))
        return key

    def set_refusal(self, key: JobKey, refusal: Refusal | None) -> None:
        with self.lock:
            before = self.refusals.get(key)
            if refusal is None:
                self.refusals.pop(key, None)
            else:
                self.refusals[key] = refusal
        if before != refusal:
            self._changed(key)

    def put_account(self, body: Mapping[str, Any], deleted: bool) -> list[JobKey]:
        """Record a ServiceAccount; the jobs that waited for it, to reconcile now."""
        meta = body["metadata"]
        account = (str(meta["namespace"]), str(meta["name"]))
        with self.lock:
            if deleted:
                self.accounts.discard(account)
                return []
            self.accounts.add(account)
            return sorted(self.awaiting.pop(account, ()))

    def has_account(self, namespace: str, name: str) -> bool:
        with self.lock:
            return (namespace, name) in self.accounts

    def await_account(self, namespace: str, name: str, key: JobKey) -> None:
        with self.lock:
            if (namespace, name) not in self.accounts:
                self.awaiting.setdefault((namespace, name), set()).add(key)

    def refusal(self, key: JobKey) -> Refusal | None:
        with self.lock:
            return self.refusals.get(key)

    def all_jobs(self) -> list[tuple[JobKey, Body]]:
        with self.lock:
            return list(self.jobs.items())

    def all_pods(self) -> dict[JobKey, list[Body]]:
        """Every pod of our kinds, by the job that owns (or owned) it."""
        with self.lock:
            return {key: list(pods.values()) for key, pods in self.pods.items() if pods}

    def board(self, key: JobKey) -> Body | None:
        with self.lock:
            return self.boards.get(key)

    def read(self, key: JobKey) -> tuple[Body | None, list[Body]]:
        with self.lock:
            job = self.jobs.get(key)
            pods = list(self.pods.get(key, {}).values())
        return job, pods


class WorkQueue:
    """Keys waiting for a reconcile; a key queued twice runs once, never concurrently."""

    def __init__(self) -> None:
        self._pending: list[JobKey] = []
        self._queued: set[JobKey] = set()
        self._running: set[JobKey] = set()
        self._dirty: set[JobKey] = set()
        self._cond = threading.Condition()

    def add(self, key: JobKey) -> None:
        with self._cond:
            if key in self._running:
                self._dirty.add(key)
            elif key not in self._queued:
                self._queued.add(key)
                self._pending.append(key)
                self._cond.notify()

    def take(self, timeout: float) -> JobKey | None:
        with self._cond:
            if not self._pending:
                self._cond.wait(timeout)
            if not self._pending:
                return None
            key = self._pending.pop(0)
            self._queued.discard(key)
            self._running.add(key)
            return key

    def done(self, key: JobKey) -> None:
        with self._cond:
            self._running.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._queued.add(key)
                self._pending.append(key)
                self._cond.notify()


def observe(pod: Mapping[str, Any], kind: JobKind) -> core.ObservedPod:
    meta, status = pod["metadata"], pod.get("status") or {}
    labels = meta.get("labels") or {}
    statuses = status.get("containerStatuses") or []
    containers = []
    for item in statuses:
        state = item.get("state") or {}
        name = next(iter(state), "waiting")
        code = (state.get("terminated") or {}).get("exitCode")
        containers.append(core.ContainerState(item.get("name", ""), name.capitalize(),
                                              None if code is None else int(code)))
    preferred = [c for c in containers if c.name == kind.container] or containers
    exit_code = next((c.exit_code for c in preferred if c.exit_code is not None), None)
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or [])
    return core.ObservedPod(
        name=meta["name"], role=labels.get(kind.type_label, ""),
        index=int(labels.get(kind.index_label, "-1")), phase=status.get("phase") or "Pending",
        exit_code=exit_code, deleting=bool(meta.get("deletionTimestamp")), ready=ready,
        uid=meta.get("uid", ""), containers=tuple(containers),
        variant=(meta.get("annotations") or {}).get(RUN_VARIANT, ""),
        attempt=(meta.get("annotations") or {}).get(RUN_ATTEMPT, ""),
    )


class SchedulerProbe:
    """Which gang schedulers the member has, from its CRDs, re-checked every
    ``FLEET_GANG_PROBE_SECONDS`` (15). ``FLEET_GANG_SCHEDULER`` forces one (or ``none``)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.ttl = float(os.environ.get("FLEET_GANG_PROBE_SECONDS", "15"))
        self.forced = os.environ.get("FLEET_GANG_SCHEDULER", "").strip()
        self._found: tuple[Scheduler, ...] = ()
        self._at = -self.ttl

    def available(self) -> tuple[Scheduler, ...]:
        if self.forced:
            return () if self.forced == "none" else (Scheduler(self.forced),)
        if time.monotonic() - self._at > self.ttl:
            found = []
            for scheduler, resource in PODGROUPS.items():
                try:
                    self.kube.get(r.CRDS, f"{resource.plural}.{resource.group}")
                    found.append(scheduler)
                except errors.ApiError:
                    continue
            self._found, self._at = tuple(found), time.monotonic()
        return self._found


class ServedElsewhere:
    """The agent's kinds whose CRD on the member someone else installed: the member runs
    their controllers (JobSet, Kubeflow Trainer, the training operator), which run the jobs
    created on the member; the agent runs only the copies it applied from Works (whose
    ``managedBy`` names another manager, so those controllers leave them alone). Re-checked
    as often as the gang schedulers."""

    def __init__(self, kube: Kube, ttl: float) -> None:
        self.kube, self.ttl = kube, ttl
        self._known: dict[str, tuple[float, bool]] = {}

    def __call__(self, kind: JobKind) -> bool:
        resource = kind.resource
        at, served = self._known.get(resource.plural + resource.group, (-self.ttl, False))
        if time.monotonic() - at > self.ttl:
            crd = self.kube.get_or_none(r.CRDS, f"{resource.plural}.{resource.group}")
            served = crd is not None and not installed_by_fleet(crd)
            self._known[resource.plural + resource.group] = (time.monotonic(), served)
        return served


class JobController:
    def __init__(self, kube: Kube, stores: Stores, queue: WorkQueue) -> None:
        self.kube = kube
        self.stores = stores
        self.queue = queue
        self.schedulers = SchedulerProbe(kube)
        self.served_elsewhere = ServedElsewhere(kube, self.schedulers.ttl)
        self.events = events.EventRecorder(kube, COMPONENT)
        self._creators = ThreadPoolExecutor(8, thread_name_prefix="create-pods")
        self._ensured: set[tuple[str, str, str, str]] = set()  # (kind, ns, name, job uid)
        self._applied: dict[tuple[str, str, str, str], str] = {}  # ... -> content digest
        # Workers add to both while kopf's handler thread forgets a deleted job's entries.
        self._marks_lock = threading.Lock()
        self._timers: dict[JobKey, threading.Timer] = {}
        self._timers_lock = threading.Lock()
        # Fencing: whether this job may run here now (the Work watch knows the Works); a fenced job
        # is not reconciled at all, so it gets no new pods, until it runs again or is removed.
        self.fence: Callable[[Mapping[str, Any], JobKey], bool] = lambda job, key: True
        # Reservations: the node a slot's placeholder holds (it is deleted as the slot's real
        # pod is created there; the reservation holds know the placeholders), None when none
        # holds it.
        self.take_slot: Callable[[Mapping[str, Any], tuple[str, int]], str | None] = \
            lambda job, slot: None
        self._failures: dict[JobKey, tuple[int, str]] = {}  # key -> (failures in a row, last)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            key = self.queue.take(timeout=1.0)
            if key is None:
                continue
            try:
                self.reconcile(key)
            except errors.Conflict:
                self.queue.add(key)  # read again and retry
            except PodsRefused as exc:  # told on the job and its Work already: retried
                delay = self._failed(key, exc, told=True)
                self.requeue_after(key, min(delay, PASSING_RETRY_SECONDS) if exc.passing
                                   else delay)
            except errors.NotFound as exc:  # mostly a job deleted during its reconcile,
                # whose deletion event is on its way: said only if it happens again
                self.requeue_after(key, self._failed(key, exc, quiet=True))
            except Exception as exc:
                self.requeue_after(key, self._failed(key, exc))
            else:
                self._failures.pop(key, None)
            finally:
                self.queue.done(key)

    def _failed(self, key: JobKey, exc: Exception, *, quiet: bool = False,
                told: bool = False) -> float:
        """Log a failed reconcile and say when to retry: 2 s doubling to 5 min while it keeps
        failing. The traceback is logged once per distinct error (an API refusal has none),
        not on every retry; a failure already ``told`` elsewhere is logged at debug only."""
        count, last = self._failures.get(key, (0, ""))
        text = f"{type(exc).__name__}: {exc}"[:500]
        if told:
            log.debug("reconcile of %s: %s", key, text)
        elif quiet and count == 0:
            log.debug("reconcile of %s: %s", key, text)
            text = ""  # a second time is logged
        elif text != last and not isinstance(exc, errors.ApiError):
            log.exception("reconcile of %s failed", key)
        elif text != last:
            log.warning("reconcile of %s failed: %s", key, text)
        if len(self._failures) >= 10_000:  # bounded: forget the oldest
            self._failures.pop(next(iter(self._failures)))
        self._failures[key] = (count + 1, text)
        return float(min(2.0 * 2 ** min(count, 10), 300.0))

    def requeue_after(self, key: JobKey, seconds: float) -> None:
        def fire() -> None:
            with self._timers_lock:  # a fired timer is forgotten: one entry per waiting job
                if self._timers.get(key) is timer:
                    del self._timers[key]
            self.queue.add(key)

        timer = threading.Timer(seconds, fire)
        timer.daemon = True
        with self._timers_lock:
            old = self._timers.pop(key, None)
            if old:
                old.cancel()
            self._timers[key] = timer
        timer.start()

    def reconcile(self, key: JobKey) -> None:
        job, pods = self.stores.read(key)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        kind = KINDS.get(key.kind_key)
        if kind is None:
            return  # a TrainJob the member's own Trainer runs (its Work's status reads it)
        if not copy_work(job["metadata"])[1] and self.served_elsewhere(kind):
            return  # made on the member, whose own controller of the kind runs it
        if not self.fence(job, key):
            self.requeue_after(key, 2.0)
            return
        problem = check(kind, job)
        if problem is not None:  # nothing below may read a spec that cannot be run
            self._carry_out(key, kind, job, invalid(kind, job, [observe(p, kind) for p in pods],
                                                    Observed(now=datetime.now(UTC)), problem))
            return
        gang = self.gang_for(kind, job)
        admitted = True
        if gang is not None and not kind.finished(job.get("status") or {}):
            group = self._ensure(gang.resource, gang.podgroup(owner(job)), job, fresh=True)
            admitted = gang.admitted(group)
        for kind_of_key, secret in ((jobkeys.SSH, kind.ssh_key_secret(job)),
                                    (jobkeys.CURVE, kind.curve_secret(job))):
            if secret is not None:  # unless the Work brought the split gang's own
                body = jobkeys.secret(kind_of_key, secret, key.namespace, job["metadata"]["name"])
                body["metadata"]["ownerReferences"] = [owner(job)]
                self._ensure(r.SECRETS, body, job)
        for resource, body in tensorboard.objects(job, owner(job)):
            self._ensure(resource, body, job)
        extras = {"tensorboard": self.stores.board(key)}  # kept current by its watch
        observed = Observed(now=datetime.now(UTC), gang=gang, gang_admitted=admitted,
                            extras=extras)
        decision = decide(kind, job, [observe(p, kind) for p in pods], observed)
        self._carry_out(key, kind, job, decision)

    def _carry_out(self, key: JobKey, kind: JobKind, job: Body, decision: Decision) -> None:
        namespace = key.namespace
        for resource, body in decision.objects:
            self._apply(resource, body, job)
        for name in decision.delete:
            self.kube.delete(r.PODS, name, namespace)
        missing = self._missing_account(namespace, decision)
        if missing is not None:  # woken by the account's watch (and retried meanwhile)
            waiting, account = missing
            self.stores.await_account(namespace, account, key)
            refusal = Refusal(waiting, "ServiceAccountNotReady",
                              f'serviceaccount "{account}" does not exist in {namespace} yet; '
                              "the pods are created once it does")
            self.stores.set_refusal(key, refusal)
            raise PodsRefused(refusal.message, passing=True)
        # Pods before Services, as the Kubeflow operators do (a pod's peers resolve its
        # Service name only once they run), and a job's pods at once, not one by one.
        for pod in decision.create:
            self._pin(kind, job, pod)
        failures = [f for f in self._creators.map(self._create_pod, decision.create) if f]
        if failures and self._deleted(kind, job):
            # Deleted meanwhile (its Work went): what it owned, a launcher's ServiceAccount
            # say, is being collected, so its pods are refused; nothing is wrong to report.
            log.debug("pods of %s refused while it is deleted: %s", key,
                      failures[0][0])
            return
        for exc, pod in failures:  # e.g. a quota or admission refusal on the member
            self.events.record(job, "FailedCreatePod", f"pod {pod['metadata']['name']}: {exc}",
                               type="Warning")
        causes = [(classify(exc.status, exc.message), exc, pod) for exc, pod in failures]
        # the pod whose cause is the job's or the member's configuration first: it is what
        # the hub must show, while a passing one beside it only says the job waits
        shown = sorted(((cause, exc, pod) for cause, exc, pod in causes if cause is not None),
                       key=lambda item: item[0] in MEMBER_WAITING_REASONS)
        told = Refusal(shown[0][2]["metadata"]["name"], shown[0][0],
                       shown[0][1].message) if shown else None
        self.stores.set_refusal(key, told)
        refused = [exc for cause, exc, _ in causes if cause == "Invalid"]
        if refused and not kind.finished(job.get("status") or {}):
            # The member's API server refuses the pod as written: the template is malformed
            # (a field only the Pod schema checks), so retrying cannot help. (A member's own
            # admission policy may answer 422 too: that is the member's, and fails over.)
            text = str(refused[0])
            text = text if len(text) <= 300 else f"{text[:300]}..."
            self._carry_out(key, kind, job, invalid(
                kind, job, [], Observed(now=datetime.now(UTC)),
                f"has a pod template the member refuses ({text})"))
            return
        if failures:
            raise PodsRefused(failures[0][0], passing=told is not None and told.passing)
        for service in decision.services:
            self._ensure(r.SERVICES, service, job)
        if decision.status is not None:
            # A whole-status replace guarded by resourceVersion: a merge patch would keep
            # counts this reconcile dropped, and a stale read must not overwrite a newer one.
            written = self.kube.replace(kind.resource, {**job, "status": decision.status},
                                        subresource="status")
            self.stores.put_job(key, written)
        for type_, reason, message in decision.events:
            self.events.record(job, reason, message, type=type_)
        if decision.delete_job:
            self.kube.delete(kind.resource, key.name, key.namespace, uid=job["metadata"]["uid"])
        elif decision.requeue_after is not None:
            self.requeue_after(key, decision.requeue_after)

    def _missing_account(self, namespace: str, decision: Decision) -> tuple[str, str] | None:
        """(pod, account) of a pod to create whose ServiceAccount the member does not have
        yet (kube-controller-manager makes a new namespace's ``default`` a moment after it):
        the member would refuse the pod. Accounts the job brings itself are applied above."""
        brought = {body["metadata"]["name"] for resource, body in decision.objects
                   if resource == r.SERVICEACCOUNTS}
        for pod in decision.create:
            spec = pod.get("spec") or {}
            account = str(spec.get("serviceAccountName") or spec.get("serviceAccount")
                          or "default")
            if account not in brought and not self.stores.has_account(namespace, account):
                return str(pod["metadata"]["name"]), account
        return None

    def _deleted(self, kind: JobKind, job: Mapping[str, Any]) -> bool:
        """Whether ``job`` is gone or going on the member now (the stores may lag)."""
        meta = job["metadata"]
        current = self.kube.get_or_none(kind.resource, meta["name"], meta["namespace"])
        return current is None or current["metadata"].get("uid") != meta.get("uid") \
            or bool(current["metadata"].get("deletionTimestamp"))

    def _pin(self, kind: JobKind, job: Mapping[str, Any], pod: Body) -> None:
        """A pod whose slot a placeholder holds goes to that node (the placeholder goes)."""
        labels = pod["metadata"].get("labels") or {}
        try:
            slot = (str(labels[kind.type_label]), int(labels[kind.index_label]))
        except (KeyError, ValueError):
            return
        node = self.take_slot(job, slot)
        if node:
            pod["spec"]["nodeName"] = node
            pod["spec"].pop("schedulingGates", None)

    def _create_pod(self, pod: Body) -> tuple[errors.ApiError, Body] | None:
        try:
            self.kube.create(r.PODS, pod)
        except errors.AlreadyExists:
            pass
        except errors.ApiError as exc:
            return exc, pod
        return None

    def gang_for(self, kind: JobKind, job: Mapping[str, Any]) -> Gang | None:
        available = self.schedulers.available()
        if not available:
            return None
        request = kind.gang_request(job)
        scheduler = choose(available, asks_t9k=bool(request.queue) and kind.group == T9K_GROUP)
        types = kind.replica_types(job)
        meta = job["metadata"]
        return Gang(scheduler, meta["name"], meta["namespace"],
                    min_member=sum(t.replicas for t in types), queue=request.queue,
                    priority=request.priority, priority_class=request.priority_class,
                    roles={t.label: t.replicas for t in types},
                    timeout_seconds=request.timeout_seconds)

    def _apply(self, resource: r.Resource, body: Body, job: Mapping[str, Any]) -> None:
        """Server-side apply ``body`` unless this agent applied the same content already."""
        meta = body["metadata"]
        mark = (resource.plural, meta["namespace"], meta["name"], job["metadata"]["uid"])
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        if self._applied.get(mark) == digest:
            return
        self.kube.apply(resource, body, field_manager=FIELD_MANAGER)
        with self._marks_lock:
            self._applied[mark] = digest

    def forget(self, uid: str) -> None:
        """Drop what is remembered of a deleted job's objects."""
        with self._marks_lock:
            self._ensured = {m for m in self._ensured if m[3] != uid}
            self._applied = {m: d for m, d in self._applied.items() if m[3] != uid}

    def _ensure(self, resource: r.Resource, body: Body, job: Mapping[str, Any], *,
                fresh: bool = False) -> Body | None:
        """Create ``body`` unless it exists. With ``fresh``, return it as the server has it
        now; without, it is created once per job and never read again (None)."""
        meta = body["metadata"]
        mark = (resource.plural, meta["namespace"], meta["name"], job["metadata"]["uid"])
        if mark in self._ensured:
            if not fresh:
                return None
            found = self.kube.get_or_none(resource, meta["name"], meta["namespace"])
            if found is not None:
                return found
        try:
            created: Body | None = self.kube.create(resource, body)
        except errors.AlreadyExists:
            created = self.kube.get_or_none(resource, meta["name"], meta["namespace"])
        with self._marks_lock:
            self._ensured.add(mark)
        return created if fresh else None
