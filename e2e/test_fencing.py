"""Fencing and member-side failures (docs/architecture.md, invariant 6, issue 15).

A member that comes back after its gang failed over removes its copy instead of running it; a
Work that disappears from the hub takes its member job along at once; a member that refuses a
job's pods says so on the hub job, naming itself and the reason, and the refusal counts toward
application failover. Each test fails on the code before fencing.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.chaos import faults
from e2e.conftest import eventually, running
from e2e.jobs import events, hub_job, hub_state, member_job, pods, pods_named, seed_pytorchjob
from e2e.localfleet import HUB, LocalFleet
from fleet.api.protocol import JOB_UID, member_namespace
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e
Body = dict[str, Any]


@pytest.fixture(scope="module")
def fleet2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    """A fleet of its own: these tests freeze members' API servers and stop the hub. Its hub
    and agents are host processes: the tests SIGKILL and SIGSTOP them directly."""
    workdir = Path(tmp_path_factory.mktemp("fencing"))
    with running(LocalFleet(workdir, say=lambda m: print(f"[fencing] {m}", flush=True),
                            nodes="host"),
                 tail=20) as local:
        # every node Ready in both reports: a gang must be able to move to the other member
        # (on a loaded machine kwok marks nodes Ready well after the agents' first report)
        eventually(lambda: len([c for c in local.client(HUB).list(r.MEMBERCLUSTERS)[0]
                                if (c.get("status") or {}).get("readyNodes") == 4
                                and (c.get("status") or {}).get("freeGpus", 0) >= 24]) == 2,
                   timeout=180, what="two members reporting their nodes Ready")
        yield local


def conditions_of(hub: Kube, job: Body, kind: str) -> list[Body]:
    status = hub_job(hub, job).get("status") or {}
    return [c for c in status.get("conditions") or []
            if c.get("type") == kind and c.get("status") == "True"]


def namespace_with_failover(hub: Kube, namespace: str, toleration: int) -> None:
    if hub.get_or_none(r.NAMESPACES, namespace) is None:
        hub.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": namespace}})
    hub.apply(r.PROPAGATIONPOLICIES, {
        "apiVersion": "policy.one.alibabacloud.com/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "gang", "namespace": namespace},
        "spec": {"resourceSelectors": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}],
                 "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided",
                                                     "customSchedulingType": "Gang"}},
                 "failover": {"application": {
                     "decisionConditions": {"tolerationSeconds": toleration},
                     "purgeMode": "Immediately"}}}}, field_manager="test")


def placed_on(hub: Kube, job: Body) -> str:
    def cluster() -> str | None:
        return (hub_job(hub, job)["metadata"].get("annotations") or {}).get("fleet.sh/clusters")
    return eventually(cluster, what=f"{job['metadata']['name']} placed")


def running_job(fleet: LocalFleet, namespace: str, name: str) -> tuple[Kube, Body, str, Kube]:
    """A PyTorchJob of 3 replicas that runs for good, under a failover policy that waits 300
    seconds: (hub, job, the member it runs on, that member), once its pods exist."""
    hub = fleet.client(HUB)
    namespace_with_failover(hub, namespace, toleration=300)
    job = hub.create(r.PYTORCHJOBS, seed_pytorchjob(name, namespace, run_for="8760h"))
    cluster = placed_on(hub, job)
    member = fleet.client(cluster)
    pods_named(member, job, 3)
    return hub, job, cluster, member


def drop_works(hub: Kube, cluster: str, uid: str) -> list[str]:
    """Delete the Works of the hub job ``uid`` on ``cluster`` as a lost member's are (the
    agent's finalizer dropped first); their names."""
    namespace = member_namespace(cluster)
    works, _ = hub.list(r.WORKS, namespace, label_selector=f"{JOB_UID}={uid}")
    for work in works:
        name = work["metadata"]["name"]
        hub.patch(r.WORKS, name, {"metadata": {"finalizers": None}}, namespace)
        hub.delete(r.WORKS, name, namespace)
    return [w["metadata"]["name"] for w in works]


def gone_from(member: Kube, job: Body) -> bool:
    return member_job(member, job) is None and not pods(member, job)


def test_a_work_removed_behind_the_agents_back_takes_its_job_along(
        fleet2: LocalFleet) -> None:
    hub, job, cluster, member = running_job(fleet2, "orphans", "orphan")
    first = member_job(member, job)
    assert first is not None
    uid = hub_job(hub, job)["metadata"]["uid"]

    # With the hub stopped, nothing puts the Work back: the agent alone must act on its loss
    # (the hub drops the agent's finalizer the same way for a member it has lost).
    fleet2.stop_process("hub")
    try:
        assert len(drop_works(hub, cluster, uid)) == 1
        removed = time.monotonic()
        eventually(lambda: gone_from(member, job), timeout=60,
                   what="the member job of the deleted Work removed")
        print(f"member job removed {time.monotonic() - removed:.1f}s after its Work")
    finally:
        fleet2.start_hub()
    # The hub restores the Work of the still-bound job; a fresh copy runs.
    def rerun() -> Body | None:
        again = member_job(member, job)
        return again if again and again["metadata"]["uid"] != first["metadata"]["uid"] else None

    eventually(rerun, timeout=90, what="the job applied again from the restored Work")
    hub.delete(r.PYTORCHJOBS, "orphan", "orphans")
    eventually(lambda: gone_from(member, job), timeout=90, what="the job removed")


def test_an_agent_back_from_an_outage_removes_copies_whose_work_went(
        fleet2: LocalFleet) -> None:
    hub, job, cluster, member = running_job(fleet2, "restarts", "stale")
    uid = hub_job(hub, job)["metadata"]["uid"]

    fleet2.stop_process(f"agent-{cluster}", signal.SIGKILL)
    fleet2.stop_process("hub")
    agent_started = False
    try:
        drop_works(hub, cluster, uid)
        time.sleep(2)
        assert member_job(member, job) is not None  # nobody to remove it while the agent is down
        fleet2.start_agent(cluster)
        agent_started = True
        started = time.monotonic()
        eventually(lambda: gone_from(member, job), timeout=90,
                   what="the copy removed by the agent once it runs again")
        print(f"stale copy removed {time.monotonic() - started:.1f}s after the agent started "
              "(lease 6s)")
    finally:
        if not agent_started:
            fleet2.start_agent(cluster)
        fleet2.start_hub()
    hub.delete(r.PYTORCHJOBS, "stale", "restarts")
    eventually(lambda: gone_from(member, job), timeout=90, what="the job removed")


def refuse_pods_in(kube: Kube, namespace: str) -> None:
    """A member's own admission policy refusing every pod in ``namespace`` (as a member's
    Gatekeeper or Kyverno rule would)."""
    name = f"fleet-test-refuse-{namespace}"
    kube.apply(r.VALIDATINGADMISSIONPOLICIES, field_manager="fleet-test", body={
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{
                     "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                     "resources": ["pods"]}]},
                 "validations": [{"expression": "false", "reason": "Forbidden",  # a 403:
                                  # a 422 says the pod itself is invalid, which fails the job
                                  "message": "pods are not allowed in this namespace"}]}})
    kube.apply(r.VALIDATINGADMISSIONPOLICYBINDINGS, field_manager="fleet-test", body={
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {
                     "kubernetes.io/metadata.name": namespace}}}}})
    # A policy takes a moment to be enforced: wait until a pod is refused (dry run)
    kube.apply(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": namespace}}, field_manager="fleet-test")
    probe = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "probe", "namespace": namespace},
             "spec": {"containers": [{"name": "c", "image": "busybox"}]}}

    def enforced() -> bool:
        try:
            kube.apply(r.PODS, probe, field_manager="fleet-test", dry_run=True)
        except errors.Forbidden as exc:
            return name in str(exc)
        return False

    eventually(enforced, timeout=30, what=f"{name} enforced")


def test_a_member_refusing_pods_says_so_on_the_hub(fleet2: LocalFleet) -> None:
    hub = fleet2.client(HUB)
    for member in fleet2.members:  # (a PriorityClass the hub lacks keeps the job on the hub)
        refuse_pods_in(fleet2.client(member), "refused")
    namespace_with_failover(hub, "refused", toleration=10)
    job = hub.create(r.PYTORCHJOBS, seed_pytorchjob("refused", "refused", run_for="8760h"))
    cluster = placed_on(hub, job)
    created = time.monotonic()

    condition = eventually(lambda: conditions_of(hub, job, "ReplicaFailure"), timeout=60,
                           what="a ReplicaFailure condition on the hub")[0]
    print(f"refusal on the hub {time.monotonic() - created:.1f}s after the job was created: "
          f"{condition}")
    assert condition["reason"] == "AdmissionDenied"
    assert condition["message"].startswith(f"{cluster}: ")
    assert "pods are not allowed in this namespace" in condition["message"]
    said = eventually(lambda: events(hub, job, "AdmissionDenied"), timeout=30,
                      what="an AdmissionDenied event on the hub job")
    assert said[0]["type"] == "Warning"
    assert said[0]["message"].startswith(f"{cluster}: ")
    # It counts toward application failover: past the toleration the gang is requeued.
    moved = eventually(lambda: events(hub, job, "FailedOver"), timeout=90,
                       what="the refused gang failed over")
    assert f"{cluster}: " in moved[0]["message"]
    assert "pods are not allowed" in moved[0]["message"]
    hub.delete(r.PYTORCHJOBS, "refused", "refused")


def test_a_member_quota_refusing_pods_says_so_on_the_hub(fleet2: LocalFleet) -> None:
    hub = fleet2.client(HUB)
    namespace_with_failover(hub, "member-quota", toleration=300)
    for name in fleet2.members:  # wherever the gang goes, its member forbids GPU pods here
        member = fleet2.client(name)
        if member.get_or_none(r.NAMESPACES, "member-quota") is None:
            member.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                         "metadata": {"name": "member-quota"}})
        member.apply(r.RESOURCEQUOTAS, {
            "apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "no-gpus", "namespace": "member-quota"},
            "spec": {"hard": {"requests.nvidia.com/gpu": "0"}}}, field_manager="test")
    job = hub.create(r.PYTORCHJOBS, seed_pytorchjob("over", "member-quota", run_for="8760h"))
    cluster = placed_on(hub, job)

    condition = eventually(lambda: conditions_of(hub, job, "ReplicaFailure"), timeout=60,
                           what="a ReplicaFailure condition on the hub")[0]
    assert condition["reason"] == "MemberQuotaExceeded"
    assert condition["message"].startswith(f"{cluster}: ")
    assert "exceeded quota" in condition["message"]
    said = eventually(lambda: events(hub, job, "MemberQuotaExceeded"), timeout=30,
                      what="a MemberQuotaExceeded event on the hub job")
    assert said[0]["message"] == condition["message"]
    time.sleep(3)  # the refusal goes on (the member controller retries): said once all the same
    assert len(events(hub, job, "MemberQuotaExceeded")) == 1
    hub.delete(r.PYTORCHJOBS, "over", "member-quota")


def test_a_namespace_whose_account_comes_late_waits_then_runs(fleet2: LocalFleet) -> None:
    """A new namespace's default ServiceAccount comes from the member's
    kube-controller-manager a moment after the namespace: while it is not there the member
    refuses the job's pods (a 403). The job waits, shown as Waiting on the hub, never as a
    ReplicaFailure, and runs once the account is made. (Here the controller managers are
    down for a while, so the moment is long enough to look at.)"""
    hub = fleet2.client(HUB)
    namespace_with_failover(hub, "late-account", toleration=300)
    supervisor = faults.Supervisor(fleet2).start()
    downs = [threading.Thread(target=supervisor.kill_and_restart,
                              args=(member, "kube-controller-manager", 45.0), daemon=True)
             for member in fleet2.members]
    try:
        for down in downs:
            down.start()
        time.sleep(2)  # both gone before the job's namespace is made on its member
        job = hub.create(r.PYTORCHJOBS, seed_pytorchjob("late", "late-account",
                                                        run_for="8760h"))
        cluster = placed_on(hub, job)
        waiting = eventually(lambda: conditions_of(hub, job, "Waiting"), timeout=40,
                             what="the job shown Waiting for its member's account")[0]
        print(f"waiting on the hub: {waiting}")
        assert waiting["reason"] == "ServiceAccountNotReady"
        assert waiting["message"].startswith(f"{cluster}: ")
        assert not conditions_of(hub, job, "ReplicaFailure")
        said = eventually(lambda: events(hub, job, "ServiceAccountNotReady"), timeout=30,
                          what="a ServiceAccountNotReady event on the hub job")
        assert said[0]["type"] == "Normal"
    finally:
        for down in downs:
            down.join(timeout=120)
        supervisor.stop()
    hub_state(hub, job, "Running", timeout=150)  # the new lease holder makes the account
    pods_named(fleet2.client(cluster), job, 3)
    eventually(lambda: not conditions_of(hub, job, "Waiting"), timeout=30,
               what="the wait gone from the hub once the account was made")
    assert not conditions_of(hub, job, "ReplicaFailure")
    hub.delete(r.PYTORCHJOBS, "late", "late-account")


# Last in this module: a member whose API server was frozen comes back without its
# kube-controller-manager (it exits when it cannot renew its leader lease, and nothing restarts
# it in the local fleet), so no garbage collection and no default ServiceAccounts there after.
def test_a_member_back_after_failover_removes_its_copy(fleet2: LocalFleet) -> None:
    hub = fleet2.client(HUB)
    namespace_with_failover(hub, "fenced", toleration=5)
    job = hub.create(r.PYTORCHJOBS, seed_pytorchjob("twice", "fenced", run_for="8760h"))
    lost = placed_on(hub, job)
    hub_state(hub, job, "Running")
    old = fleet2.client(lost)
    pods_named(old, job, 3)
    other = next(name for name in fleet2.members if name != lost)
    eventually(lambda: (hub.get(r.MEMBERCLUSTERS, other).get("status") or {}).get(
        "freeGpus", 0) >= 3, what=f"room for the gang on {other}")

    fleet2.kill_component(lost, "kube-apiserver", signal.SIGSTOP)
    frozen = time.monotonic()
    try:
        def moved() -> str | None:
            clusters = (hub_job(hub, job)["metadata"].get("annotations") or {}).get(
                "fleet.sh/clusters")
            return clusters if clusters and clusters != lost else None

        target = eventually(moved, timeout=120, what="the gang moved to the other member")
        print(f"failover from frozen {lost} to {target}: {time.monotonic() - frozen:.1f}s")
        new = fleet2.client(target)
        pods_named(new, job, 3)
    finally:
        fleet2.kill_component(lost, "kube-apiserver", signal.SIGCONT)
    thawed = time.monotonic()

    def removed() -> bool:
        # The agent could not renew its lease on the frozen member, so it gave up leading
        # and exited; the kubelet would start it again, as the fleet does here.
        fleet2.restart_exited_agents()
        return gone_from(old, job)

    eventually(removed, timeout=120, what=f"the old copy (job and pods) removed from {lost}")
    print(f"old copy gone from {lost} {time.monotonic() - thawed:.1f}s after the thaw")
    # The new copy is untouched and still runs; the hub says where.
    running = hub_state(hub, job, "Running")
    assert running["status"]["clusters"] == [target]
    assert all(p["status"].get("phase") == "Running" for p in pods(new, job).values())
    assert member_job(old, job) is None

    hub.delete(r.PYTORCHJOBS, "twice", "fenced")
    for member in (old, new):
        eventually(lambda member=member: gone_from(member, job), timeout=90,  # type: ignore[misc]
                   what="no copy left on either member after the hub job was deleted")
