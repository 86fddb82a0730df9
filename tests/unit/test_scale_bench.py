"""The scale bench's own parts: its simulated member runs a Work as the agent reports it, and
its figures are read right (histogram quantiles, write counts, bind rates)."""

from __future__ import annotations

import random
from typing import Any, cast

from e2e.bench.members import Member, nodes_of, resource_of, seconds
from e2e.bench.scale import Bindings, job, quantile
from fleet.clients.kube import Kube
from fleet.hub import works as w
from fleet.kinds import adapter_for
from propagation.jobkey import JobKey


def a_work(gpus_per_replica: int = 8) -> dict[str, Any]:
    rng = random.Random(1)
    body = job("j", "tenant-a", rng)
    for spec in body["spec"]["pytorchReplicaSpecs"].values():
        limits = spec["template"]["spec"]["containers"][0]["resources"]["limits"]
        limits["nvidia.com/gpu"] = gpus_per_replica
    body["metadata"] |= {"uid": "0123456789", "generation": 1, "resourceVersion": "5"}
    adapter = adapter_for(body["apiVersion"], body["kind"])
    replicas = {r.name: r.replicas for r in adapter.roles(body)}
    share = {"cluster": "m1", "replicas": replicas, "offsets": dict.fromkeys(replicas, 0)}
    work = w.work_body(body, adapter, share, [share])
    work["metadata"] |= {"uid": "w-1", "resourceVersion": "7", "creationTimestamp":
                         "2026-01-01T00:00:00Z"}
    return work


def gpus_free(member: Member) -> int:
    return sum(free.get("nvidia.com/gpu", 0) for free in member.free.values())


def test_a_simulated_member_runs_a_work_and_reports_it_as_the_agent_does() -> None:
    member = Member("m1", cast(Kube, None), nodes_of("m1", 20, random.Random(3)))
    work = a_work()
    replicas = sum(work["spec"]["placement"]["replicas"].values())
    before = gpus_free(member)
    duration = member.apply(work)
    assert duration is not None
    assert 15 <= duration <= 45
    assert gpus_free(member) == before - 8 * replicas  # every pod bound, first fit
    assert member.sync.status.work_status(work)["applied"] is True

    job_body = work["spec"]["manifests"][0]
    current, _ = member.state.stores.read(JobKey("PyTorchJob.kubeflow.org/tenant-a/j"))
    assert current is not None
    member.run_pods(current, "Running")
    status = member.sync.status.work_status(work)
    assert status["state"] == "Running"
    assert {p["phase"] for p in status["pods"]} == {"Running"}
    assert all(p.get("node") for p in status["pods"])
    assert "boundTime" in status

    current, _ = member.state.stores.read(JobKey.of_body(job_body))
    assert current is not None
    member.run_pods(current, "Succeeded")
    assert member.sync.status.work_status(work)["state"] == "Succeeded"
    assert gpus_free(member) == before
    report = member.reporter.capacity()
    assert report["freeGpus"] == before
    assert report["readyNodes"] == 20


def test_a_pod_that_fits_no_node_stays_pending_unschedulable() -> None:
    member = Member("m1", cast(Kube, None), nodes_of("m1", 3, random.Random(3)))
    member.apply(a_work(gpus_per_replica=64))
    status = member.sync.status.work_status(a_work())
    assert not any(p.get("node") for p in status["pods"])
    healthy = next(c for c in status["conditions"] if c["type"] == "Healthy")
    assert healthy["status"] == "False"


def test_quantiles_interpolate_within_the_bucket_as_prometheus_does() -> None:
    buckets = {0.1: 50.0, 0.2: 90.0, 0.5: 100.0, float("inf"): 100.0}
    assert quantile(buckets, 0.5) == 0.1
    assert abs(quantile(buckets, 0.7) - 0.15) < 1e-9
    assert abs(quantile(buckets, 0.99) - 0.47) < 1e-9
    assert quantile({float("inf"): 3.0}, 0.5) == 0.0  # all beyond the last bound


def test_writes_are_counted_by_resource_and_subresource_as_the_api_server_labels_them() -> None:
    assert resource_of("/apis/fleet.sh/v1alpha1/namespaces/n/works/w/status") == "works/status"
    assert resource_of("/apis/fleet.sh/v1alpha1/memberclusters/m/status") == \
        "memberclusters/status"
    assert resource_of("/apis/coordination.k8s.io/v1/namespaces/x/leases/l") == "leases"
    assert resource_of("/api/v1/namespaces") == "namespaces"


def test_the_peak_bind_rate_is_the_busiest_window() -> None:
    bindings = Bindings.__new__(Bindings)
    bindings.at = {f"j{i}": 100 + i * 0.1 for i in range(50)}  # 50 in 4.9 s
    bindings.at |= {f"k{i}": 200 + i for i in range(5)}
    assert bindings.peak_rate(10.0) == 5.0


def test_go_durations() -> None:
    assert seconds("45s") == 45
    assert seconds("1m30s") == 90
    assert seconds("500ms") == 0.5
    assert seconds("", default=7) == 7
