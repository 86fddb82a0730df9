"""``kubectl fleet dashboard``: open the leading hub's page on this machine.

The leader says on its Lease where its page listens (:data:`fleet.api.protocol.HUB_DASHBOARD`)
and, in a Pod, which Pod it is (:data:`~fleet.api.protocol.HUB_POD`). For a Pod, this listens
on a local port and carries each connection through the API server's ``pods/portforward``
to the Pod that leads *when the connection opens*, as ``kubectl port-forward`` does for one
Pod: after a failover the page reaches the new leader by itself. For a hub running as a
process on this host, the page is already local: its URL is printed.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleet.api.protocol import HUB_DASHBOARD, HUB_LEASE, HUB_POD
from fleet.cli.config import CliError
from fleet.cli.output import one_line
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

LEADER_RECHECK_SECONDS = 5.0  # a connection within this of the last reuses its leader
CHUNK = 64 * 1024


@dataclass(frozen=True)
class Whereabouts:
    holder: str
    address: str
    port: int
    pod: tuple[str, str] | None  # (namespace, name) when the leader runs in a Pod


def leader_page(hub: Kube) -> Whereabouts:
    """Where the leading hub serves its page, from its Lease."""
    namespace, name = HUB_LEASE
    try:
        lease = hub.get(r.LEASES, name, namespace)
    except errors.NotFound:
        raise CliError(f"no hub leads: Lease {namespace}/{name} not found (is the hub "
                       "installed and running?)") from None
    holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
    if not holder:
        raise CliError(f"no hub leads: Lease {namespace}/{name} has no holder")
    annotations = lease["metadata"].get("annotations") or {}
    where = str(annotations.get(HUB_DASHBOARD) or "")
    address, _, port = where.rpartition(":")
    if not where or not port.isdigit():
        raise CliError(f"the leading hub ({holder}) serves no dashboard: set "
                       "FLEET_DASHBOARD_PORT on it (deploy/ sets 8095)")
    pod_namespace, slash, pod_name = str(annotations.get(HUB_POD) or "").partition("/")
    pod = (pod_namespace, pod_name) if slash else None
    return Whereabouts(holder, address, int(port), pod)


def local_url(where: Whereabouts) -> str:
    """The page of a hub running as a process on this host, checked to answer."""
    host = "127.0.0.1" if where.address in ("0.0.0.0", "") else where.address
    url = f"http://{host}:{where.port}/"
    try:
        with urllib.request.urlopen(url, timeout=5):
            pass
    except (urllib.error.URLError, OSError) as exc:
        raise CliError(f"the leading hub ({where.holder}) runs outside a Pod and its page at "
                       f"{url} does not answer from here ({exc}): run this on its host") \
            from None
    return url


class Forwarder:
    """A local listener whose every connection goes to the leading hub Pod's page."""

    def __init__(self, hub: Kube, address: str, port: int,
                 find: Callable[[Kube], Whereabouts] = leader_page,
                 warn: Callable[[str], None] = lambda line: None) -> None:
        self.hub = hub
        self.find = find
        self.warn = warn
        try:
            self.listener = socket.create_server((address, port))
        except OSError as exc:
            raise CliError(f"cannot listen on {address}:{port}: {exc.strerror or exc}") \
                from None
        self.address = address
        self.port = self.listener.getsockname()[1]
        self._leader: tuple[float, Whereabouts] | None = None
        self._lock = threading.Lock()

    def leader(self) -> Whereabouts:
        with self._lock:
            if self._leader and time.monotonic() - self._leader[0] < LEADER_RECHECK_SECONDS:
                return self._leader[1]
        found = self.find(self.hub)
        if found.pod is None:
            raise CliError(f"the leading hub ({found.holder}) no longer runs in a Pod")
        with self._lock:
            self._leader = (time.monotonic(), found)
        return found

    def serve(self, stop: threading.Event) -> None:
        self.listener.settimeout(0.5)
        while not stop.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._carry, args=(client,), daemon=True,
                             name="dashboard-connection").start()
        self.listener.close()

    def _carry(self, client: socket.socket) -> None:
        try:
            where = self.leader()
            assert where.pod is not None
            forward = self.hub.port_forward(where.pod[1], where.pod[0], where.port)
        except Exception as exc:  # no leader, refused, unreachable: the browser's request
            self.warn(f"a connection was not forwarded: {one_line(str(exc))}")  # fails, and the
            client.close()  # page says it is not current; the next may pass
            return
        remote = forward.socket(where.port)
        remote.setblocking(True)
        done = threading.Event()
        threading.Thread(target=_pump, args=(client, remote, done), daemon=True).start()
        _pump(remote, client, done)
        done.wait(5)
        for end in (client, remote):
            _close(end)
        forward.close()


def _pump(source: Any, sink: Any, done: threading.Event) -> None:
    """Copy ``source`` into ``sink`` until either side closes."""
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        done.set()


def _close(end: Any) -> None:
    try:
        end.close()
    except OSError:
        pass


def run(hub: Kube, address: str, port: int, say: Callable[[str], None],
        warn: Callable[[str], None], stop: threading.Event | None = None) -> None:
    """Print the page's URL; for a hub in a Pod, forward until interrupted."""
    where = leader_page(hub)
    if where.pod is None:
        say(f"Dashboard: {local_url(where)} (the leading hub, {where.holder}, runs on this "
            "host)")
        return
    forwarder = Forwarder(hub, address, port, warn=warn)
    shown = f"[{address}]" if ":" in address else address
    say(f"Forwarding from {shown}:{forwarder.port} -> pod {where.pod[0]}/{where.pod[1]}:"
        f"{where.port} (the leading hub; followed across failovers)")
    say(f"Dashboard: http://{shown}:{forwarder.port}/")
    say("Press Ctrl+C to stop.")
    forwarder.serve(stop or threading.Event())
