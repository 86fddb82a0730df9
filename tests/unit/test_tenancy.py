"""Tenants on nodes of their own (HiveD's cells, node by node): the tenant a bind names goes
on the job, into its Works as a label value, and onto every pod template of the member job
the agent applies, with a preferred anti-affinity to other tenants' pods; the simulated
member's scheduler keeps tenants apart alike."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from e2e.jobs import seed_pytorchjob
from e2e.localfleet.demo import EXAMPLES
from fleet.api import protocol
from fleet.api.cluster import Work
from fleet.hub.works import work_body
from fleet.kinds import adapter_for
from fleet.sim.members import Members
from fleet.sim.trace import Gang, Node
from member_agent.tenancy import kept_apart, other_tenants, own_cells
from member_agent.topology import placed
from propagation.division import ClusterShare
from quota.cells import Cells

Body = dict[str, Any]
GI = 1 << 30


def example(name: str) -> Body:
    """The example's job (the first document: some files add a Service after it)."""
    return dict(next(yaml.safe_load_all((EXAMPLES / name).read_text())))


@pytest.mark.parametrize(("tenant", "label"), [
    ("root/team-a", "root.team-a"), ("opportunistic", "opportunistic"), ("", "")])
def test_a_tenant_reads_as_a_label_value(tenant: str, label: str) -> None:
    assert protocol.tenant_label(tenant) == label


def test_a_tenant_too_long_for_a_label_value_is_a_stable_digest() -> None:
    deep = "root/" + "/".join(["a-quota-node-with-a-long-name"] * 4)
    value = protocol.tenant_label(deep)
    assert value == protocol.tenant_label(deep) != protocol.tenant_label(deep + "x")
    assert len(value) <= 63
    assert value.startswith("t-")


def work_of(job: Body, tenant: str, cells: tuple[str, ...] = ()) -> Body:
    share = ClusterShare("m1", (("Worker", 2),), (("Worker", 0),), cells=cells)
    job["metadata"].update(uid="u-1", generation=1)
    job["metadata"]["annotations"] = {protocol.PLACEMENT: protocol.encode_placement([share]),
                                      **({protocol.TENANT: tenant} if tenant else {})}
    placement = protocol.decode_placement(job)
    body = work_body(job, adapter_for(job["apiVersion"], job["kind"]), placement[0], placement)
    Work.model_validate(body)
    return body


def test_the_bound_tenant_travels_in_the_work_not_in_the_member_copy() -> None:
    body = work_of(seed_pytorchjob("j", "ns", workers=2, master=False), "root/team-a")
    assert body["spec"]["placement"]["tenant"] == "root.team-a"
    assert protocol.TENANT not in body["spec"]["manifests"][0]["metadata"]["annotations"]
    bare = work_of(seed_pytorchjob("j", "ns", workers=2, master=False), "")
    assert "tenant" not in bare["spec"]["placement"]


def templates(job: Body) -> list[Body]:
    adapter = adapter_for(job["apiVersion"], job["kind"])
    return [spec["template"] for _, spec in adapter.replica_specs(job)]


@pytest.mark.parametrize("job", [
    seed_pytorchjob("j", "ns"), example("kubeflow-mpijob.yaml"),
    example("t9k-mpijob-horovod.yaml"), example("t9k-tensorflowtrainingjob.yaml")],
    ids=["pytorchjob", "kubeflow-mpijob", "t9k-mpijob", "t9k-tensorflow"])
def test_the_agent_labels_every_template_and_keeps_it_from_other_tenants(job: Body) -> None:
    own = {"weight": 5, "podAffinityTerm": {"labelSelector": {"matchLabels": {"x": "y"}},
                                            "topologyKey": "zone"}}
    job = copy.deepcopy(job)
    templates(job)[0].setdefault("spec", {})["affinity"] = {
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [own]}}
    before = copy.deepcopy(job)
    out = kept_apart(job, "root.team-a")
    assert job == before  # the Work's manifest is not touched
    assert templates(out)
    for i, template in enumerate(templates(out)):
        assert template["metadata"]["labels"][protocol.TENANT] == "root.team-a"
        preferred = template["spec"]["affinity"]["podAntiAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"]
        assert preferred == ([own] if i == 0 else []) + [other_tenants("root.team-a")]
    assert kept_apart(out, "root.team-a") == out  # applied again: nothing added
    assert kept_apart(job, "") == job


def test_the_anti_affinity_is_to_other_tenants_pods_of_any_namespace_per_node() -> None:
    term = other_tenants("root.team-a")["podAffinityTerm"]
    assert term["namespaceSelector"] == {}  # every namespace
    assert term["topologyKey"] == protocol.HOSTNAME_LEVEL
    assert term["labelSelector"]["matchExpressions"] == [
        {"key": protocol.TENANT, "operator": "Exists"},
        {"key": protocol.TENANT, "operator": "NotIn", "values": ["root.team-a"]}]


def test_the_simulated_scheduler_keeps_a_tenants_replicas_off_another_tenants_node() -> None:
    """Two 8-GPU nodes: tenant a holds 4 GPUs of the first. Best fit alone would put b's 1-GPU
    replica beside them (fewest GPUs left); kept apart it takes the empty node, and a's next
    replica goes to a's node."""
    members = Members([Node(f"n{i}", 64_000, 256 * GI, 8, "A100") for i in range(2)], 1)

    def one(tenant: str, gpus: int) -> Gang:
        return Gang(f"{tenant}-{gpus}", tenant, 0, 10, 1, 1000, GI, gpus, 0)

    assert members.place(0, one("a", 4), 1, tenant="a") == [0]
    assert members.place(0, one("b", 1), 1, tenant="b") == [1]
    assert members.place(0, one("a", 1), 1, tenant="a") == [0]
    assert members.place(0, one("c", 1), 1) == [0]  # no tenant: best fit alone
    members.release(0, one("b", 1), [1], "b")
    assert members.place(0, one("a", 1), 1, tenant="a") == [0]  # b's node empty again:
    # a's own node still fits best



def test_the_agent_applies_the_work_as_its_placement_places_it() -> None:
    body = work_of(seed_pytorchjob("j", "ns", workers=2, master=False), "root/team-a")
    before = copy.deepcopy(body)
    [template] = templates(placed(body))
    assert body == before  # the Work is not changed
    assert template["metadata"]["labels"][protocol.TENANT] == "root.team-a"


def test_a_tenants_pods_prefer_its_cells_named_in_the_work() -> None:
    """The bind names the tenant's cells on the member; the Work carries them and the agent
    has every pod prefer those nodes (by name), beside keeping away from other tenants."""
    body = work_of(seed_pytorchjob("j", "ns", workers=2, master=False), "root/team-a",
                   cells=("node-2", "node-0"))
    assert body["spec"]["placement"]["cells"] == ["node-2", "node-0"]
    [template] = templates(placed(body))
    preferred = template["spec"]["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred == own_cells(["node-2", "node-0"])
    assert [p["preference"] for p in preferred] == [{"matchFields": [  # one value a field term
        {"key": "metadata.name", "operator": "In", "values": [node]}]} for node in ("node-2",
                                                                                  "node-0")]
    bare = work_of(seed_pytorchjob("j", "ns", workers=2, master=False), "root/team-a")
    assert "cells" not in bare["spec"]["placement"]
    assert "nodeAffinity" not in templates(placed(bare))[0]["spec"]["affinity"]


def test_the_simulated_scheduler_puts_a_tenants_replicas_on_its_cells_first() -> None:
    """Three empty 8-GPU nodes: the second is a's cell, the third b's. a's replica takes its
    cell, b's its own, and a replica of nobody's tenant takes the node no one owns."""
    members = Members([Node(f"n{i}", 64_000, 256 * GI, 8, "A100") for i in range(3)], 1)
    members.cells = Cells({"c0/c0-n00001": "a", "c0/c0-n00002": "b"})

    def one(tenant: str) -> Gang:
        return Gang(f"{tenant}-1", tenant, 0, 10, 1, 1000, GI, 1, 0)

    assert members.place(0, one("a"), 1, tenant="a") == [1]
    assert members.place(0, one("b"), 1, tenant="b") == [2]
    assert members.place(0, one("o"), 1, tenant="opportunistic") == [0]
