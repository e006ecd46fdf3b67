"""The one raw request seam of the adapter: where a kind lives, and one request.

`Resource` builds a kind's paths, core kinds and custom resources alike; `send` makes
one request with the client's connection pool and auth and raises on a non-2xx answer;
`call` is `send` with the answer parsed and the error translated (`errors.py`). The
informers' LISTs, the Writer, the bench and the tests build their requests here, so a
change of how a request is made is made once (the leader elector keeps the client's
typed Lease API).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from adapters.kubernetes import errors

__all__ = ["CONFIG_MAPS", "EVENTS", "LEASES", "Obj", "Resource", "Timeout", "call", "send"]

Obj = dict[str, Any]
Timeout = float | tuple[float, float]


@dataclass(frozen=True)
class Resource:
    """Where a kind lives: `group` is "" for the core API."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def _root(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def collection_path(self, namespace: str | None = None) -> str:
        """The list/watch path; all namespaces when `namespace` is None."""
        if self.namespaced and namespace:
            return f"{self._root()}/namespaces/{_segment(namespace)}/{self.plural}"
        return f"{self._root()}/{self.plural}"

    def object_path(self, namespace: str | None, name: str, subresource: str = "") -> str:
        if self.namespaced and not namespace:
            raise ValueError(f"{self.kind} is namespaced: a namespace is required")
        path = f"{self.collection_path(namespace if self.namespaced else None)}/{_segment(name)}"
        return f"{path}/{subresource}" if subresource else path


def _segment(name: str) -> str:
    """`name` as one segment of a path. Names come from specs a user or a class author
    wrote: `../../victim/secrets/tls` as a Secret's name made the controller read another
    namespace's Secret with its own rights (urllib3 folds dot segments)."""
    if name in (".", ".."):  # a dot segment even quoted: no object has such a name
        return name.replace(".", "%2E")
    return quote(name, safe="")


CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap")
EVENTS = Resource("", "v1", "events", "Event")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")


def send(
    api: ApiClient,
    method: str,
    path: str,
    *,
    query: Sequence[tuple[str, Any]] = (),
    body: Any = None,
    content_type: str | None = None,
    timeout: Timeout | None = None,
) -> Any:
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    request = api.param_serialize(
        method,
        path,
        query_params=list(query),
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*request, _request_timeout=timeout)
    if not 200 <= response.status <= 299:
        response.read()
        raise ApiException.from_response(
            http_resp=response, body=response.data.decode("utf-8", "replace"), data=None
        )
    return response


def call(
    api: ApiClient,
    method: str,
    path: str,
    *,
    query: Sequence[tuple[str, Any]] = (),
    body: Any = None,
    content_type: str | None = None,
    timeout: Timeout | None = (10.0, 60.0),
) -> Obj:
    """One request, its JSON answer as a dict (also for 201 Created); errors translated."""
    with errors.translating():
        response = send(
            api, method, path, query=query, body=body, content_type=content_type, timeout=timeout
        )
        response.read()
        return dict(json.loads(response.data)) if response.data else {}
