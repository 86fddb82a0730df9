"""The agent as its member's kubelet on the hub: it serves the hub's API server the logs of
the member's job pods (see ``fleet.hub.pod_mirrors``).

The hub keeps the member as a node whose kubelet endpoint is this server (the agent reports
address and port in its MemberCluster status), and mirrors of its job pods bound to that node.
``kubectl logs`` of a mirror makes the hub's API server call
``GET https://<address>:<port>/containerLogs/<namespace>/<pod>/<container>?<options>``, as it
would call a kubelet; this server answers with the member API server's ``pods/log`` of the
same pod, which reaches the pod's own kubelet (or kwok). Nothing else is served.

Who may call: TLS with a client certificate signed by the hub's client CA (the API server's
``--kubelet-client-certificate``); by default the CA of the agent's hub kubeconfig,
``FLEET_KUBELET_CLIENT_CA`` names another. Only pods owned by a job kind fleet runs are served.
Bounds: ``MAX_STREAMS`` streams at once, at most ``MAX_LOG_BYTES`` per answer (followed or not).
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import re
import ssl
import tempfile
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

log = logging.getLogger(__name__)

MAX_STREAMS = 16
MAX_LOG_BYTES = 16 * 1024 * 1024
_PATH = re.compile(r"^/containerLogs/([a-z0-9.-]{1,253})/([a-z0-9.-]{1,253})/([a-z0-9-]{1,63})$")
# kubelet's log options, passed on to the member's pods/log (the rest is dropped).
_BOOLEAN = ("follow", "previous", "timestamps")
_NUMBER = ("tailLines", "limitBytes", "sinceSeconds")
_JOB_KINDS = {(k.api_version, k.kind) for k in r.JOB_KINDS}


def serving_certificate(directory: Path, address: str) -> tuple[Path, Path]:
    """A self-signed certificate for ``address``: the hub's API server checks a kubelet's
    certificate only when it has ``--kubelet-certificate-authority``, which names the CA of
    real kubelets, not ours."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fleet-agent-kubelet")])
    now = datetime.datetime.now(datetime.UTC)
    try:
        san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(address))
    except ValueError:
        san = x509.DNSName(address)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .sign(key, hashes.SHA256()))
    certfile, keyfile = directory / "kubelet.crt", directory / "kubelet.key"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    keyfile.chmod(0o600)
    return certfile, keyfile


def log_query(query: str) -> dict[str, str]:
    """The member's pods/log options from a kubelet request's query; raises ValueError naming
    the option that is not what kubelet accepts."""
    raw = parse_qs(query, keep_blank_values=True)
    out: dict[str, str] = {}
    for name in _BOOLEAN:
        if name in raw:
            value = raw[name][-1].lower()
            if value not in ("true", "false", "1", "0", ""):
                raise ValueError(f"{name}: not a boolean")
            out[name] = "true" if value in ("true", "1", "") else "false"
    for name in _NUMBER:
        if name in raw:
            text = raw[name][-1]
            if not text.isdigit() or len(text) > 18:
                raise ValueError(f"{name}: not a non-negative integer")
            out[name] = text
    if "sinceTime" in raw:
        out["sinceTime"] = raw["sinceTime"][-1][:64]
    limit = min(int(out.get("limitBytes") or MAX_LOG_BYTES), MAX_LOG_BYTES)
    out["limitBytes"] = str(limit)
    return out


def from_environment(member: Kube, hub: Kube, env: Mapping[str, str]) -> KubeletEndpoint | None:
    """The endpoint ``FLEET_KUBELET_PORT`` asks for (none when unset or 0), advertised at
    ``FLEET_KUBELET_ADDRESS`` (default: the Pod's IP, else 127.0.0.1)."""
    port = int(env.get("FLEET_KUBELET_PORT") or 0)
    if not port:
        return None
    address = env.get("FLEET_KUBELET_ADDRESS") or env.get("POD_IP") or "127.0.0.1"
    bind = env.get("FLEET_KUBELET_BIND") or ("0.0.0.0" if env.get("POD_IP") else address)
    ca = env.get("FLEET_KUBELET_CLIENT_CA") or hub.ca_file
    if not ca:
        raise ValueError("FLEET_KUBELET_PORT needs the hub's client CA: set "
                         "FLEET_KUBELET_CLIENT_CA or a CA in the hub kubeconfig")
    return KubeletEndpoint(member, ca, bind=bind, address=address, port=port)


class KubeletEndpoint:
    def __init__(self, member: Kube, hub_ca: str, *, bind: str, address: str,
                 port: int) -> None:
        self.member, self.address = member, address
        self.slots = threading.BoundedSemaphore(MAX_STREAMS)
        directory = Path(tempfile.mkdtemp(prefix="fleet-kubelet-"))
        certfile, keyfile = serving_certificate(directory, address)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=hub_ca)
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_cert_chain(str(certfile), str(keyfile))
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                endpoint.handle(self)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("kubelet endpoint: " + format, *args)

        self.server = ThreadingHTTPServer((bind, port), Handler)
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])

    def run(self, stop: threading.Event) -> None:
        threading.Thread(target=self.server.serve_forever, name="kubelet-endpoint",
                         daemon=True).start()
        stop.wait()
        self.server.shutdown()

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        url = urlsplit(request.path)
        if url.path == "/healthz":
            _answer(request, 200, "ok")
            return
        match = _PATH.match(url.path)
        if not match:
            _answer(request, 404, "only /containerLogs/<namespace>/<pod>/<container> is served")
            return
        namespace, name, container = match.groups()
        try:
            query = log_query(url.query)
        except ValueError as exc:
            _answer(request, 400, str(exc))
            return
        if not self.slots.acquire(blocking=False):
            _answer(request, 429, f"more than {MAX_STREAMS} log streams at once")
            return
        try:
            self._stream(request, namespace, name, container, query)
        finally:
            self.slots.release()

    def _stream(self, request: BaseHTTPRequestHandler, namespace: str, name: str,
                container: str, query: dict[str, str]) -> None:
        try:
            pod = self.member.get(r.PODS, name, namespace)
            if not any((o.get("apiVersion"), o.get("kind")) in _JOB_KINDS
                       for o in pod["metadata"].get("ownerReferences") or []):
                _answer(request, 403, f"pod {namespace}/{name} is not a fleet job's pod")
                return
            if query.get("follow") == "true" and _finished(pod, container):
                query = {**query, "follow": "false"}  # as a kubelet: nothing more will come
            response = self.member.stream(r.PODS, name, namespace, "log",
                                          {**query, "container": container})
        except errors.NotFound as exc:
            _answer(request, 404, str(exc))
            return
        except errors.ApiError as exc:
            _answer(request, exc.status if 400 <= exc.status < 600 else 502, str(exc))
            return
        left = int(query["limitBytes"])
        try:
            request.send_response(200)
            request.send_header("Content-Type", "text/plain")
            request.send_header("Connection", "close")
            request.end_headers()
            for chunk in response.stream(4096, decode_content=True):
                piece = chunk[:left]
                request.wfile.write(piece)
                request.wfile.flush()
                left -= len(piece)
                if left <= 0:
                    break
        except OSError:
            pass  # the caller went away
        finally:
            response.release_conn()


def _finished(pod: Mapping[str, Any], container: str) -> bool:
    """Whether ``container`` has ended for good (simulated runtimes such as kwok would follow
    its log forever)."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return True
    return any(c.get("name") == container and "terminated" in (c.get("state") or {})
               and pod.get("spec", {}).get("restartPolicy") == "Never"
               for c in status.get("containerStatuses") or [])


def _answer(request: BaseHTTPRequestHandler, status: int, text: str) -> None:
    body = text.encode()
    request.send_response(status)
    request.send_header("Content-Type", "text/plain")
    request.send_header("Content-Length", str(len(body)))
    request.end_headers()
    request.wfile.write(body)
