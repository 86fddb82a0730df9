"""An agent's hub identity reaches its own namespace and MemberCluster, and nothing else."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from e2e.localfleet import LocalFleet
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e


def test_agent_reads_its_own_works_only(fleet: LocalFleet) -> None:
    agent = Kube(str(fleet.agent_kubeconfig("member1")))
    agent.list(r.WORKS, "fleet-member-member1")
    with pytest.raises(errors.Forbidden):
        agent.list(r.WORKS, "fleet-member-member2")
    with pytest.raises(errors.Forbidden):
        agent.list(r.WORKS)
    with pytest.raises(errors.Forbidden):
        agent.list(r.PYTORCHJOBS, "default")
    with pytest.raises(errors.Forbidden):
        agent.list(r.SECRETS, "fleet-member-member1")


def test_agent_writes_its_own_membercluster_status_only(fleet: LocalFleet) -> None:
    agent = Kube(str(fleet.agent_kubeconfig("member1")))
    agent.patch(r.MEMBERCLUSTERS, "member1", {"status": {}}, subresource="status")
    with pytest.raises(errors.Forbidden):
        agent.patch(r.MEMBERCLUSTERS, "member2", {"status": {"freeGpus": 999}},
                    subresource="status")
    with pytest.raises(errors.Forbidden):
        agent.patch(r.MEMBERCLUSTERS, "member1", {"spec": {"taints": []}})
    with pytest.raises(errors.Forbidden):
        agent.list(r.MEMBERCLUSTERS)


def test_agent_cannot_touch_another_members_works_secrets_or_cluster(fleet: LocalFleet) -> None:
    agent = Kube(str(fleet.agent_kubeconfig("member1")))
    other = "fleet-member-member2"
    denied: list[Callable[[], object]] = [
        lambda: agent.patch(r.WORKS, "any", {"metadata": {"labels": {"x": "y"}}}, other),
        lambda: agent.create(r.WORKS, {"apiVersion": "fleet.sh/v1alpha1", "kind": "Work",
                                       "metadata": {"name": "forged", "namespace": other},
                                       "spec": {}}),
        lambda: agent.get(r.SECRETS, "any", other),
        lambda: agent.list(r.SECRETS, other),
        lambda: agent.get(r.MEMBERCLUSTERS, "member2"),
        lambda: agent.patch(r.LEASES, "fleet-agent", {"spec": {"holderIdentity": "me"}}, other),
        lambda: agent.list(r.PYTORCHJOBS),
        lambda: agent.list(r.TENSORFLOWTRAININGJOBS, "fleet-member-member1"),
        lambda: agent.create(r.PYTORCHJOBS, {"apiVersion": "kubeflow.org/v1",
                                             "kind": "PyTorchJob",
                                             "metadata": {"name": "x", "namespace": "default"},
                                             "spec": {}}),
    ]
    for attempt in denied:
        with pytest.raises(errors.Forbidden):
            attempt()
