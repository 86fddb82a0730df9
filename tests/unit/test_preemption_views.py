"""The hub's side of priorities: PriorityClasses carried with a job, and the snapshot turned
into the preemption planner's inputs (pods on their nodes, quota held, no cascades)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleet.api.protocol import HUB_ONLY, PROPAGATED_LABEL, REQUEUED_AT
from fleet.hub import preemption_views as pv
from fleet.hub import queueing as q
from fleet.hub import works as w
from fleet.hub.cache import Cache, Changes
from fleet.hub.job_views import Context, JobViews
from fleet.hub.pass_view import Carried, PassViewBuilder
from fleet.hub.running_jobs import RunningJobs
from fleet.kinds import adapter_for
from planner.intents import Bind, Preempt
from preemption.model import Pod, Running
from propagation.jobkey import JobKey
from propagation.resources import Resources
from propagation.views import ClusterView, JobDemand, NodeGroup
from quota.tree import QuotaNode, leaves_by_namespace

Body = dict[str, Any]
GPU = "nvidia.com/gpu"


def pytorchjob(name: str, priority_class: str | None = None, *, bound: bool = False,
               admitted: bool = False, uid: str | None = None,
               preempted_by: str | None = None) -> Body:
    def template() -> Body:
        spec: Body = {"containers": [{"name": "c", "image": "x", "resources": {
            "limits": {GPU: "2", "cpu": "1"}}}]}
        if priority_class:
            spec["priorityClassName"] = priority_class
        return {"spec": spec}

    annotations: dict[str, str] = {}
    if bound:
        annotations[w.PLACEMENT] = '[{"cluster": "m1", "replicas": {"Master": 1, "Worker": 2}}]'
    if admitted:
        annotations[q.ADMITTED_AT] = "2026-01-01T00:01:00Z"
    if preempted_by:
        annotations[w.PREEMPTED_BY] = preempted_by
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "team", "uid": uid or f"uid-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": annotations},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template()},
                "Worker": {"replicas": 2, "template": template()}}}}


def work_of(job: Body, pods: list[Body]) -> Body:
    return {"apiVersion": "fleet.sh/v1alpha1", "kind": "Work",
            "metadata": {"name": f"w-{job['metadata']['name']}",
                         "namespace": "fleet-member-m1", "uid": f"w-{job['metadata']['uid']}"},
            "spec": {"job": {"uid": job["metadata"]["uid"]}, "placement": {"cluster": "m1"},
                     "manifests": [job]},
            "status": {"pods": pods, "boundTime": "2026-01-01T00:00:00Z"}}


def priority_class(name: str, value: int, default: bool = False) -> Body:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name, "uid": "x", "resourceVersion": "9"}, "value": value,
            "globalDefault": default, "preemptionPolicy": "PreemptLowerPriority"}


def test_a_job_carries_the_hub_classes_it_names_never_as_the_global_default() -> None:
    cache = Cache()
    cache.upsert("priorityclasses", priority_class("prod", 100, default=True))
    job = pytorchjob("a", "prod")
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"priorityClass": "missing-on-the-hub"}}
    [carried] = q.priority_class_manifests(job, cache.snapshot())
    assert carried == {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                       "metadata": {"name": "prod", "labels": {PROPAGATED_LABEL: "true"}},
                       "value": 100, "preemptionPolicy": "PreemptLowerPriority"}
    assert q.priority_class_manifests(pytorchjob("b"), cache.snapshot()) == []


def test_priority_comes_from_the_classes_and_negative_means_opportunistic() -> None:
    classes = {"prod": 100, "oppo": -1}
    assert q.priority_of(pytorchjob("a", "prod"), classes) == 100
    assert q.priority_of(pytorchjob("a", "oppo"), classes) == -1
    assert pv.lowest_priority(classes) == -1
    assert pv.lowest_priority({"prod": 100}) == 0


def test_a_cached_jobs_priority_follows_its_spec_from_version_to_version() -> None:
    """The classes a cached job names are read once per spec (the cache keeps one object
    per unchanged spec), and again for a new spec."""
    cache, classes = Cache(), {"prod": 100, "oppo": -1}
    job = pytorchjob("a", "prod")
    for version, cls in enumerate(("prod", "prod", "oppo", "prod", None), start=1):
        body = pytorchjob("a", cls)
        body["metadata"]["resourceVersion"] = str(version)
        cache.upsert("jobs", body)
        job = cache.snapshot().jobs[Cache.key(body)]
        assert q.priority_of(job, classes) == classes.get(cls or "", 0)
    assert sum(kept[0] is job["spec"] for kept in q.CLASS_NAMES._found.values()) == 1


def test_a_job_naming_a_class_the_hub_lacks_waits_for_it_naming_the_field() -> None:
    cache = Cache()
    job = pytorchjob("a", "oppo")
    snap = cache.snapshot()
    waiting = JobViews().build(job, snap, Context.of(snap))
    assert waiting.invalid.startswith("priorityClassName: PriorityClass 'oppo' does not exist")
    cache.upsert("priorityclasses", priority_class("oppo", -1))
    snap = cache.snapshot()
    assert JobViews().build(job, snap, Context.of(snap)).invalid == ""


def test_running_jobs_have_their_pods_on_their_nodes_and_their_quota() -> None:
    cache = Cache()
    tree = QuotaNode("root", max={GPU: 8}, children=(
        QuotaNode("team", max={GPU: 8}, namespaces=("team",)),))
    job = pytorchjob("run", "test", bound=True, admitted=True)
    cache.upsert("jobs", job)
    cache.upsert("works", work_of(job, [
        {"name": "run-master-0", "role": "master", "node": "n1", "phase": "Running"},
        {"name": "run-worker-0", "role": "worker", "node": "n2", "phase": "Running"},
        {"name": "run-worker-1", "role": "worker", "phase": "Pending"},
        {"name": "old", "role": "worker", "node": "n3", "phase": "Failed"}]))
    cache.upsert("jobs", pytorchjob("waiting", "prod"))  # not bound: no victim
    going = pytorchjob("going", bound=True)
    going["metadata"]["annotations"][q.REQUEUE] = "preempted"
    cache.upsert("jobs", going)
    [running] = victims(RunningJobs(), cache, {"test": 0}, leaves_by_namespace(tree))
    request = Resources.of({GPU: 2, "cpu": 1000})
    assert running.key == "PyTorchJob.kubeflow.org/team/run"
    assert running.pods == (Pod("m1", "n1", request, "master"),
                            Pod("m1", "n2", request, "worker"), Pod("m1", "", request, "worker"))
    assert running.leaf == "root/team"
    assert running.charge[GPU] == 6
    assert running.started == "2026-01-01T00:01:00Z"


def running_on_one_node(name: str, role: str, phase: str) -> tuple[Cache, Body, Body, Any]:
    """A bound job in quota leaf root/team whose Work (version 1) reports one pod on node n1
    in ``phase``: the cache, the job, its Work, and the tree's leaves by namespace."""
    cache = Cache()
    tree = QuotaNode("root", max={GPU: 8}, children=(
        QuotaNode("team", max={GPU: 8}, namespaces=("team",)),))
    job = pytorchjob(name, "test", bound=True, admitted=True)
    cache.upsert("jobs", job)
    work = work_of(job, [{"name": f"{name}-{role}-0", "role": role, "node": "n1",
                          "phase": phase}])
    work["metadata"]["resourceVersion"] = "1"
    cache.upsert("works", work)
    return cache, job, work, leaves_by_namespace(tree)


def test_a_remembered_running_job_follows_its_works_reports() -> None:
    """The hub keeps a job's view as a possible victim between passes: a Work that reports
    its pods elsewhere (a new resourceVersion) is read again, an unchanged one is not."""
    cache, _, work, leaves = running_on_one_node("run", "worker", "Running")
    kept = RunningJobs()
    [before] = victims(kept, cache, {"test": 0}, leaves)
    assert victims(kept, cache, {"test": 0}, leaves) == (before,)
    work["status"]["pods"][0]["node"] = "n2"
    work["metadata"]["resourceVersion"] = "2"
    cache.upsert("works", work)
    [after] = victims(kept, cache, {"test": 0}, leaves)
    assert [pod.node for pod in before.pods] == ["n1"]
    assert [pod.node for pod in after.pods] == ["n2"]


def test_a_job_its_members_report_succeeded_is_no_victim_and_holds_no_quota() -> None:
    """Its pods are done though its status does not say so yet (the hub writes it a moment
    later): reclaimed meanwhile, it would run again from the start."""
    cache, job, work, leaves = running_on_one_node("done", "master", "Succeeded")
    kept = RunningJobs()
    assert len(victims(kept, cache, {"test": 0}, leaves)) == 1
    assert q.holding(job, {"test": 0}, _demand, [work]) is not None
    work["status"]["state"] = "Succeeded"
    work["metadata"]["resourceVersion"] = "2"
    cache.upsert("works", work)
    assert victims(kept, cache, {"test": 0}, leaves) == ()
    assert q.holding(job, {"test": 0}, _demand, [work]) is None
    failed = {**work, "status": {**work["status"], "state": "Failed"}}
    assert q.holding(job, {"test": 0}, _demand, [failed]) is not None  # may be failed over
    assert q.holding(job, {"test": 0}, _demand, [work, failed]) is not None  # a share runs on


def test_an_opportunistic_running_job_holds_no_quota() -> None:
    cache = Cache()
    tree = QuotaNode("root", max={GPU: 8}, children=(
        QuotaNode("team", max={GPU: 8}, namespaces=("team",)),))
    cache.upsert("jobs", pytorchjob("oppo", "oppo", bound=True, admitted=True))
    [running] = victims(RunningJobs(), cache, {"oppo": -1},
                                           leaves_by_namespace(tree))
    assert (running.priority, running.leaf, dict(running.charge)) == (-1, None, {})


def _demand(job: Mapping[str, Any]) -> JobDemand:
    return adapter_for(job["apiVersion"], job["kind"]).demand(JobKey.of_body(job), job)


def test_a_requeued_job_counts_its_starvation_from_when_it_began_to_wait_again() -> None:
    job = pytorchjob("victim", preempted_by="PyTorchJob.kubeflow.org/team/prod")
    assert q.as_quota_job(job, {}, _demand(job)).waiting_since == ""
    job["metadata"]["annotations"][REQUEUED_AT] = "2026-01-01T00:05:00Z"
    quota_job = q.as_quota_job(job, {}, _demand(job))
    assert (quota_job.created, quota_job.waiting_since) == ("2026-01-01T00:00:00Z",
                                                            "2026-01-01T00:05:00Z")
    assert REQUEUED_AT in HUB_ONLY  # never carried to a member's copy


def test_a_preempted_job_is_marked_so() -> None:
    job = pytorchjob("victim", preempted_by="PyTorchJob.kubeflow.org/team/prod")
    snap = Cache().snapshot()
    view = JobViews().build(job, snap, Context.of(snap))
    # the planner's Preemptor.preempted
    assert view.preempted_by == "PyTorchJob.kubeflow.org/team/prod"
    status = pv.with_preempted({"conditions": [{"type": "Queuing"}]}, job, "now")
    said = status["conditions"][-1]
    assert (said["type"], said["status"], said["reason"]) == ("Preempted", "True", "Preempted")
    assert "preempted by PyTorchJob team/prod;" in said["message"]
    assert pv.with_preempted({"conditions": []}, pytorchjob("other"), "now") == {
        "conditions": []}


# -- the hub's seam: one pass decides one preemption, the next holds it --------------------
class Recorder:
    """The dispatcher's writes, recorded (the decision, not the API server, is tested)."""

    def __init__(self) -> None:
        self.requeued: list[tuple[str, str, dict[str, str]]] = []
        self.events: list[tuple[str, str, str]] = []

    def mark_requeue(self, job: Body, adapter: object, reason: str,
                     extra: dict[str, str] | None = None) -> bool:
        self.requeued.append((job["metadata"]["name"], reason, dict(extra or {})))
        return True

    def event(self, obj: Body, reason: str, message: str, kind: str = "Normal") -> None:
        self.events.append((obj["metadata"]["name"], reason, message))


    def write_status(self, job: Body, adapter: object, status: object) -> None:
        return None


def one_pass(cache: Cache, clusters: list[Any], holds: Any = None, retry_at: Any = None
             ) -> tuple[Any, Recorder]:
    """One pass of the hub's shell: the view, the pure plan, its writes (recorded)."""
    from datetime import UTC, datetime

    from fleet.hub.writer import PassContext, Writer
    from planner import plan_pass

    snap, now = cache.snapshot(), datetime(2026, 1, 1, tzinfo=UTC)
    jobs = [j for j in snap.jobs.values() if j["metadata"]["name"] == "prod"]
    view = PassViewBuilder().build(snap, now, "now", Changes(), jobs, clusters, {}, _raise,
                                   Carried(holds or {}, retry_at or {}))
    plan = plan_pass(view)
    recorder = Recorder()
    writer = Writer(cache, recorder)  # type: ignore[arg-type]
    writer.write([i for i in plan.intents if not isinstance(i, Bind)],
                 PassContext(snap, now, {JobKey.of_body(j): j for j in jobs}))
    return plan, recorder


def _raise(job: Body, exc: Exception) -> None:
    raise exc


def victims(kept: RunningJobs, cache: Cache, classes: dict[str, int],
            leaves: Any) -> tuple[Running, ...]:
    """The running jobs as preemption reads them, those changed since the last call (or
    whose Works did) read again."""
    changes, snap = cache.take_changed(), cache.snapshot()
    kept.mark(changes.work_jobs | {snap.jobs[key]["metadata"]["uid"] for key in changes.jobs
                                   if key in snap.jobs})
    return kept.victims(snap, classes, leaves, JobViews().placed_demand)


def _policy_and_classes(cache: Cache, *classes: tuple[str, int]) -> None:
    cache.upsert("policies", {
        "apiVersion": "policy.one.alibabacloud.com/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "p", "namespace": "team", "resourceVersion": "1"},
        "spec": {"resourceSelectors": [{"apiVersion": "kubeflow.org/v1",
                                        "kind": "PyTorchJob"}]}})
    for name, value in classes:
        cache.upsert("priorityclasses", priority_class(name, value))


def test_one_pass_preempts_the_lower_job_and_the_next_holds_its_capacity() -> None:
    cache = Cache()
    _policy_and_classes(cache, ("prod", 100), ("test", 0))
    test = pytorchjob("test", "test", bound=True)
    cache.upsert("jobs", test)
    cache.upsert("works", work_of(test, [
        {"name": f"test-{i}", "role": role, "node": f"n{i}", "phase": "Running"}
        for i, role in enumerate(("master", "worker", "worker"))]))
    cache.upsert("jobs", pytorchjob("prod", "prod"))
    cache.upsert("clusters", {  # its report counts the victim's pods (no assumed capacity)
        "apiVersion": "fleet.sh/v1alpha1", "kind": "MemberCluster", "metadata": {"name": "m1"},
        "status": {"capacity": {"observedTime": "2026-01-01T00:00:10Z"}}})
    full = [ClusterView("m1", True, node_groups=tuple(
        NodeGroup(1, Resources.of({GPU: 0, "cpu": 8000}), nodes=(f"n{i}",))
        for i in range(3)))]
    plan, recorder = one_pass(cache, full)
    [waiting] = plan.waits
    assert waiting.reason == "Preempting"
    [preempt] = [i for i in plan.intents if isinstance(i, Preempt)]
    assert preempt.job == "PyTorchJob.kubeflow.org/team/prod"
    [(victim, reason, extra)] = recorder.requeued
    assert victim == "test"
    assert reason == "preempted by PyTorchJob team/prod (priority 100 > 0)"
    assert extra == {w.PREEMPTED_BY: "PyTorchJob.kubeflow.org/team/prod"}
    assert {(n, r) for n, r, _ in recorder.events} == {
        ("test", "Preempted"), ("prod", "Preempting")}
    assert set(plan.holds) == {"uid-prod"}
    # The next pass (the victim still reported) gets the hold back in its view: no second
    # decision, the hold is kept.
    again, recorder = one_pass(cache, full, plan.holds, plan.retry_at)
    assert [w.reason for w in again.waits] == ["Preempting"]
    assert recorder.requeued == []
    assert again.holds == plan.holds


def test_a_job_that_fits_elsewhere_preempts_nobody() -> None:
    cache = Cache()
    _policy_and_classes(cache, ("prod", 100))
    cache.upsert("jobs", pytorchjob("prod", "prod"))
    free = [ClusterView("m2", True, node_groups=(
        NodeGroup(3, Resources.of({GPU: 2, "cpu": 8000}), nodes=("a", "b", "c")),))]
    plan, recorder = one_pass(cache, free)
    assert [b.job for b in plan.binds] == ["PyTorchJob.kubeflow.org/team/prod"]  # placed on m2
    assert recorder.requeued == []
    assert not plan.holds
