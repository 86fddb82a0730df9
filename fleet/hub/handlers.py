"""The hub process: kopf serves the admission webhook and runs the start-up, which starts
the watches that fill the cache (:mod:`fleet.hub.watches`), the leader election, the
scheduler, the Queue reporter, the mirror loop and the dashboard, each on a thread of its own.

kopf watches nothing here (it writes nothing to the hub's objects either: no progress or
diff-base annotations, no finalizers): every hub write is a decision's.
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
from fleet.api.protocol import HUB_LEASE
from fleet.clients.kopf_storage import STARTUP_RETRY_SECONDS, watch_only
from fleet.clients.kube import Kube
from fleet.clients.leases import LeaderElector
from fleet.hub import admission, dashboard, pod_mirroring, webhook_tls
from fleet.hub.cache import Cache
from fleet.hub.dispatch import Dispatcher
from fleet.hub.scheduler import Scheduler, Settings
from fleet.hub.watches import Watches
from propagation.views import FitMode

log = logging.getLogger(__name__)
CACHE = Cache()
RUNTIMES = admission.Runtimes(CACHE)
_STOP = threading.Event()


admission.register(CACHE, RUNTIMES)


_ELECTION: list[LeaderElector] = []  # this process's one elector, kept across start-ups


def elector_once(make: Callable[[], LeaderElector]) -> LeaderElector:
    """The process's elector, made and started at the first start-up only: kopf retries a
    start-up that failed further on (the webhook's certificate, say), and a second elector
    would campaign for the same lease beside the first, each with its own idea of the term."""
    if not _ELECTION:
        elector = make()
        threading.Thread(target=elector.run, args=(_STOP,), name="leader-election",
                         daemon=True).start()
        _ELECTION.append(elector)
    return _ELECTION[0]


@kopf.on.startup(backoff=STARTUP_RETRY_SECONDS)
def start(settings: kopf.OperatorSettings, **_: Any) -> None:
    watch_only(settings)
    # a connection for each writer thread (binds, moves, statuses), each watch, the
    # reporter, events, the elector and the webhook's lookups: a full pool drops
    # connections, and each new one is a TLS handshake
    kube = Kube(os.environ.get("KUBECONFIG"), pool=96)
    watches = Watches(kube, CACHE)
    metrics.ready_when("caches-synced", watches.synced)  # before /readyz is served at all
    metrics.serve(int(os.environ.get("FLEET_METRICS_PORT", "0")))
    # The chart's leaderElection.leaseSeconds; its schema bounds it to 2..300 as this does.
    lease_seconds = min(300, max(2, int(os.environ.get("FLEET_HUB_LEASE_SECONDS", "10"))))
    dashboard_port = int(os.environ.get("FLEET_DASHBOARD_PORT", "0"))
    dashboard_addr = os.environ.get("FLEET_DASHBOARD_ADDR", "127.0.0.1")
    elector = elector_once(lambda: LeaderElector(
        kube, *HUB_LEASE, lease_seconds=lease_seconds,
        annotations=dashboard.whereabouts(dashboard_addr, dashboard_port)))
    _serve_webhook(settings, kube, lambda: elector.leading)  # may fail: the start is retried
    watches.start(_STOP)
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
    threading.Thread(target=pod_mirroring.mirror_pods(kube).run, args=(_STOP,),
                     name="watch-mirror-pods", daemon=True).start()
    mirrors = pod_mirroring.Mirroring(kube, CACHE, lambda: elector.leading)
    threading.Thread(target=mirrors.run, args=(_STOP,), name="mirrors", daemon=True).start()
    if dashboard_port:
        dashboard.start(scheduler.reporting, elector, kube, dashboard_addr, dashboard_port,
                        _STOP)
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
    RUNTIMES.read_through(kube)
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
