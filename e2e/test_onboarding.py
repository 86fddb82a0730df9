"""Onboarding and packaging on real API servers: the deploy/ bases pass a server-side dry run,
one command joins a third member (agent installed) that then runs a job, unjoin removes it,
and a node change reaches the hub within seconds.

kwok runs no containers, so the agent DaemonSet's pods on member3 are stand-ins; the agent
process the test starts with the credentials join made plays their part.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.conftest import eventually
from e2e.jobs import gang_namespace, hub_state, seed_pytorchjob
from e2e.localfleet import HUB, LocalFleet
from e2e.localfleet.nodes import NodeShape, node_manifests
from fleet import deploy, onboarding
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e
Body = dict[str, Any]
REPO = Path(__file__).resolve().parent.parent


def kustomize(fleet: LocalFleet, part: str) -> list[Body]:
    out = subprocess.run([fleet.binaries()["kubectl"], "kustomize", str(REPO / "deploy" / part)],
                         check=True, capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def dry_run_all(kube: Kube, manifests: list[Body]) -> None:
    namespaces = [m for m in manifests if m["kind"] == "Namespace"]
    for body in namespaces:  # a dry run cannot create the namespace the rest goes into
        kube.apply(r.NAMESPACES, body, field_manager="test-deploy")
    for body in manifests:
        resource = r.for_kind(body["apiVersion"], body["kind"])
        kube.apply(resource, body, field_manager="test-deploy", dry_run=True)


def test_deploy_bases_pass_a_server_side_dry_run(fleet: LocalFleet, hub: Kube) -> None:
    hub_side = kustomize(fleet, "hub")
    assert {m["kind"] for m in hub_side} >= {"Deployment", "ClusterRole", "Service"}
    dry_run_all(hub, hub_side)
    agent = kustomize(fleet, "agent")
    daemonset = next(m for m in agent if m["kind"] == "DaemonSet")
    assert daemonset["spec"]["template"]["spec"]["containers"][0]["image"] == deploy.IMAGE
    dry_run_all(fleet.client("member1"), agent)
    secret = deploy.agent_manifests(hub_kubeconfig="apiVersion: v1\nkind: Config\n")[-1]
    fleet.client("member1").apply(r.SECRETS, secret, field_manager="test-deploy", dry_run=True)


def test_join_a_member_with_one_command_run_a_job_and_unjoin(fleet: LocalFleet,
                                                            hub: Kube) -> None:
    fleet.add_cluster("member3", [NodeShape(2, 8)])
    credentials = fleet.workdir / "member3.agent-hub.kubeconfig"
    cli = [sys.executable, "-m", "fleet.cli", "--kubeconfig", str(fleet.kubeconfig(HUB))]
    joined = subprocess.run([*cli, "join", "member3", "--member-kubeconfig",
                             str(fleet.kubeconfig("member3")), "--agent-kubeconfig-out",
                             str(credentials)], capture_output=True, text=True, check=False)
    assert joined.returncode == 0, joined.stderr
    assert "agent DaemonSet fleet-system/fleet-agent installed" in joined.stdout
    member = fleet.client("member3")
    daemonset = member.get(r.DAEMONSETS, "fleet-agent", "fleet-system")
    assert daemonset["spec"]["template"]["spec"]["serviceAccountName"] == "fleet-agent"
    assert member.get(r.CONFIGMAPS, "fleet-agent", "fleet-system")["data"]["cluster"] == "member3"
    assert member.get(r.SECRETS, "fleet-hub-kubeconfig", "fleet-system")

    fleet.agent_kubeconfig("member3").write_text(credentials.read_text())
    # A host process: a cluster added here has kwok nodes only (the DaemonSet's Pods land on
    # them, faked); a real node per added cluster would cost its own containerd and kubelet.
    fleet.start_agent("member3")
    eventually(lambda: ((hub.get(r.MEMBERCLUSTERS, "member3").get("status") or {})
                        .get("capacity") or {}).get("nodeGroups"), timeout=60,
               what="member3 reporting capacity")

    def conditions() -> dict[str, str] | None:
        status = hub.get(r.MEMBERCLUSTERS, "member3").get("status") or {}
        found = {c["type"]: c["status"] for c in status.get("conditions") or []}
        return found if {"Ready", "CapacityStale"} <= set(found) else None

    # Ready is the agent's, CapacityStale the hub's: server-side apply keeps both.
    assert eventually(conditions, what="Ready and CapacityStale") == {
        "Ready": "True", "CapacityStale": "False"}
    lease = hub.get(r.LEASES, "fleet-agent", "fleet-member-member3")
    assert lease["metadata"]["labels"]["fleet.sh/agent-heartbeat"] == "true"

    namespace = "on-member3"
    gang_namespace(hub, namespace, cluster="member3")
    job = hub.create(r.PYTORCHJOBS, seed_pytorchjob("on-3", namespace, run_for="3s", gpus=1))
    done = hub_state(hub, job, "Succeeded")
    assert done["status"]["clusters"] == ["member3"]

    # A node change reaches the hub: time from adding a node to the hub's capacity showing it.
    extra = node_manifests("member3", [NodeShape(1, 8)])[0]
    extra["metadata"]["name"] = "member3-extra"
    started = time.monotonic()
    member.apply(r.NODES, extra, field_manager="test")

    def sees_three() -> bool:
        capacity = (hub.get(r.MEMBERCLUSTERS, "member3").get("status") or {}).get("capacity")
        groups: list[Body] = (capacity or {}).get("nodeGroups") or []
        return sum(int(g["count"]) for g in groups) == 3

    eventually(sees_three, timeout=60, interval=0.05, what="the hub seeing the new node")
    print(f"node added on member3 -> hub capacity shows it: {time.monotonic() - started:.2f}s")

    hub.delete(r.PYTORCHJOBS, "on-3", namespace)  # its Work carries the agent's finalizer
    eventually(lambda: hub.get_or_none(r.PYTORCHJOBS, "on-3", namespace) is None,
               what="on-3 deleted through its member's agent")
    fleet.stop_process("agent-member3")
    left = subprocess.run([*cli, "unjoin", "member3", "--member-kubeconfig",
                           str(fleet.kubeconfig("member3"))], capture_output=True, text=True,
                          check=False)
    assert left.returncode == 0, left.stderr
    assert hub.get_or_none(r.MEMBERCLUSTERS, "member3") is None
    assert member.get_or_none(r.DAEMONSETS, "fleet-agent", "fleet-system") is None
    assert member.get_or_none(r.SECRETS, "fleet-hub-kubeconfig", "fleet-system") is None


def test_a_member_keeps_the_crds_someone_else_installed(fleet: LocalFleet) -> None:
    """A member that runs JobSet or Kubeflow Trainer keeps their CRDs when it joins: fleet
    applies its own only where it installed them, or where none is."""
    member = fleet.client("member2")

    def crd(description: str) -> Body:
        return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "widgets.example.fleet.sh"},
                "spec": {"group": "example.fleet.sh", "scope": "Namespaced",
                         "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                         "versions": [{"name": "v1", "served": True, "storage": True,
                                       "schema": {"openAPIV3Schema": {
                                           "type": "object", "description": description,
                                           "x-kubernetes-preserve-unknown-fields": True}}}]}}

    member.apply(r.CRDS, crd("theirs"), field_manager="kubectl")
    try:
        onboarding.install_crds(member, [crd("fleet's")], keep_foreign=True)
        schema = member.get(r.CRDS, "widgets.example.fleet.sh")["spec"]["versions"][0]["schema"]
        assert schema["openAPIV3Schema"]["description"] == "theirs"
        onboarding.install_crds(member, [crd("fleet's")])  # the hub's own: fleet's always
        schema = member.get(r.CRDS, "widgets.example.fleet.sh")["spec"]["versions"][0]["schema"]
        assert schema["openAPIV3Schema"]["description"] == "fleet's"
    finally:
        member.delete(r.CRDS, "widgets.example.fleet.sh")
