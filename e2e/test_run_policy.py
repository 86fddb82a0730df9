"""runPolicy as the training operator reads it, on the hub's real API server and webhook:
``managedBy`` (only the operator's two names; MultiKueue's jobs are left alone; never
changed), ``schedulingPolicy.minAvailable`` (above the replicas the job waits, an update
lowering it lets it run), and one name per job across kinds."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator

import pytest

from e2e.conftest import eventually
from e2e.jobs import delete_jobs, gang_namespace, hub_job, hub_state, seed_pytorchjob
from fleet.api.kubeflow import MULTIKUEUE_MANAGER, OPERATOR_MANAGER
from fleet.api.protocol import FINALIZER
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Body, Kube

pytestmark = pytest.mark.e2e
NAMESPACE = "run-policy"


@pytest.fixture(scope="module")
def namespace(hub: Kube) -> Iterator[str]:
    gang_namespace(hub, NAMESPACE, kinds=(("kubeflow.org/v1", "PyTorchJob"),
                                          ("kubeflow.org/v1", "TFJob")))
    yield NAMESPACE
    delete_jobs(hub, NAMESPACE, wait=True)


def managed(name: str, manager: str | None, **run_policy: object) -> Body:
    job = seed_pytorchjob(name, NAMESPACE, run_for="2s")
    job["spec"]["runPolicy"] = {**(job["spec"].get("runPolicy") or {}), **run_policy,
                                **({"managedBy": manager} if manager else {})}
    return job


def test_managed_by_takes_only_the_operators_two_names(hub: Kube, namespace: str) -> None:
    with pytest.raises(errors.Invalid) as refused:
        hub.create(r.PYTORCHJOBS, managed("other", "kueue.x-k8s.io/other-controller"))
    assert "spec.runPolicy.managedBy" in refused.value.message


def test_a_multikueue_job_is_left_alone_and_the_default_runs(hub: Kube, namespace: str) -> None:
    ours = hub.create(r.PYTORCHJOBS, managed("ours", OPERATOR_MANAGER))
    theirs = hub.create(r.PYTORCHJOBS, managed("theirs", MULTIKUEUE_MANAGER))
    hub_state(hub, ours, "Succeeded", timeout=120)  # the hub has long looked at both
    left = hub_job(hub, theirs)
    assert not left.get("status"), left.get("status")
    assert FINALIZER not in (left["metadata"].get("finalizers") or [])
    assert not [w for w in hub.list(r.WORKS)[0]
                if w["spec"]["job"]["uid"] == theirs["metadata"]["uid"]]
    with pytest.raises(errors.Invalid) as refused:  # and it stays theirs
        hub.patch(r.PYTORCHJOBS, "theirs", {"spec": {"runPolicy": {"managedBy": None}}},
                  NAMESPACE)
    assert "spec.runPolicy.managedBy" in refused.value.message
    assert "immutable" in refused.value.message


def test_a_gang_minimum_above_the_replicas_waits_until_lowered(hub: Kube,
                                                                namespace: str) -> None:
    job = hub.create(r.PYTORCHJOBS, managed("gang", None,
                                            schedulingPolicy={"minAvailable": 10}))

    def reason() -> str | None:
        queue = (hub_job(hub, job).get("status") or {}).get("queue") or {}
        return queue.get("message") if "minAvailable" in str(queue.get("message")) else None
    message = eventually(reason, what="the job waiting for its gang minimum")
    assert message.startswith("spec.runPolicy.schedulingPolicy.minAvailable: 10 pods")
    for _ in range(3):  # as the operator's suite checks: never running meanwhile
        current = hub_job(hub, job)
        assert not (current["metadata"].get("annotations") or {}).get("fleet.sh/clusters")
        time.sleep(2)
    hub.patch(r.PYTORCHJOBS, "gang", {"spec": {"runPolicy": {
        "schedulingPolicy": {"minAvailable": 2}}}}, NAMESPACE)
    hub_state(hub, job, "Succeeded", timeout=120)


def test_a_second_kind_may_not_take_a_jobs_name(hub: Kube, namespace: str) -> None:
    job = hub.create(r.PYTORCHJOBS, managed("named", None))
    eventually(lambda: hub_job(hub, job).get("status"), what="the hub seeing the job")
    template = copy.deepcopy(job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"])
    tf: Body = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
                "metadata": {"name": "named", "namespace": NAMESPACE},
                "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "template": template}}}}
    tf["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "name"] = "tensorflow"
    with pytest.raises(errors.Invalid) as refused:
        hub.create(r.TFJOBS, tf)
    assert refused.value.message.count("metadata.name: PyTorchJob run-policy/named") == 1
