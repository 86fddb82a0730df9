"""Kubernetes Events about an object, recorded best-effort (an event never fails a caller).

Like client-go's recorder, :class:`EventRecorder` hands events to background threads: the
decision an event reports is not kept waiting for the event's own write (on a busy API server
that was a fifth of a job's path from the hub to a running pod).
"""

from __future__ import annotations

import logging
import queue
import threading
import zlib
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
    """Events written by ``senders`` background threads; all events of one object go through
    the same thread, so they keep their order."""

    def __init__(self, kube: Kube, component: str, *, senders: int = 4,
                 capacity: int = 10_000) -> None:
        self.kube = kube
        self.component = component
        self._queues: list[queue.Queue[Body]] = [queue.Queue(capacity) for _ in range(senders)]
        self._started = False
        self._lock = threading.Lock()

    def record(self, obj: Mapping[str, Any], reason: str, message: str, *,
               type: str = "Normal") -> None:
        """Queue the event (stamped now); dropped with a warning if thousands are waiting."""
        body = event_body(obj, reason, message, type=type, component=self.component)
        meta = obj["metadata"]
        lane = self._queues[zlib.crc32(str(meta.get("uid") or meta["name"]).encode())
                            % len(self._queues)]
        try:
            lane.put_nowait(body)
        except queue.Full:
            log.warning("event %s on %s/%s dropped: %d events are waiting", reason,
                        meta["namespace"], meta["name"], lane.qsize())
            return
        with self._lock:
            if not self._started:
                for index, pending in enumerate(self._queues):
                    threading.Thread(target=self._send_forever, args=(pending,),
                                     name=f"events-{index}", daemon=True).start()
                self._started = True

    def _send_forever(self, pending: queue.Queue[Body]) -> None:
        while True:
            body = pending.get()
            try:
                self.kube.create(r.EVENTS, body)
            except errors.ApiError as exc:
                involved = body["involvedObject"]
                log.warning("event %s on %s/%s not recorded: %s", body["reason"],
                            involved["namespace"], involved["name"], exc)
            except Exception:  # a sender must outlive any one event
                log.exception("event %s not recorded", body["reason"])
            finally:
                pending.task_done()
