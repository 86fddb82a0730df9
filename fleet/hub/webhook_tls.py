"""The webhook's serving certificate, shared by every hub replica through a Secret.

The first replica to start creates the Secret ``fleet-system/fleet-hub-webhook-tls`` when it is
missing (creation is atomic: the others read what won). Every replica writes the Secret's
certificate and key to a local directory that kopf's webhook server serves and re-reads when
it changes. Only the leader rotates the certificate before it expires and patches the caBundle
of the ValidatingWebhookConfiguration ``fleet.sh``; the bundle keeps the previous certificate
while it is valid, so replicas still serving it are trusted until they have reloaded. No
replica creates or deletes the configuration: it comes with the install.
"""

from __future__ import annotations

import base64
import datetime
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Body, Kube
from fleet.hub import certs

log = logging.getLogger(__name__)
NAMESPACE = "fleet-system"
SECRET = "fleet-hub-webhook-tls"
CONFIGURATION = "fleet.sh"


def service_hosts(service: str, namespace: str) -> list[str]:
    """The names the API server may use for a Service (it verifies ``<svc>.<ns>.svc``)."""
    return [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local",
            f"{service}.{namespace}", service]


@dataclass
class WebhookCertificates:
    kube: Kube
    directory: Path
    hosts: Sequence[str]
    namespace: str = NAMESPACE
    secret: str = SECRET
    configuration: str = CONFIGURATION
    lifetime: datetime.timedelta = datetime.timedelta(days=90)
    renew_before: datetime.timedelta = datetime.timedelta(days=30)

    def __post_init__(self) -> None:
        self._served: bytes | None = None
        self._generation = 0

    # -- paths kopf serves: a symlink switched atomically, so cert and key always match ----
    @property
    def certfile(self) -> Path:
        return self.directory / "current" / "tls.crt"

    @property
    def keyfile(self) -> Path:
        return self.directory / "current" / "tls.key"

    def serving(self) -> bool:
        return self.certfile.exists() and self.keyfile.exists()

    # -- the Secret ------------------------------------------------------------------------
    def ensure(self) -> None:
        """Make sure the Secret exists and its certificate is served here (at startup)."""
        secret = self.kube.get_or_none(r.SECRETS, self.secret, self.namespace)
        if secret is None or not _complete(secret):
            secret = self._create_or_read(secret)
        self._write(secret)

    def sync(self, leading: bool, now: datetime.datetime | None = None) -> None:
        """Serve the Secret's current certificate; as leader, rotate it when it is close to
        expiry and keep the configuration's caBundle equal to the Secret's bundle."""
        now = now or datetime.datetime.now(datetime.UTC)
        secret = self.kube.get_or_none(r.SECRETS, self.secret, self.namespace)
        if secret is None or not _complete(secret):
            secret = self._create_or_read(secret)
        if leading and certs.not_after(_data(secret, "tls.crt")) - now < self.renew_before:
            secret = self._rotate(secret, now)
        self._write(secret)
        if leading:
            self._patch_ca_bundle(_data(secret, "ca.crt"))

    def run(self, stop: threading.Event, leading: Callable[[], bool],
            interval: float = 30, first: float = 1) -> None:
        """Sync every ``interval`` seconds; in the first minute every ``first`` second until
        this replica has synced as the leader (a fresh install's caBundle must not wait)."""
        synced_as_leader, fast_until = False, time.monotonic() + 60
        while not stop.wait(first if not synced_as_leader and time.monotonic() < fast_until
                            else interval):
            try:
                lead = leading()
                self.sync(lead)
                synced_as_leader = synced_as_leader or lead
            except (errors.ApiError, ValueError) as exc:
                log.warning("webhook certificate not synced: %s", exc)

    def _new_data(self, previous_bundle: bytes, now: datetime.datetime) -> dict[str, str]:
        cert, key = certs.self_signed_pem(self.hosts, lifetime=self.lifetime, now=now)
        bundle = b"".join([cert, *certs.valid_certificates(previous_bundle, now)])
        return {k: base64.b64encode(v).decode()
                for k, v in (("tls.crt", cert), ("tls.key", key), ("ca.crt", bundle))}

    def _create_or_read(self, existing: Body | None) -> Body:
        now = datetime.datetime.now(datetime.UTC)
        if existing is not None:  # there, but emptied or cut short: the leader's to repair
            return self._rotate(existing, now)
        body = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": self.secret, "namespace": self.namespace,
                             "labels": {"app.kubernetes.io/part-of": "fleet"}},
                "data": self._new_data(b"", now)}
        try:
            created = self.kube.create(r.SECRETS, body)
            log.info("created the webhook certificate Secret %s/%s", self.namespace, self.secret)
            return created
        except errors.AlreadyExists:
            return self.kube.get(r.SECRETS, self.secret, self.namespace)

    def _rotate(self, secret: Body, now: datetime.datetime) -> Body:
        previous = _data(secret, "ca.crt") if _complete(secret) else b""
        body = {**secret, "data": self._new_data(previous, now)}
        try:
            rotated = self.kube.replace(r.SECRETS, body)
        except errors.Conflict:  # another replica rotated it first: serve theirs
            return self.kube.get(r.SECRETS, self.secret, self.namespace)
        log.info("rotated the webhook certificate (valid until %s)",
                 certs.not_after(_data(rotated, "tls.crt")).isoformat())
        return rotated

    def _write(self, secret: Body) -> None:
        cert, key = _data(secret, "tls.crt"), _data(secret, "tls.key")
        if cert == self._served:
            return
        self._generation += 1
        version = self.directory / f"v{os.getpid()}-{self._generation}"
        version.mkdir(parents=True, exist_ok=True)
        (version / "tls.crt").write_bytes(cert)
        (version / "tls.key").write_bytes(key)
        (version / "tls.key").chmod(0o600)
        link = self.directory / f".current-{self._generation}"
        link.symlink_to(version.name)
        os.replace(link, self.directory / "current")
        self._served = cert

    def _patch_ca_bundle(self, bundle: bytes) -> None:
        for resource in (r.VALIDATINGWEBHOOKCONFIGURATIONS, r.MUTATINGWEBHOOKCONFIGURATIONS):
            self._patch_one(resource, base64.b64encode(bundle).decode())

    def _patch_one(self, resource: r.Resource, wanted: str) -> None:
        config = self.kube.get_or_none(resource, self.configuration)
        if config is None:
            log.warning("%s %s is missing: install deploy/hub", resource.kind,
                        self.configuration)
            return
        webhooks = config.get("webhooks") or []
        if all(w.get("clientConfig", {}).get("caBundle") == wanted for w in webhooks):
            return
        for webhook in webhooks:
            webhook.setdefault("clientConfig", {})["caBundle"] = wanted
        try:
            self.kube.patch(resource, self.configuration, {
                "metadata": {"resourceVersion": config["metadata"]["resourceVersion"]},
                "webhooks": webhooks})
            log.info("patched the caBundle of %s %s", resource.kind, self.configuration)
        except errors.Conflict:
            pass  # changed meanwhile: the next sync sees it


def _complete(secret: Body) -> bool:
    data = secret.get("data") or {}
    return all(data.get(k) for k in ("tls.crt", "tls.key", "ca.crt"))


def _data(secret: Body, key: str) -> bytes:
    return base64.b64decode((secret.get("data") or {})[key])
