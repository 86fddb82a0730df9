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
from e2e.jobs import hub_job, nested, padded, seed_pytorchjob, seed_tensorflowtrainingjob
from e2e.localfleet import HUB, LocalFleet
from e2e.localfleet.demo import EXAMPLES
from fleet import deploy, nesting
from fleet.api.limits import MAX_DEPTH, MAX_OBJECT_BYTES
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
    assert {w["name"]: w["clientConfig"]["service"] for w in config["webhooks"]} == {
        name: {"namespace": deploy.NAMESPACE, "name": deploy.HUB, "path": path,
               "port": deploy.WEBHOOK_PORT}
        for name, path in (("elasticquotatree.fleet.sh", "/elasticquotatree"),
                           ("jobs.fleet.sh", "/job"))}
    assert not any("url" in w["clientConfig"] for w in config["webhooks"])
    bundle = data(secret(hub), "ca.crt")
    assert ca_bundles(hub) == [bundle, bundle]
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
    eventually(lambda: set(ca_bundles(hub)) == {bundle}, timeout=60,
               what="the caBundle following")
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


WORKER_ENV = "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env"


def test_a_job_too_large_to_copy_is_refused_naming_its_field(fleet: LocalFleet) -> None:
    """Past etcd's request limit the API server alone answers a bare 500; the webhook refuses
    the job first (here 1 MiB: well under that limit, over fleet's), naming the field."""
    hub = fleet.client(HUB)
    big = padded(seed_pytorchjob("too-large"), 2 * MAX_OBJECT_BYTES)

    def refused() -> str | None:
        try:
            hub.apply(r.PYTORCHJOBS, big, field_manager="test", dry_run=True)
        except errors.Invalid as exc:
            return exc.message
        return None  # accepted: the job webhook is not in the configuration yet

    message = eventually(refused, what="the job webhook refusing the job")
    assert f"denied the request: {WORKER_ENV}: 1.0 MiB of the object's 1.0 MiB" in message
    assert "fleet accepts at most 512 KiB" in message
    near = padded(seed_pytorchjob("large-enough"), MAX_OBJECT_BYTES - 8192)
    hub.apply(r.PYTORCHJOBS, near, field_manager="test", dry_run=True)


def test_a_job_nested_too_deep_is_refused_even_too_deep_to_review(fleet: LocalFleet) -> None:
    """A TensorBoard spec is open. Past fleet's bound the webhook names the path; near the
    API server's own limit it cannot even send the job for review, and the webhook failing
    closed refuses it (failing open, it would be stored and no client could list the kind)."""
    hub = fleet.client(HUB)
    deep = nested(seed_tensorflowtrainingjob("too-deep"), 100)
    with pytest.raises(errors.Invalid) as caught:
        hub.apply(r.TENSORFLOWTRAININGJOBS, deep, field_manager="test", dry_run=True)
    assert (f"spec.tensorboardSpec.nested.a.a.a.a.a.a.a…: nested more than {MAX_DEPTH} "
            "levels deep") in caught.value.message
    nesting.allow_api_depth()  # this client must encode it, too
    deepest = nested(seed_tensorflowtrainingjob("deepest"), nesting.API_MAX_DEPTH - 10)
    with pytest.raises(errors.ApiError) as failed:
        hub.create(r.TENSORFLOWTRAININGJOBS, deepest)
    assert "jobs.fleet.sh" in failed.value.message, failed.value.message
    assert hub.get_or_none(r.TENSORFLOWTRAININGJOBS, "deepest", "default") is None
    hub.list(r.TENSORFLOWTRAININGJOBS)  # the kind still lists


def test_a_deep_field_no_schema_names_is_pruned_before_anyone_reads_it(
        fleet: LocalFleet) -> None:
    """A pod template's schema is the core API's: an unknown field, however deep, is dropped
    as the API server decodes the job, and the job is stored without it. (A server-side apply
    of it fails instead, with a 500 naming the field: kubernetes/kubernetes#139253.)"""
    hub = fleet.client(HUB)
    nesting.allow_api_depth()
    job = nested(seed_pytorchjob("pruned"), nesting.API_MAX_DEPTH - 10)
    stored = hub.raw("POST", r.PYTORCHJOBS.path("default") + "?dryRun=All", job)
    assert all("nested" not in spec["template"]["spec"]
               for spec in stored["spec"]["pytorchReplicaSpecs"].values())


def test_a_too_large_job_stored_while_the_webhook_was_off_waits_as_invalid(
        fleet: LocalFleet) -> None:
    hub = fleet.client(HUB)
    config = hub.get(r.VALIDATINGWEBHOOKCONFIGURATIONS, deploy.WEBHOOK_CONFIGURATION)
    kept = config["webhooks"]
    without = [w for w in kept if w["name"] != "jobs.fleet.sh"]
    hub.patch(r.VALIDATINGWEBHOOKCONFIGURATIONS, deploy.WEBHOOK_CONFIGURATION,
              {"webhooks": without})
    big = padded(seed_pytorchjob("stored-too-large"), 2 * MAX_OBJECT_BYTES)

    def stored() -> Body | None:  # the API server's webhook cache follows within a moment
        try:
            return hub.create(r.PYTORCHJOBS, big)
        except errors.Invalid:
            return None

    try:
        job = eventually(stored, what="the job stored without the job webhook")
    finally:
        current = hub.get(r.VALIDATINGWEBHOOKCONFIGURATIONS, deploy.WEBHOOK_CONFIGURATION)
        hub.patch(r.VALIDATINGWEBHOOKCONFIGURATIONS, deploy.WEBHOOK_CONFIGURATION,
                  {"webhooks": [*current["webhooks"], *(w for w in kept
                                                        if w["name"] == "jobs.fleet.sh")]})
    try:
        def invalid() -> Body | None:
            conditions = (hub_job(hub, job).get("status") or {}).get("conditions") or []
            return next((c for c in conditions if c["type"] == "Queuing"
                         and c["reason"] == "Invalid"), None)

        queuing = eventually(invalid, what="a Queuing condition, reason Invalid")
        assert queuing["message"].startswith(f"{WORKER_ENV}: 1.0 MiB of the object's")
        assert not (hub_job(hub, job)["metadata"].get("annotations") or {}).get(
            "fleet.sh/placement")
    finally:
        hub.delete(r.PYTORCHJOBS, job["metadata"]["name"], "default")
