"""The hub's cache keeps one copy of what repeats: an object's next version shares what did
not change with the last, and a Work's job manifest shares its job's pod templates."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from fleet.hub.cache import JOBS, WORKS, Cache, shared

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


def test_json_types_are_never_confused() -> None:
    for new, old in (({"a": 1}, {"a": True}), ([1.0], [1]), ([-0.0], [0.0])):
        assert as_json(shared(new, old)) == as_json(new)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                    | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=3), inner, max_size=4), max_leaves=20)


@given(JSON, JSON)
def test_sharing_gives_the_new_value_and_leaves_the_old_alone(new: Any, old: Any) -> None:
    before = as_json(old)
    assert as_json(shared(new, old)) == as_json(new)
    assert as_json(old) == before
