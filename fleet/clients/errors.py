"""fleet's own API errors, so that no caller depends on the client library's exceptions."""

from __future__ import annotations


class ApiError(Exception):
    """``retry_after``: seconds the server asked to wait (a 429/503 ``Retry-After``);
    ``sent`` is False only when the request certainly never reached the server (the
    connection was refused), so that even a create may be tried again."""

    def __init__(self, status: int, reason: str, message: str, *,
                 retry_after: float | None = None, sent: bool = True) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        self.sent = sent


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    """409: the object changed since it was read (or already exists, see AlreadyExists)."""


class AlreadyExists(Conflict):
    pass


class Forbidden(ApiError):
    pass


class Invalid(ApiError):
    """422: rejected by schema, CEL or an admission webhook; ``message`` names the field."""


class Unreachable(ApiError):
    """The API server did not answer (connection refused, timeout, 5xx after retries)."""


def from_status(status: int, reason: str, message: str, *,
                retry_after: float | None = None) -> ApiError:
    if status >= 500:
        kind = Unreachable if status in (502, 503, 504) else ApiError
        return kind(status, reason, message, retry_after=retry_after)
    if status == 429:
        return ApiError(status, reason, message, retry_after=retry_after)
    if status == 404:
        return NotFound(status, reason, message)
    if status == 409:
        kind = AlreadyExists if reason == "AlreadyExists" else Conflict
        return kind(status, reason, message)
    if status == 403:
        return Forbidden(status, reason, message)
    if status == 422:
        return Invalid(status, reason, message)
    return ApiError(status, reason, message)
