"""The Kubernetes adapter's own errors, so no caller ever catches a client-library exception.

Every failure talking to the API server reaches the caller as one of these, raised `from`
the library's exception (kept as `__cause__` for the logs), so the client library could be
replaced without touching the controller:

    APIError                       any failed request; `.status` is the HTTP code (0: none)
    ├── APIBadRequestError         400: the body or a parameter is malformed
    ├── APIUnauthorizedError       401: no or a wrong credential
    ├── APIForbiddenError          403: RBAC says no
    ├── APINotFoundError           404: no such object (or no such kind)
    ├── APIConflictError           409: the resourceVersion is stale or the name is taken;
    │                                   re-read and re-decide, never retry the stale body
    ├── APIGoneError               410: the watch's resourceVersion is compacted; re-LIST
    ├── APIInvalidError            422: the object does not validate
    ├── APITooManyRequestsError    429: back off (`.retry_after` when the server said)
    ├── APIServerError             5xx: the server failed
    │   └── APIUnavailableError    503/504: the server (or etcd behind it) is not there yet
    └── APIConnectionError         no answer at all: refused, reset, TLS, read timeout
        └── APITimeoutError        the connection or the read timed out

`transient` says whether trying the same request again later can succeed (429, 5xx,
connection trouble); the work queue and the watch loop back off on those.

Foreign exceptions are translated once, at one boundary: wrap every client call in
`with errors.translating():` (rest.call and the leader elector do it for you).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

__all__ = [
    "APIBadRequestError",
    "APIConflictError",
    "APIConnectionError",
    "APIError",
    "APIForbiddenError",
    "APIGoneError",
    "APIInvalidError",
    "APINotFoundError",
    "APIServerError",
    "APITimeoutError",
    "APITooManyRequestsError",
    "APIUnauthorizedError",
    "APIUnavailableError",
    "from_api_exception",
    "from_status",
    "translating",
]


class APIError(Exception):
    """A request to the API server failed; `status` is the HTTP code, 0 when none came back."""

    transient = False

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        reason: str = "",
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        # The Status object's machine-readable reason: "Conflict", "AlreadyExists", "Expired"...
        self.reason = reason
        self.details: Mapping[str, Any] = details or {}


class APIBadRequestError(APIError):
    """400: the request is malformed."""


class APIUnauthorizedError(APIError):
    """401: the credential is missing or wrong."""


class APIForbiddenError(APIError):
    """403: the identity may not do this (RBAC)."""


class APINotFoundError(APIError):
    """404: the object, or its kind, does not exist."""


class APIConflictError(APIError):
    """409: a stale resourceVersion or a taken name; re-read, re-decide, then write again."""


class APIGoneError(APIError):
    """410: the resourceVersion is too old (compacted); the watcher must LIST again."""


class APIInvalidError(APIError):
    """422: the object failed validation."""


class APITooManyRequestsError(APIError):
    """429: the server throttles us; back off, at least `retry_after` seconds if given."""

    transient = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class APIServerError(APIError):
    """5xx: the server failed this request."""

    transient = True


class APIUnavailableError(APIServerError):
    """503/504: the server or its storage is not available right now."""


class APIConnectionError(APIError):
    """No HTTP answer: the connection was refused or reset, TLS failed, or a read stalled."""

    transient = True


class APITimeoutError(APIConnectionError):
    """The connection or a read timed out (a network outage looks like this)."""


_BY_STATUS: dict[int, type[APIError]] = {
    400: APIBadRequestError,
    401: APIUnauthorizedError,
    403: APIForbiddenError,
    404: APINotFoundError,
    409: APIConflictError,
    410: APIGoneError,
    422: APIInvalidError,
    429: APITooManyRequestsError,
    503: APIUnavailableError,
    504: APIUnavailableError,
}


def _class_for(status: int) -> type[APIError]:
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if 500 <= status <= 599:
        return APIServerError
    if status == 0:
        return APIConnectionError
    return APIError


def from_status(status: Mapping[str, Any], *, retry_after: float | None = None) -> APIError:
    """The error a Kubernetes `Status` object describes (an ERROR watch event, an error body)."""
    code = int(status.get("code") or 0)
    message = str(status.get("message") or status.get("reason") or f"HTTP {code}")
    kw: dict[str, Any] = {
        "status": code,
        "reason": str(status.get("reason") or ""),
        "details": status.get("details") or {},
    }
    cls = _class_for(code)
    if cls is APITooManyRequestsError:
        return APITooManyRequestsError(message, retry_after=retry_after, **kw)
    return cls(message, **kw)


def _retry_after(headers: Any) -> float | None:
    try:
        value = headers.get("Retry-After") if headers is not None else None
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def from_api_exception(exc: ApiException) -> APIError:
    """Translate the client's ApiException, reading the Status body when there is one."""
    status = int(exc.status or 0)
    body: Any = None
    if exc.body:
        try:
            body = json.loads(exc.body)
        except (TypeError, ValueError):
            body = None
    if not isinstance(body, dict) or body.get("kind") != "Status":
        # Watch.stream raises ERROR events as ApiException(status, "Reason: message").
        reason, _, message = str(exc.reason or "").partition(": ")
        body = {"code": status, "reason": reason if message else "", "message": message or reason}
    body = {**body, "code": body.get("code") or status}
    return from_status(body, retry_after=_retry_after(exc.headers))


@contextmanager
def translating() -> Iterator[None]:
    """Re-raise the client library's and urllib3's exceptions as this module's errors."""
    try:
        yield
    except ApiException as exc:
        raise from_api_exception(exc) from exc
    except (urllib3.exceptions.TimeoutError, TimeoutError) as exc:
        raise APITimeoutError(f"timed out: {exc}") from exc
    except urllib3.exceptions.MaxRetryError as exc:
        # urllib3 gives up after its own retries; the last failure says which kind it was.
        if isinstance(exc.reason, urllib3.exceptions.TimeoutError):
            raise APITimeoutError(f"timed out: {exc.reason}") from exc
        raise APIConnectionError(f"no answer from the API server: {exc.reason}") from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise APIConnectionError(f"no answer from the API server: {exc}") from exc
