"""The webhook certificate's bundle and the shipped manifests' hardening (no API server
needed; the e2e suite runs the certificate keeper against a real one)."""

from __future__ import annotations

import datetime

from fleet import deploy
from fleet.hub import certs
from fleet.hub.webhook_tls import service_hosts

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def test_a_rotated_bundle_keeps_the_previous_certificate_while_it_is_valid() -> None:
    hosts = service_hosts("fleet-hub", "fleet-system")
    old, _ = certs.self_signed_pem(hosts, lifetime=datetime.timedelta(days=90), now=NOW)
    expired, _ = certs.self_signed_pem(hosts, lifetime=datetime.timedelta(days=1), now=NOW)
    later = NOW + datetime.timedelta(days=70)
    assert certs.valid_certificates(old + expired, later) == [old]
    assert certs.not_after(old) == NOW + datetime.timedelta(days=90)
    assert certs.valid_certificates(b"", later) == []


def test_the_hub_ships_probes_limits_a_budget_and_a_locked_down_pod() -> None:
    manifests = deploy.hub_manifests()
    kinds = {m["kind"] for m in manifests}
    assert {"PodDisruptionBudget", "ValidatingWebhookConfiguration", "Service"} <= kinds
    deployment = next(m for m in manifests if m["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = pod["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"livenessProbe", "readinessProbe"} <= set(container)
    assert {"requests", "limits"} <= set(container["resources"])
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FLEET_METRICS_ADDR"] == "0.0.0.0"
    assert env["FLEET_WEBHOOK_ADDR"] == "0.0.0.0"
    budget = next(m for m in manifests if m["kind"] == "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1


def test_the_hub_may_create_no_namespace_and_touch_only_its_webhook_configuration() -> None:
    rules = [rule for m in deploy.hub_manifests() if m["kind"] in ("ClusterRole", "Role")
             for rule in m["rules"]]
    assert not any("namespaces" in rule["resources"] for rule in rules)
    webhook = [rule for rule in rules if "validatingwebhookconfigurations" in rule["resources"]]
    assert webhook == [{"apiGroups": ["admissionregistration.k8s.io"],
                        "resources": ["validatingwebhookconfigurations",
                                      "mutatingwebhookconfigurations"],
                        "verbs": ["get", "patch"], "resourceNames": ["fleet.sh"]}]
