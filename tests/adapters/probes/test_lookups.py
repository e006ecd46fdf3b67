"""A name the resolver never answers for does not hold a probe or a hub lookup.

getaddrinfo takes no timeout: a cluster DNS that does not answer held the caller for the
resolver's own attempts times the search list, past the probe's timeout and the hub
lookup's total bound, each holding a background thread. Here the lookup of one name
blocks until the test lets it go; the caller must have answered before that.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpcore2
import pytest

from adapters.models.hub_network import DeadlineBackend
from adapters.models.huggingface import HubResolver, HubSettings
from adapters.models.lookup import ModelUnavailable
from adapters.probes import deadlines
from adapters.probes.http import probe
from fsm.reasons import Reason

HUNG = "resolver-never-answers.test"


class Lookups:
    def __init__(self) -> None:
        self.asked: list[str] = []
        self.ended: list[str] = []  # lookups of HUNG that returned (after the test)
        self.release = threading.Event()


@pytest.fixture
def hung_lookups(monkeypatch: pytest.MonkeyPatch) -> Iterator[Lookups]:
    """The names looked up; HUNG's lookup waits until the test ends."""
    real = socket.getaddrinfo
    lookups = Lookups()

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        lookups.asked.append(name)
        if name == HUNG:
            lookups.release.wait(60)
            lookups.ended.append(name)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        if name not in ("127.0.0.1", "localhost", "::1"):
            raise OSError(f"test tried to reach {name!r}")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield lookups
    lookups.release.set()


def test_an_address_is_not_looked_up(hung_lookups: Lookups) -> None:
    assert deadlines.addresses("127.0.0.1", 80, 1.0) == [("127.0.0.1", 80)]
    assert deadlines.addresses("::1", 80, 1.0) == [("::1", 80)]
    assert hung_lookups.asked == []


def test_a_lookup_waits_no_longer_than_its_timeout_nor_the_deadline(
    hung_lookups: Lookups,
) -> None:
    with pytest.raises(TimeoutError, match=f"looking up {HUNG}"):
        deadlines.addresses(HUNG, 80, 0.2)
    with deadlines.until(0.0), pytest.raises(TimeoutError):  # a deadline long past
        deadlines.addresses(HUNG, 80, None)


def test_a_probe_of_a_name_never_looked_up_times_out_connecting(
    hung_lookups: Lookups,
) -> None:
    answer = probe(f"http://{HUNG}:8000", None, timeout=0.3)
    assert not answer.ok and answer.status_code is None
    assert answer.error is not None and "connecting" in answer.error
    assert HUNG in hung_lookups.asked and not hung_lookups.ended  # answered while it hangs


def test_a_hub_lookup_of_a_name_never_looked_up_ends_by_its_bound(
    hung_lookups: Lookups,
) -> None:
    settings = HubSettings(endpoint=f"http://{HUNG}:8080", request_timeout=0.3, total_timeout=1)
    answer = HubResolver(settings).resolve("Qwen/Qwen2.5-0.5B-Instruct")
    assert isinstance(answer, ModelUnavailable)
    assert answer.reason is Reason.MODEL_SOURCE_UNREACHABLE
    assert HUNG in hung_lookups.asked and not hung_lookups.ended  # answered while it hangs


class _Refusing(httpcore2.NetworkBackend):
    """Connects to 127.0.0.1 only; 127.0.0.2 times out, as a node dropping SYNs does."""

    def __init__(self) -> None:
        self.tried: list[str] = []

    def connect_tcp(self, host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        self.tried.append(host)
        if host == "127.0.0.2":
            raise httpcore2.ConnectTimeout("timed out")
        return httpcore2.MockStream([])


def test_a_hub_connection_goes_on_to_the_next_address_after_a_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """socket.create_connection, the library's own way, goes on to a name's next address
    after any failure: a timeout ended the connection instead."""

    def two_addresses(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        assert host == "dual.test"
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.2", port)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
        ]

    monkeypatch.setattr(socket, "getaddrinfo", two_addresses)
    inner = _Refusing()
    DeadlineBackend(inner).connect_tcp("dual.test", 443, timeout=1.0)
    assert inner.tried == ["127.0.0.2", "127.0.0.1"]
