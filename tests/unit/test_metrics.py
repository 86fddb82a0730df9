from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from fleet import metrics


def value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_quota_gauges_and_borrowing() -> None:
    metrics.set_quota("t-leaf", {"cpu": 2000}, {"cpu": 8000, "nvidia.com/gpu": 4},
                      {"cpu": 3500, "nvidia.com/gpu": 1})
    assert value("fleet_quota_used", queue="t-leaf", resource="cpu") == 3500
    assert value("fleet_quota_nominal", queue="t-leaf", resource="cpu") == 2000
    assert value("fleet_quota_borrowed", queue="t-leaf", resource="cpu") == 1500
    assert value("fleet_quota_borrowed", queue="t-leaf", resource="nvidia.com/gpu") == 1
    assert value("fleet_quota_max", queue="t-leaf", resource="nvidia.com/gpu") == 4


def test_a_member_that_left_is_no_longer_charted() -> None:
    metrics.set_cluster("t-gone", {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 2})
    metrics.CLUSTER_READY.labels("t-gone").set(1)
    metrics.set_cluster("t-stays", {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 8})
    metrics.forget_clusters(["t-stays"])
    assert value("fleet_cluster_ready", cluster="t-gone") is None
    assert value("fleet_cluster_capacity", cluster="t-gone", resource="nvidia.com/gpu") is None
    assert value("fleet_cluster_free", cluster="t-stays", resource="nvidia.com/gpu") == 8


def test_the_address_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLEET_METRICS_ADDR", raising=False)
    assert metrics.address() == "127.0.0.1"
    monkeypatch.setenv("FLEET_METRICS_ADDR", "0.0.0.0")
    assert metrics.address() == "0.0.0.0"
