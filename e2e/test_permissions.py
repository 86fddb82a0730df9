"""Least privilege, proven on the running fleet: each identity's effective permissions
(SelfSubjectRulesReview) equal its reviewed list in ``deploy/permissions/`` — nothing missing,
nothing extra — and no component of the fleet logged a 403.

Identities: the hub's ServiceAccount, the agent's ServiceAccount on its member, the agent's
scoped identity on the hub (from join), and an MPI launcher's ServiceAccount (the RBAC the
agent's Kubeflow MPI controller writes, applied as the agent: the agent can grant no more than
it holds).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from e2e.conftest import FORBIDDEN, forbidden_lines
from e2e.localfleet import HUB, LocalFleet
from e2e.localfleet.demo import EXAMPLES
from e2e.permissions import Reviewed, differences
from fleet import onboarding
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Body, Kube
from member_agent.controllers.kubeflow_mpi import KubeflowMPIKind

pytestmark = pytest.mark.e2e
MEMBER, OTHER = "member1", "member2"
LAUNCHER_NS, JOB = "perm-mpi", "perm-job"


def as_hub(fleet: LocalFleet) -> Kube:
    return Kube(str(fleet.identity_kubeconfig(HUB)))


def as_agent_on_member(fleet: LocalFleet) -> Kube:
    return Kube(str(fleet.identity_kubeconfig(MEMBER)))


def as_agent_on_hub(fleet: LocalFleet) -> Kube:
    return Kube(str(fleet.agent_kubeconfig(MEMBER)))


@pytest.fixture(scope="module")
def launcher(fleet: LocalFleet, tmp_path_factory: pytest.TempPathFactory) -> Kube:
    """An MPI launcher's identity: the ServiceAccount, Role and RoleBinding the Kubeflow MPI
    controller makes for a two-worker job, written by the agent's own identity."""
    doc = yaml.safe_load((EXAMPLES / "kubeflow-mpijob.yaml").read_text())
    job: Body = {**copy.deepcopy(doc), "metadata": {"name": JOB, "namespace": LAUNCHER_NS,
                                                     "uid": "00000000-0000-0000-0000-0000000000aa"}}
    admin, agent = fleet.client(MEMBER), as_agent_on_member(fleet)
    admin.apply(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": LAUNCHER_NS}}, field_manager="test")
    for resource, made in KubeflowMPIKind().objects(job, [], []):
        if resource in (r.SERVICEACCOUNTS, r.ROLES, r.ROLEBINDINGS):
            body = copy.deepcopy(made)
            body["metadata"].pop("ownerReferences", None)  # no such job: keep them from GC
            agent.apply(resource, body, field_manager="test-as-agent")
    token = onboarding.service_account_token(admin, LAUNCHER_NS, f"{JOB}-launcher", 3600)
    path = Path(tmp_path_factory.mktemp("launcher")) / "kubeconfig"
    path.write_text(onboarding.token_kubeconfig(fleet.kubeconfig(MEMBER), "launcher", token))
    return Kube(str(path))


def test_the_hub_holds_exactly_its_reviewed_permissions(fleet: LocalFleet) -> None:
    assert differences(as_hub(fleet), Reviewed.load("hub")) == []


def test_the_agent_holds_exactly_its_reviewed_permissions_on_its_member(
        fleet: LocalFleet) -> None:
    assert differences(as_agent_on_member(fleet), Reviewed.load("agent-member")) == []


def test_the_agent_holds_exactly_its_reviewed_permissions_on_the_hub(fleet: LocalFleet) -> None:
    reviewed = Reviewed.load("agent-hub", cluster=MEMBER)
    # Another member's namespace is one where only the "*" part may hold.
    others = ["default", f"fleet-member-{OTHER}", "fleet-system"]
    assert differences(as_agent_on_hub(fleet), reviewed, others) == []


def test_an_mpi_launcher_holds_exactly_its_reviewed_permissions(launcher: Kube) -> None:
    reviewed = Reviewed.load("mpi-launcher", job=JOB, namespace=LAUNCHER_NS)
    assert differences(launcher, reviewed, ["default"]) == []


def test_the_comparison_reports_a_removed_and_an_added_rule(fleet: LocalFleet) -> None:
    """A review that cannot fail proves nothing: bind one rule more to the hub and leave one
    out of its reviewed list, and both must show."""
    hub = fleet.client(HUB)
    reviewed = Reviewed.load("hub")
    taken = ("scheduling.k8s.io priorityclasses", "watch")
    pruned = Reviewed(reviewed.identity, {ns: grants - {taken} for ns, grants
                                          in reviewed.namespaces.items()})
    extra = "test-extra-hub-rule"
    hub.apply(r.CLUSTERROLES, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": extra},
        "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}]},
        field_manager="test")
    hub.apply(r.CLUSTERROLEBINDINGS, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": extra},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": extra},
        "subjects": [{"kind": "ServiceAccount", "name": "fleet-hub",
                      "namespace": "fleet-system"}]}, field_manager="test")
    try:
        found = differences(as_hub(fleet), pruned)
    finally:
        hub.delete(r.CLUSTERROLEBINDINGS, extra)
        hub.delete(r.CLUSTERROLES, extra)
    assert "fleet-hub in default: extra core namespaces get" in found
    assert "fleet-hub in default: extra scheduling.k8s.io priorityclasses watch" in found
    assert not any("missing" in line for line in found)
    # and the other way round: a rule the list names but the identity lacks
    assert any("missing core namespaces get" in line
               for line in differences(as_hub(fleet), Reviewed(reviewed.identity, {
                   ns: g | {("core namespaces", "get")} for ns, g in reviewed.namespaces.items()})))


def test_no_component_logged_a_403(fleet: LocalFleet) -> None:
    """(The session fixture checks the same once more after its last test.)"""
    assert forbidden_lines(fleet.workdir / "logs") == []


def test_a_403_is_what_a_missing_rule_gives(fleet: LocalFleet) -> None:
    """The log check above looks for what the API server answers to a missing rule."""
    with pytest.raises(errors.Forbidden) as caught:
        as_hub(fleet).list(r.NAMESPACES)
    assert FORBIDDEN.search(f"{caught.value.status} {caught.value}")
