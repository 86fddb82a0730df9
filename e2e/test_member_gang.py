"""Gang scheduling on a member that runs Volcano: the agent's controller gives the job a
PodGroup and creates its pods only once Volcano admits the group (``Inqueue``).

No Volcano scheduler runs here; the test installs Volcano's PodGroup CRD on one member and
plays the scheduler's part by moving the PodGroup's phase, which is all the controller reads.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.conftest import eventually
from e2e.localfleet import LocalFleet
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube
from member_agent.controllers.gang import PODGROUPS, Scheduler

pytestmark = pytest.mark.e2e
Body = dict[str, Any]
NS = "gang"
PODGROUP = PODGROUPS[Scheduler.VOLCANO]


def podgroup_crd() -> Body:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "podgroups.scheduling.volcano.sh"},
        "spec": {
            "group": "scheduling.volcano.sh", "scope": "Namespaced",
            "names": {"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup",
                      "shortNames": ["pg"]},
            "versions": [{"name": "v1beta1", "served": True, "storage": True,
                          "subresources": {"status": {}},
                          "schema": {"openAPIV3Schema": {
                              "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }


@pytest.fixture(scope="module")
def volcano_member(fleet: LocalFleet) -> Iterator[Kube]:
    kube = fleet.client("member2")
    kube.create(r.CRDS, podgroup_crd())
    def served() -> bool:
        try:
            kube.list(PODGROUP)
        except errors.NotFound:
            return False
        return True

    eventually(served, what="PodGroup CRD served")
    kube.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": NS}})
    try:
        yield kube
    finally:
        kube.delete(r.CRDS, "podgroups.scheduling.volcano.sh")
        eventually(lambda: kube.get_or_none(r.CRDS, "podgroups.scheduling.volcano.sh") is None,
                   what="PodGroup CRD removed")
        time.sleep(3)  # the agent's scheduler probe (FLEET_GANG_PROBE_SECONDS) forgets it


def test_pods_wait_for_the_volcano_podgroup(volcano_member: Kube) -> None:
    kube = volcano_member
    template = {"metadata": {"annotations": {"fleet.sh/sim-duration": "1h"}},
                "spec": {"containers": [{"name": "pytorch", "image": "train:1"}]}}
    kube.create(r.PYTORCHJOBS, {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "gang-job", "namespace": NS},
        "spec": {"runPolicy": {"schedulingPolicy": {"queue": "research"}},
                 "pytorchReplicaSpecs": {
                     "Master": {"replicas": 1, "template": template},
                     "Worker": {"replicas": 2, "template": template}}}})
    group = eventually(lambda: kube.get_or_none(PODGROUP, "gang-job", NS), timeout=30,
                       what="a PodGroup for the job")
    assert group["spec"] == {"minMember": 3, "queue": "research"}
    assert group["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
    time.sleep(3)
    assert not kube.list(r.PODS, NS)[0], "pods created before Volcano admitted the group"

    kube.patch(PODGROUP, "gang-job", {"status": {"phase": "Inqueue"}}, NS,
               subresource="status")
    def three_pods() -> list[Body] | None:
        items = kube.list(r.PODS, NS)[0]
        return items if len(items) == 3 else None

    pods = eventually(three_pods, what="3 pods once Inqueue")
    for pod in pods:
        assert pod["spec"]["schedulerName"] == "volcano"
        assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "gang-job"
    roles = sorted(p["metadata"]["annotations"]["volcano.sh/task-spec"] for p in pods)
    assert roles == ["master", "worker", "worker"]
    kube.delete(r.PYTORCHJOBS, "gang-job", NS)
    eventually(lambda: kube.get_or_none(PODGROUP, "gang-job", NS) is None, timeout=60,
               what="the PodGroup goes with its job (garbage collection)")
