"""An agent's hub identity reaches its own namespace and MemberCluster, and nothing else."""

from __future__ import annotations

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
