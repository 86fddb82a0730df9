"""client-go's reflector and store: one resource (in one namespace, or all), listed and then
watched, each event handed to a handler on the informer's thread.

The hub's caches are filled by one informer per resource it decides from
(:mod:`fleet.hub.watches`); the agent watches its hub namespace's Works on the hub; the scale
bench watches the hub's Works for its simulated members. This is that loop once:

- list, then watch from the list's resourceVersion, with bookmarks;
- a watch that expires (410) or breaks lists again, after ``pause`` seconds on an error;
- after each list, the objects that vanished meanwhile are handed over as ``DELETED`` with
  their last known state (client-go's ``DeletedFinalStateUnknown``), so a handler never
  misses a deletion that happened while the watch was down;
- ``synced`` is set once the first list has been handed over (client-go's ``HasSynced``), and
  ``listed`` is called after every list; a kind the API server does not serve (its CRD not
  installed) counts as synced and empty, and is looked for again every ``ABSENT_PAUSE``.

Handlers run on the informer's thread, in the API server's order; a slow handler delays the
next event, so handlers that do I/O hand work on (the agent's go to a per-key pool).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

from fleet.clients import errors
from fleet.clients.kube import Kube
from fleet.clients.resources import Resource

log = logging.getLogger(__name__)
Body = dict[str, Any]
Handler = Callable[[str, Body], None]  # (ADDED | MODIFIED | DELETED, object)
Key = tuple[str, str]  # (namespace, name)
ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
ABSENT_PAUSE = 30.0  # seconds between looks for a kind the API server does not serve
STUB_FIELDS = ("name", "namespace", "uid", "resourceVersion")  # kept of each object (keep=False)
# (apiVersion, kind, then STUB_FIELDS' values): a tuple, as a hub keeps ten thousands of them
Stub = tuple[str | None, ...]


def key_of(body: Body) -> Key:
    meta = body["metadata"]
    return meta.get("namespace") or "", meta["name"]


class Informer:
    def __init__(self, kube: Kube, resource: Resource, namespace: str | None = None, *,
                 handle: Handler, listed: Callable[[], None] | None = None,
                 keep: bool = True, timeout_seconds: int = 60, pause: float = 1.0,
                 label_selector: str | None = None, page: int | None = None) -> None:
        self.kube, self.resource, self.namespace = kube, resource, namespace
        self.handle, self.listed, self.keep = handle, listed, keep
        self.timeout_seconds, self.pause, self.label_selector = timeout_seconds, pause, \
            label_selector
        self.page = page  # objects per list request (None: all in one)
        self.synced = threading.Event()
        self._store: dict[Key, Body | Stub] = {}  # each object's last state (keep=True) or stub
        self._lock = threading.Lock()

    def get(self, namespace: str, name: str) -> Body | None:
        with self._lock:
            found = self._store.get((namespace, name))
        return None if found is None else _body(found)

    def items(self) -> list[Body]:
        with self._lock:
            return [_body(found) for found in self._store.values()]

    def run(self, stop: threading.Event) -> None:
        version = ""
        while not stop.is_set():
            try:
                if not version:
                    version = self.relist()
                for kind, body in self.kube.watch(
                        self.resource, self.namespace, resource_version=version,
                        label_selector=self.label_selector,
                        timeout_seconds=self.timeout_seconds):
                    version = body.get("metadata", {}).get("resourceVersion", version)
                    if kind in (ADDED, MODIFIED, DELETED):
                        self._seen(kind, body)
                    if stop.is_set():
                        return
            except errors.NotFound:
                # The kind is not served (its CRD not installed): nothing to list, so the
                # cache of it is synced; looked for again now and then.
                version = ""
                if not self.synced.is_set():
                    log.info("%s: not served by the API server; looking again every %.0f s",
                             self.resource.plural, ABSENT_PAUSE)
                self._vanish_all()
                self.synced.set()
                stop.wait(ABSENT_PAUSE)
            except errors.ApiError as exc:
                version = ""  # list again, whatever went wrong
                if exc.status != 410:
                    log.warning("watch of %s interrupted: %s", self.resource.plural, exc)
                    stop.wait(self.pause)

    def relist(self) -> str:
        """One list handed over as events; returns the version to watch from."""
        items, version = self.kube.list(self.resource, self.namespace,
                                        label_selector=self.label_selector, limit=self.page)
        listed = {key_of(body) for body in items}
        with self._lock:
            vanished = [_body(found) for key, found in self._store.items() if key not in listed]
            known = set(self._store)
        for body in vanished:
            self._seen(DELETED, body)
        for body in items:
            self._seen(MODIFIED if key_of(body) in known else ADDED, body)
        self.synced.set()
        if self.listed is not None:
            self.listed()
        return version

    def _vanish_all(self) -> None:
        with self._lock:
            vanished = [_body(found) for found in self._store.values()]
        for body in vanished:
            self._seen(DELETED, body)

    def _seen(self, kind: str, body: Body) -> None:
        key = key_of(body)
        with self._lock:
            if kind == DELETED:
                self._store.pop(key, None)
            elif self.keep:
                self._store[key] = body
            else:  # enough to tell what vanished, and to name it
                meta = body["metadata"]
                self._store[key] = (_shared(body.get("apiVersion")), _shared(body.get("kind")),
                                    *(_shared(meta.get(k)) if k == "namespace" else meta.get(k)
                                      for k in STUB_FIELDS))
        self.handle(kind, body)


def _shared(text: Any) -> Any:
    return sys.intern(text) if isinstance(text, str) else text


def _body(found: Body | Stub) -> Body:
    """An object as kept, or its stub as an object's outline."""
    if isinstance(found, dict):
        return found
    api_version, kind, *values = found
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {k: v for k, v in zip(STUB_FIELDS, values, strict=True)
                         if v is not None}}
