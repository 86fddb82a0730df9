"""The dashboard's HTTP server: a read-only page and the JSON it reads, served by the leader.

It listens on ``FLEET_DASHBOARD_ADDR`` (127.0.0.1 unless set) and ``FLEET_DASHBOARD_PORT``.
In a Pod, 127.0.0.1 is reachable only through ``kubectl port-forward`` (``kubectl fleet
dashboard`` opens one), so the page has exactly the authentication and authorization of the
API server's ``pods/portforward``; nothing is written through it (it answers GET and HEAD
only). A request whose ``Host`` is not a loopback name is refused, so a web page elsewhere
cannot read it through a rebound DNS name.

Every view is computed from the leader's last pass (:meth:`Reporting.latest`), at most once
a second and once per pass whatever the number of browsers; a replica that does not lead
answers 503 with the leader's identity, as its cache is no one's decisions.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from fleet import clock as wall_clock
from fleet.api.protocol import HUB_DASHBOARD, HUB_POD
from fleet.clients.kube import Kube
from fleet.clients.leases import LeaderElector
from fleet.clients.resources import EVENTS
from fleet.http_answer import answer
from fleet.hub.dashboard import pages
from fleet.hub.dashboard import payloads as pl
from fleet.hub.dashboard.history import History
from fleet.hub.reporting import Offer, Reporting
from planner.intents import QueueReport

log = logging.getLogger(__name__)
Body = dict[str, Any]
REFRESH_SECONDS = 1.0  # a view computed less than this ago is served again
CACHED_VIEWS = 64  # distinct URLs kept between passes (filters, job pages)
MAX_EVENTS = 100  # the latest events about a job shown on its timeline
LOOPBACK = ("localhost", "127.0.0.1", "[::1]", "::1")
STATIC = {"/": ("index.html", "text/html; charset=utf-8"),
          "/app.js": ("app.js", "text/javascript; charset=utf-8"),
          "/app.css": ("app.css", "text/css; charset=utf-8")}
HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    # everything comes from the hub itself: no script, style or font from anywhere else
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
}


@dataclass(frozen=True)
class Leader:
    """What the page says about who serves it."""

    leading: Callable[[], bool]
    identity: Callable[[], str]
    term: Callable[[], str]
    holder: Callable[[], str]  # whom the Lease named when this replica last read it


class Board:
    """The views, computed from the latest pass and kept until the next."""

    def __init__(self, latest: Callable[[], tuple[Offer | None, QueueReport | None]],
                 leader: Leader, events: Callable[[str, str], list[Body]],
                 history: History | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.latest = latest
        self.leader = leader
        self.events = events  # (namespace, uid) -> the events about that job
        self.history = history or History()
        self.clock = clock
        self._views: dict[str, tuple[int, float, bytes]] = {}  # url -> (offer, when, json)
        self._lock = threading.Lock()
        self._was_leading = False

    def view(self, url: str) -> tuple[int, bytes]:
        """``(status, JSON)`` for an ``/api/...`` URL."""
        if not self.leader.leading():
            return 503, _json({"error": "this hub replica does not lead: its view is not the "
                                        "fleet's", "leader": self.leader.holder()})
        offer, report = self.latest()
        if offer is None:
            return 503, _json({"error": "the leader has not finished its first pass yet",
                               "leader": self.leader.identity()})
        version, now = offer.number, self.clock()
        with self._lock:
            kept = self._views.get(url)
        if kept is not None and (kept[0] == version or now - kept[1] < REFRESH_SECONDS):
            return 200, kept[2]
        found = self._compute(url, offer, report)
        if found is None:
            return 404, _json({"error": f"no such view: {urlsplit(url).path}"})
        body = _json(found)
        with self._lock:
            if len(self._views) >= CACHED_VIEWS:
                self._views.clear()
            self._views[url] = (version, now, body)
        return 200, body

    def _compute(self, url: str, offer: Offer, report: QueueReport | None) -> object | None:
        parts = urlsplit(url)
        path, query = parts.path.rstrip("/"), parse_qs(parts.query)

        def arg(name: str) -> str:
            return (query.get(name) or [""])[0][:200]

        snap, views = offer.snap, offer.clusters
        if path == "/api/overview":
            return self.overview(offer, report)
        if path == "/api/members":
            cells = report.cells if report else {}
            return pages.members(snap, views, cells)
        if path == "/api/queues":
            return pages.queues(snap, report, offer.now)
        if path == "/api/history":
            return self.history.read()
        if path == "/api/jobs":
            limit = int(arg("limit")) if arg("limit").isdigit() else pages.MAX_JOBS_SHOWN
            return pages.jobs(snap, text=arg("text"), state=arg("state"), queue=arg("queue"),
                              limit=limit)
        if path.startswith("/api/jobs/"):
            uid = unquote(path.removeprefix("/api/jobs/"))
            key = snap.job_keys.get(uid)
            if key is None:
                return None
            return pages.job(snap, uid, self._events(key[1], uid))
        return None

    def _events(self, namespace: str, uid: str) -> list[Body]:
        try:
            return self.events(namespace, uid)
        except Exception as exc:  # the page shows the job without them
            log.warning("events of job %s not read: %s", uid, exc)
            return []

    def overview(self, offer: Offer, report: QueueReport | None) -> pl.Overview:
        members, ready, jobs, waiting, gpus = pages.overview(offer.snap, offer.clusters, report)
        return pl.Overview(leading=True, identity=self.leader.identity(),
                           term=self.leader.term(), at=wall_clock.text(at=offer.now),
                           version=offer.number,
                           members=members, membersReady=ready, jobs=jobs, waiting=waiting,
                           gpus=gpus)

    def sample(self) -> None:
        """Add the latest pass to the history while leading; forget it on losing the lead
        (a replica that leads again starts a new history)."""
        leading = self.leader.leading()
        if leading != self._was_leading:
            self.history.clear()
            self._was_leading = leading
        offer, report = self.latest()
        if leading and offer is not None:
            self.history.add(offer.now, pages.queues(offer.snap, report, offer.now)["queues"])

    def run_sampler(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.sample()
            except Exception:  # a sample missed never stops the next
                log.exception("dashboard history sample failed")
            stop.wait(self.history.step)


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _host(header: str) -> str:
    """The name in a Host header, without its port ("[::1]:8095" -> "[::1]")."""
    if header.startswith("["):
        return header.split("]", 1)[0] + "]"
    return header.rsplit(":", 1)[0]


def _static() -> Mapping[str, tuple[bytes, str]]:
    files = resources.files("fleet.hub.dashboard") / "static"
    return {path: ((files / name).read_bytes(), kind) for path, (name, kind) in STATIC.items()}


class _Handler(BaseHTTPRequestHandler):
    board: Board
    files: Mapping[str, tuple[bytes, str]]
    server_version = "fleet-dashboard"
    sys_version = ""

    def do_GET(self) -> None:
        self._serve(body=True)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def _serve(self, body: bool) -> None:
        if _host(self.headers.get("Host") or "") not in LOOPBACK:
            self._answer(403, b"the dashboard answers only on a loopback address "
                              b"(kubectl fleet dashboard)\n", "text/plain", body)
            return
        path = urlsplit(self.path).path
        if path in self.files:
            content, kind = self.files[path]
            self._answer(200, content, kind, body)
        elif path.startswith("/api/"):
            try:
                status, content = self.board.view(self.path)
            except Exception:  # one view's failure is one answer's, never the server's
                log.exception("dashboard view %s failed", path)
                status, content = 500, _json({"error": "the hub could not compute this view"})
            self._answer(status, content, "application/json", body)
        else:
            self._answer(404, b"not found\n", "text/plain", body)

    def _answer(self, code: int, content: bytes, kind: str, body: bool) -> None:
        answer(self, code, content, kind, HEADERS, send_body=body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # a page polling every few seconds would flood the JSON log


def serve(board: Board, port: int, addr: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Serve the page on ``addr``:``port`` from a thread of its own (port 0: any free one)."""
    handler = type("Handler", (_Handler,), {"board": board, "files": _static()})
    server = ThreadingHTTPServer((addr, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="dashboard", daemon=True).start()
    log.info("dashboard served on %s:%s", addr, server.server_address[1])
    return server


def whereabouts(addr: str, port: int) -> dict[str, str]:
    """What the leader says of its dashboard on its Lease (nothing when it serves none):
    ``kubectl fleet dashboard`` reads it to reach the page."""
    if not port:
        return {}
    told = {HUB_DASHBOARD: f"{addr}:{port}"}
    pod, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    if pod and namespace:
        told[HUB_POD] = f"{namespace}/{pod}"
    return told


def start(reporting: Reporting, elector: LeaderElector, kube: Kube, addr: str, port: int,
          stop: threading.Event) -> ThreadingHTTPServer | None:
    """The hub's dashboard: its page on ``addr``:``port`` and its history's sampler (none,
    said in the log, when the address cannot be listened on: the hub runs without it)."""
    if not 1 <= port <= 65535:
        log.error("FLEET_DASHBOARD_PORT=%s is no port (1..65535): no dashboard", port)
        return None
    def events(namespace: str, uid: str) -> list[Body]:
        found, _ = kube.list(EVENTS, namespace, field_selector=f"involvedObject.uid={uid}")
        found.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        return found[-MAX_EVENTS:]

    board = Board(reporting.latest,
                  Leader(leading=lambda: elector.leading, identity=lambda: elector.identity,
                         term=lambda: elector.term, holder=lambda: elector.holder),
                  events)
    try:
        server = serve(board, port, addr)
    except OSError as exc:
        log.error("dashboard not served on %s:%s: %s", addr, port, exc)
        return None
    threading.Thread(target=board.run_sampler, args=(stop,), name="dashboard-history",
                     daemon=True).start()
    return server
