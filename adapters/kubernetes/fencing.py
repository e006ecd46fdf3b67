"""A Kubernetes client that refuses to write once this process no longer leads.

Leader election does not fence by itself (ENGINEERING item 15): a pass that began while
this process led may still be running when the Lease goes — paused by the GC, stuck in
a probe or a hub call. The event log refuses its appends by epoch; this client refuses
its Kubernetes writes. The controller hands the reconcile pass an `ApiClient` built here,
so every write of a pass (server-side apply, the token Secret, reclaims, the status)
goes through one check of `may_write()` just before the request is sent, however the pass
is written. Reads pass through. The elector and the informers keep the plain client:
renewing and releasing the Lease are the writes that must still go out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes.client import ApiClient

__all__ = ["NotLeading", "fenced"]

_READS = frozenset({"GET", "HEAD", "OPTIONS"})


class NotLeading(RuntimeError):
    """A write was refused: this process does not lead (any more)."""


class _FencedClient(ApiClient):  # type: ignore[misc]  # the client is untyped
    def __init__(self, api: ApiClient, may_write: Callable[[], bool]) -> None:
        super().__init__(configuration=api.configuration)
        self._may_write = may_write

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method.upper() not in _READS and not self._may_write():
            raise NotLeading(f"not leading: {method} {url.split('?', 1)[0]} not sent")
        return super().call_api(method, url, *args, **kwargs)


def fenced(api: ApiClient, may_write: Callable[[], bool]) -> ApiClient:
    """A client with `api`'s configuration whose writes happen only while `may_write()`."""
    return _FencedClient(api, may_write)
