"""The hub's watches: every resource it decides from, listed and then watched into its cache,
one informer (:mod:`fleet.clients.informer`) and one thread each.

Each event is recorded and nothing else (the scheduler is woken by the cache). The caches
count as synced (client-go's ``HasSynced``) once every informer has handed over its first
list: the readiness probe waits for it, since a replica answering webhooks before then
would judge from a partial view.

Informers, not kopf's watches: kopf's per-event machinery (its causes, its state, its
handler invocation on an asyncio loop shared with the webhook server) cost about a sixth of
the hub's CPU at Kueue's scale, and its event queue fell seconds behind the API server while
the hub was busy; the hub's handlers only ever recorded what they saw.
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass

from fleet.api.cluster import AGENT_HEARTBEAT
from fleet.clients import resources as r
from fleet.clients.informer import DELETED, Body, Informer
from fleet.clients.kube import Kube
from fleet.hub import cache as stores
from fleet.hub import stages
from fleet.hub.cache import Cache
from fleet.kinds import managed_elsewhere

log = logging.getLogger(__name__)
LIST_PAGE = 500  # objects per list request: ten thousand jobs at once were a huge response
WATCH_SECONDS = 300  # how long the API server keeps one watch open before it is renewed


@dataclass(frozen=True)
class Watched:
    resource: r.Resource
    store: str
    label_selector: str | None = None


WATCHED: tuple[Watched, ...] = (
    *(Watched(job, stores.JOBS) for job in r.JOB_KINDS),
    Watched(r.PROPAGATIONPOLICIES, stores.POLICIES),
    Watched(r.CLUSTERPROPAGATIONPOLICIES, stores.CLUSTER_POLICIES),
    Watched(r.MEMBERCLUSTERS, stores.CLUSTERS),
    Watched(r.WORKS, stores.WORKS),
    Watched(r.ELASTICQUOTATREES, stores.QUOTA_TREES),
    Watched(r.QUEUES, stores.QUEUES),
    Watched(r.PRIORITYCLASSES, stores.PRIORITY_CLASSES),
    Watched(r.LEASES, stores.HEARTBEATS, AGENT_HEARTBEAT),
    Watched(r.TRAININGRUNTIMES, stores.RUNTIMES),
    Watched(r.CLUSTERTRAININGRUNTIMES, stores.RUNTIMES),
)


def record(cache: Cache, store: str, kind: str, body: Body) -> None:
    """One watch event into the cache (and the job's stage clock); an object that cannot be
    recorded is logged and passed over, never the end of its watch."""
    try:
        _record(cache, store, kind, body)
    except Exception:
        log.exception("watch event not recorded: %s in %s", kind, store)


def _record(cache: Cache, store: str, kind: str, body: Body) -> None:
    if store == stores.JOBS and kind != DELETED and managed_elsewhere(body):
        kind = DELETED  # another controller's job (MultiKueue's): the hub never sees it
    if kind == DELETED:
        cache.remove(store, body)
        if store == stores.JOBS:
            stages.CLOCK.forget(body)
    else:
        if store == stores.JOBS:
            stages.CLOCK.seen(body)  # before the scheduler can see it in the cache
        cache.upsert(store, body)


class Watches:
    def __init__(self, kube: Kube, cache: Cache,
                 watched: tuple[Watched, ...] = WATCHED) -> None:
        self.informers = [
            Informer(kube, w.resource, handle=functools.partial(record, cache, w.store),
                     keep=False, label_selector=w.label_selector, page=LIST_PAGE,
                     timeout_seconds=WATCH_SECONDS)
            for w in watched]

    def start(self, stop: threading.Event) -> None:
        for informer in self.informers:
            threading.Thread(target=informer.run, args=(stop,), daemon=True,
                             name=f"watch-{informer.resource.plural}").start()

    def synced(self) -> bool:
        return all(informer.synced.is_set() for informer in self.informers)
