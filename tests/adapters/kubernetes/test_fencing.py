"""The fenced client: a write checked while leading is never sent after leadership went.

urllib3 sends a request again on its own after a connect error or a read timeout, long
after `may_write()` was asked. Against the session's API server, through a relay that
can drop every byte (tests/support/relay.py).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from adapters.kubernetes import fencing, rest
from tests.support.relay import Relay

pytestmark = pytest.mark.cluster


@pytest.fixture
def through_relay(cluster: Any) -> Iterator[tuple[client.ApiClient, Relay]]:
    relay = Relay(cluster.server)
    configuration = client.Configuration()
    config.load_kube_config(
        config_file=str(cluster.kubeconfig("admin")), client_configuration=configuration
    )
    configuration.host = relay.url
    configuration.refresh_api_key_hook = None  # it would set the kubeconfig's host again
    api = client.ApiClient(configuration)
    try:
        yield api, relay
    finally:
        api.close()
        relay.close()


def test_a_write_is_not_sent_again_once_leadership_went(
    cluster: Any, through_relay: tuple[client.ApiClient, Relay]
) -> None:
    api, relay = through_relay
    core = client.CoreV1Api(cluster.api_client("admin"))
    namespace = f"fence-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    try:
        child = core.create_namespaced_config_map(namespace, {"metadata": {"name": "child"}})
        leading = threading.Event()
        leading.set()
        writer = fencing.fenced(api, leading.is_set)
        path = rest.CONFIG_MAPS.object_path(namespace, "child")
        rest.call(writer, "GET", path)  # a kept connection through the relay
        relay.black_hole()
        outcome: list[BaseException | None] = []

        def delete() -> None:
            body = {"kind": "DeleteOptions", "apiVersion": "v1",
                    "preconditions": {"uid": child.metadata.uid}}  # fmt: skip
            try:
                rest.call(writer, "DELETE", path, body=body, timeout=(1.0, 2.0))
                outcome.append(None)
            except BaseException as exc:  # what the caller would see
                outcome.append(exc)

        sending = threading.Thread(target=delete)
        sending.start()
        time.sleep(1.0)  # sent while leading, and lost
        leading.clear()  # the Lease went: nothing may be sent from here on
        time.sleep(0.5)
        relay.heal()  # urllib3's retry would now get through
        sending.join(30)
        assert len(outcome) == 1 and isinstance(outcome[0], fencing.NotLeading), outcome
        # The ConfigMap is still there: the retry was never sent.
        still = core.read_namespaced_config_map("child", namespace)
        assert still.metadata.uid == child.metadata.uid
    finally:
        core.delete_namespace(namespace)
