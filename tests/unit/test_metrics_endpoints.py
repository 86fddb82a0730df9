"""The metrics server answers the probes: /readyz follows the registered checks, /healthz is
always 200, /metrics has the fleet_ series; it binds the address it is given."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

from fleet import metrics


def status(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_readyz_follows_the_checks_and_metrics_are_served() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    metrics.serve(port, "127.0.0.1")
    base = f"http://127.0.0.1:{port}"
    ready = {"webhook": False}
    metrics.ready_when("test-webhook", lambda: ready["webhook"])
    metrics.ready_when("test-started", lambda: True)
    code, text = status(f"{base}/readyz")
    assert (code, text) == (503, "not ready: test-webhook\n")
    ready["webhook"] = True
    assert status(f"{base}/readyz") == (200, "ok\n")
    assert status(f"{base}/healthz")[0] == 200
    code, text = status(f"{base}/metrics")
    assert code == 200
    assert "fleet_pending_jobs" in text
    assert status(f"{base}/other")[0] == 404


def test_serving_again_on_the_same_port_is_a_no_op() -> None:
    """A kopf start-up activity that failed after serving runs again: the second call must
    not fail on the port its first call holds (it did: "Address already in use" every
    minute, and the agent never started)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    metrics.serve(port, "127.0.0.1")
    metrics.serve(port, "127.0.0.1")
    assert status(f"http://127.0.0.1:{port}/healthz")[0] == 200
