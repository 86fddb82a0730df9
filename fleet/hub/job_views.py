"""Each job as the planner sees it (:class:`~planner.view.JobView`), parsed once per version.

Everything the hub computes of one job is computed here: its stage, demand (the one place
the hub computes it; quota holdings, admission and division all use it), policy, quota
view, Works. A view is remembered with the versions it was built from (the job's, its
Works', and the context: policies and PriorityClasses) and built again only when one of
them changes: at 10,000 jobs, building every view again on every pass was most of a pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fleet.api import protocol
from fleet.api.cluster import HEALTHY
from fleet.api.policy import PropagationPolicySpec
from fleet.api.size import JOB_COPIES, refusal
from fleet.hub import elastic as el
from fleet.hub import queueing as q
from fleet.hub import works as w
from fleet.hub.backfill_views import runtime_of
from fleet.hub.cache import EVICTING, Body, Snapshot
from fleet.hub.views import job_identity, parse_time, placement_rules, policy_ref
from fleet.kinds import adapter_for, checks
from fleet.kinds.base import InvalidJob
from planner.elastic import with_count
from planner.view import FailoverSettings, JobView, PolicyView, Stage, WorkView
from propagation.jobkey import JobKey
from propagation.matching import PolicyRef, governing_policy
from propagation.views import FitMode, JobDemand

MAX_REMEMBERED = 100_000  # parsed demands and views kept across passes (one per job)


def failover_settings(spec: PropagationPolicySpec) -> FailoverSettings | None:
    """The policy's application failover, defaulted as Karmada does; None when it has none."""
    app = spec.failover.application if spec.failover else None
    if app is None:
        return None
    toleration = app.decision_conditions.toleration_seconds if app.decision_conditions else None
    return FailoverSettings(
        toleration_seconds=float(300 if toleration is None else toleration),
        purge_mode=app.purge_mode.value if app.purge_mode else "Graciously",
        grace_period_seconds=float(600 if app.grace_period_seconds is None
                                   else app.grace_period_seconds),
    )


def policy_view(body: Body, fit_mode: FitMode) -> PolicyView:
    spec = PropagationPolicySpec.model_validate(body.get("spec", {}))
    meta = body["metadata"]
    name = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
    runner = (meta.get("annotations") or {}).get(protocol.TRAINJOB_RUNNER)
    member_trainer = runner == "member-trainer"
    rules = placement_rules(body, fit_mode)
    return PolicyView(name, replace(rules, max_clusters=1) if member_trainer else rules,
                      queues=bool(spec.suspension and spec.suspension.scheduling),
                      failover=failover_settings(spec),
                      propagate_deps=bool(spec.propagate_deps), member_trainer=member_trainer)


def seconds(text: str | None) -> float | None:
    when = parse_time(text)
    return None if when is None else when.timestamp()


def stage_of(job: Mapping[str, Any]) -> Stage:
    meta = job["metadata"]
    annotations = meta.get("annotations") or {}
    if meta.get("deletionTimestamp"):
        return Stage.DELETING
    if q.REQUEUE in annotations:
        return Stage.REQUEUED
    if annotations.get(w.PLACEMENT) not in (None, "", "[]"):
        return Stage.BOUND
    return Stage.DONE if adapter_for(job["apiVersion"], job["kind"]).is_finished(job) \
        else Stage.WAITING


def built_from(job: Mapping[str, Any]) -> tuple[object, ...]:
    """What a job's view is built from, as a key: its spec (by its generation), its
    metadata and whether it finished, not the rest of its status. A status the hub writes
    itself (why the job waits, where it runs) does not make its view be built again: after
    a change that tells ten thousand waiting jobs a new reason, the next pass would
    otherwise parse every one of them again. (Without a generation: its version.)"""
    meta = job["metadata"]
    generation = meta.get("generation")
    if generation is None:
        return (meta.get("resourceVersion", ""),)
    status = job.get("status") or {}
    return (generation, _items(meta.get("annotations")), _items(meta.get("labels")),
            tuple(meta.get("finalizers") or ()), meta.get("deletionTimestamp"),
            adapter_for(job["apiVersion"], job["kind"]).finished(status),
            status.get("completionTime"))


def _lookup(snap: Snapshot) -> checks.Lookup:
    """The hub's jobs by kind, namespace and name, as :mod:`fleet.kinds.checks` reads them."""
    return lambda api_version, kind, namespace, name: snap.jobs.get(
        (f"{api_version}/{kind}", namespace, name))


def _items(mapping: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(mapping.items())) if mapping else ()


def retry_at(annotations: Mapping[str, Any]) -> float | None:
    """When a job whose reservation was rolled back may be placed again (None: any time)."""
    try:
        return float(annotations[protocol.RESERVE_RETRY_AT])
    except (KeyError, TypeError, ValueError):
        return None


def keeps_copy(work: Mapping[str, Any]) -> bool:
    """Whether removing the Work would leave its member copy (purge mode Never)."""
    manifest = work["spec"]["manifests"][0]
    return ((work["metadata"].get("annotations") or {}).get(w.PURGE_MODE)
            or (manifest["metadata"].get("annotations") or {}).get(w.PURGE_MODE)) == "Never"


def work_key(work: Mapping[str, Any]) -> str:
    return f"{work['metadata']['namespace']}/{work['metadata']['name']}"


def work_view(work: Body) -> WorkView:
    meta = work["metadata"]
    status = work.get("status") or {}
    unhealthy = next((c for c in status.get("conditions") or []
                      if c.get("type") == HEALTHY and c.get("status") == "False"), None)
    reservation, said = protocol.reservation(work)
    return WorkView(
        name=work_key(work),
        cluster=work["spec"]["placement"]["cluster"],
        state=str(status.get("state") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        keeps_copy=keeps_copy(work),
        unhealthy=unhealthy is not None,
        unhealthy_since=seconds(unhealthy.get("lastTransitionTime")) if unhealthy else None,
        unhealthy_reason=str(unhealthy.get("message") or unhealthy.get("reason")
                             or "unhealthy") if unhealthy else "",
        evict_after=seconds((meta.get("annotations") or {}).get(EVICTING)),
        phase=protocol.work_phase(work),
        reservation=reservation,
        reservation_message=said,
        created=seconds(meta.get("creationTimestamp")),
    )


@dataclass(frozen=True)
class Context:
    """What every job's view reads beside the job and its Works: the policies (parsed),
    and the PriorityClasses' values. A pass whose context differs from the last pass's
    builds every view again."""

    policies: Mapping[tuple[str, str], Body]  # (namespace, name) -> body
    refs: Sequence[PolicyRef]
    classes: Mapping[str, int]
    versions: tuple[object, ...]

    @classmethod
    def of(cls, snap: Snapshot) -> Context:
        bodies = {(b["metadata"].get("namespace") or "", b["metadata"]["name"]): b
                  for b in (*snap.policies.values(), *snap.cluster_policies.values())}
        classes = q.priority_classes(snap)
        versions = (tuple(sorted((k, b["metadata"].get("resourceVersion", ""))
                                 for k, b in bodies.items())), tuple(sorted(classes.items())))
        return cls(bodies, [policy_ref(b) for b in bodies.values()], classes, versions)


@dataclass
class JobViews:
    """Builds each job's view; keeps across passes what parsing costs."""

    fit_mode: FitMode = FitMode.NODE_AWARE
    _policies: dict[tuple[str, str], tuple[str, PolicyView]] = field(default_factory=dict)
    # A job's demand by uid, with what it was parsed from (its spec's generation and the
    # topology it asks for): one per job, dropped with its view.
    _demands: dict[str, tuple[tuple[int, str, str, str], JobDemand | InvalidJob]] = field(
        default_factory=dict)
    # A job's view by uid, with the versions it was built from.
    _views: dict[str, tuple[tuple[object, ...], JobView]] = field(default_factory=dict)

    def demand(self, job: Mapping[str, Any]) -> JobDemand:
        """The job's demand, parsed once per spec (raises InvalidJob)."""
        meta = job["metadata"]
        annotations = meta.get("annotations") or {}
        # Annotations do not raise a job's generation: the topology it asks for is in the key.
        uid = meta.get("uid", "")
        key = (int(meta.get("generation") or 0),
               meta.get("resourceVersion", "") if not meta.get("generation") else "",
               str(annotations.get(w.TOPOLOGY_REQUIRED, "")),
               str(annotations.get(w.TOPOLOGY_PREFERRED, "")))
        known = self._demands.get(uid)
        if known is not None and known[0] == key:
            found = known[1]
        else:
            try:
                found = adapter_for(job["apiVersion"], job["kind"]).demand(
                    JobKey.of_body(job), job)
            except InvalidJob as exc:
                found = exc
            if len(self._demands) >= MAX_REMEMBERED and uid not in self._demands:
                self._demands.pop(next(iter(self._demands)))
            self._demands[uid] = (key, found)
        if isinstance(found, InvalidJob):
            raise found
        return found

    def placed_demand(self, job: Mapping[str, Any]) -> JobDemand:
        """What a bound job holds: an elastic one at the size its placement runs now."""
        return el.placed_demand(job, self.demand(job))

    def policy(self, body: Body) -> PolicyView:
        """A policy parsed once per version rather than for every job on every pass."""
        meta = body["metadata"]
        key, version = (meta.get("namespace") or "", meta["name"]), meta.get("resourceVersion", "")
        known = self._policies.get(key)
        if known is None or known[0] != version:
            known = (version, policy_view(body, self.fit_mode))
            self._policies[key] = known
        return known[1]

    def forget_policies(self, context: Context) -> None:
        self._policies = {k: v for k, v in self._policies.items() if k in context.policies}

    def forget(self, uid: str) -> None:
        """Drop what is kept of the job: it is gone, or settled (``planner.bound.settled``:
        a finished job is looked at again only when it changes, and its view is then built
        anew; ten thousand finished jobs would otherwise keep a view and a demand each)."""
        self._views.pop(uid, None)
        self._demands.pop(uid, None)

    def view(self, job: Body, snap: Snapshot, context: Context) -> JobView:
        """The job's view as the last pass built it while nothing it is built from changed
        (the job but its status, its Works', the context); else built anew."""
        meta = job["metadata"]
        uid = meta["uid"]
        rivals = tuple(sorted(r["metadata"].get("uid", "")
                              for r in checks.same_name(job, _lookup(snap))))
        versions = (built_from(job), context.versions, rivals,
                    tuple(wk["metadata"].get("resourceVersion") for wk in snap.works_of(uid)),
                    tuple(wk["metadata"].get("resourceVersion") for wk in snap.evicting_of(uid)),
                    len(snap.ended_by_job.get(uid, ())))
        known = self._views.get(uid)
        if known is not None and known[0] == versions:
            return known[1]
        view = self.build(job, snap, context)
        if len(self._views) >= MAX_REMEMBERED and uid not in self._views:
            self._views.pop(next(iter(self._views)))
        self._views[uid] = (versions, view)
        return view

    def build(self, job: Body, snap: Snapshot, context: Context) -> JobView:
        adapter = adapter_for(job["apiVersion"], job["kind"])
        meta = job["metadata"]
        annotations = meta.get("annotations") or {}
        stage = stage_of(job)
        uid = meta["uid"]
        finished = adapter.is_finished(job)
        classes = context.classes
        view = JobView(JobKey.of_body(job), uid, meta.get("creationTimestamp", ""), stage,
                       priority=q.priority_of(job, classes),
                       preempted_by=annotations.get(w.PREEMPTED_BY) or "",
                       reserve_retry_at=retry_at(annotations),
                       requeue_reason=annotations.get(q.REQUEUE, ""),
                       dispatch_finalizer=w.FINALIZER in (meta.get("finalizers") or []),
                       finished=finished,
                       works=tuple(work_view(wk) for wk in snap.works_of(uid)),
                       evicting=tuple(work_view(wk) for wk in snap.evicting_of(uid)))
        if stage is Stage.REQUEUED:  # whether it ended before its requeue reached it
            return replace(view, placement=w.placement_of(job),
                           ended=tuple(work_view(wk) for wk in snap.ended_of(uid)))
        if stage is Stage.BOUND:
            ttl = adapter.ttl(job) if finished else None
            done = seconds((job.get("status") or {}).get("completionTime"))
            view = replace(view, placement=w.placement_of(job),
                           policy=self.governing(job, context),
                           ttl_seconds=ttl, finished_at=done)
            return view if finished else self._elastic_bound(view, job, classes)
        if stage is not Stage.WAITING:
            return view
        refused = refusal(job, why=JOB_COPIES) or checks.name_taken_earlier(
            job, _lookup(snap))  # stored without the webhook, or past it at the same time
        if refused:
            return replace(view, invalid=refused)
        try:
            demand = self.demand(job)
            elastic = el.elastic_of(job)
            runtime = runtime_of(job, adapter)
        except InvalidJob as exc:  # checked before any quota or capacity is counted
            return replace(view, invalid=str(exc))
        unrunnable = q.missing_priority_class(job, classes) or (
            None if elastic else checks.gang_unsatisfiable(job))
        if unrunnable:
            return replace(view, invalid=unrunnable)
        if elastic is not None:  # asks for its max; the planner sizes it to what fits
            demand = with_count(demand, elastic.role, elastic.max)
            view = replace(view, elastic=elastic)
        policy = self.governing(job, context)
        quota = q.as_quota_job(job, classes, demand) if policy and policy.queues else None
        failed_on = {name for name in (annotations.get(w.FAILOVER_AVOID) or "").split(",")
                     if name}
        since = parse_time(annotations.get(w.FAILOVER_SINCE)) if failed_on else None
        return replace(view, demand=demand, policy=policy, quota=quota,
                       avoid=tuple(sorted(failed_on | {wk.cluster for wk in view.evicting})),
                       failed_over_at=None if since is None else since.timestamp(),
                       runtime=None if runtime is None else float(runtime))

    def _elastic_bound(self, view: JobView, job: Body, classes: Mapping[str, int]) -> JobView:
        """A running elastic job: its range, its demand at its placed size, and its quota
        view when it holds quota (growing it is charged there)."""
        try:
            elastic = el.elastic_of(job)
            if elastic is None:
                return view
            demand = self.placed_demand(job)
        except InvalidJob:
            return view
        held = q.ADMITTED_AT in (job["metadata"].get("annotations") or {})
        return replace(view, elastic=elastic, demand=demand,
                       quota=q.as_quota_job(job, classes, demand) if held else None)

    def governing(self, job: Body, context: Context) -> PolicyView | None:
        chosen = governing_policy(job_identity(job), context.refs)
        return self.policy(context.policies[(chosen.namespace, chosen.name)]) \
            if chosen else None
