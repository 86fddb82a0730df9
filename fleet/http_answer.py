"""One HTTP answer, as fleet's small servers (metrics, probes, the dashboard) give it."""

from __future__ import annotations

from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler


def answer(handler: BaseHTTPRequestHandler, code: int, body: bytes, content_type: str,
           headers: Mapping[str, str] | None = None, *, send_body: bool = True) -> None:
    """One HTTP answer (its body left out for HEAD); a client that hung up (a probe that
    timed out, a closed browser) gets none, and nothing is logged."""
    try:
        handler.send_response(code)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        if send_body:
            handler.wfile.write(body)
    except (BrokenPipeError, ConnectionResetError):
        pass
