"""The hub client's network backend: held to deadlines on the library's own client, and
a loud refusal where a release of httpx2 or httpcore2 moved what it sets."""

from __future__ import annotations

import httpx2
import pytest
from huggingface_hub import get_session

from adapters.models import huggingface  # noqa: F401  (sets the library's client factory)
from adapters.models.hub_network import DeadlineBackend, hold_to_deadlines


def test_the_librarys_client_reads_through_the_deadline_backend() -> None:
    pool = get_session()._transport._pool  # type: ignore[attr-defined]
    assert isinstance(pool._network_backend, DeadlineBackend)


def test_a_transport_without_the_pool_it_expects_is_refused_loudly() -> None:
    client = httpx2.Client(transport=httpx2.MockTransport(lambda _r: httpx2.Response(200)))
    with client, pytest.raises(RuntimeError, match="changed where a pool keeps its network"):
        hold_to_deadlines(client)


def test_holding_twice_wraps_once() -> None:
    with httpx2.Client() as client:
        hold_to_deadlines(client)
        hold_to_deadlines(client)
        backend = client._transport._pool._network_backend  # type: ignore[attr-defined]
    assert isinstance(backend, DeadlineBackend)
    assert not isinstance(backend._inner, DeadlineBackend)
