"""A Kubernetes client that refuses to write once this process no longer leads.

Leader election does not fence by itself (ENGINEERING item 15): a pass that began while
this process led may still be running when the Lease goes — paused by the GC, stuck in
a probe or a hub call. The event log refuses its appends by epoch; this client refuses
its Kubernetes writes. The controller hands the reconcile pass an `ApiClient` built here,
so every write of a pass (server-side apply, the token Secret, reclaims, the status)
goes through a check of `may_write()` just before the request is sent, however the pass
is written, and again before urllib3 sends it anew on its own (after a connect error or a
read timeout, up to its default 3 times, a minute or more later). Reads pass through. The
elector and the informers keep the plain client: renewing and releasing the Lease are the
writes that must still go out.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

from kubernetes.client import ApiClient
from urllib3.connectionpool import ConnectionPool
from urllib3.response import BaseHTTPResponse
from urllib3.util.retry import Retry

__all__ = ["NotLeading", "fenced"]

_READS = frozenset({"GET", "HEAD", "OPTIONS"})


class NotLeading(RuntimeError):
    """A write was refused: this process does not lead (any more)."""


class _FencedRetry(Retry):
    """urllib3's default retries, each re-send of a write fenced like its first send."""

    def __init__(
        self, *args: Any, may_write: Callable[[], bool] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.may_write = may_write  # None only between urllib3's `new` and ours

    def new(self, **kwargs: Any) -> Self:
        retry = super().new(**kwargs)
        retry.may_write = self.may_write
        return retry

    def increment(
        self,
        method: str | None = None,
        url: str | None = None,
        response: BaseHTTPResponse | None = None,
        error: Exception | None = None,
        _pool: ConnectionPool | None = None,
        _stacktrace: TracebackType | None = None,
    ) -> Self:
        fence = self.may_write
        if (method or "GET").upper() not in _READS and fence is not None and not fence():
            raise NotLeading(f"not leading: {method} not sent again") from error
        return super().increment(method, url, response, error, _pool, _stacktrace)


class _FencedClient(ApiClient):  # type: ignore[misc]  # the client is untyped
    def __init__(self, api: ApiClient, may_write: Callable[[], bool]) -> None:
        # A configuration of its own: the retries are this client's, not the informers'.
        configuration = copy.deepcopy(api.configuration)
        configuration.retries = _FencedRetry(Retry.DEFAULT.total, may_write=may_write)
        super().__init__(configuration=configuration)
        self._may_write = may_write

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method.upper() not in _READS and not self._may_write():
            raise NotLeading(f"not leading: {method} {url.split('?', 1)[0]} not sent")
        return super().call_api(method, url, *args, **kwargs)


def fenced(api: ApiClient, may_write: Callable[[], bool]) -> ApiClient:
    """A client with `api`'s configuration whose writes happen only while `may_write()`."""
    return _FencedClient(api, may_write)
