"""kopf handlers of the hub: each one only records what it saw and wakes the scheduler.

All handlers are event watchers, so kopf itself writes nothing to the watched objects (no
progress or diff-base annotations, no finalizers): every hub write is a decision's.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kopf

from fleet import metrics
from fleet.api.cluster import AGENT_HEARTBEAT
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kopf_storage import STARTUP_RETRY_SECONDS, watch_only
from fleet.clients.kube import Kube
from fleet.clients.leases import LeaderElector
from fleet.hub import admission, pod_mirroring, stages, webhook_tls
from fleet.hub import cache as stores
from fleet.hub.cache import Cache
from fleet.hub.dispatch import Dispatcher
from fleet.hub.initial_sync import InitialSync
from fleet.hub.scheduler import Scheduler, Settings
from fleet.kinds import managed_elsewhere
from propagation.views import FitMode

log = logging.getLogger(__name__)
CACHE = Cache()
SYNC = InitialSync()
# What kopf watches (resource, label selector): listed once at startup to know when the
# watches have delivered everything (``initial_sync``).
WATCHED: list[tuple[r.Resource, str | None]] = []
_STOP = threading.Event()
LIST_PAGE = 500


def _record(store: str, kind: str, body: kopf.Body) -> None:
    SYNC.saw(Cache.key(body))
    if store == stores.JOBS and managed_elsewhere(body):
        kind = "DELETED"  # another controller's job (MultiKueue's): the hub never sees it
    if kind == "DELETED":
        CACHE.remove(store, body)
        if store == stores.JOBS:
            stages.CLOCK.forget(body)
    else:
        if store == stores.JOBS:
            stages.CLOCK.seen(body)  # before the scheduler can see it in the cache
        CACHE.upsert(store, body)


def _watch(resource: r.Resource, store: str) -> None:
    async def handler(*, type: str, body: kopf.Body, **_: Any) -> None:
        _record(store, type, body)

    handler.__name__ = f"watch_{resource.plural}_{resource.group.replace('.', '_')}"
    kopf.on.event(resource.group, resource.version, resource.plural)(handler)
    WATCHED.append((resource, None))


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


WATCHED.append((r.LEASES, AGENT_HEARTBEAT))


def _list_watched(kube: Kube) -> None:
    """List what kopf watches for ``SYNC``, once, then again every few seconds while some
    listed object has not come through a watch (it may have been deleted meanwhile)."""
    first = True
    while not _STOP.is_set() and not SYNC.synced():
        try:
            keys = []
            for resource, selector in WATCHED:
                try:
                    # names only, a page at a time: every few seconds until synced, and
                    # at 10,000 jobs whole objects were hundreds of MiB decoded and dropped
                    items, _ = kube.list(resource, label_selector=selector,
                                         limit=LIST_PAGE, metadata_only=True)
                except errors.NotFound:  # no such kind installed: kopf watches nothing either
                    continue
                keys += [Cache.key(item) for item in items]
        except errors.ApiError as exc:
            log.warning("listing the watched resources failed (retrying): %s", exc)
            _STOP.wait(2)
            continue
        if first:
            SYNC.listed(keys)
            log.info("caches: %d objects listed at startup", len(keys))
            first = False
        else:
            SYNC.still_there(keys)
        _STOP.wait(5)


admission.register(CACHE)


@kopf.on.startup(backoff=STARTUP_RETRY_SECONDS)
def start(settings: kopf.OperatorSettings, **_: Any) -> None:
    watch_only(settings)
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    metrics.ready_when("caches-synced", SYNC.synced)  # before /readyz is served at all
    metrics.serve(int(os.environ.get("FLEET_METRICS_PORT", "0")))
    # a connection for each writer thread (binds, statuses), the reporter, events, the
    # elector and the webhook's lookups: a full pool drops connections, and each new one is a
    # TLS handshake
    kube = Kube(os.environ.get("KUBECONFIG"), pool=48)
    # The chart's leaderElection.leaseSeconds; its schema bounds it to 2..300 as this does.
    lease_seconds = min(300, max(2, int(os.environ.get("FLEET_HUB_LEASE_SECONDS", "10"))))
    elector = LeaderElector(kube, "fleet-system", "fleet-hub", lease_seconds=lease_seconds)
    threading.Thread(target=elector.run, args=(_STOP,), name="leader-election",
                     daemon=True).start()
    _serve_webhook(settings, kube, lambda: elector.leading)  # may fail: the start is retried
    threading.Thread(target=_list_watched, args=(kube,), name="initial-list",
                     daemon=True).start()
    fit = FitMode(os.environ.get("FLEET_FIT_MODE", FitMode.NODE_AWARE.value))
    scheduler = Scheduler(
        cache=CACHE,
        dispatcher=Dispatcher(kube, elector.fence),
        elector=elector,
        settings=Settings(fit_mode=fit,
                          heartbeat_timeout=float(os.environ.get("FLEET_HEARTBEAT_TIMEOUT", "15")),
                          capacity_stale_after=float(
                              os.environ.get("FLEET_CAPACITY_STALE_SECONDS", "90")),
                          chaos_pass_pause=min(60.0, max(0.0, float(
                              os.environ.get("FLEET_CHAOS_PASS_PAUSE_SECONDS", "0"))))),
    )
    threading.Thread(target=scheduler.run, args=(_STOP,), name="scheduler", daemon=True).start()
    threading.Thread(target=scheduler.reporting.run, args=(_STOP, lambda: elector.leading),
                     name="reporting", daemon=True).start()
    mirrors = pod_mirroring.Mirroring(kube, CACHE, lambda: elector.leading)
    threading.Thread(target=mirrors.run, args=(_STOP,), name="mirrors", daemon=True).start()
    metrics.ready_when("started", lambda: True)
    log.info("hub scheduler started (fit mode %s)", fit.value)


def _serve_webhook(settings: kopf.OperatorSettings, kube: Kube,
                   leading: Callable[[], bool]) -> None:
    """Serve the validating webhook on FLEET_WEBHOOK_ADDR:FLEET_WEBHOOK_PORT with the
    certificate every replica shares (or FLEET_WEBHOOK_CERT/KEY when mounted). kopf does not
    manage the ValidatingWebhookConfiguration: it comes with the install, and the leader only
    patches its caBundle, so a replica that exits leaves it in place for the others."""
    port = int(os.environ.get("FLEET_WEBHOOK_PORT", "0"))
    if not port:
        log.warning("FLEET_WEBHOOK_PORT is not set: checks that span objects run only as "
                    "controller conditions")
        return
    addr = os.environ.get("FLEET_WEBHOOK_ADDR", "127.0.0.1")
    cert, key = os.environ.get("FLEET_WEBHOOK_CERT"), os.environ.get("FLEET_WEBHOOK_KEY")
    if not (cert and key):
        service = os.environ.get("FLEET_WEBHOOK_SERVICE", "fleet-hub")
        keeper = webhook_tls.WebhookCertificates(
            kube, Path(tempfile.mkdtemp(prefix="fleet-webhook-")),
            webhook_tls.service_hosts(service, webhook_tls.NAMESPACE))
        keeper.ensure()
        keeper.sync(leading())
        threading.Thread(target=keeper.run, args=(_STOP, leading), name="webhook-tls",
                         daemon=True).start()
        cert, key = str(keeper.certfile), str(keeper.keyfile)
    settings.admission.server = admission.WebhookServer(
        addr=addr, port=port, host=os.environ.get("FLEET_WEBHOOK_HOST"),
        certfile=cert, pkeyfile=key, file_check_interval=5)
    settings.admission.managed = None
    metrics.ready_when("webhook", lambda: _accepts(addr, port))


def _accepts(addr: str, port: int) -> bool:
    host = "127.0.0.1" if addr in ("0.0.0.0", "") else addr
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


@kopf.on.cleanup()
def stop(**_: Any) -> None:
    _STOP.set()
    CACHE.poke()
