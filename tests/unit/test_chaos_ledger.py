"""The chaos ledger's checks on hand-made snapshots: each invariant it guards is reported when
broken and not when kept (the e2e scenarios feed it real hub and member state)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.chaos.ledger import Ledger, Limits, Snapshot

Body = dict[str, Any]
NOW_LIMITS = Limits(settle=0, gang_grace=0, orphan_grace=0, pending_bound=0)


@dataclass
class FakeFleet:
    members: dict[str, list[object]] = field(
        default_factory=lambda: {"member1": [], "member2": []})
    workdir: Path = Path()


def job(name: str, uid: str, clusters: str = "", *, admitted: bool = True,
        gpus: int = 1, **annotations: str) -> Body:
    meta_annotations = dict(annotations)
    if clusters:
        meta_annotations |= {"fleet.sh/clusters": clusters,
                             "fleet.sh/placement": f'[{{"cluster":"{clusters}"}}]'}
        if admitted:
            meta_annotations["fleet.sh/admitted-at"] = "2026-01-01T00:00:00Z"
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "ns", "uid": uid,
                         "annotations": meta_annotations},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {
                "containers": [{"name": "pytorch", "image": "x", "resources": {
                    "limits": {"nvidia.com/gpu": gpus}}}]}}}}}}


def work(uid: str, cluster: str, **annotations: str) -> Body:
    return {"metadata": {"name": f"w-{uid}", "namespace": f"fleet-member-{cluster}",
                         "annotations": annotations},
            "spec": {"job": {"uid": uid}, "placement": {"cluster": cluster}}}


def member_job(name: str, uid: str, **annotations: str) -> Body:
    return {"metadata": {"name": name, "namespace": "ns", "labels": {"fleet.sh/job-uid": uid},
                         "annotations": annotations}}


def pod(job_name: str, phase: str) -> Body:
    return {"metadata": {"name": f"{job_name}-master-0", "namespace": "ns",
                         "labels": {"training.kubeflow.org/job-name": job_name}},
            "status": {"phase": phase}}


def ledger(hub: Body, members: dict[str, Body] | None = None) -> Ledger:
    found = Ledger(FakeFleet(), ("ns",), NOW_LIMITS)  # type: ignore[arg-type]
    now = time.monotonic()
    found._latest = {"hub": Snapshot(now, {"tree": None, "queues": [], **hub})}
    for cluster, data in (members or {}).items():
        found._latest[cluster] = Snapshot(now, {"jobs": [], "pods": [], **data})
    found.check_once()
    time.sleep(0.01)
    found.check_once()  # conditions held past a zero grace
    return found


def kinds(found: Ledger) -> list[str]:
    return sorted(v.kind for v in found.summary())


def test_a_job_placed_once_with_its_work_and_pods_there_is_clean() -> None:
    found = ledger({"jobs": [job("a", "u1", "member1")], "works": [work("u1", "member1")]},
                   {"member1": {"jobs": [member_job("a", "u1")], "pods": [pod("a", "Running")]}})
    assert kinds(found) == []


def test_live_works_outside_the_placement_are_a_double_binding() -> None:
    found = ledger({"jobs": [job("a", "u1", "member1")],
                    "works": [work("u1", "member1"), work("u1", "member2")]})
    assert kinds(found) == ["bound-twice"]


def test_an_evicting_work_outside_the_placement_is_not() -> None:
    found = ledger({"jobs": [job("a", "u1", "member1")], "works": [
        work("u1", "member1"), work("u1", "member2", **{"fleet.sh/evict-after": "x"})]})
    assert kinds(found) == []


def test_a_member_job_without_its_work_is_an_orphan_unless_purge_mode_never() -> None:
    hub = {"jobs": [], "works": []}
    assert kinds(ledger(hub, {"member1": {"jobs": [member_job("a", "u1")],
                                          "pods": [pod("a", "Pending")]}})) == [
        "orphan", "pending"]
    never = {"member1": {"jobs": [member_job("a", "u1", **{"fleet.sh/purge-mode": "Never"})],
                         "pods": [pod("a", "Pending")]}}
    failed_over = {"jobs": [job("a", "u1", "member2")], "works": [work("u1", "member2")]}
    kept = ledger(failed_over, never)
    assert kinds(kept) == []
    assert kept.kept_by_never == {"member1:ns/a"}
    # deleting the hub job removes its copies whatever the purge mode
    assert kinds(ledger(hub, never)) == ["orphan", "pending"]


def test_a_gang_running_on_two_clusters_outside_its_placement() -> None:
    running = {"jobs": [member_job("a", "u1")], "pods": [pod("a", "Running")]}
    found = ledger({"jobs": [job("a", "u1", "member2")], "works": [
        work("u1", "member1"), work("u1", "member2")]},
        {"member1": running, "member2": running})
    assert "two-clusters" in kinds(found)


def test_bindings_beyond_max_at_any_node_break_quota() -> None:
    tree = {"spec": {"root": {"name": "root", "max": {"nvidia.com/gpu": 4}, "children": [
        {"name": "leaf", "max": {"nvidia.com/gpu": 4}, "namespaces": ["ns"]}]}}}
    within = [job("a", "u1", "member1", gpus=2), job("b", "u2", "member1", gpus=2)]
    assert kinds(ledger({"jobs": within, "works": [], "tree": tree})) == []
    beyond = [*within, job("c", "u3", "member1", gpus=1)]
    found = ledger({"jobs": beyond, "works": [], "tree": tree})
    assert kinds(found) == ["quota", "quota"]  # the leaf and the root
    not_admitted = [*within, job("c", "u3", "member1", gpus=1, admitted=False)]
    assert kinds(ledger({"jobs": not_admitted, "works": [], "tree": tree})) == []
