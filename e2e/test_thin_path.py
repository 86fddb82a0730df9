"""The thinnest real path on three real API servers (hub + 2 members).

A PyTorchJob applied to the hub is matched by the seed's gang policy, bound whole to one
member (with the exact ScheduleBindingSucceed text), dispatched as one Work, run by the agent
with master and worker pods carrying the rendezvous environment, and its status flows back
until the hub shows it Succeeded.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.chaos.fuzz import nested_value
from e2e.conftest import eventually
from e2e.localfleet import LocalFleet
from e2e.localfleet.demo import EXAMPLES, apply_file, binding_event
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e

BINDING = re.compile(
    r"^Binding has been scheduled successfully\. Result: "
    r"\{(member\d):0,\[\{master 1\} \{worker 2\}\]\}$")


def seed_job(name: str, namespace: str = "default", run_for: str = "3s") -> dict[str, Any]:
    job: dict[str, Any] = yaml.safe_load((EXAMPLES / "pytorchjob.yaml").read_text())
    job = copy.deepcopy(job)
    job["metadata"] = {"name": name, "namespace": namespace}
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"].setdefault("metadata", {})["annotations"] = {
            "fleet.sh/sim-duration": run_for}
    return job


def state(job: dict[str, Any]) -> str:
    conditions = [c["type"] for c in (job.get("status") or {}).get("conditions") or []
                  if c.get("status") == "True"]
    return conditions[-1] if conditions else ""


def test_pytorchjob_flows_from_hub_to_member_and_back(fleet: LocalFleet, hub: Kube) -> None:
    apply_file(hub, EXAMPLES / "propagationpolicy-gang.yaml")
    job = hub.create(r.PYTORCHJOBS, seed_job("thin-path", run_for="4s"))

    message = eventually(lambda: binding_event(hub, job), what="ScheduleBindingSucceed event")
    match = BINDING.match(message)
    assert match, message
    cluster = match.group(1)

    bound = hub.get(r.PYTORCHJOBS, "thin-path", "default")
    assert bound["metadata"]["annotations"]["fleet.sh/clusters"] == cluster
    works, _ = hub.list(r.WORKS, f"fleet-member-{cluster}")
    mine = [w for w in works if w["spec"]["job"]["uid"] == job["metadata"]["uid"]]
    assert len(mine) == 1
    assert mine[0]["spec"]["placement"]["replicas"] == {"Master": 1, "Worker": 2}
    other = "member2" if cluster == "member1" else "member1"
    assert not [w for w in hub.list(r.WORKS, f"fleet-member-{other}")[0]
                if w["spec"]["job"]["uid"] == job["metadata"]["uid"]]

    member = fleet.client(cluster)

    def running_pods() -> list[dict[str, Any]] | None:
        pods, _ = member.list(r.PODS, "default",
                              label_selector="training.kubeflow.org/job-name=thin-path")
        return pods if len(pods) == 3 and all(
            (p.get("status") or {}).get("phase") == "Running" for p in pods) else None

    pods = {p["metadata"]["name"]: p for p in eventually(running_pods, what="3 running pods")}
    assert set(pods) == {"thin-path-master-0", "thin-path-worker-0", "thin-path-worker-1"}
    for name, rank in (("thin-path-master-0", "0"), ("thin-path-worker-0", "1"),
                       ("thin-path-worker-1", "2")):
        env = {e["name"]: e.get("value") for e in pods[name]["spec"]["containers"][0]["env"]}
        assert env["MASTER_ADDR"] == "thin-path-master-0"
        assert env["MASTER_PORT"] == "23456"
        assert env["WORLD_SIZE"] == "3"
        assert env["RANK"] == rank
        assert pods[name]["spec"]["nodeName"].startswith(f"{cluster}-node-")
    assert pods["thin-path-master-0"]["metadata"]["labels"][
        "training.kubeflow.org/job-role"] == "master"

    eventually(lambda: state(hub.get(r.PYTORCHJOBS, "thin-path", "default")) == "Running",
               what="hub job Running")
    def succeeded() -> dict[str, Any] | None:
        job = hub.get(r.PYTORCHJOBS, "thin-path", "default")
        return job if state(job) == "Succeeded" else None

    final = eventually(succeeded, what="hub job Succeeded")
    assert final["status"]["clusters"] == [cluster]
    assert final["status"]["replicaStatuses"]["Master"] == {"succeeded": 1}
    assert final["status"]["replicaStatuses"]["Worker"] == {"succeeded": 2}
    work = hub.get(r.WORKS, mine[0]["metadata"]["name"], f"fleet-member-{cluster}")
    assert work["status"]["applied"] is True
    assert work["status"]["state"] == "Succeeded"
    assert {p["name"] for p in work["status"]["pods"]} == set(pods)


TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"  # what kubectl get asks for


def table_rows(hub: Kube, path: str) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The API server's Table for ``path``: column definitions and rows by object name."""
    table = hub.raw("GET", path, accept=TABLE)
    assert table["kind"] == "Table", table.get("kind")
    names = [c["name"] for c in table["columnDefinitions"]]
    rows = {row["cells"][0]: dict(zip(names, row["cells"], strict=True))
            for row in table["rows"]}
    return table["columnDefinitions"], rows


def test_printer_columns_show_state_age_and_clusters(fleet: LocalFleet, hub: Kube) -> None:
    apply_file(hub, EXAMPLES / "propagationpolicy-gang.yaml")
    job = hub.create(r.PYTORCHJOBS, seed_job("columns", run_for="1h"))
    cluster = BINDING.match(eventually(lambda: binding_event(hub, job), what="binding")
                            ).group(1)  # type: ignore[union-attr]
    eventually(lambda: state(hub.get(r.PYTORCHJOBS, "columns", "default")) == "Running",
               what="hub job Running")
    try:
        columns, rows = table_rows(hub, "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs")
        assert [(c["name"], c.get("priority", 0)) for c in columns] == [
            ("Name", 0), ("State", 0), ("Age", 0), ("Clusters", 1)]  # Clusters: -o wide
        row = rows["columns"]
        assert row["State"] == "Running"
        assert row["Clusters"] == cluster
        assert re.fullmatch(r"\d+(s|m\d*s?)", row["Age"]), row["Age"]

        _, works = table_rows(hub, f"/apis/fleet.sh/v1alpha1/namespaces/fleet-member-{cluster}"
                                   "/works")
        (work,) = [w for w in works.values() if w["Job"] == "columns"]
        assert (work["Cluster"], work["Applied"], work["State"]) == (cluster, True, "Running")

        _, clusters = table_rows(hub, "/apis/fleet.sh/v1alpha1/memberclusters")
        status = hub.get(r.MEMBERCLUSTERS, cluster)["status"]
        shown = clusters[cluster]
        assert (shown["Ready"], shown["Capacity-Stale"]) == ("True", "False")
        assert shown["Free-GPUs"] == status["freeGpus"]
        assert shown["Nodes"] == 4
    finally:
        hub.delete(r.PYTORCHJOBS, "columns", "default")


def test_deleting_the_hub_job_removes_its_share_on_the_member(fleet: LocalFleet,
                                                              hub: Kube) -> None:
    apply_file(hub, EXAMPLES / "propagationpolicy-gang.yaml")
    job = hub.create(r.PYTORCHJOBS, seed_job("short-lived", run_for="1h"))
    message = eventually(lambda: binding_event(hub, job), what="binding")
    cluster = BINDING.match(message).group(1)  # type: ignore[union-attr]
    member = fleet.client(cluster)
    eventually(lambda: member.get_or_none(r.PYTORCHJOBS, "short-lived", "default"),
               what="job on the member")
    hub.delete(r.PYTORCHJOBS, "short-lived", "default")
    eventually(lambda: hub.get_or_none(r.PYTORCHJOBS, "short-lived", "default") is None,
               what="hub job gone (dispatch finalizer released)")
    eventually(lambda: member.get_or_none(r.PYTORCHJOBS, "short-lived", "default") is None,
               what="member job purged")
    # (the agent drops its finalizer just after purging: the Work goes a moment later)
    eventually(lambda: not [w for w in hub.list(r.WORKS, f"fleet-member-{cluster}")[0]
                            if w["spec"]["job"]["name"] == "short-lived"] or None,
               what="the Work gone")


def test_a_member_job_deleted_on_the_member_is_put_back(fleet: LocalFleet, hub: Kube) -> None:
    """The hub's word wins: the agent applies a Work once per spec, and again when its job
    has gone from the member behind the hub's back."""
    apply_file(hub, EXAMPLES / "propagationpolicy-gang.yaml")
    job = hub.create(r.PYTORCHJOBS, seed_job("drifting", run_for="1h"))
    cluster = BINDING.match(eventually(lambda: binding_event(hub, job), what="binding")
                            ).group(1)  # type: ignore[union-attr]
    member = fleet.client(cluster)
    first = eventually(lambda: member.get_or_none(r.PYTORCHJOBS, "drifting", "default"),
                       what="job on the member")
    member.delete(r.PYTORCHJOBS, "drifting", "default")

    def back() -> dict[str, Any] | None:
        found = member.get_or_none(r.PYTORCHJOBS, "drifting", "default")
        return found if found and found["metadata"]["uid"] != first["metadata"]["uid"] else None

    eventually(back, timeout=60, what="the job applied again on the member")
    hub.delete(r.PYTORCHJOBS, "drifting", "default")


def test_a_member_job_status_too_deep_for_the_hub_is_reported_in_part(
        fleet: LocalFleet, hub: Kube) -> None:
    """Whoever may write a job's status on a member can nest it deep (a PyTorchJob's replica
    label selector is open; once the job has ended its controller writes it no more). Copied
    whole into the Work, it would break every list of Works on the hub: the agent reports
    the status's short fields and conditions instead."""
    apply_file(hub, EXAMPLES / "propagationpolicy-gang.yaml")
    job = hub.create(r.PYTORCHJOBS, seed_job("deep-status", run_for="1s"))
    cluster = BINDING.match(eventually(lambda: binding_event(hub, job), what="binding")
                            ).group(1)  # type: ignore[union-attr]
    member = fleet.client(cluster)
    eventually(lambda: state(member.get_or_none(r.PYTORCHJOBS, "deep-status", "default")
                             or {}) == "Succeeded" or None, what="the member job Succeeded")
    member.patch(r.PYTORCHJOBS, "deep-status", {"status": {"replicaStatuses": {"Worker": {
        "labelSelector": nested_value(200, {})}}}}, "default", subresource="status")

    def reported_in_part() -> dict[str, Any] | None:
        works, _ = hub.list(r.WORKS, f"fleet-member-{cluster}")
        mine = [w for w in works if w["spec"]["job"]["uid"] == job["metadata"]["uid"]]
        status = (mine[0].get("status") or {}).get("jobStatus") if mine else None
        return status if status and "replicaStatuses" not in status else None

    reported = eventually(reported_in_part, what="the Work reporting part of the status")
    assert reported["completionTime"], reported
    assert state(hub.get(r.PYTORCHJOBS, "deep-status", "default")) == "Succeeded"
    hub.delete(r.PYTORCHJOBS, "deep-status", "default")


def test_the_seed_job_applies_unchanged(fleet: LocalFleet, hub: Kube, tmp_path: Path) -> None:
    applied = apply_file(hub, EXAMPLES / "pytorchjob.yaml", namespace="kube-public")
    assert applied[0]["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
