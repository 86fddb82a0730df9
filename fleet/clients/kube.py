"""A small typed client over the kubernetes library's REST layer, one instance per cluster.

Every verb is one HTTP request (no discovery, no hidden reads), so request counts are exactly
what callers see, and every request is counted in ``fleet_api_requests_total`` (errors in
``fleet_api_errors_total``). Everything that fails surfaces as a :mod:`fleet.clients.errors`
exception, after the retries below.

Retries (:func:`retryable`, :func:`backoff`) go by what a repeat could do:

* GET, LIST: always safe; retried after connection errors, 429 and 5xx.
* PUT (replace): the body carries a resourceVersion, so a repeat of a request that did
  succeed (its answer lost) is refused with 409 Conflict and cannot overwrite anything;
  the caller handles that Conflict as any other (re-read, decide again).
* PATCH (merge and server-side apply; fleet sends no JSON patch): setting fields to values
  twice gives the same object; retried like reads. A JSON patch is not idempotent (an ``add``
  to ``/-`` appends twice) and is retried only when it certainly was not processed.
* DELETE: a repeat answers 404; after a retried attempt that means the first one worked,
  and :meth:`Kube.delete` says so.
* POST (create) only when the object's name is fixed by the caller (no ``generateName``): a
  repeat then answers 409 AlreadyExists, which after an attempt whose fate is unknown means
  it was created, and the object is read and returned, if it holds the spec that was sent
  (else someone else made it, a rival's Lease say, and AlreadyExists is raised). Other
  POSTs (generated names, token requests, reviews, evictions) are retried only when they
  certainly were not processed: the connection was refused, or the server answered 429 (API
  Priority and Fairness rejects before it runs anything).

Waits grow exponentially (50 ms doubling, at most 2 s, five attempts), except that a 429 or
503 with ``Retry-After`` waits as long as the server asks (at most 10 s).
"""

from __future__ import annotations

import builtins
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar, cast

import kubernetes.client
import kubernetes.config
import urllib3
from kubernetes.client.exceptions import ApiException
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from fleet import metrics
from fleet.clients import errors
from fleet.clients.resources import Resource

Body = dict[str, Any]
Timeout = float | tuple[float, float | None] | None  # seconds, or (connect, read)
log = logging.getLogger(__name__)

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


T = TypeVar("T")
ATTEMPTS = 5
RETRY_AFTER_CAP = 10.0
_exponential = wait_exponential(multiplier=0.05, max=2)


def retryable(exc: BaseException, *, idempotent: bool) -> bool:
    """Whether a request that failed with ``exc`` may be sent again (see the module doc)."""
    if not isinstance(exc, errors.ApiError):
        return False
    if exc.status == 429 or not exc.sent:
        return True  # rejected before anything ran, or never sent at all
    return idempotent and (exc.status == 0 or exc.status >= 500)


def backoff(attempt: int, exc: BaseException | None) -> float:
    """Seconds to wait before attempt ``attempt + 1``: the server's ``Retry-After`` when it
    gave one, else exponential."""
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        return float(min(max(retry_after, 0.0), RETRY_AFTER_CAP))
    return float(_exponential(_State(attempt)))  # type: ignore[arg-type]


def _attempt(verb: str, resource: str, call: Callable[[], T]) -> T:
    """One attempt of a request; the verb and resource ride along for the policy's
    callbacks (:func:`_count_retry`)."""
    return call()


def _count_retry(state: RetryCallState) -> None:
    verb, resource = state.args[0], state.args[1]
    metrics.API_RETRIES.labels(verb, resource).inc()
    log.debug("retrying %s %s after %s", verb, resource, _failure(state))


def _wait(state: RetryCallState) -> float:
    return backoff(state.attempt_number, _failure(state))


def _failure(state: RetryCallState) -> BaseException | None:
    return state.outcome.exception() if state.outcome else None


class _State:
    """The one field of a tenacity RetryCallState that its exponential wait reads."""

    def __init__(self, attempt_number: int) -> None:
        self.attempt_number = attempt_number


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` header: delta-seconds or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


# A list of objects' metadata only (names, labels, versions; no spec or status); a server
# without it answers with full objects (the fallback after the comma).
PARTIAL_METADATA = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io," \
    "application/json"

class KubeconfigError(ValueError):
    """A kubeconfig that cannot be read or lacks the context asked for."""


def kubeconfig_contexts(kubeconfig: str) -> tuple[list[Body], Body | None]:
    """The contexts of ``kubeconfig`` (each ``{"name", "context": {...}}``) and its current
    one."""
    try:
        contexts, current = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)
    except kubernetes.config.ConfigException as exc:
        raise KubeconfigError(f"kubeconfig {kubeconfig}: {exc}") from None
    return list(contexts or []), current


# How often a client looks whether its token is due for a refresh. The kubernetes client looks
# before every request, and each look re-reads the proxy settings from the environment (2 % of
# the hub's CPU at scale); tokens are refreshed five minutes before they expire, and a service
# account's token file is re-read every minute, so a look every few seconds misses nothing.
TOKEN_CHECK_SECONDS = 5.0


def _at_most_every(seconds: float, hook: Callable[[Any], None]) -> Callable[[Any], None]:
    """``hook``, skipped when it ran less than ``seconds`` ago (by the monotonic clock)."""
    last = [-seconds]
    lock = threading.Lock()

    def throttled(configuration: Any) -> None:
        with lock:
            now = time.monotonic()
            if now - last[0] < seconds:
                return
            last[0] = now
        hook(configuration)
    return throttled


class Kube:
    """One API server. ``kubeconfig`` is a path (several joined by ``os.pathsep`` are merged,
    as kubectl does) and ``context`` one of its contexts (default: its current one); None uses
    the in-cluster service account."""

    def __init__(self, kubeconfig: str | None = None, *, pool: int = 16,
                 timeout: float = 30.0, context: str | None = None) -> None:
        config = kubernetes.client.Configuration()
        if kubeconfig:
            try:
                kubernetes.config.load_kube_config(config_file=kubeconfig, context=context,
                                                   client_configuration=config)
            except kubernetes.config.ConfigException as exc:
                raise KubeconfigError(f"kubeconfig {kubeconfig}: {exc}") from None
        else:
            kubernetes.config.load_incluster_config(client_configuration=config)
        config.connection_pool_maxsize = pool
        if config.refresh_api_key_hook is not None:
            config.refresh_api_key_hook = _at_most_every(TOKEN_CHECK_SECONDS,
                                                         config.refresh_api_key_hook)
        self.host = cast(str, config.host)
        self._api = kubernetes.client.ApiClient(config)
        self._timeout = timeout
        self._sleep: Callable[[float], None] = time.sleep
        self._retries = {idempotent: self._retry_policy(idempotent)
                         for idempotent in (True, False)}
        self.warnings: list[str] = []  # the API server's warnings for the last request
        self._forwarding = threading.Lock()  # see port_forward
        self._forward_api: kubernetes.client.ApiClient | None = None

    @property
    def ca_file(self) -> str | None:
        """The file of the CA this client trusts for its API server (kubeconfig data is
        written to a temporary file by the kubernetes client)."""
        return cast(str | None, self._api.configuration.ssl_ca_cert)

    def close(self) -> None:
        self._api.close()
        if self._forward_api is not None:
            self._forward_api.close()

    def _retrying(self, verb: str, resource: str, call: Callable[[], T], *,
                  idempotent: bool) -> T:
        return cast(T, self._retries[idempotent](_attempt, verb, resource, call))

    def _retry_policy(self, idempotent: bool) -> Retrying:
        """One tenacity policy per client and kind of request, shared by every request
        (tenacity keeps a call's state per thread). Built per request, each was half a dozen
        objects in a reference cycle, garbage only the cycle collector finds."""
        return Retrying(
            retry=retry_if_exception(functools.partial(retryable, idempotent=idempotent)),
            wait=_wait, stop=stop_after_attempt(ATTEMPTS), before_sleep=_count_retry,
            reraise=True, sleep=self._pause)

    def _pause(self, seconds: float) -> None:
        self._sleep(seconds)  # (looked up each time: a test replaces it)

    def _call(self, method: str, path: str, *, body: object = None,
              query: Mapping[str, object] | None = None, content_type: str | None = None,
              stream: bool = False, timeout: Timeout = None, verb: str = "",
              resource: str = "other", accept: str = "application/json") -> Any:
        verb = verb or method.lower()
        try:
            result = self._send(method, path, body=body, query=query,
                                content_type=content_type, stream=stream, timeout=timeout,
                                accept=accept)
        except errors.ApiError as exc:
            metrics.API_REQUESTS.labels(verb, resource, str(exc.status)).inc()
            metrics.API_ERRORS.labels(verb, resource, type(exc).__name__).inc()
            raise
        metrics.API_REQUESTS.labels(verb, resource, "2xx").inc()
        return result

    def _send(self, method: str, path: str, *, body: object = None,
              query: Mapping[str, object] | None = None, content_type: str | None = None,
              stream: bool = False, timeout: Timeout = None,
              accept: str = "application/json") -> Any:
        headers = {"Accept": accept}
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
            raise errors.Unreachable(0, "Unreachable", str(exc), sent=_sent(exc)) from exc
        self.warnings = _warnings(response.response.headers)
        if response.status >= 300:
            raise _error(response.status, response.reason or "", response.read(),
                         response.response.headers.get("Retry-After"))
        if stream:
            return response.response
        data = response.read()
        if not data:
            return {}
        try:
            return json.loads(data)
        except ValueError:
            return {"text": data.decode(errors="replace")}

    def get(self, resource: Resource, name: str, namespace: str | None = None,
            subresource: str | None = None) -> Body:
        path = resource.path(namespace, name, subresource)
        return cast(Body, self._retrying("get", resource.plural, lambda: self._call(
            "GET", path, verb="get", resource=resource.plural), idempotent=True))

    def get_or_none(self, resource: Resource, name: str,
                    namespace: str | None = None) -> Body | None:
        try:
            return self.get(resource, name, namespace)
        except errors.NotFound:
            return None

    def list(self, resource: Resource, namespace: str | None = None, *,
             label_selector: str | None = None, field_selector: str | None = None,
             limit: int | None = None, metadata_only: bool = False
             ) -> tuple[list[Body], str]:
        """All objects (following continue tokens) and the list's resourceVersion. With
        ``metadata_only``, each object's apiVersion, kind and metadata only (the server's
        PartialObjectMetadataList): at ten thousand jobs a full listing decodes hundreds of
        megabytes of specs and statuses that a caller after names would throw away."""
        return self._retrying("list", resource.plural, lambda: self._list(
            resource, namespace, label_selector, field_selector, limit, metadata_only),
            idempotent=True)

    def _list(self, resource: Resource, namespace: str | None, label_selector: str | None,
              field_selector: str | None, limit: int | None, metadata_only: bool = False
              ) -> tuple[builtins.list[Body], str]:
        items: builtins.list[Body] = []
        token: str | None = None
        while True:
            page = cast(Body, self._call("GET", resource.path(namespace), query={
                "labelSelector": label_selector, "fieldSelector": field_selector,
                "limit": limit, "continue": token,
            }, verb="list", resource=resource.plural,
                accept=PARTIAL_METADATA if metadata_only else "application/json"))
            for item in page.get("items") or []:  # a metadata list says null for none
                if metadata_only:  # the server says PartialObjectMetadata: name the kind
                    items.append({"apiVersion": resource.api_version, "kind": resource.kind,
                                  "metadata": item.get("metadata") or {}})
                    continue
                item.setdefault("apiVersion", resource.api_version)
                item.setdefault("kind", resource.kind)
                items.append(item)
            token = page.get("metadata", {}).get("continue")
            if not token:
                return items, str(page.get("metadata", {}).get("resourceVersion", ""))

    def create(self, resource: Resource, body: Mapping[str, object],
               namespace: str | None = None, subresource: str | None = None,
               name: str | None = None) -> Body:
        """Create; retried only where a repeat cannot create a second object (module doc)."""
        ns = namespace or _namespace_of(body)
        path = resource.path(ns, name, subresource) if subresource else resource.path(ns)
        fixed = None if subresource else _fixed_name(body)
        unsure = False  # an attempt failed after the server may have run it

        def attempt() -> Body:
            nonlocal unsure
            try:
                return cast(Body, self._call("POST", path, body=body, verb="create",
                                             resource=resource.plural))
            except errors.AlreadyExists:
                if unsure and fixed:
                    existing = self.get(resource, fixed, ns)
                    if _made_from(existing, body):
                        return existing  # our own earlier attempt made it
                raise
            except errors.ApiError as exc:
                unsure = unsure or (exc.sent and exc.status != 429)
                raise

        return self._retrying("create", resource.plural, attempt, idempotent=bool(fixed))

    def replace(self, resource: Resource, body: Mapping[str, object],
                subresource: str | None = None) -> Body:
        meta = cast(Mapping[str, str], body.get("metadata", {}))
        path = resource.path(meta.get("namespace"), meta["name"], subresource)
        return cast(Body, self._retrying("update", resource.plural, lambda: self._call(
            "PUT", path, body=body, verb="update", resource=resource.plural), idempotent=True))

    def patch(self, resource: Resource, name: str, patch: object, namespace: str | None = None,
              *, subresource: str | None = None, content_type: str = MERGE) -> Body:
        path = resource.path(namespace, name, subresource)
        return cast(Body, self._retrying("patch", resource.plural, lambda: self._call(
            "PATCH", path, body=patch, content_type=content_type, verb="patch",
            resource=resource.plural), idempotent=content_type != JSON_PATCH))

    def apply(self, resource: Resource, body: Mapping[str, object], *, field_manager: str,
              subresource: str | None = None, force: bool = True,
              dry_run: bool = False) -> Body:
        """Server-side apply ``body`` (which names itself) as ``field_manager``; with
        ``dry_run`` the server validates and admits it but stores nothing."""
        meta = cast(Mapping[str, str], body["metadata"])
        path = resource.path(meta.get("namespace"), meta["name"], subresource)
        query = {"fieldManager": field_manager, "force": "true" if force else None,
                 "dryRun": "All" if dry_run else None}
        return cast(Body, self._retrying("apply", resource.plural, lambda: self._call(
            "PATCH", path, body=body, query=query, content_type=APPLY, verb="apply",
            resource=resource.plural), idempotent=True))

    def delete(self, resource: Resource, name: str, namespace: str | None = None, *,
               propagation: str = "Background", uid: str | None = None,
               grace_period_seconds: int | None = None,
               resource_version: str | None = None) -> bool:
        """Delete; False when it was already gone. ``uid`` and ``resource_version`` are
        preconditions: the object must still be that one, at that version (else Conflict)."""
        options: Body = {"propagationPolicy": propagation}
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version))
                         if v}
        if preconditions:
            options["preconditions"] = preconditions
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        path = resource.path(namespace, name)
        unsure = False

        def attempt() -> bool:
            nonlocal unsure
            try:
                self._call("DELETE", path, body=options, verb="delete", resource=resource.plural)
            except errors.NotFound:
                return unsure  # gone: by an earlier attempt of ours, or before we came
            except errors.ApiError as exc:
                unsure = unsure or (exc.sent and exc.status != 429)
                raise
            return True

        return self._retrying("delete", resource.plural, attempt, idempotent=True)

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
        }, timeout=timeout_seconds + 10, verb="watch", resource=resource.plural)
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

    def raw(self, method: str, path: str, body: object = None, *,
            accept: str = "application/json") -> Body:
        """An arbitrary request (health checks, discovery, access reviews); ``accept`` asks
        for another representation, e.g. a Table as kubectl does. GETs are retried."""
        return cast(Body, self._retrying(method.lower(), "raw", lambda: self._call(
            method, path, body=body, resource="raw", accept=accept),
            idempotent=method == "GET"))

    def stream(self, resource: Resource, name: str, namespace: str, subresource: str,
               query: Mapping[str, object]) -> Any:
        """A streamed GET of a subresource (a pod's ``log``): the raw response, to read with
        ``.stream()`` and release with ``.release_conn()``."""
        return self._call("GET", resource.path(namespace, name, subresource), query=query,
                          stream=True, timeout=(10.0, None), verb="get",
                          resource=resource.plural)  # no read timeout: a quiet follow waits

    def port_forward(self, pod: str, namespace: str, port: int) -> Any:
        """One connection to ``port`` inside ``pod`` through the API server's
        ``pods/portforward`` (a websocket): the returned object's ``socket(port)`` sends and
        receives, its ``error(port)`` says what the kubelet refused, ``close()`` ends it."""
        from kubernetes.stream import portforward  # a websocket client: loaded when used

        # The library swaps its client's call_api for the websocket's while it connects:
        # any other request on that client meanwhile is mixed up with it ("Missing required
        # parameter `ports`"), so forwards have a client of their own and open one at a time.
        with self._forwarding:
            if self._forward_api is None:
                self._forward_api = kubernetes.client.ApiClient(self._api.configuration)
            api = kubernetes.client.CoreV1Api(self._forward_api)
            try:
                return portforward(api.connect_get_namespaced_pod_portforward, pod, namespace,
                                   ports=str(port))
            except ApiException as exc:
                raise _translate(exc) from None


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


def _fixed_name(body: Mapping[str, object]) -> str | None:
    meta = body.get("metadata")
    if isinstance(meta, Mapping) and not meta.get("generateName"):
        name = meta.get("name")
        return name if isinstance(name, str) and name else None
    return None


def _made_from(existing: Mapping[str, object], body: Mapping[str, object]) -> bool:
    """Whether ``existing`` holds everything ``body`` asked for in its spec and data: only
    then is an AlreadyExists after a lost answer taken for our own create. A Lease that
    another replica created first names another holder, so it is not taken for ours; a
    value the server normalised makes this say no, and the caller sees AlreadyExists."""
    return all(_contains(existing.get(key), body[key]) for key in ("spec", "data")
               if key in body)


def _contains(have: object, want: object) -> bool:
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(
            key in have and _contains(have[key], value) for key, value in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(have) == len(want) and all(
            _contains(h, w) for h, w in zip(have, want, strict=True))
    return have == want


def _sent(exc: BaseException) -> bool:
    """False when the connection was never made, so the server cannot have seen it."""
    reason = getattr(exc, "reason", None) if isinstance(
        exc, urllib3.exceptions.MaxRetryError) else exc
    return not isinstance(reason, urllib3.exceptions.NewConnectionError
                          | urllib3.exceptions.ConnectTimeoutError | ConnectionRefusedError)


def _translate(exc: ApiException) -> errors.ApiError:
    if not exc.status:
        return errors.Unreachable(0, "Unreachable", str(exc.reason))
    headers = exc.headers or {}
    return _error(int(exc.status), str(exc.reason or ""), exc.body or b"",
                  headers.get("Retry-After"))


def _error(status: int, reason: str, body: bytes | str,
           retry_after: str | None = None) -> errors.ApiError:
    message = body.decode(errors="replace") if isinstance(body, bytes) else body
    try:
        decoded = json.loads(message or "{}")
        reason = str(decoded.get("reason") or reason)
        message = str(decoded.get("message") or message)
    except (ValueError, AttributeError):
        pass
    return errors.from_status(status, reason, message,
                              retry_after=retry_after_seconds(retry_after))
