"""Bounds on user-controlled numbers and sizes, and malformed objects through the pure code:
the schema carries a bound for every field a user writes, the hub's adapters refuse counts
beyond them before expanding anything, and the agent's reconcile never raises on a job that
admission let through (it fails the job with reason InvalidSpec instead)."""

from __future__ import annotations

import copy
import logging
import re
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from pydantic import BaseModel, ValidationError

from e2e.chaos.fuzz import fuzzed, sources
from fleet.api import kubeflow, limits, t9k
from fleet.api.crds import ALL
from fleet.api.quantity import QuantityError, canonical
from fleet.clients import errors
from fleet.hub.quota_views import quota_node
from fleet.kinds import adapter_for
from fleet.kinds.base import InvalidJob
from member_agent.controllers.kind import Observed
from member_agent.controllers.reconcile import INVALID, Decision, check, decide
from member_agent.controllers.runtime import KINDS, JobController, PodsRefused, Stores
from propagation.jobkey import JobKey, kind_key
from quota import validation
from quota.validation import validate_tree
from tests.unit.test_job_status import pod
from tests.unit.test_schema import nodes

Body = dict[str, Any]
HUGE = 4611686018427387904  # the replica count
NOW = datetime(2026, 1, 1, tzinfo=UTC)

JOB_MODELS: dict[tuple[str, str], type[BaseModel]] = {
    ("kubeflow.org/v1", "PyTorchJob"): kubeflow.PyTorchJob,
    ("kubeflow.org/v1", "TFJob"): kubeflow.TFJob,
    ("kubeflow.org/v1", "MPIJob"): kubeflow.MPIJob,
    ("kubeflow.org/v1", "JAXJob"): kubeflow.JAXJob,
    ("kubeflow.org/v1", "PaddleJob"): kubeflow.PaddleJob,
    ("kubeflow.org/v1", "XGBoostJob"): kubeflow.XGBoostJob,
    ("batch.tensorstack.dev/v1beta1", "MPIJob"): t9k.MPIJob,
    ("batch.tensorstack.dev/v1beta1", "TensorFlowTrainingJob"): t9k.TensorFlowTrainingJob,
}


def example(kind: str, api_version: str = "kubeflow.org/v1") -> Body:
    for _, body in sources():
        if body["kind"] == kind and body["apiVersion"] == api_version:
            job = copy.deepcopy(body)
            job["metadata"] = {"name": "job", "namespace": "ns", "uid": "u1"}
            return job
    raise LookupError(kind)


# -- the schema ---------------------------------------------------------------------------

USER_WRITTEN = [c for c in ALL if c.kind not in ("MemberCluster", "Work", "Queue")]


@pytest.mark.parametrize("crd", USER_WRITTEN, ids=[c.name for c in USER_WRITTEN])
def test_every_user_written_field_is_bounded(crd: Any) -> None:
    """Every list, map, integer and free string a user writes has a maximum in the CRD."""
    schema = crd.manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    unbounded = []
    for path, node in nodes(schema):
        if path.startswith((".status", ".metadata")) or path in (".apiVersion", ".kind"):
            continue
        if not _bounded(path, node):
            unbounded.append(path)
    assert not unbounded, unbounded


def _bounded(path: str, node: dict[str, Any]) -> bool:
    kind = node.get("type")
    if kind == "array":  # quota children: counted by the webhook (see fleet/api/quota.py)
        return "maxItems" in node or path.endswith(".children")
    if kind == "object" and "additionalProperties" in node:
        return "maxProperties" in node
    if kind == "integer":
        return "maximum" in node
    if kind == "string":
        return _bounded_string(node)
    return True


def _bounded_string(node: dict[str, Any]) -> bool:
    """maxLength, an enum, or a pattern that is one (``^(In|NotIn|Exists)$``)."""
    return "maxLength" in node or "enum" in node or bool(
        re.fullmatch(r"\^\([\w|]+\)\$", node.get("pattern", "")))


def test_replicas_are_bounded_in_the_models() -> None:
    job = example("PyTorchJob")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = HUGE
    with pytest.raises(ValidationError, match="less than or equal to 10000"):
        kubeflow.PyTorchJob.model_validate(job)


# -- quantities ---------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["1e30", "2Ei", "1e999999999", "1e999999999Ei", "-1e19"])
def test_quantities_beyond_the_bound_are_refused_before_they_become_integers(text: str) -> None:
    with pytest.raises(QuantityError):
        canonical("nvidia.com/gpu", text)
    assert canonical("memory", "400000Gi") == 400000 * 2**30  # the seed's tree still counts


def test_quota_amounts_name_their_field() -> None:
    root = {"name": "root", "max": {"cpu": 10}, "children": [
        {"name": "a", "max": {"cpu": "1e30"}, "namespaces": ["x"]}]}
    with pytest.raises(QuantityError, match=r"spec.root.children\[0\].max\[cpu\]"):
        quota_node(root)


def test_negative_quota_amounts_are_refused_naming_the_field() -> None:
    """A tree stored before the schema said so (the webhook checks again)."""
    from quota.tree import QuotaNode
    root = QuotaNode("root", max={"cpu": 10_000}, children=(
        QuotaNode("a", min={"cpu": -1000}, max={"cpu": 5000}, namespaces=("x",)),))
    verdict = validate_tree(root, namespace="kube-system", name="t")
    assert "spec.root.children[0].min[cpu]: -1000 must not be negative" in verdict.errors


def test_quota_trees_are_bounded_in_nodes() -> None:
    from quota.tree import QuotaNode
    assert validation.MAX_QUOTA_NODES == limits.MAX_QUOTA_NODES
    leaves = tuple(QuotaNode(f"n{i}", namespaces=(f"ns{i}",)) for i in range(1_000))
    verdict = validate_tree(QuotaNode("root", children=leaves), namespace="kube-system",
                            name="t")
    assert any("1001 nodes, more than 1000" in e for e in verdict.errors)


# -- the hub's adapters -------------------------------------------------------------------

def test_a_huge_count_that_bypassed_the_schema_is_refused_without_allocating() -> None:
    """The issue's PyTorchJob (replicas 2^62), as if stored under an older CRD: the adapter
    refuses it naming the field, and the hub allocates nothing proportional to it."""
    job = example("PyTorchJob")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = HUGE
    adapter = adapter_for("kubeflow.org/v1", "PyTorchJob")
    tracemalloc.start()
    try:
        with pytest.raises(InvalidJob, match=r"spec.pytorchReplicaSpecs.Worker.replicas: "
                                             r"4611686018427387904 is outside 1..10000"):
            adapter.demand("PyTorchJob/ns/job", job)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


@pytest.mark.parametrize(("api_version", "kind", "path"), [
    ("kubeflow.org/v1", "TFJob", ("spec", "tfReplicaSpecs", "Worker", "replicas")),
    ("kubeflow.org/v1", "JAXJob", ("spec", "jaxReplicaSpecs", "Worker", "replicas")),
    ("kubeflow.org/v1", "PaddleJob", ("spec", "paddleReplicaSpecs", "Worker", "replicas")),
    ("kubeflow.org/v1", "XGBoostJob", ("spec", "xgbReplicaSpecs", "Worker", "replicas")),
    ("batch.tensorstack.dev/v1beta1", "MPIJob", ("spec", "worker", "replicas")),
    ("batch.tensorstack.dev/v1beta1", "TensorFlowTrainingJob",
     ("spec", "replicaSpecs", 0, "replicas")),
])
def test_every_adapter_refuses_counts_beyond_the_bound(api_version: str, kind: str,
                                                       path: tuple[Any, ...]) -> None:
    job = example(kind, api_version)
    node: Any = job
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = limits.MAX_REPLICAS + 1
    with pytest.raises(InvalidJob, match="replicas"):
        adapter_for(api_version, kind).demand("k", job)


def test_the_jobs_total_is_bounded_too() -> None:
    job = example("PyTorchJob")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = limits.MAX_REPLICAS
    with pytest.raises(InvalidJob, match=r"\[\*\].replicas: 10001 replicas in the job"):
        adapter_for("kubeflow.org/v1", "PyTorchJob").demand("k", job)


@pytest.mark.parametrize("value", ["many", {"a": 1}, None, -3, 0])
def test_malformed_counts_and_requests_are_invalid_jobs(value: Any) -> None:
    adapter = adapter_for("kubeflow.org/v1", "PyTorchJob")
    job = example("PyTorchJob")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = value
    with pytest.raises(InvalidJob):
        adapter.demand("k", job)
    job = example("PyTorchJob")
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"][
        "containers"][0]
    container["resources"] = {"limits": {"cpu": value if value is not None else "1e999999999"}}
    if value not in (0,):
        with pytest.raises(InvalidJob, match="template"):
            adapter.demand("k", job)


def test_fuzzed_jobs_never_raise_anything_but_invalid_job_in_the_adapters() -> None:
    for item in fuzzed(seed=15, count=1500):
        key = (item.body.get("apiVersion"), item.body.get("kind"))
        if key not in JOB_MODELS:
            continue
        adapter = adapter_for(*key)  # type: ignore[arg-type]
        try:
            adapter.demand("k", item.body)
        except InvalidJob:
            continue


# -- the agent's reconcile ----------------------------------------------------------------

def accepted_jobs(seed: int, count: int) -> list[Body]:
    """Fuzzed jobs the models accept (admission's schema, less CEL and the pods' own)."""
    out = []
    for item in fuzzed(seed=seed, count=count):
        model = JOB_MODELS.get((item.body.get("apiVersion"), item.body.get("kind")))  # type: ignore[arg-type]
        if model is None:
            continue
        try:
            model.model_validate(item.body)
        except ValidationError:
            continue
        item.body["metadata"]["uid"] = "u1"
        out.append(item.body)
    return out


def test_accepted_mutations_never_raise_in_the_agents_reconcile() -> None:
    """The issue: mutated MPIJob and TensorFlowTrainingJob objects that admission let through
    raised in the agent's reconcile, again and again."""
    jobs = accepted_jobs(seed=9, count=3000)
    assert len(jobs) > 300
    outcomes = {"ran": 0, "invalid": 0}
    for job in jobs:
        kind = KINDS[kind_key(job["apiVersion"], job["kind"])]
        for pods in ([], [pod("worker", 0), pod("Worker", 0, "Failed", 137)]):
            decision = decide(kind, job, pods, Observed(now=NOW))
            failed = decision.status is not None and INVALID in str(decision.status)
            outcomes["invalid" if failed else "ran"] += 1
    assert outcomes["ran"]
    assert outcomes["invalid"]


def test_a_malformed_template_fails_the_job_once_naming_the_field() -> None:
    """The T9k MPIJob whose container env is a number (the pod schema is the member's)."""
    job = example("MPIJob", "batch.tensorstack.dev/v1beta1")
    job["spec"]["worker"]["template"]["spec"]["containers"][0]["env"] = 7
    kind = KINDS[kind_key(job["apiVersion"], job["kind"])]
    decision = decide(kind, job, [], Observed(now=NOW))
    assert not decision.create
    assert decision.status is not None
    assert decision.status["phase"] == "Failed"
    failed = next(c for c in decision.status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == INVALID
    assert "template.spec.containers[0].env is not a list" in failed["message"]
    assert decision.events[0][1] == INVALID
    after = {**job, "status": decision.status}
    for _ in range(2):  # the finished job settles: no pods, no events, no retry
        again = decide(kind, after, [], Observed(now=NOW))
        assert not again.create
        assert not again.events
        assert again.requeue_after is None
        after = {**after, "status": again.status or after["status"]}
    assert again.status is None


@pytest.mark.parametrize(("api_version", "kind"), sorted(JOB_MODELS))
def test_the_agent_refuses_huge_counts_before_expanding_them(api_version: str,
                                                             kind: str) -> None:
    job = example(kind, api_version)
    spec = job["spec"]
    if "worker" in spec:
        spec["worker"]["replicas"] = HUGE
    elif "replicaSpecs" in spec:
        spec["replicaSpecs"][0]["replicas"] = HUGE
    else:
        specs = next(v for k, v in spec.items() if k.endswith("ReplicaSpecs"))
        specs["Worker"]["replicas"] = HUGE
    controller = KINDS[kind_key(api_version, kind)]
    assert "4611686018427387904" in (check(controller, job) or "")
    tracemalloc.start()
    try:
        decision = decide(controller, job, [], Observed(now=NOW))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not decision.create
    assert decision.status is not None
    assert peak < 1 << 20


def test_a_deadline_beyond_any_date_fails_the_job_instead_of_overflowing() -> None:
    job = example("PyTorchJob")
    job["spec"]["runPolicy"] = {"activeDeadlineSeconds": 10**15}
    job["status"] = {"startTime": "2026-01-01T00:00:00Z", "conditions": []}
    kind = KINDS[kind_key(job["apiVersion"], job["kind"])]
    decision = decide(kind, job, [], Observed(now=NOW))
    assert decision.status is not None
    assert "activeDeadlineSeconds" in str(decision.status["conditions"])


def test_failed_reconciles_back_off_and_log_one_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    controller = JobController.__new__(JobController)
    controller._failures = {}
    key = JobKey("PyTorchJob.kubeflow.org/ns/job")
    with caplog.at_level(logging.WARNING):
        delays = [controller._failed(key, ValueError("broken")) for _ in range(12)]
        refused = controller._failed(key, errors.Invalid(422, "Invalid", "pod refused"))
    assert delays[:4] == [2.0, 4.0, 8.0, 16.0]
    assert delays[-1] == 300.0
    assert refused == 300.0
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1
    assert sum("pod refused" in r.getMessage() for r in caplog.records) == 1


def test_a_job_deleted_during_its_reconcile_is_not_a_failure_unless_it_repeats(
        caplog: pytest.LogCaptureFixture) -> None:
    controller = JobController.__new__(JobController)
    controller._failures = {}
    key = ("MPIJob.kubeflow.org", "ns", "gone")
    gone = errors.NotFound(404, "NotFound", "mpijobs.kubeflow.org \"gone\" not found")
    with caplog.at_level(logging.WARNING):
        controller._failed(key, gone, quiet=True)
        assert not caplog.records
        controller._failed(key, gone, quiet=True)
    assert len(caplog.records) == 1


def test_pods_refused_while_their_job_is_deleted_are_not_reported(
        caplog: pytest.LogCaptureFixture) -> None:
    """Its Work went mid-reconcile: the job's launcher ServiceAccount is collected with it
    and the member refuses its pods (403); no event, no warning, no retry."""
    from concurrent.futures import ThreadPoolExecutor

    from member_agent.controllers.reconcile import Decision
    from member_agent.controllers.runtime import PodsRefused

    class Member:
        def __init__(self, job: dict[str, Any] | None) -> None:
            self.job = job

        def create(self, resource: object, body: dict[str, Any]) -> None:
            raise errors.Forbidden(403, "Forbidden", "error looking up service account")

        def get_or_none(self, *_: object) -> dict[str, Any] | None:
            return self.job

    class Events:
        def __init__(self) -> None:
            self.said: list[str] = []

        def record(self, obj: object, reason: str, *_: object, **__: object) -> None:
            self.said.append(reason)

    job = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
           "metadata": {"name": "j", "namespace": "ns", "uid": "u"}, "spec": {}}
    pod = {"metadata": {"name": "j-launcher", "namespace": "ns", "labels": {}}, "spec": {}}
    key = JobKey("MPIJob.kubeflow.org/ns/j")
    kind = KINDS[key.kind_key]
    for current, raises in ((None, False),
                            ({**job, "metadata": {**job["metadata"],
                                                  "deletionTimestamp": "now"}}, False),
                            (job, True)):
        controller = JobController.__new__(JobController)
        controller.kube = cast(Any, Member(current))
        controller.events = cast(Any, Events())
        controller.stores = Stores()
        controller.stores.put_account({"metadata": {"namespace": "ns", "name": "default"}},
                                      deleted=False)
        controller._creators = ThreadPoolExecutor(1)
        controller.take_slot = lambda job, slot: None
        with caplog.at_level(logging.WARNING):
            cause: object = None
            try:
                controller._carry_out(key, kind, job, Decision(create=(dict(pod),)))
            except PodsRefused as refused:
                cause = refused.args[0]
            if raises:  # a job still there: its refusal is reported and retried
                assert isinstance(cause, errors.Forbidden)
                assert controller.events.said == ["FailedCreatePod"]
            else:
                assert cause is None
                assert not controller.events.said
        assert not caplog.records


def test_pods_wait_for_their_service_account_and_go_when_it_comes() -> None:
    """A new namespace's default ServiceAccount comes a moment after the namespace: the
    controller creates no pod before it (the member would refuse it), says the job waits,
    and the account's arrival wakes the job."""
    created: list[str] = []

    class Member:
        def create(self, resource: object, body: dict[str, Any]) -> None:
            created.append(body["metadata"]["name"])

    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "j", "namespace": "ns", "uid": "u"}, "spec": {}}
    pod = {"metadata": {"name": "j-master-0", "namespace": "ns", "labels": {}},
           "spec": {"serviceAccountName": "trainer"}}
    key = JobKey("PyTorchJob.kubeflow.org/ns/j")
    controller = JobController.__new__(JobController)
    controller.kube = cast(Any, Member())
    controller.stores = Stores()
    controller._creators = ThreadPoolExecutor(1)
    controller.take_slot = lambda job, slot: None
    with pytest.raises(PodsRefused) as refused:
        controller._carry_out(key, KINDS[key.kind_key], job, Decision(create=(dict(pod),)))
    assert refused.value.passing
    assert created == []
    refusal = controller.stores.refusal(key)
    assert refusal is not None
    assert (refusal.pod, refusal.reason, refusal.passing) == (
        "j-master-0", "ServiceAccountNotReady", True)
    assert controller.stores.put_account({"metadata": {"namespace": "ns", "name": "default"}},
                                         deleted=False) == []  # not the one it waits for
    assert controller.stores.put_account({"metadata": {"namespace": "ns", "name": "trainer"}},
                                         deleted=False) == [key]


def test_fired_requeue_timers_are_forgotten() -> None:
    import threading
    import time

    from member_agent.controllers.runtime import WorkQueue
    controller = JobController.__new__(JobController)
    controller.queue = WorkQueue()
    controller._timers, controller._timers_lock = {}, threading.Lock()
    controller.requeue_after(("k", "ns", "a"), 0.01)
    deadline = time.monotonic() + 5
    while controller._timers and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not controller._timers
    assert controller.queue.take(1.0) == ("k", "ns", "a")


# -- the hub's pass -----------------------------------------------------------------------

def test_the_hub_shows_a_job_beyond_the_bounds_as_invalid_without_dividing_it() -> None:
    """A job with 2^62 replicas stored under an older CRD waits with reason Invalid; the
    pass goes on to decide the others (no division, no memory proportional to the count)."""
    from fleet.hub.cache import Cache, Changes
    from fleet.hub.pass_view import PassViewBuilder
    from planner import plan_pass

    cache = Cache()
    policy = {"apiVersion": "policy.one.alibabacloud.com/v1alpha1",
              "kind": "PropagationPolicy",
              "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "1"},
              "spec": {"resourceSelectors": [{"apiVersion": "kubeflow.org/v1",
                                              "kind": "PyTorchJob"}]}}
    cache.upsert("policies", policy)
    job = example("PyTorchJob")
    job["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = HUGE
    failures: list[Exception] = []
    tracemalloc.start()
    try:
        view = PassViewBuilder().build(cache.snapshot(), NOW, "now", Changes(), [job], [],
                                       {}, lambda _, exc: failures.append(exc))
        waiting = {why.job: why for why in plan_pass(view).waits}
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not failures
    why = waiting["PyTorchJob.kubeflow.org/ns/job"]
    assert why.reason == "Invalid"
    assert "spec.pytorchReplicaSpecs.Worker.replicas: 4611686018427387904" in why.message
    assert peak < 4 << 20


def test_the_fuzzer_replays_from_its_seed_and_covers_every_kind() -> None:
    first = [(f.source, f.body, f.mutations) for f in fuzzed(seed=3, count=60)]
    assert first == [(f.source, f.body, f.mutations) for f in fuzzed(seed=3, count=60)]
    assert first != [(f.source, f.body, f.mutations) for f in fuzzed(seed=4, count=60)]
    kinds = {(f.body["apiVersion"], f.body["kind"]) for f in fuzzed(seed=3,
                                                                     count=len(sources()))}
    assert JOB_MODELS.keys() <= kinds
    assert {k for _, k in kinds} >= {"PropagationPolicy", "ClusterPropagationPolicy",
                                     "ElasticQuotaTree"}


def test_a_bound_job_changed_beyond_the_bounds_keeps_running_as_divided() -> None:
    """Its replicas changed to 2^62 under an older CRD: one event says so, the Works keep
    their manifests, and nothing raises out of the bound job's reconcile."""
    from fleet.hub import works as w
    from fleet.hub.hub_writes import RewriteWork, Say
    from fleet.hub.status_mirror import spec_changes

    job = example("PyTorchJob")
    job["metadata"]["generation"] = 2
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = HUGE
    work = {"metadata": {"name": "w", "annotations": {w.JOB_GENERATION: "1"}},
            "spec": {"placement": {"cluster": "member1"}, "manifests": [job]}}
    placement = [{"cluster": "member1", "replicas": {"Master": 1, "Worker": 2}}]
    adapter = adapter_for("kubeflow.org/v1", "PyTorchJob")
    writes = spec_changes(job, adapter, placement, [work])
    assert [wr.generation for wr in writes if isinstance(wr, RewriteWork)] == ["2"]
    [(reason, message)] = [(wr.reason, wr.message) for wr in writes if isinstance(wr, Say)]
    assert reason == "ReplicasChangeIgnored"
    assert "Worker.replicas: 4611686018427387904" in message
    assert "keeps running as divided" in message
