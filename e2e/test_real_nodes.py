"""Real nodes: every cluster of the local fleet gets a kubelet on containerd (a real node, or
the kind node on the kind backend), and fleet's own hub Deployment and agent DaemonSet from
deploy/ run on them as Pods with in-cluster config.

Skipped only when the machine cannot run real nodes (no root, no cgroup v1, no containerd...);
with ``FLEET_E2E_REQUIRED=1`` (CI) that is a failure instead.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from e2e.chaos.__main__ import run_scenario, table
from e2e.chaos.scenarios import SCENARIOS, Scenario
from e2e.conftest import eventually
from e2e.localfleet import HUB, LocalFleet, demo, images, pods
from e2e.localfleet.realnode import REAL_NODE_LABEL, unavailable_reason
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e
MEMBER = "member1"


@pytest.fixture(scope="module")
def real_fleet(fleet: LocalFleet) -> LocalFleet:
    """The suite's own fleet, which runs as shipped (conftest): no fleet of its own."""
    if not fleet.runs_pods:
        reason = unavailable_reason() or "the suite's fleet runs host processes (FLEET_E2E_NODES)"
        if os.environ.get("FLEET_E2E_REQUIRED") == "1":
            pytest.fail(f"real nodes required but unavailable: {reason}")
        pytest.skip(reason)
    return fleet


def kubectl(fleet: LocalFleet, cluster: str, *args: str) -> str:
    done = subprocess.run([fleet.binaries()["kubectl"], "--kubeconfig",
                           str(fleet.kubeconfig(cluster)), *args],
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def busybox_pod(name: str, command: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeSelector": {REAL_NODE_LABEL: "true"},
                     "tolerations": [{"key": REAL_NODE_LABEL, "operator": "Exists"}],
                     "restartPolicy": "Never",
                     "containers": [{"name": "main", "image": images.BUSYBOX,
                                     "imagePullPolicy": "Never",
                                     "command": ["sh", "-c", command]}]}}


def test_a_pod_runs_on_the_members_real_node_and_reaches_the_api_server_by_service(
        real_fleet: LocalFleet) -> None:
    member = real_fleet.client(MEMBER)
    node = real_fleet.node_facts(MEMBER)
    # A TCP connection to the API server through the kubernetes Service (kube-proxy's rules
    # in the node's namespace, then the host's forward to the API server).
    member.create(r.PODS, busybox_pod(
        "probe", f"echo hello from $(hostname); echo | nc -w 5 {node.kubernetes_service_ip} 443"
                 " && echo SERVICE-OK; sleep 3600"))

    def running() -> dict[str, Any] | None:
        pod = member.get(r.PODS, "probe", "default")
        return pod if pod.get("status", {}).get("phase") == "Running" else None

    pod = eventually(running, timeout=120, what="probe pod Running")
    assert pod["spec"]["nodeName"] == node.name
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(node.pod_cidr)
    def answered() -> str | None:
        out = kubectl(real_fleet, MEMBER, "logs", "probe")
        return out if "SERVICE-OK" in out else None

    logs = eventually(answered, timeout=60, what="SERVICE-OK in the probe's logs")
    assert "hello from probe" in logs
    assert kubectl(real_fleet, MEMBER, "exec", "probe", "--", "cat", "/proc/1/cmdline")


def test_kubelets_run_as_their_node_not_as_admin(real_fleet: LocalFleet,
                                                tmp_path: Path) -> None:
    """Each kubelet holds ``system:node:<node>``: the Node authorizer and NodeRestriction
    let it read and write its own Node, never another's, and no Secret of its choosing."""
    node = real_fleet.node_facts(MEMBER)
    config = tmp_path / "kubelet.kubeconfig"
    config.write_text(node.kubelet_kubeconfig)
    kubelet = Kube(str(config))
    assert kubelet.get(r.NODES, node.name)["metadata"]["name"] == node.name
    kubelet.patch(r.NODES, node.name, {"metadata": {"annotations": {"fleet.local/checked": "yes"}}})
    other = next(n["metadata"]["name"] for n in real_fleet.client(MEMBER).list(r.NODES)[0]
                 if n["metadata"]["name"] != node.name)
    with pytest.raises(errors.Forbidden):
        kubelet.get(r.NODES, other)  # (Kubernetes 1.36: a node reads its own Node only)
    with pytest.raises(errors.Forbidden):
        kubelet.patch(r.NODES, other, {"metadata": {"annotations": {"fleet.local/x": "y"}}})
    with pytest.raises(errors.Forbidden):
        kubelet.list(r.SECRETS, pods.NAMESPACE)
    assert subject(node.kubelet_kubeconfig) == f"O=system:nodes,CN=system:node:{node.name}"
    assert subject(node.proxy_kubeconfig) == "CN=system:kube-proxy"


def subject(kubeconfig: str) -> str:
    user = yaml.safe_load(kubeconfig)["users"][0]["user"]
    cert = x509.load_pem_x509_certificate(base64.b64decode(user["client-certificate-data"]))
    return ",".join(
        attribute.rfc4514_string() for attribute in cert.subject)


def test_fleet_runs_as_pods_on_every_cluster(real_fleet: LocalFleet) -> None:
    real_fleet.wait_hub_pods_ready()  # an earlier module may have just replaced a hub Pod
    for cluster in (HUB, MEMBER):
        kube = real_fleet.client(cluster)
        assert pods.not_running(kube, pods.NAMESPACE) == []
        items, _ = kube.list(r.PODS, pods.NAMESPACE)
        assert {p["spec"]["nodeName"] for p in items} == {real_fleet.node_facts(cluster).name}
    hub_pods, _ = real_fleet.client(HUB).list(r.PODS, pods.NAMESPACE)
    assert len(hub_pods) == 2


def _holder(hub: Kube) -> str:
    lease = hub.get_or_none(r.LEASES, "fleet-hub", pods.NAMESPACE)
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def _submit(fleet: LocalFleet, name: str) -> None:
    hub = fleet.client(HUB)
    demo.apply_file(hub, demo.EXAMPLES / "propagationpolicy-gang.yaml")
    job = next(d for d in yaml.safe_load_all((demo.EXAMPLES / "pytorchjob.yaml").read_text())
               if d)
    job["metadata"]["name"] = name
    job["metadata"]["namespace"] = "default"

    def applied() -> bool:  # the job webhook fails closed: a replica just killed may be
        try:                # an endpoint for a moment yet, as a user retrying would see
            hub.apply(r.PYTORCHJOBS, job, field_manager="kubectl-client-side-apply")
            return True
        except errors.ApiError as exc:
            raise AssertionError(str(exc)) from exc

    eventually(applied, timeout=60, what=f"{name} accepted by the hub's API server")


def _succeeded(fleet: LocalFleet, name: str) -> bool:
    job = fleet.client(HUB).get(r.PYTORCHJOBS, name, "default")
    return any(c.get("type") == "Succeeded" and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def test_a_job_flows_with_the_hub_and_agent_as_pods(real_fleet: LocalFleet) -> None:
    _submit(real_fleet, "pods-first")
    eventually(lambda: _succeeded(real_fleet, "pods-first"), timeout=240,
               what="pytorchjob pods-first Succeeded")


def test_killing_the_leader_hub_pod_hands_over_and_jobs_keep_flowing(
        real_fleet: LocalFleet) -> None:
    hub = real_fleet.client(HUB)
    leader = real_fleet.hub_leader_pod()
    other = next(p["metadata"]["name"] for p in real_fleet.fleet_pods(HUB)
                 if p["metadata"]["name"] != leader)
    started = time.monotonic()
    real_fleet.delete_hub_pod(leader, grace=0)  # its container killed at once
    new_leader = eventually(lambda: pods.leader_pod(hub) if pods.leader_pod(hub) != leader
                            else None, timeout=120, what="the other replica taking the lease")
    print(f"hub leader {leader} killed; {new_leader} leads after "
          f"{time.monotonic() - started:.1f}s")
    if new_leader != other:
        print(f"the Deployment's new Pod {new_leader} won the lease before the standby {other}")
    _submit(real_fleet, "pods-after-failover")
    eventually(lambda: _succeeded(real_fleet, "pods-after-failover"), timeout=240,
               what="pytorchjob pods-after-failover Succeeded")
    real_fleet.wait_hub_pods_ready()  # two replicas again for the tests after this one


def test_a_leader_hub_container_killed_hands_over_too(real_fleet: LocalFleet) -> None:
    """SIGKILL of the leading replica's process (the Pod stays; the kubelet restarts the
    container, as after a crash or an OOM kill)."""
    hub = real_fleet.client(HUB)
    leader = real_fleet.hub_leader_pod()
    killed = _holder(hub)  # the process's identity: the Pod's name and a random suffix
    real_fleet.kill_container(HUB, leader)
    eventually(lambda: _holder(hub) not in ("", killed), timeout=120,
               what="another hub process taking the lease")
    _submit(real_fleet, "pods-after-crash")
    eventually(lambda: _succeeded(real_fleet, "pods-after-crash"), timeout=240,
               what="pytorchjob pods-after-crash Succeeded")
    real_fleet.wait_hub_pods_ready()


def test_the_api_server_calls_the_hub_webhook_through_its_service(
        real_fleet: LocalFleet) -> None:
    config = json.loads(kubectl(real_fleet, HUB, "get", "validatingwebhookconfiguration",
                                "fleet.sh", "-o", "json"))
    services = {(w["clientConfig"].get("service") or {}).get("name") for w in config["webhooks"]}
    assert services == {"fleet-hub"}, config["webhooks"][0]["clientConfig"]
    # The demo's objects go through it (failurePolicy Fail): applying them worked above; a
    # dry-run create asks the webhook again now.
    kubectl(real_fleet, HUB, "apply", "--dry-run=server", "-f",
            str(demo.EXAMPLES / "pytorchjob.yaml"))


def test_hub_metrics_through_its_service(real_fleet: LocalFleet) -> None:
    hub = real_fleet.client(HUB)
    service_ip = hub.get(r.SERVICES, "fleet-hub", pods.NAMESPACE)["spec"]["clusterIP"]
    hub.create(r.PODS, busybox_pod(
        "metrics-probe", f"printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {service_ip} 8080"
                         "; sleep 3600"))

    def scraped() -> str | None:
        out = kubectl(real_fleet, HUB, "logs", "metrics-probe")
        return out if "# HELP" in out else None

    eventually(scraped, timeout=60, what="hub metrics through the fleet-hub Service")


@pytest.mark.parametrize("scenario", [pytest.param(s, id=s.name) for s in SCENARIOS if s.pods])
def test_chaos_scenario_of_the_hub_as_shipped(real_fleet: LocalFleet, scenario: Scenario
                                              ) -> None:
    """CI's short chaos lane for the scenarios that need the hub as Pods (the others run in
    e2e/chaos/test_chaos_short.py on a fleet of host processes)."""
    results = run_scenario(real_fleet, None, scenario, short=True, seed=1)
    print("\n" + table([(scenario.name, results)]))
    assert not any(r.skipped for r in results), results
    violations = [str(v) for r in results for v in r.violations]
    assert not violations, "\n".join(violations)
