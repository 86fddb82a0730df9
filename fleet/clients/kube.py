"""A small typed client over the kubernetes library's REST layer, one instance per cluster.

Every verb is one HTTP request (no discovery, no hidden reads), so request counts are exactly
what callers see. Transient failures (connection errors, 429, 5xx) are retried with backoff;
everything else surfaces as a :mod:`fleet.clients.errors` exception.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any, cast

import kubernetes.client
import kubernetes.config
import urllib3
from kubernetes.client.exceptions import ApiException
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from fleet.clients import errors
from fleet.clients.resources import Resource

Body = dict[str, Any]
log = logging.getLogger(__name__)

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, errors.ApiError):
        return exc.status == 429 or exc.status >= 500
    return isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


_retrying = retry(
    retry=retry_if_exception(_transient),
    wait=wait_exponential(multiplier=0.05, max=2),
    stop=stop_after_attempt(5),
    reraise=True,
)


class Kube:
    """One API server. ``kubeconfig`` is a path; None uses the in-cluster service account."""

    def __init__(self, kubeconfig: str | None = None, *, pool: int = 16,
                 timeout: float = 30.0) -> None:
        config = kubernetes.client.Configuration()
        if kubeconfig:
            kubernetes.config.load_kube_config(config_file=kubeconfig,
                                               client_configuration=config)
        else:
            kubernetes.config.load_incluster_config(client_configuration=config)
        config.connection_pool_maxsize = pool
        self.host = cast(str, config.host)
        self._api = kubernetes.client.ApiClient(config)
        self._timeout = timeout
        self.warnings: list[str] = []  # the API server's warnings for the last request

    def close(self) -> None:
        self._api.close()

    def _call(self, method: str, path: str, *, body: object = None,
              query: Mapping[str, object] | None = None, content_type: str | None = None,
              stream: bool = False, timeout: float | None = None) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        try:
            _, url, headers, _, _ = self._api.param_serialize(
                method=method, resource_path=path,
                query_params=[(k, v) for k, v in (query or {}).items() if v is not None],
                header_params=headers, auth_settings=["BearerToken"],
            )
            response = self._api.call_api(
                method, url, header_params=headers,
                body=body,
                _request_timeout=timeout or self._timeout,
            )
        except ApiException as exc:
            raise _translate(exc) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise errors.Unreachable(0, "Unreachable", str(exc)) from exc
        self.warnings = _warnings(response.response.headers)
        if response.status >= 300:
            raise _error(response.status, response.reason or "", response.read())
        if stream:
            return response.response
        data = response.read()
        if not data:
            return {}
        try:
            return json.loads(data)
        except ValueError:
            return {"text": data.decode(errors="replace")}

    @_retrying
    def get(self, resource: Resource, name: str, namespace: str | None = None,
            subresource: str | None = None) -> Body:
        return cast(Body, self._call("GET", resource.path(namespace, name, subresource)))

    def get_or_none(self, resource: Resource, name: str,
                    namespace: str | None = None) -> Body | None:
        try:
            return self.get(resource, name, namespace)
        except errors.NotFound:
            return None

    @_retrying
    def list(self, resource: Resource, namespace: str | None = None, *,
             label_selector: str | None = None, field_selector: str | None = None,
             limit: int | None = None) -> tuple[list[Body], str]:
        """All objects (following continue tokens) and the list's resourceVersion."""
        items: list[Body] = []
        token: str | None = None
        while True:
            page = cast(Body, self._call("GET", resource.path(namespace), query={
                "labelSelector": label_selector, "fieldSelector": field_selector,
                "limit": limit, "continue": token,
            }))
            for item in page.get("items", []):
                item.setdefault("apiVersion", resource.api_version)
                item.setdefault("kind", resource.kind)
                items.append(item)
            token = page.get("metadata", {}).get("continue")
            if not token:
                return items, str(page.get("metadata", {}).get("resourceVersion", ""))

    @_retrying
    def create(self, resource: Resource, body: Mapping[str, object],
               namespace: str | None = None, subresource: str | None = None,
               name: str | None = None) -> Body:
        ns = namespace or _namespace_of(body)
        path = resource.path(ns, name, subresource) if subresource else resource.path(ns)
        return cast(Body, self._call("POST", path, body=body))

    @_retrying
    def replace(self, resource: Resource, body: Mapping[str, object],
                subresource: str | None = None) -> Body:
        meta = cast(Mapping[str, str], body.get("metadata", {}))
        path = resource.path(meta.get("namespace"), meta["name"], subresource)
        return cast(Body, self._call("PUT", path, body=body))

    @_retrying
    def patch(self, resource: Resource, name: str, patch: object, namespace: str | None = None,
              *, subresource: str | None = None, content_type: str = MERGE) -> Body:
        path = resource.path(namespace, name, subresource)
        return cast(Body, self._call("PATCH", path, body=patch, content_type=content_type))

    @_retrying
    def apply(self, resource: Resource, body: Mapping[str, object], *, field_manager: str,
              subresource: str | None = None, force: bool = True,
              dry_run: bool = False) -> Body:
        """Server-side apply ``body`` (which names itself) as ``field_manager``; with
        ``dry_run`` the server validates and admits it but stores nothing."""
        meta = cast(Mapping[str, str], body["metadata"])
        path = resource.path(meta.get("namespace"), meta["name"], subresource)
        query = {"fieldManager": field_manager, "force": "true" if force else None,
                 "dryRun": "All" if dry_run else None}
        return cast(Body, self._call("PATCH", path, body=body, query=query, content_type=APPLY))

    @_retrying
    def delete(self, resource: Resource, name: str, namespace: str | None = None, *,
               propagation: str = "Background", uid: str | None = None,
               grace_period_seconds: int | None = None) -> bool:
        """Delete; False when it was already gone."""
        options: Body = {"propagationPolicy": propagation}
        if uid:
            options["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        try:
            self._call("DELETE", resource.path(namespace, name), body=options)
        except errors.NotFound:
            return False
        return True

    def watch(self, resource: Resource, namespace: str | None = None, *,
              resource_version: str = "", label_selector: str | None = None,
              field_selector: str | None = None,
              timeout_seconds: int = 60) -> Iterator[tuple[str, Body]]:
        """Events (type, object) from ``resource_version`` until the server closes the watch.

        Raises :class:`errors.ApiError` with status 410 when the version is too old.
        """
        response = self._call("GET", resource.path(namespace), stream=True, query={
            "watch": "true", "resourceVersion": resource_version or None,
            "allowWatchBookmarks": "true", "labelSelector": label_selector,
            "fieldSelector": field_selector, "timeoutSeconds": timeout_seconds,
        }, timeout=timeout_seconds + 10)
        buffer = b""
        try:
            for chunk in response.stream(4096, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    obj = cast(Body, event.get("object", {}))
                    if event.get("type") == "ERROR":
                        raise errors.from_status(int(obj.get("code", 500)),
                                                 str(obj.get("reason", "")),
                                                 str(obj.get("message", "")))
                    yield str(event["type"]), obj
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise errors.Unreachable(0, "Unreachable", str(exc)) from exc
        finally:
            response.release_conn()

    def raw(self, method: str, path: str, body: object = None) -> Body:
        """An arbitrary request (health checks, discovery, access reviews)."""
        return cast(Body, self._call(method, path, body=body))


def _warnings(headers: Any) -> list[str]:
    """Texts of ``Warning: 299 - "text"`` response headers."""
    values = headers.getlist("Warning") if hasattr(headers, "getlist") else []
    out = []
    for value in values:
        text = str(value)
        if text.startswith("299 - "):
            text = text[len("299 - "):]
        out.append(text.strip().strip('"'))
    return out


def _namespace_of(body: Mapping[str, object]) -> str | None:
    meta = body.get("metadata")
    if isinstance(meta, Mapping):
        ns = meta.get("namespace")
        return ns if isinstance(ns, str) else None
    return None


def _translate(exc: ApiException) -> errors.ApiError:
    if not exc.status:
        return errors.Unreachable(0, "Unreachable", str(exc.reason))
    return _error(int(exc.status), str(exc.reason or ""), exc.body or b"")


def _error(status: int, reason: str, body: bytes | str) -> errors.ApiError:
    message = body.decode(errors="replace") if isinstance(body, bytes) else body
    try:
        decoded = json.loads(message or "{}")
        reason = str(decoded.get("reason") or reason)
        message = str(decoded.get("message") or message)
    except (ValueError, AttributeError):
        pass
    return errors.from_status(status, reason, message)
