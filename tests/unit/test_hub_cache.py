"""The hub's cache keeps one copy of what repeats: an object's next version shares what did
not change with the last, a Work's job manifest shares its job's pod templates, and jobs
alike share theirs; what it holds is frozen."""

from __future__ import annotations

import copy
import gc
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet.hub.cache import JOBS, WORKS, Cache
from fleet.hub.interning import FrozenDict, Interner

Body = dict[str, Any]
TEMPLATE: Body = {"spec": {"containers": [{"name": "pytorch", "image": "train:1",
                                           "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}


def job(version: int, status: Body | None = None) -> Body:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "a", "namespace": "t", "uid": "u1",
                         "resourceVersion": str(version),
                         "managedFields": [{"manager": "x"}]},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 4,
                                                        "template": copy.deepcopy(TEMPLATE)}}},
            "status": status or {}}


def work(version: int, state: str) -> Body:
    return {"apiVersion": "fleet.sh/v1alpha1", "kind": "Work",
            "metadata": {"name": "w", "namespace": "fleet-member-m1",
                         "resourceVersion": str(version)},
            "spec": {"job": {"uid": "u1"}, "manifests": [
                {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                 "metadata": {"name": "a", "namespace": "t"},
                 "spec": {"pytorchReplicaSpecs": {"Worker": {
                     "replicas": 2, "template": copy.deepcopy(TEMPLATE)}}}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}]},
            "status": {"state": state}}


def as_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def template_of(body: Body) -> Any:
    return body["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]


def test_a_new_version_shares_what_did_not_change_and_drops_managed_fields() -> None:
    cache = Cache()
    cache.upsert(JOBS, job(1))
    first = cache.snapshot().jobs[("kubeflow.org/v1/PyTorchJob", "t", "a")]
    cache.upsert(JOBS, job(2, {"conditions": [{"type": "Created", "status": "True"}]}))
    second = cache.snapshot().jobs[("kubeflow.org/v1/PyTorchJob", "t", "a")]
    assert second["spec"] is first["spec"]
    assert first["status"] == {}
    assert second["status"] == {"conditions": [{"type": "Created", "status": "True"}]}
    assert "managedFields" not in second["metadata"]
    assert second["metadata"]["resourceVersion"] == "2"


def test_a_version_seen_already_changes_nothing_and_wakes_no_pass() -> None:
    """The watch event of the hub's own write comes after the write's answer: it is the same
    version, so it is not interned again nor looked at again by the next pass; an older one
    (a watch behind) is not either."""
    cache = Cache()
    cache.upsert(JOBS, job(5))
    cached = cache.snapshot().jobs[("kubeflow.org/v1/PyTorchJob", "t", "a")]
    assert cache.take_changed().jobs
    cache.upsert(JOBS, job(5, {"conditions": []}))
    cache.upsert(JOBS, job(4))
    assert not cache.take_changed().jobs
    assert cache.snapshot().jobs[("kubeflow.org/v1/PyTorchJob", "t", "a")] is cached
    cache.upsert(JOBS, job(6))
    assert cache.take_changed().jobs
    assert cache.snapshot().jobs[("kubeflow.org/v1/PyTorchJob", "t", "a")][
        "metadata"]["resourceVersion"] == "6"


def test_a_works_manifest_shares_its_jobs_pod_templates_not_its_own_counts() -> None:
    cache = Cache()
    cache.upsert(JOBS, job(1))
    cache.upsert(WORKS, work(5, "Running"))
    snap = cache.snapshot()
    held = snap.jobs[("kubeflow.org/v1/PyTorchJob", "t", "a")]
    placed = next(iter(snap.works.values()))
    manifest = placed["spec"]["manifests"][0]
    assert template_of(manifest) is template_of(held)
    assert manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    assert held["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4
    cache.upsert(WORKS, work(6, "Succeeded"))  # a report: the manifests are kept as they were
    again = next(iter(cache.snapshot().works.values()))
    assert again["spec"] is placed["spec"]
    assert again["status"] == {"state": "Succeeded"}


def test_jobs_alike_share_their_templates_and_a_cached_object_cannot_be_changed() -> None:
    cache = Cache()
    cache.upsert(JOBS, job(1))
    other = job(1)
    other["metadata"].update(name="b", uid="u2")
    cache.upsert(JOBS, other)
    snap = cache.snapshot()
    a = snap.jobs[("kubeflow.org/v1/PyTorchJob", "t", "a")]
    b = snap.jobs[("kubeflow.org/v1/PyTorchJob", "t", "b")]
    assert template_of(a) is template_of(b)
    with pytest.raises(TypeError, match="copy it"):
        template_of(b)["spec"]["containers"][0]["image"] = "changed:1"
    with pytest.raises(TypeError):
        template_of(b)["spec"]["containers"].append({})
    mine = copy.deepcopy(b)  # a plain copy to change
    template_of(mine)["spec"]["containers"][0]["image"] = "changed:1"
    assert template_of(a)["spec"]["containers"][0]["image"] == "train:1"
    assert type(mine["spec"]) is dict
    assert json.loads(json.dumps(b)) == b


def test_values_no_object_holds_are_swept() -> None:
    intern = Interner(sweep_from=1)
    kept = intern({"a": [1, 2], "b": {"c": "d"}})
    intern({"x": [3], "y": {"z": 1}})
    gc.collect()
    intern.sweep()
    assert len(intern) == 3  # kept, its list and its inner dict
    assert intern({"b": {"c": "d"}, "a": [1, 2]})["a"] is kept["a"]


def test_a_body_made_of_interned_parts_keeps_them_and_another_tables_are_taken_by_content(
        ) -> None:
    intern = Interner()
    first = intern({"spec": {"x": [1, 2]}, "status": {"s": 1}})
    second = intern({"spec": first["spec"], "status": {"s": 2}})
    assert second["spec"] is first["spec"]
    assert intern({**first}) is first  # a plain copy of its top level
    elsewhere = Interner()({"spec": {"x": [1, 2]}})
    assert intern(elsewhere)["spec"] is first["spec"]


def test_json_types_are_never_confused() -> None:
    for new, old in (({"a": 1}, {"a": True}), ([1.0], [1]), ([-0.0], [0.0]),
                     ({"a": "1"}, {"a": 1})):
        intern = Interner()
        intern(old)
        assert as_json(intern(new)) == as_json(new)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                    | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=3), inner, max_size=4), max_leaves=20)


@given(st.lists(JSON, min_size=1, max_size=6))
def test_interning_gives_each_value_and_leaves_the_earlier_ones_alone(values: list[Any]) -> None:
    intern = Interner(sweep_from=2)
    held = []
    for value in values:
        before = [as_json(h) for h in held]
        held.append(intern(value))
        assert as_json(held[-1]) == as_json(value)
        assert [as_json(h) for h in held[:-1]] == before
    assert all(isinstance(h, FrozenDict) for h in held if isinstance(h, dict))


def test_a_requeued_jobs_work_gone_after_saying_it_succeeded_is_kept_as_its_last_word() -> None:
    """Its requeue came too late: the planner completes it rather than run it again
    (planner.bound.finish_requeue), so the cache keeps the Work's last version until the job
    is no longer being requeued."""
    cache = Cache()
    requeued = job(1)
    requeued["metadata"]["annotations"] = {"fleet.sh/requeue": "reclaimed"}
    cache.upsert(JOBS, requeued)
    cache.upsert(WORKS, work(2, "Running"))
    cache.remove(WORKS, work(2, "Running"))
    assert cache.snapshot().ended_of("u1") == []  # stopped before it ended: nothing to keep
    cache.upsert(WORKS, work(3, "Succeeded"))
    cache.remove(WORKS, work(3, "Succeeded"))
    [kept] = cache.snapshot().ended_of("u1")
    assert kept["status"]["state"] == "Succeeded"
    cache.upsert(JOBS, job(4))  # its mark taken off (completed, or unbound): forgotten
    assert cache.snapshot().ended_of("u1") == []
    cache.upsert(JOBS, job(1))
    cache.upsert(WORKS, work(5, "Succeeded"))
    cache.remove(WORKS, work(5, "Succeeded"))  # a job not being requeued: nothing kept
    assert cache.snapshot().ended_of("u1") == []
