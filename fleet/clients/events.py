"""Kubernetes Events about an object, recorded best-effort (an event never fails a caller).

Like client-go's recorder, :class:`EventRecorder` hands events to one background thread: the
decision an event reports is not kept waiting for the event's own write (on a busy API server
that was a fifth of a job's path from the hub to a running pod), and events keep their order.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

log = logging.getLogger(__name__)
Body = dict[str, Any]


def event_body(obj: Mapping[str, Any], reason: str, message: str, *, type: str,
               component: str) -> Body:
    meta = obj["metadata"]
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
                           "name": meta["name"], "namespace": meta["namespace"],
                           "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")},
        "reason": reason, "message": message, "type": type,
        "source": {"component": component},
        "reportingComponent": component, "reportingInstance": component,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }


class EventRecorder:
    def __init__(self, kube: Kube, component: str, capacity: int = 10_000) -> None:
        self.kube = kube
        self.component = component
        self._queue: queue.Queue[Body] = queue.Queue(capacity)
        self._sender: threading.Thread | None = None
        self._lock = threading.Lock()

    def record(self, obj: Mapping[str, Any], reason: str, message: str, *,
               type: str = "Normal") -> None:
        """Queue the event (stamped now); dropped with a warning if thousands are waiting."""
        body = event_body(obj, reason, message, type=type, component=self.component)
        try:
            self._queue.put_nowait(body)
        except queue.Full:
            log.warning("event %s on %s/%s dropped: %d events are waiting", reason,
                        body["metadata"]["namespace"], obj["metadata"]["name"],
                        self._queue.qsize())
            return
        with self._lock:
            if self._sender is None:
                self._sender = threading.Thread(target=self._send_forever, name="events",
                                                daemon=True)
                self._sender.start()

    def flush(self) -> None:
        """Wait until every queued event has been written or refused."""
        self._queue.join()

    def _send_forever(self) -> None:
        while True:
            body = self._queue.get()
            try:
                self.kube.create(r.EVENTS, body)
            except errors.ApiError as exc:
                involved = body["involvedObject"]
                log.warning("event %s on %s/%s not recorded: %s", body["reason"],
                            involved["namespace"], involved["name"], exc)
            except Exception:  # the sender must outlive any one event
                log.exception("event %s not recorded", body["reason"])
            finally:
                self._queue.task_done()
