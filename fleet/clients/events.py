"""Kubernetes Events about an object, recorded best-effort (an event never fails a caller).

Like client-go's recorder, :class:`EventRecorder` hands events to background threads: the
decision an event reports is not kept waiting for the event's own write (on a busy API server
that was a fifth of a job's path from the hub to a running pod). And like client-go's event
correlator, an event said again about the same object (same reason, type and message) within
:data:`SIMILAR_SECONDS` raises the count of the one already written instead of making a new
one, and an object whose events come faster than its budget (a burst of
:data:`BURST`, then one every :data:`REFILL_SECONDS`) has the excess dropped: a job told
why it waits on every pass cannot flood the API server or its own event list.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from fleet import clock
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

log = logging.getLogger(__name__)
Body = dict[str, Any]


def event_body(obj: Mapping[str, Any], reason: str, message: str, *, type: str,
               component: str) -> Body:
    meta = obj["metadata"]
    stamp = clock.text()
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


SIMILAR_SECONDS = 600.0  # client-go's: an event said again this soon raises a count
BURST, REFILL_SECONDS = 25, 300.0  # client-go's spam filter: per object
REMEMBERED = 4096  # events and objects remembered for the two above (the oldest forgotten)


class EventRecorder:
    """Events written by ``senders`` background threads; all events of one object go through
    the same thread, so they keep their order."""

    def __init__(self, kube: Kube, component: str, *, senders: int = 4,
                 capacity: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.component = component
        self.clock = clock
        self._queues: list[queue.Queue[Body]] = [queue.Queue(capacity) for _ in range(senders)]
        self._started = False
        self._lock = threading.Lock()
        # (object uid, reason, type, message) -> (the Event's namespace and name, its count,
        # when it was last said); object uid -> (tokens left, when counted)
        self._said: OrderedDict[tuple[str, str, str, str], tuple[str, str, int, float]] = \
            OrderedDict()
        self._budget: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def record(self, obj: Mapping[str, Any], reason: str, message: str, *,
               type: str = "Normal") -> None:
        """Queue the event (stamped now); dropped with a warning if thousands are waiting,
        quietly if its object is over its budget."""
        meta = obj["metadata"]
        if not self._spend(str(meta.get("uid") or meta["name"])):
            log.debug("event %s on %s/%s dropped: its object is over its budget", reason,
                      meta.get("namespace"), meta["name"])
            return
        body = event_body(obj, reason, message, type=type, component=self.component)
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

    def _spend(self, uid: str) -> bool:
        """Take one of the object's tokens (client-go's token bucket per object)."""
        now = self.clock()
        with self._lock:
            tokens, since = self._budget.pop(uid, (float(BURST), now))
            tokens = min(float(BURST), tokens + (now - since) / REFILL_SECONDS)
            if tokens < 1:
                self._budget[uid] = (tokens, now)
                return False
            self._budget[uid] = (tokens - 1, now)
            while len(self._budget) > REMEMBERED:
                self._budget.popitem(last=False)
        return True

    def _send(self, body: Body) -> None:
        """Create the event, or raise the count of the same one said a moment ago."""
        involved = body["involvedObject"]
        said = (str(involved.get("uid") or involved["name"]), body["reason"], body["type"],
                body["message"])
        now = self.clock()
        with self._lock:
            known = self._said.pop(said, None)
        if known is not None and now - known[3] <= SIMILAR_SECONDS:
            namespace, name, count, _ = known
            try:
                self.kube.patch(r.EVENTS, name, {"count": count + 1,
                                                 "lastTimestamp": body["lastTimestamp"]},
                                namespace)
                self._remember(said, (namespace, name, count + 1, now))
                return
            except errors.NotFound:  # expired meanwhile: a new one
                pass
        made = self.kube.create(r.EVENTS, body)
        self._remember(said, (made["metadata"]["namespace"], made["metadata"]["name"], 1, now))

    def _remember(self, said: tuple[str, str, str, str],
                  event: tuple[str, str, int, float]) -> None:
        with self._lock:
            self._said[said] = event
            while len(self._said) > REMEMBERED:
                self._said.popitem(last=False)

    def drained(self) -> bool:
        """Whether every queued event has been sent (or given up on)."""
        return all(pending.unfinished_tasks == 0 for pending in self._queues)

    def _send_forever(self, pending: queue.Queue[Body]) -> None:
        while True:
            body = pending.get()
            try:
                self._send(body)
            except errors.ApiError as exc:
                involved = body["involvedObject"]
                log.warning("event %s on %s/%s not recorded: %s", body["reason"],
                            involved["namespace"], involved["name"], exc)
            except Exception:  # a sender must outlive any one event
                log.exception("event %s not recorded", body["reason"])
            finally:
                pending.task_done()
