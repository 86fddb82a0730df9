"""kopf handlers of the hub: each one only records what it saw and wakes the scheduler.

All handlers are event watchers, so kopf itself writes nothing to the watched objects (no
progress or diff-base annotations, no finalizers): every hub write is a decision's.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import kopf

from fleet import metrics
from fleet.api.cluster import AGENT_HEARTBEAT
from fleet.clients import resources as r
from fleet.clients.kopf_storage import watch_only
from fleet.clients.kube import Kube
from fleet.clients.leases import LeaderElector
from fleet.hub import admission, certs
from fleet.hub import cache as stores
from fleet.hub.cache import Cache
from fleet.hub.dispatch import Dispatcher
from fleet.hub.scheduler import Scheduler, Settings
from propagation.views import FitMode

log = logging.getLogger(__name__)
CACHE = Cache()
_STOP = threading.Event()


def _record(store: str, kind: str, body: kopf.Body) -> None:
    if kind == "DELETED":
        CACHE.remove(store, body)
    else:
        CACHE.upsert(store, body)


def _watch(resource: r.Resource, store: str) -> None:
    async def handler(*, type: str, body: kopf.Body, **_: Any) -> None:
        _record(store, type, body)

    handler.__name__ = f"watch_{resource.plural}_{resource.group.replace('.', '_')}"
    kopf.on.event(resource.group, resource.version, resource.plural)(handler)


for _job in r.JOB_KINDS:
    _watch(_job, stores.JOBS)
_watch(r.PROPAGATIONPOLICIES, stores.POLICIES)
_watch(r.CLUSTERPROPAGATIONPOLICIES, stores.CLUSTER_POLICIES)
_watch(r.MEMBERCLUSTERS, stores.CLUSTERS)
_watch(r.WORKS, stores.WORKS)
_watch(r.ELASTICQUOTATREES, stores.QUOTA_TREES)
_watch(r.QUEUES, stores.QUEUES)
_watch(r.PRIORITYCLASSES, stores.PRIORITY_CLASSES)


@kopf.on.event("coordination.k8s.io", "v1", "leases", labels={AGENT_HEARTBEAT: kopf.PRESENT})
async def watch_agent_heartbeats(*, type: str, body: kopf.Body, **_: Any) -> None:
    _record(stores.HEARTBEATS, type, body)



admission.register(CACHE)


@kopf.on.startup()
def start(settings: kopf.OperatorSettings, **_: Any) -> None:
    watch_only(settings)
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    metrics.serve(int(os.environ.get("FLEET_METRICS_PORT", "0")))
    _serve_webhook(settings)
    kube = Kube(os.environ.get("KUBECONFIG"), pool=32)
    fit = FitMode(os.environ.get("FLEET_FIT_MODE", FitMode.NODE_AWARE.value))
    scheduler = Scheduler(
        cache=CACHE,
        dispatcher=Dispatcher(kube),
        elector=LeaderElector(kube, "fleet-system", "fleet-hub"),
        settings=Settings(fit_mode=fit,
                          heartbeat_timeout=float(os.environ.get("FLEET_HEARTBEAT_TIMEOUT", "15")),
                          capacity_stale_after=float(
                              os.environ.get("FLEET_CAPACITY_STALE_SECONDS", "90"))),
    )
    threading.Thread(target=scheduler.run, args=(_STOP,), name="scheduler", daemon=True).start()
    log.info("hub scheduler started (fit mode %s)", fit.value)


def _serve_webhook(settings: kopf.OperatorSettings) -> None:
    """Serve the validating webhook on FLEET_WEBHOOK_PORT (127.0.0.1 unless FLEET_WEBHOOK_HOST)
    and let kopf keep the ValidatingWebhookConfiguration ``fleet.sh`` pointing at it."""
    port = int(os.environ.get("FLEET_WEBHOOK_PORT", "0"))
    if not port:
        log.warning("FLEET_WEBHOOK_PORT is not set: checks that span objects run only as "
                    "controller conditions")
        return
    host = os.environ.get("FLEET_WEBHOOK_HOST", "127.0.0.1")
    cert, key = os.environ.get("FLEET_WEBHOOK_CERT"), os.environ.get("FLEET_WEBHOOK_KEY")
    if not (cert and key):
        directory = Path(tempfile.mkdtemp(prefix="fleet-webhook-"))
        cert_path, key_path = certs.self_signed([host], directory)
        cert, key = str(cert_path), str(key_path)
    settings.admission.server = kopf.WebhookServer(
        addr=os.environ.get("FLEET_WEBHOOK_ADDR", "127.0.0.1"), port=port, host=host,
        certfile=cert, pkeyfile=key, cafile=cert)
    settings.admission.managed = "fleet.sh"


@kopf.on.cleanup()
def stop(**_: Any) -> None:
    _STOP.set()
    CACHE.poke()
