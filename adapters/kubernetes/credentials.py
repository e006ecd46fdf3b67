"""API clients whose credentials are refreshed when they can change, not on every request.

The Kubernetes client's kubeconfig and in-cluster loaders both install a
`refresh_api_key_hook`, which the client calls before every request. Each call sets the
configuration up again from the loader: the host among the rest, and the host's setter
reads the proxy settings from the whole environment. That was 14 % of the client's CPU
for a GET here (0.065 of 0.47 ms) and about 4 % of the controller's CPU in a rollout
(py-spy, docs/performance-journal.md). Yet the hooks renew a token only when it can have
changed: the kubeconfig's when its expiry is less than five minutes away, the in-cluster
token file once a minute. Asked at most once a second, a hook renews each token as it
did; nothing else it sets changes.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

__all__ = ["REFRESH_EVERY", "CredentialsError", "from_kubeconfig", "in_cluster", "refresh_seldom"]

REFRESH_EVERY = 1.0  # seconds; far under the loaders' own margins (a minute and more)

Hook = Callable[[Any], None]


class _SeldomRefresh:
    """A loader's refresh hook, run at most once every `every` seconds per configuration.

    Per configuration: the controller and the simulator copy their configurations for
    pools of their own, and a shallow copy shares this hook. Were the due times shared,
    a busy copy could keep another from ever renewing its token.
    """

    def __init__(self, hook: Hook, every: float, clock: Callable[[], float]) -> None:
        self._hook = hook
        self._every = every
        self._clock = clock
        # configuration -> when its hook may run again; a configuration dropped is forgotten
        self._due: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

    def __call__(self, target: client.Configuration) -> None:
        now = self._clock()
        if now < self._due.get(target, -math.inf):
            return
        self._due[target] = now + self._every
        self._hook(target)
        # The loaders install a hook of their own again on every call.
        target.refresh_api_key_hook = self


def refresh_seldom(
    configuration: client.Configuration,
    every: float = REFRESH_EVERY,
    clock: Callable[[], float] = time.monotonic,
) -> client.Configuration:
    """Let `configuration`'s refresh hook, if it has one, run at most once every `every`
    seconds (for it and for each copy of it)."""
    hook: Hook | None = configuration.refresh_api_key_hook
    if hook is not None and not isinstance(hook, _SeldomRefresh):
        configuration.refresh_api_key_hook = _SeldomRefresh(hook, every, clock)
    return configuration


class CredentialsError(RuntimeError):
    """No client can be made from what was given; the message says why, never a secret."""


def from_kubeconfig(path: Path | str) -> client.ApiClient:
    """A client for the kubeconfig at `path` (its current context)."""
    if not Path(path).exists():
        raise CredentialsError(f"cannot load the kubeconfig {path}: no such file")
    try:
        api = config.new_client_from_config(config_file=str(path))
    except yaml.MarkedYAMLError as exc:
        # Only where: the lines of a kubeconfig may hold its tokens.
        mark = exc.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise CredentialsError(f"cannot load the kubeconfig {path}: not YAML{where}") from None
    except (config.ConfigException, yaml.YAMLError, OSError) as exc:
        raise CredentialsError(f"cannot load the kubeconfig {path}: {exc}") from None
    refresh_seldom(api.configuration)
    return api


def in_cluster() -> client.ApiClient:
    """A client for the pod's service account (its token file, renewed as it rotates)."""
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException as exc:
        raise CredentialsError(
            f"no service account to run as ({exc}): run in a pod, or give --kubeconfig"
        ) from None
    return client.ApiClient(refresh_seldom(configuration))
