"""The simulator's one seam to the API server: raw JSON over the client's transport.

The simulator plays the scheduler, the kubelets and a DRA driver, so it reads and writes
objects the generated client models do not know on a 1.20 server (`resource.k8s.io/v1`
stand-ins, pod fields of 1.34). Going through paths and dicts keeps every field as the
server sent it. Errors from the library are translated here, once:

    KubeError            any answer outside 2xx, or none (status 0: unreachable)
    ├── NotFound         404
    └── Conflict         409 (a stale resourceVersion, or AlreadyExists)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes import client

__all__ = ["Conflict", "Kube", "KubeError", "NotFound", "path"]

JSON = dict[str, Any]


class KubeError(Exception):
    """The API server refused a request."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    pass


def path(
    group_version: str,
    plural: str,
    name: str | None = None,
    *,
    namespace: str | None = None,
    subresource: str | None = None,
) -> str:
    """`/api/v1/...` for the core group, `/apis/<group>/<version>/...` otherwise."""
    root = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    parts = [root]
    if namespace is not None:
        parts += ["namespaces", quote(namespace, safe="")]
    parts.append(plural)
    if name is not None:
        parts.append(quote(name, safe=""))
    if subresource is not None:
        parts.append(subresource)
    return "/".join(parts)


class Kube:
    """Requests on behalf of one identity; thread-safe as the client's pool is."""

    def __init__(self, api: client.ApiClient, *, timeout: float = 10.0) -> None:
        self.api = api
        self.timeout = timeout

    def request(
        self,
        method: str,
        url: str,
        body: Any = None,
        *,
        query: Sequence[tuple[str, str]] = (),
        content_type: str = "application/json",
    ) -> JSON:
        serialized = self.api.param_serialize(
            method,
            url,
            query_params=list(query),
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self.api.call_api(*serialized, _request_timeout=self.timeout)
        except client.ApiException as err:
            raise _translate(int(err.status or 0), str(err.reason or ""), err.body) from err
        except urllib3.exceptions.HTTPError as err:  # refused, reset, timed out
            raise KubeError(0, "Unavailable", str(err)) from err
        data = response.read() or b"{}"
        if not 200 <= response.status <= 299:
            raise _translate(response.status, str(response.reason or ""), data)
        answer = json.loads(data)
        return answer if isinstance(answer, dict) else {}

    def get(self, url: str) -> JSON | None:
        try:
            return self.request("GET", url)
        except NotFound:
            return None

    def list(self, url: str, *, label_selector: str | None = None) -> tuple[list[JSON], str]:
        """Items and the list's resourceVersion; a kind the server does not serve is empty."""
        query = [("labelSelector", label_selector)] if label_selector else []
        try:
            answer = self.request("GET", url, query=query)
        except NotFound:
            return [], ""
        items = answer.get("items") or []
        return list(items), str((answer.get("metadata") or {}).get("resourceVersion", ""))

    def create(self, url: str, body: Mapping[str, Any]) -> JSON:
        return self.request("POST", url, dict(body))

    def replace(self, url: str, body: Mapping[str, Any]) -> JSON:
        return self.request("PUT", url, dict(body))

    def merge_patch(self, url: str, body: Mapping[str, Any]) -> JSON:
        """JSON merge patch; put `metadata.resourceVersion` in it to make it conditional."""
        return self.request("PATCH", url, dict(body), content_type="application/merge-patch+json")

    def strategic_patch(self, url: str, body: Mapping[str, Any]) -> JSON:
        """Strategic merge patch (built-in kinds only): lists merge by their keys."""
        return self.request(
            "PATCH", url, dict(body), content_type="application/strategic-merge-patch+json"
        )

    def delete(self, url: str, *, grace_seconds: int | None = None, uid: str | None = None) -> bool:
        """Delete; False when it was already gone. `uid` guards against a namesake."""
        options: JSON = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        try:
            self.request("DELETE", url, options)
        except NotFound:
            return False
        except Conflict:  # the uid precondition failed: someone else's object now
            return False
        return True


def _translate(status: int, reason: str, body: Any) -> KubeError:
    message = ""
    if isinstance(body, bytes | str):
        try:
            message = str(json.loads(body).get("message", ""))
        except (ValueError, AttributeError):
            message = body.decode(errors="replace") if isinstance(body, bytes) else body
    if status == 404:
        return NotFound(status, reason, message)
    if status == 409:
        return Conflict(status, reason, message)
    return KubeError(status, reason, message)
