"""``helm install`` of both charts (deploy/helm) on the local fleet with real nodes: the pinned
helm installs the hub chart on the hub and ``kubectl fleet join --helm`` the agent chart on a
member, their Pods run on the clusters' real nodes, their ServiceAccounts hold exactly the
reviewed permissions of deploy/permissions, and the seed's PyTorchJob runs to Succeeded.

Nothing of deploy/ is applied here (``LocalFleet(install_shipped=False)``): what runs is what
the charts install. Skipped only when the machine cannot run real nodes; with
``FLEET_E2E_REQUIRED=1`` (CI) that is a failure instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from e2e import charts
from e2e.conftest import FORBIDDEN, eventually
from e2e.localfleet import HUB, LocalFleet, demo, pods
from e2e.localfleet.nodes import NodeShape
from e2e.localfleet.realnode import REAL_NODE_LABEL, unavailable_reason
from e2e.permissions import Reviewed, differences
from e2e.test_webhook import checked_by_the_webhook
from fleet import deploy, onboarding
from fleet.clients import resources as r
from fleet.clients.kube import Kube

# A fleet with real nodes, then two installs that wait for readiness: more than the suite's
# 600 s per test on a machine loaded by other work.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]
MEMBER = "member1"
INSTALL_SECONDS = 300  # the Pods' readiness: caches synced, the webhook served
ON_REAL_NODE = {"nodeSelector": {REAL_NODE_LABEL: "true"},
                "tolerations": [{"key": REAL_NODE_LABEL, "operator": "Exists"}]}


@pytest.fixture(scope="module")
def helm_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    reason = unavailable_reason()
    if reason:
        if os.environ.get("FLEET_E2E_REQUIRED") == "1":
            pytest.fail(f"real nodes required but unavailable: {reason}")
        pytest.skip(reason)
    workdir = Path(tmp_path_factory.mktemp("helmfleet"))
    local = LocalFleet(workdir, {MEMBER: [NodeShape(2, 8)]}, nodes="real", install_shipped=False,
                       say=lambda m: print(f"[fleet] {m}", flush=True))
    try:
        local.up(with_controllers=False)
        assert local.real_nodes
        t0 = time.monotonic()
        install_hub_chart(local, workdir)
        print(f"[fleet] helm install fleet-hub: {time.monotonic() - t0:.1f}s", flush=True)
        t0 = time.monotonic()
        join_with_helm(local)
        print(f"[fleet] kubectl fleet join --helm: {time.monotonic() - t0:.1f}s", flush=True)
        yield local
    finally:
        for cluster in local.clusters:
            print(f"--- fleet pods on {cluster}:\n{pod_logs(local, cluster)}")
        local.down()


def install_hub_chart(fleet: LocalFleet, workdir: Path) -> None:
    values = workdir / "hub-values.yaml"
    values.write_text(yaml.safe_dump(ON_REAL_NODE))
    charts.helm("install", "fleet-hub", str(charts.HUB_CHART), "--namespace", deploy.NAMESPACE,
                "--create-namespace", "--kubeconfig", str(fleet.kubeconfig(HUB)),
                "--values", str(values), "--wait", "--timeout", f"{INSTALL_SECONDS}s",
                timeout=INSTALL_SECONDS + 30)


def join_with_helm(fleet: LocalFleet) -> None:
    """``kubectl fleet join --helm`` as a user runs it; the member's Pods reach the hub at its
    address on the nodes' network (--hub-server). The member was joined by ``up`` already,
    and join is idempotent."""
    server = fleet.network(HUB).from_node("https://127.0.0.1:" + hub_port(fleet))
    done = subprocess.run(
        [sys.executable, "-m", "fleet.cli", "join", MEMBER,
         "--kubeconfig", str(fleet.kubeconfig(HUB)), "--hub-server", server,
         "--member-kubeconfig", str(fleet.kubeconfig(MEMBER)), "--helm",
         "--helm-binary", charts.helm_binary(),
         "--agent-node-selector", f"{REAL_NODE_LABEL}=true"],
        capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Helm release fleet-system/fleet-agent" in done.stdout
    pods.wait_running(fleet.client(MEMBER), deploy.NAMESPACE, timeout=300)


def hub_port(fleet: LocalFleet) -> str:
    config = yaml.safe_load(fleet.kubeconfig(HUB).read_text())
    return str(config["clusters"][0]["cluster"]["server"]).rsplit(":", 1)[1]


def pod_logs(fleet: LocalFleet, cluster: str) -> str:
    kubectl = [fleet.binaries()["kubectl"], "--kubeconfig", str(fleet.kubeconfig(cluster)),
               "-n", deploy.NAMESPACE]
    out = []
    for args in (["get", "all,events", "-o", "wide"],
                 ["logs", "-l", "app.kubernetes.io/name in (fleet-hub, fleet-agent)",
                  "--tail", "8", "--prefix", "--all-containers"]):
        done = subprocess.run([*kubectl, *args], capture_output=True, text=True, check=False,
                              timeout=60)
        out.append(done.stdout + done.stderr)
    return "\n".join(out)[-6000:]


def releases(fleet: LocalFleet, cluster: str) -> dict[str, str]:
    out = charts.helm("list", "--namespace", deploy.NAMESPACE, "--output", "json",
                      "--kubeconfig", str(fleet.kubeconfig(cluster))).stdout
    return {release["name"]: release["status"] for release in json.loads(out)}


def service_account(fleet: LocalFleet, cluster: str, name: str, workdir: Path) -> Kube:
    admin = fleet.client(cluster)
    token = onboarding.service_account_token(admin, deploy.NAMESPACE, name, 3600)
    path = workdir / f"{cluster}-{name}.kubeconfig"
    path.write_text(onboarding.token_kubeconfig(fleet.kubeconfig(cluster), name, token))
    return Kube(str(path))


def test_both_charts_are_deployed_releases_running_on_the_real_nodes(
        helm_fleet: LocalFleet) -> None:
    assert releases(helm_fleet, HUB) == {"fleet-hub": "deployed"}
    assert releases(helm_fleet, MEMBER) == {"fleet-agent": "deployed"}
    for cluster, kind in ((HUB, "Deployment"), (MEMBER, "DaemonSet")):
        kube = helm_fleet.client(cluster)
        assert pods.not_running(kube, deploy.NAMESPACE) == []
        items, _ = kube.list(r.PODS, deploy.NAMESPACE)
        assert {p["spec"]["nodeName"] for p in items} == {
            helm_fleet.network(cluster).node_name}
        owner = items[0]["metadata"]["labels"]["app.kubernetes.io/name"]
        workload = kube.get(r.for_kind("apps/v1", kind), owner, deploy.NAMESPACE)
        assert workload["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    hub_pods, _ = helm_fleet.client(HUB).list(r.PODS, deploy.NAMESPACE)
    assert len(hub_pods) == 2
    webhook = helm_fleet.client(HUB).get(r.VALIDATINGWEBHOOKCONFIGURATIONS,
                                         deploy.WEBHOOK_CONFIGURATION)
    assert webhook["webhooks"][0]["clientConfig"].get("caBundle"), "the leader set no caBundle"
    # The API server calls the chart's webhook through the chart's Service.
    eventually(lambda: checked_by_the_webhook(helm_fleet.client(HUB)),
               what="the webhook's warning on the seed tree")


def test_the_charts_service_accounts_hold_exactly_the_reviewed_permissions(
        helm_fleet: LocalFleet, tmp_path: Path) -> None:
    hub = service_account(helm_fleet, HUB, deploy.HUB, tmp_path)
    agent = service_account(helm_fleet, MEMBER, "fleet-agent", tmp_path)
    assert differences(hub, Reviewed.load("hub")) == []
    assert differences(agent, Reviewed.load("agent-member")) == []


def test_the_seed_pytorchjob_runs_to_succeeded(helm_fleet: LocalFleet) -> None:
    assert demo.run_demo(helm_fleet, timeout=300), "the seed PyTorchJob did not succeed"


def test_no_fleet_pod_logged_a_403(helm_fleet: LocalFleet) -> None:
    """Every component runs with the charts' identities: a 403 in a log is a missing rule."""
    for cluster in helm_fleet.clusters:
        items, _ = helm_fleet.client(cluster).list(r.PODS, deploy.NAMESPACE)
        for pod in items:
            done = subprocess.run(
                [helm_fleet.binaries()["kubectl"], "--kubeconfig",
                 str(helm_fleet.kubeconfig(cluster)), "logs", "-n", deploy.NAMESPACE,
                 pod["metadata"]["name"]], capture_output=True, text=True, check=False,
                timeout=60)
            assert done.returncode == 0, done.stderr
            forbidden = [line[:300] for line in done.stdout.splitlines()
                         if FORBIDDEN.search(line)]
            assert forbidden == [], f"{cluster} {pod['metadata']['name']}"


def test_unjoin_with_helm_uninstalls_the_agent_release(helm_fleet: LocalFleet) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fleet.cli", "unjoin", MEMBER,
         "--kubeconfig", str(helm_fleet.kubeconfig(HUB)),
         "--member-kubeconfig", str(helm_fleet.kubeconfig(MEMBER)), "--helm",
         "--helm-binary", charts.helm_binary()],
        capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    assert releases(helm_fleet, MEMBER) == {}
    member = helm_fleet.client(MEMBER)
    assert member.get_or_none(r.for_kind("apps/v1", "DaemonSet"), "fleet-agent",
                              deploy.NAMESPACE) is None
    assert member.get_or_none(r.CLUSTERROLES, "fleet-agent") is None
    assert helm_fleet.client(HUB).get_or_none(r.MEMBERCLUSTERS, MEMBER) is None
