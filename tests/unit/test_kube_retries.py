"""The client's retry policy, against a tiny scripted HTTP server on a real socket."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube, _at_most_every, backoff, retry_after_seconds, retryable

Reply = tuple[int, dict[str, str], dict[str, Any]]


class Script:
    """Replies in order; every request (method, path) is recorded."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.seen: list[tuple[str, str]] = []


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _reply(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            script.seen.append((self.command, self.path.split("?")[0]))
            status, headers, body = script.replies.pop(0) if script.replies else (
                500, {}, {"reason": "Exhausted"})
            data = json.dumps(body).encode()
            self.send_response(status)
            for key, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _reply

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Kube, Script]]:
    script = Script()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": f"http://127.0.0.1:{httpd.server_port}"}}],
        "users": [{"name": "t", "user": {"token": "x"}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
    }))
    kube = Kube(str(config))
    try:
        yield kube, script
    finally:
        kube.close()
        httpd.shutdown()
        httpd.server_close()


def _status(code: int, reason: str) -> dict[str, Any]:
    return {"kind": "Status", "code": code, "reason": reason, "message": reason}


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}


def test_get_waits_as_long_as_retry_after_asks(server: tuple[Kube, Script]) -> None:
    kube, script = server
    script.replies = [(429, {"Retry-After": "1"}, _status(429, "TooManyRequests")),
                      (200, {}, POD)]
    started = time.monotonic()
    assert kube.get(r.PODS, "p", "ns")["metadata"]["name"] == "p"
    assert time.monotonic() - started >= 0.9
    assert script.seen == [("GET", "/api/v1/namespaces/ns/pods/p")] * 2


def test_a_create_with_a_generated_name_is_not_repeated_after_a_5xx(
        server: tuple[Kube, Script]) -> None:
    kube, script = server
    script.replies = [(503, {}, _status(503, "ServiceUnavailable")), (201, {}, POD)]
    body = {**POD, "metadata": {"generateName": "p-", "namespace": "ns"}}
    with pytest.raises(errors.Unreachable):
        kube.create(r.PODS, body)
    assert len(script.seen) == 1


def test_a_create_with_a_generated_name_is_repeated_after_429(
        server: tuple[Kube, Script]) -> None:
    kube, script = server
    script.replies = [(429, {"Retry-After": "0"}, _status(429, "TooManyRequests")),
                      (201, {}, POD)]
    kube.create(r.PODS, {**POD, "metadata": {"generateName": "p-", "namespace": "ns"}})
    assert len(script.seen) == 2


def test_a_named_create_whose_answer_was_lost_returns_the_object_it_made(
        server: tuple[Kube, Script]) -> None:
    kube, script = server
    script.replies = [(504, {}, _status(504, "Timeout")),
                      (409, {}, _status(409, "AlreadyExists")),
                      (200, {}, {**POD, "metadata": {**POD["metadata"], "uid": "u1"}})]
    created = kube.create(r.PODS, POD)
    assert created["metadata"]["uid"] == "u1"
    assert [m for m, _ in script.seen] == ["POST", "POST", "GET"]


def test_an_object_someone_else_made_meanwhile_is_not_taken_for_ours(
        server: tuple[Kube, Script]) -> None:
    kube, script = server
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "l", "namespace": "ns"}, "spec": {"holderIdentity": "me"}}
    script.replies = [(503, {}, _status(503, "ServiceUnavailable")),
                      (409, {}, _status(409, "AlreadyExists")),
                      (200, {}, {**lease, "spec": {"holderIdentity": "rival",
                                                   "leaseDurationSeconds": 6}})]
    with pytest.raises(errors.AlreadyExists):
        kube.create(r.LEASES, lease)
    script.replies = [(503, {}, _status(503, "ServiceUnavailable")),
                      (409, {}, _status(409, "AlreadyExists")),
                      (200, {}, {**lease, "spec": {"holderIdentity": "me",
                                                   "leaseDurationSeconds": 6}})]
    assert kube.create(r.LEASES, lease)["spec"]["holderIdentity"] == "me"


def test_a_first_attempt_that_finds_the_object_still_raises_already_exists(
        server: tuple[Kube, Script]) -> None:
    kube, script = server
    script.replies = [(409, {}, _status(409, "AlreadyExists"))]
    with pytest.raises(errors.AlreadyExists):
        kube.create(r.PODS, POD)
    assert len(script.seen) == 1


def test_a_delete_that_worked_before_its_answer_was_lost_reports_it_deleted(
        server: tuple[Kube, Script]) -> None:
    kube, script = server
    script.replies = [(503, {}, _status(503, "ServiceUnavailable")),
                      (404, {}, _status(404, "NotFound"))]
    assert kube.delete(r.PODS, "p", "ns") is True
    script.replies = [(404, {}, _status(404, "NotFound"))]
    assert kube.delete(r.PODS, "p", "ns") is False


def test_client_errors_are_not_retried(server: tuple[Kube, Script]) -> None:
    kube, script = server
    script.replies = [(422, {}, _status(422, "Invalid"))]
    with pytest.raises(errors.Invalid):
        kube.patch(r.PODS, "p", {"spec": {}}, "ns")
    assert len(script.seen) == 1


def test_a_refused_connection_is_retried_even_for_a_create(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "t", "user": {}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
    }))
    kube = Kube(str(config))
    waits: list[float] = []
    kube._sleep = waits.append
    with pytest.raises(errors.Unreachable) as raised:
        kube.create(r.PODS, {**POD, "metadata": {"generateName": "p-", "namespace": "ns"}})
    assert raised.value.sent is False
    assert len(waits) == 4  # five attempts


def test_policy() -> None:
    lost = errors.Unreachable(0, "Unreachable", "reset")
    refused = errors.Unreachable(0, "Unreachable", "refused", sent=False)
    assert retryable(lost, idempotent=True)
    assert not retryable(lost, idempotent=False)
    assert retryable(refused, idempotent=False)
    assert retryable(errors.ApiError(429, "TooManyRequests", ""), idempotent=False)
    assert not retryable(errors.Conflict(409, "Conflict", ""), idempotent=True)
    assert not retryable(ValueError("x"), idempotent=True)
    assert backoff(1, errors.ApiError(429, "", "", retry_after=3)) == 3
    assert backoff(1, errors.ApiError(429, "", "", retry_after=3600)) == 10
    assert backoff(1, lost) < backoff(3, lost) <= 2


def test_retry_after_header_forms() -> None:
    assert retry_after_seconds("7") == 7
    assert retry_after_seconds(None) is None
    assert retry_after_seconds("soon") is None
    now = time.time()
    assert retry_after_seconds(formatdate(now + 30, usegmt=True), now=now) == pytest.approx(
        30, abs=1)


def test_the_token_hook_runs_at_most_every_few_seconds(server: tuple[Kube, Script]) -> None:
    kube, _ = server
    configuration = kube._api.configuration
    hook = configuration.refresh_api_key_hook
    assert hook is not None  # the kubeconfig's token comes with the client's own hook
    hook(configuration)  # sets the kubeconfig's token
    configuration.api_key["BearerToken"] = "changed"
    hook(configuration)  # within the interval: not run, the token stays
    assert configuration.api_key["BearerToken"] == "changed"
    calls: list[object] = []
    throttled = _at_most_every(60.0, calls.append)
    for _ in range(3):
        throttled(configuration)
    assert len(calls) == 1
