"""One namespace's hung hub lookups do not hold back another namespace's (issue #11).

Real HTTP on both sides: the models of one tenant are asked of a hub on 127.0.0.1 that
never answers (its resolver patient for a minute), the other tenant's of the stand-in hub.
The lookups go the production way, the pass's `Observer` starting them on the background
pool with the order's namespace; the other tenant's answer must come while every hung
lookup still hangs. Before tenants took turns, it came after all of them (a lookup
answered in milliseconds waited 30 s behind 48 of another namespace's).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from adapters.kubernetes.background import Background
from adapters.kubernetes.observing import Observer
from adapters.kubernetes.settings import Settings
from adapters.models import ModelFound
from adapters.models.huggingface import HubResolver, HubSettings
from adapters.simulator.hub import StandInHub
from fsm.identity import OrderRef
from fsm.values import ModelRef, ModelSource
from tests.support.polling import eventually

SERVED = "Qwen/Qwen2.5-0.5B-Instruct"


class HungHub(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Hang)
        self.release = threading.Event()
        self.asked = 0
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Hang(BaseHTTPRequestHandler):
    server: HungHub

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.asked += 1
        self.server.release.wait(60)


class TwoHubs:
    """The resolver the observer asks: the hung tenant's models go to the hung hub."""

    def __init__(self, hung: HubResolver, served: HubResolver) -> None:
        self._hung, self._served = hung, served
        self.answered_hung = 0

    def _for(self, name: str) -> HubResolver:
        return self._hung if name.startswith("hung/") else self._served

    def peek(self, name: str, **kwargs: Any) -> Any:
        return self._for(name).peek(name, **kwargs)

    def resolve(self, name: str, **kwargs: Any) -> Any:
        answer = self._for(name).resolve(name, **kwargs)
        if name.startswith("hung/"):
            self.answered_hung += 1
        return answer


@pytest.fixture
def hung_hub() -> Iterator[HungHub]:
    hub = HungHub()
    yield hub
    hub.release.set()
    hub.shutdown()
    hub.server_close()


def test_a_tenants_hung_lookups_do_not_hold_back_another_tenants(
    module_hub: StandInHub, hung_hub: HungHub
) -> None:
    woken: dict[str, threading.Event] = {}
    background = Background(lambda uid: woken.setdefault(uid, threading.Event()).set(), workers=8)
    patient = HubSettings(endpoint=hung_hub.url, request_timeout=60, total_timeout=60)
    hubs = TwoHubs(HubResolver(patient), HubResolver(HubSettings(endpoint=module_hub.url)))
    world: Any = None  # HuggingFace models without a Secret read nothing of the cluster
    observer = Observer(world, hubs, Settings, background)
    try:
        for i in range(48):
            order = OrderRef(f"o{i}", "hung-tenant", f"uid-a{i}")
            model = ModelRef(src=ModelSource.HUGGING_FACE, name=f"hung/model-{i}")
            assert observer._lookup(order, model) is None  # asked off the worker
        other = OrderRef("served", "other-tenant", "uid-b")
        served = ModelRef(src=ModelSource.HUGGING_FACE, name=SERVED)
        assert observer._lookup(other, served) is None
        assert woken.setdefault("uid-b", threading.Event()).wait(30), (
            "the other tenant's lookup waited behind the hung tenant's"
        )
        found = observer._lookup(other, served)
        assert isinstance(found, ModelFound) and found.facts.name == SERVED
        assert hubs.answered_hung == 0  # every hung lookup still hangs
        eventually(lambda: hung_hub.asked == 6, timeout=10, what="six hung requests")
        assert background._once is not None
        assert background._once.running("hung-tenant") == 6  # its share of eight, no more
    finally:
        hung_hub.release.set()
        background.stop()
