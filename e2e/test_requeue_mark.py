"""A reclaim's requeue mark is not lost to a status write (against the hub's API server).

The pass that reclaims gives the victim's quota away at once, so the mark, guarded by the
version the pass read, is tried again on a newer version while the job is still bound as
decided (found at 10 % of Kueue's baseline: the root of the quota tree above its max). The
mark is resource-agnostic; it is tried here on ConfigMaps, which the hub neither watches nor
fences, so the running hub stays out of the way and the API server's own conflicts decide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from fleet.api import protocol as p
from fleet.clients import resources as r
from fleet.clients.kube import Kube
from fleet.hub.dispatch import Dispatcher

NAMESPACE = "requeue-mark"


@dataclass(frozen=True)
class ConfigMapJob:
    """As much of a kind adapter as the mark reads: its resource, and whether it ended."""

    resource: r.Resource = r.CONFIGMAPS

    def is_finished(self, body: dict[str, Any]) -> bool:
        return (body.get("data") or {}).get("state") == "Succeeded"


@pytest.fixture(scope="module")
def kube(hub: Kube) -> Kube:
    hub.apply(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": NAMESPACE}}, field_manager="test")
    return hub


def bound(kube: Kube, name: str, **marks: str) -> dict[str, Any]:
    """A "job" bound once (placement generation 1), as the pass read it."""
    return kube.create(r.CONFIGMAPS, {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE,
                     "annotations": {p.PLACEMENT: "[]", p.PLACEMENT_GENERATION: "1", **marks}},
        "data": {"state": "Running"}})


def changed(kube: Kube, decided: dict[str, Any], **data_or_marks: Any) -> None:
    """A write that lands after the pass read the job (its status, say)."""
    meta = decided["metadata"]
    kube.patch(r.CONFIGMAPS, meta["name"], data_or_marks, NAMESPACE)


def marked(kube: Kube, name: str) -> str | None:
    body = kube.get(r.CONFIGMAPS, name, NAMESPACE)
    return (body["metadata"].get("annotations") or {}).get(p.REQUEUE)


def test_a_write_in_between_does_not_lose_the_mark(kube: Kube) -> None:
    decided = bound(kube, "status-written")
    changed(kube, decided, data={"state": "Running", "reported": "yes"})
    assert Dispatcher(kube).mark_requeue(decided, ConfigMapJob(), "preempted") is not None  # type: ignore[arg-type]
    assert marked(kube, "status-written") == "preempted"


def test_a_job_bound_again_already_leaving_or_ended_is_left_alone(kube: Kube) -> None:
    cases: dict[str, dict[str, Any]] = {
        "bound-again": {"metadata": {"annotations": {p.PLACEMENT_GENERATION: "2"}}},
        "leaving": {"metadata": {"annotations": {p.REQUEUE: "failed over"}}},
        "ended": {"data": {"state": "Succeeded"}}}
    for name, change in cases.items():
        decided = bound(kube, name)
        changed(kube, decided, **change)
        assert Dispatcher(kube).requeue_mark(decided, ConfigMapJob(), "preempted") == (  # type: ignore[arg-type]
            None, False), name  # not marked, and not holding what the pass decided on
        assert marked(kube, name) in (None, "failed over"), name


def test_a_job_changed_more_often_than_tried_is_said_to_hold_its_quota(kube: Kube) -> None:
    """A reclaim that could not mark its victim gives nothing back: the binds behind it
    wait (fleet.hub.writer)."""
    decided = bound(kube, "busy")
    changed(kube, decided, data={"state": "Running", "reported": "1"})
    assert Dispatcher(kube).requeue_mark(decided, ConfigMapJob(), "preempted",  # type: ignore[arg-type]
                                         tries=1) == (None, True)
    assert marked(kube, "busy") is None
