"""The hub's validating webhook through its Service: one certificate for every replica (a
Secret), rotated by the leader before it expires with the caBundle following, and a replica
that exits leaves the configuration the others use.
"""

from __future__ import annotations

import base64
import datetime
from pathlib import Path

import pytest
import yaml

from e2e.conftest import eventually
from e2e.localfleet import HUB, LocalFleet
from e2e.localfleet.demo import EXAMPLES
from fleet import deploy
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Body, Kube
from fleet.hub import certs
from fleet.hub.webhook_tls import service_hosts

pytestmark = pytest.mark.e2e


def secret(hub: Kube) -> Body:
    return hub.get(r.SECRETS, deploy.WEBHOOK_TLS_SECRET, deploy.NAMESPACE)


def data(body: Body, key: str) -> bytes:
    return base64.b64decode(body["data"][key])


def ca_bundles(hub: Kube) -> list[bytes]:
    config = hub.get(r.VALIDATINGWEBHOOKCONFIGURATIONS, deploy.WEBHOOK_CONFIGURATION)
    return [base64.b64decode(w["clientConfig"]["caBundle"]) for w in config["webhooks"]]


def checked_by_the_webhook(hub: Kube) -> bool:
    """A dry run of the seed tree comes back with the webhook's warning about root min (and
    not with a failed call: a replica may be reloading its certificate)."""
    doc = yaml.safe_load((EXAMPLES / "elasticquotatree.yaml").read_text())
    doc["metadata"]["namespace"] = doc["metadata"].get("namespace", "default")
    try:
        hub.apply(r.ELASTICQUOTATREES, doc, field_manager="test", dry_run=True)
    except errors.ApiError as exc:
        raise AssertionError(str(exc)) from exc
    return any("spec.root.min differs from spec.root.max" in w for w in hub.warnings)


def test_the_api_server_calls_the_webhook_through_the_service(fleet: LocalFleet) -> None:
    hub = fleet.client(HUB)
    config = hub.get(r.VALIDATINGWEBHOOKCONFIGURATIONS, deploy.WEBHOOK_CONFIGURATION)
    assert all(w["clientConfig"]["service"] == {
        "namespace": deploy.NAMESPACE, "name": deploy.HUB, "path": "/elasticquotatree",
        "port": deploy.WEBHOOK_PORT} for w in config["webhooks"])
    assert "url" not in config["webhooks"][0]["clientConfig"]
    assert ca_bundles(hub) == [data(secret(hub), "ca.crt")]
    eventually(lambda: checked_by_the_webhook(hub), what="the webhook's warning")


def test_the_leader_rotates_a_certificate_close_to_expiry(fleet: LocalFleet,
                                                         tmp_path: Path) -> None:
    hub = fleet.client(HUB)
    current = secret(hub)
    short, key = certs.self_signed_pem(service_hosts(deploy.HUB, deploy.NAMESPACE),
                                       lifetime=datetime.timedelta(days=2))
    current["data"] = {k: base64.b64encode(v).decode()
                       for k, v in (("tls.crt", short), ("tls.key", key), ("ca.crt", short))}
    hub.replace(r.SECRETS, current)

    def rotated() -> Body | None:
        body = secret(hub)
        left = certs.not_after(data(body, "tls.crt")) - datetime.datetime.now(datetime.UTC)
        return body if left > datetime.timedelta(days=60) else None

    body = eventually(rotated, timeout=120, what="the leader rotating the certificate")
    bundle = data(body, "ca.crt")
    assert short in bundle, "the bundle dropped the certificate replicas may still serve"
    assert data(body, "tls.crt") in bundle
    eventually(lambda: ca_bundles(hub) == [bundle], timeout=60, what="the caBundle following")
    # every replica reloads the new certificate (kopf re-reads the files every few seconds;
    # this test put a certificate no replica served into the Secret, so until then calls fail)
    eventually(lambda: checked_by_the_webhook(hub), timeout=60,
               what="the webhook answering with the rotated certificate")


def test_a_replica_that_exits_leaves_the_configuration(fleet: LocalFleet) -> None:
    hub = fleet.client(HUB)
    before = hub.get(r.VALIDATINGWEBHOOKCONFIGURATIONS, deploy.WEBHOOK_CONFIGURATION)
    if fleet.runs_pods:  # a replica's Pod deleted: it exits on SIGTERM, as in a rollout
        replicas = sorted(p["metadata"]["name"] for p in fleet.fleet_pods(HUB))
        assert len(replicas) == 2
        fleet.delete_hub_pod(replicas[0], grace=None)
        eventually(lambda: replicas[0] not in {p["metadata"]["name"]
                                               for p in fleet.fleet_pods(HUB)},
                   timeout=60, what=f"{replicas[0]} gone")
    else:
        fleet.start_hub("hub-2")
        fleet.stop_process("hub-2")
        assert hub.get_or_none(r.ENDPOINTSLICES, f"{deploy.HUB}-hub-2", deploy.NAMESPACE) is None
    after = hub.get(r.VALIDATINGWEBHOOKCONFIGURATIONS, deploy.WEBHOOK_CONFIGURATION)
    assert after["webhooks"] == before["webhooks"]
    eventually(lambda: checked_by_the_webhook(hub), what="the remaining replica answering")
