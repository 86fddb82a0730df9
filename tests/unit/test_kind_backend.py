"""The kind backend's cluster configuration and the agent's view of the hub (no clusters)."""

from __future__ import annotations

import pytest
import yaml

from e2e import backends
from e2e.localfleet import kindfleet
from e2e.localfleet.realnode import REAL_NODE_LABEL


def patches(config: dict[str, object]) -> dict[str, dict[str, object]]:
    docs = [yaml.safe_load(p) for p in config["kubeadmConfigPatches"]]  # type: ignore[attr-defined]
    return {doc["kind"]: doc for doc in docs}


def test_members_taint_their_kind_node_and_the_hub_does_not() -> None:
    member = patches(kindfleet.cluster_config("img", member=True))
    hub = patches(kindfleet.cluster_config("img", member=False))
    taints = member["InitConfiguration"]["nodeRegistration"]["taints"]  # type: ignore[index]
    assert {"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"} in taints
    assert "taints" not in hub["InitConfiguration"]["nodeRegistration"]  # type: ignore[operator]


def test_the_kubelet_runs_on_cgroup_v1_and_kubeadm_pulls_nothing() -> None:
    config = kindfleet.cluster_config("fleet.local/kind-node:v1", member=False)
    docs = patches(config)
    assert docs["KubeletConfiguration"]["failCgroupV1"] is False
    # No kube-proxy or CoreDNS image exists here: kube-proxy is a node service.
    assert docs["InitConfiguration"]["skipPhases"] == ["addon/kube-proxy", "addon/coredns"]
    assert config["networking"]["disableDefaultCNI"] is True  # type: ignore[index]
    assert config["nodes"][0]["image"] == "fleet.local/kind-node:v1"  # type: ignore[index]


def test_pods_reach_the_hub_at_its_node_address() -> None:
    kubeconfig = yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": [
        {"name": "hub", "cluster": {"server": "https://127.0.0.1:40123"}}]})
    rewritten = yaml.safe_load(kindfleet.internal_kubeconfig(kubeconfig, "10.89.0.5"))
    assert rewritten["clusters"][0]["cluster"]["server"] == "https://10.89.0.5:6443"


def test_kind_is_chosen_only_when_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kindfleet, "unavailable_reason", lambda: None)
    monkeypatch.delenv("FLEET_E2E_BACKEND", raising=False)
    assert backends.choose()[0] in ("binaries", "")
    monkeypatch.setenv("FLEET_E2E_BACKEND", "kind")
    assert backends.choose()[0] == "kind"
    monkeypatch.setattr(kindfleet, "unavailable_reason", lambda: "no podman")
    backend, reason = backends.choose()
    assert backend == ""
    assert "no podman" in reason
