"""API clients whose credentials are refreshed when they can change, not on every request.

The Kubernetes client's kubeconfig and in-cluster loaders both install a
`refresh_api_key_hook`, which the client calls before every request. Each call sets the
configuration up again from the loader: the host among the rest, and the host's setter
reads the proxy settings from the whole environment. That was 14 % of the client's CPU
for a GET here (0.065 of 0.47 ms) and about 4 % of the controller's CPU in a rollout
(py-spy, docs/performance.md). Yet the hooks renew a token only when it can have
changed: the kubeconfig's when its expiry is less than five minutes away, the in-cluster
token file once a minute. Asked at most once a second, a hook renews each token as it
did; nothing else it sets changes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config

__all__ = ["REFRESH_EVERY", "from_kubeconfig", "in_cluster", "refresh_seldom"]

REFRESH_EVERY = 1.0  # seconds; far under the loaders' own margins (a minute and more)

Hook = Callable[[Any], None]


def refresh_seldom(
    configuration: client.Configuration,
    every: float = REFRESH_EVERY,
    clock: Callable[[], float] = time.monotonic,
) -> client.Configuration:
    """Let `configuration`'s refresh hook run at most once every `every` seconds.

    Per configuration: the controller copies its configuration for pools of their own,
    and the copies keep this hook. Were the due times shared, a busy copy could keep
    another from ever renewing its token.
    """
    hook: Hook | None = configuration.refresh_api_key_hook
    if hook is None or getattr(hook, "refreshes_seldom", False):
        return configuration
    original: Hook = hook
    due: dict[int, float] = {}  # id of a configuration -> when its hook may run again

    def refresh(target: client.Configuration) -> None:
        now = clock()
        if now < due.get(id(target), -math.inf):
            return
        due[id(target)] = now + every
        original(target)
        # The loaders install a hook of their own again on every call.
        target.refresh_api_key_hook = refresh

    refresh.refreshes_seldom = True  # type: ignore[attr-defined]
    configuration.refresh_api_key_hook = refresh
    return configuration


def from_kubeconfig(path: Path | str) -> client.ApiClient:
    """A client for the kubeconfig at `path` (its current context)."""
    api = config.new_client_from_config(config_file=str(path))
    refresh_seldom(api.configuration)
    return api


def in_cluster() -> client.ApiClient:
    """A client for the pod's service account (its token file, renewed as it rotates)."""
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)
    return client.ApiClient(refresh_seldom(configuration))
