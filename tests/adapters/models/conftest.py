"""Fixtures for the model-source tests: one stand-in hub per module, loopback only.

Every test here runs with name resolution limited to loopback, so a resolver that tried
a public hub (a default endpoint, a redirect, telemetry) fails loudly instead of leaving
the machine.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from adapters.models.huggingface import HubResolver, HubSettings
from adapters.simulator.hub import StandInHub

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    real = socket.getaddrinfo

    def guarded(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name not in LOOPBACK:
            raise OSError(f"test tried to reach {name!r}: only 127.0.0.1 is allowed")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", guarded)


@pytest.fixture(scope="module")
def module_hub() -> Iterator[StandInHub]:
    with StandInHub() as hub:
        yield hub


@pytest.fixture
def hub(module_hub: StandInHub) -> Iterator[StandInHub]:
    """The module's hub with its knobs reset and its request log empty."""
    module_hub.delay = 0.0
    for repo_id in module_hub.fixture.models:
        module_hub.mend(repo_id)
    module_hub.clear_requests()
    yield module_hub
    module_hub.delay = 0.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def resolver(hub: StandInHub) -> HubResolver:
    return HubResolver(HubSettings(endpoint=hub.url, request_timeout=2.0, total_timeout=5.0))


@pytest.fixture
def tokens(hub: StandInHub) -> dict[str, str]:
    """Account name -> token, from the fixture (alice is granted Llama, bob is not)."""
    return {account: token for token, account in hub.fixture.tokens.items()}
