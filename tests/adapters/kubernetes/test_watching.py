"""Informers against the real API server: list+watch, bookmarks, 410 re-lists, timeouts.

A loopback TCP relay (tests/support/relay.py) stands between some informers and the API
server so a test can black-hole the network the way a partition does (open connections
go silent, new ones are refused) without touching the server.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kubernetes import client, config

from adapters import metrics
from adapters.kubernetes import rest, watching
from tests.support.polling import eventually
from tests.support.relay import Relay

pytestmark = pytest.mark.cluster


@pytest.fixture
def admin(cluster) -> client.ApiClient:
    return cluster.api_client("admin")


@pytest.fixture
def namespace(admin) -> Iterator[str]:
    name = f"watch-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(admin)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture
def relay(cluster) -> Iterator[Relay]:
    handle = Relay(cluster.server)
    yield handle
    handle.close()


@pytest.fixture
def relayed(cluster, relay) -> Iterator[client.ApiClient]:
    """An admin client whose every connection goes through the relay."""
    configuration = client.Configuration()
    config.load_kube_config(
        config_file=str(cluster.kubeconfig("admin")), client_configuration=configuration
    )
    configuration.host = relay.url
    # The loader's token-refresh hook would rewrite the host from the kubeconfig.
    configuration.refresh_api_key_hook = None
    api = client.ApiClient(configuration)
    yield api
    api.close()


@pytest.fixture
def informers() -> Iterator[list[watching.Informer]]:
    started: list[watching.Informer] = []
    yield started
    for informer in started:
        informer.stop()


def start(informers, informer: watching.Informer) -> watching.Informer:
    informer.start()
    informers.append(informer)
    assert informer.wait_synced(10)
    return informer


def config_map(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}


def test_list_then_watch_sees_creates_updates_deletes(admin, namespace, informers, caplog) -> None:
    core = client.CoreV1Api(admin)
    before = core.create_namespaced_config_map(namespace, config_map("before", app="a"))
    seen: list[tuple[str, str, str]] = []
    informer = watching.Informer(
        admin,
        rest.CONFIG_MAPS,
        namespace=namespace,
        indexers={"app": watching.by_label("app")},
    )

    def broken(event_type: str, obj: dict[str, Any]) -> None:
        raise RuntimeError("a handler bug must not stop the watch")

    informer.add_handler(broken)
    informer.add_handler(lambda t, o: seen.append((t, o["metadata"]["name"], o["metadata"]["uid"])))
    listed: list[float | None] = []  # a handler can tell a LIST's change from an event's
    informer.add_handler(lambda _t, _o: listed.append(informer.list_began))
    requested = time.monotonic()
    start(informers, informer)
    assert seen == [("ADDED", "before", before.metadata.uid)]
    assert listed[0] is not None and requested <= listed[0] <= time.monotonic()
    assert informer.get(before.metadata.uid)["kind"] == "ConfigMap"  # filled in for LIST items

    created = core.create_namespaced_config_map(namespace, config_map("during", app="a"))
    uid = created.metadata.uid
    updated = core.patch_namespaced_config_map("during", namespace, {"data": {"k": "w"}})
    # Read your own write: the cache is at least as new as what the patch returned.
    assert informer.fresh(updated)["data"] == {"k": "w"}
    assert {o["metadata"]["name"] for o in informer.by_index("app", "a")} == {"before", "during"}
    assert informer.get_by_name(namespace, "during")["metadata"]["uid"] == uid

    core.delete_namespaced_config_map("during", namespace)
    # The cache is updated before the handlers hear of a change.
    eventually(lambda: ("DELETED", "during", uid) in seen)
    assert informer.get(uid) is None
    assert informer.wait_for_rv(uid, updated.metadata.resource_version, 1)
    assert [(t, n) for t, n, u in seen if u == uid] == [
        ("ADDED", "during"),
        ("MODIFIED", "during"),
        ("DELETED", "during"),
    ]
    assert [o["metadata"]["name"] for o in informer.by_index("app", "a")] == ["before"]
    assert informer.stats.lists == 1 and informer.stats.errors == 0
    assert listed[1:] == [None] * 3 and informer.list_began is None
    assert caplog.text.count("handler failed") == 4  # every event reached the broken one too


def test_a_recreated_name_is_another_object(admin, namespace, informers) -> None:
    core = client.CoreV1Api(admin)
    informer = start(informers, watching.Informer(admin, rest.CONFIG_MAPS, namespace=namespace))
    first = core.create_namespaced_config_map(namespace, config_map("same"))
    core.delete_namespaced_config_map("same", namespace)
    second = core.create_namespaced_config_map(namespace, config_map("same"))
    informer.fresh(second)
    assert informer.get(first.metadata.uid) is None
    assert informer.get_by_name(namespace, "same")["metadata"]["uid"] == second.metadata.uid
    assert informer.uids() == [second.metadata.uid]


def test_the_cache_holds_no_field_managers(admin, namespace, informers) -> None:
    """managedFields are often most of an object, and nothing reads them from the cache."""
    core = client.CoreV1Api(admin)
    listed = core.create_namespaced_config_map(namespace, config_map("listed"))
    assert listed.metadata.managed_fields  # the server keeps them
    informer = start(informers, watching.Informer(admin, rest.CONFIG_MAPS, namespace=namespace))
    watched = core.create_namespaced_config_map(namespace, config_map("watched"))
    informer.fresh(watched)
    for obj in informer.objects(copy_=False):
        assert "managedFields" not in obj["metadata"], obj["metadata"]["name"]
    assert len(informer.objects(copy_=False)) == 2


def test_bookmarks_advance_the_resource_version(admin, namespace, informers) -> None:
    core = client.CoreV1Api(admin)
    other = f"{namespace}-other"
    core.create_namespace({"metadata": {"name": other}})
    try:
        # A short server timeout: the 1.20 watch cache bookmarks just before it ends.
        timeouts = watching.Timeouts(server=(3, 3), inactivity=None)
        informer = watching.Informer(
            admin, rest.CONFIG_MAPS, namespace=namespace, timeouts=timeouts
        )
        start(informers, informer)
        listed = informer.resource_version
        # Writes the informer never sees as events still move the server's RV on.
        for index in range(3):
            core.create_namespaced_config_map(other, config_map(f"elsewhere-{index}"))
        eventually(lambda: informer.stats.bookmarks >= 1, timeout=10)
        assert informer.resource_version != listed
        assert informer.stats.events == 0
        # The next watch resumes from the bookmark's RV and still sees what happens.
        created = core.create_namespaced_config_map(namespace, config_map("after-bookmark"))
        assert informer.fresh(created, timeout=10) is not None
        assert informer.stats.lists == 1
    finally:
        core.delete_namespace(other)


def _etcd_revision(etcd_url: str) -> int:
    key = base64.b64encode(b"\0").decode()
    answer = httpx.post(f"{etcd_url}/v3/kv/range", json={"key": key}, timeout=5)
    return int(answer.json()["header"]["revision"])


def _compact(etcd_url: str) -> None:
    revision = _etcd_revision(etcd_url)
    answer = httpx.post(
        f"{etcd_url}/v3/kv/compaction", json={"revision": revision, "physical": True}, timeout=10
    )
    answer.raise_for_status()


def _event(namespace: str, name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "involvedObject": {"kind": "ConfigMap", "name": "x", "namespace": namespace},
        "reason": "Testing",
        "message": name,
        "type": "Normal",
    }


def test_gone_relists_and_emits_a_synthetic_deletion(
    cluster, admin, relayed, relay, namespace, informers
) -> None:
    # Events bypass the API server's watch cache, so a compacted RV really is gone.
    core = client.CoreV1Api(admin)
    kept = core.create_namespaced_event(namespace, _event(namespace, "kept"))
    doomed = core.create_namespaced_event(namespace, _event(namespace, "doomed"))
    seen: list[tuple[str, str]] = []
    timeouts = watching.Timeouts(server=(60, 60), inactivity=1.0, read=30)
    informer = watching.Informer(relayed, rest.EVENTS, namespace=namespace, timeouts=timeouts)
    informer.add_handler(lambda t, o: seen.append((t, o["metadata"]["name"])))
    start(informers, informer)
    assert {n for _, n in seen} == {"kept", "doomed"}

    eventually(lambda: informer.stats.opened >= 1)  # the watch stream is up
    relay.black_hole()  # the informer is cut off from here on
    core.delete_namespaced_event("doomed", namespace)
    core.create_namespaced_event(namespace, _event(namespace, "born"))
    _compact(cluster.state.etcd_url)
    eventually(lambda: informer.stats.watchdog_stops >= 1)
    relay.heal()

    eventually(lambda: informer.stats.lists >= 2, timeout=20)
    assert informer.stats.gone >= 1
    assert informer.stats.synthetic_deletions == 1
    assert ("DELETED", "doomed") in seen and ("ADDED", "born") in seen
    assert informer.get(doomed.metadata.uid) is None
    assert informer.get(kept.metadata.uid) is not None
    assert {o["metadata"]["name"] for o in informer.objects()} == {"kept", "born"}


@pytest.mark.parametrize(
    ("timeouts", "counter"),
    [
        pytest.param(
            watching.Timeouts(server=(60, 60), inactivity=1.0, read=60),
            "watchdog_stops",
            id="inactivity-watchdog",
        ),
        pytest.param(
            watching.Timeouts(server=(60, 60), inactivity=None, read=1.5),
            "errors",
            id="client-read-timeout",
        ),
    ],
)
def test_a_silent_watch_is_restarted(
    admin, relayed, relay, namespace, informers, timeouts, counter
) -> None:
    core = client.CoreV1Api(admin)
    informer = watching.Informer(relayed, rest.CONFIG_MAPS, namespace=namespace, timeouts=timeouts)
    start(informers, informer)
    eventually(lambda: informer.stats.opened >= 1)
    restarts = {reason: _restarts(reason) for reason in ("watchdog", "ended", "error")}
    relay.black_hole()
    created = core.create_namespaced_config_map(namespace, config_map("unheard"))
    eventually(lambda: getattr(informer.stats, counter) >= 1)
    assert informer.get(created.metadata.uid) is None  # nothing got through the hole
    relay.heal()
    # Seen long before the server's 60 s timeout would have ended the stream.
    assert informer.fresh(created, timeout=10) is not None
    assert informer.stats.lists == 1  # resumed from its RV, no re-LIST needed
    if counter == "watchdog_stops":
        # One restart, counted once: the watchdog's stop was also counted as the end of
        # the stream it stopped, and the dashboard showed two.
        assert _restarts("watchdog") - restarts["watchdog"] == informer.stats.watchdog_stops
        assert _restarts("ended") == restarts["ended"]


def _restarts(reason: str) -> float:
    labels = {"resource": "configmaps", "reason": reason}
    return metrics.REGISTRY.get_sample_value("ai_inference_watch_restarts_total", labels) or 0.0


def test_resync_replays_the_cache(admin, namespace, informers) -> None:
    core = client.CoreV1Api(admin)
    created = core.create_namespaced_config_map(namespace, config_map("steady"))
    resynced: list[str] = []
    informer = watching.Informer(admin, rest.CONFIG_MAPS, namespace=namespace, resync_period=0.5)

    def on_event(event_type: str, obj: dict[str, Any]) -> None:
        if event_type == watching.RESYNC:
            resynced.append(obj["metadata"]["uid"])

    informer.add_handler(on_event)
    start(informers, informer)
    eventually(lambda: resynced.count(created.metadata.uid) >= 2)


def test_resource_paths() -> None:
    assert rest.CONFIG_MAPS.collection_path("ns") == "/api/v1/namespaces/ns/configmaps"
    assert rest.CONFIG_MAPS.collection_path() == "/api/v1/configmaps"
    lease = rest.LEASES.object_path("ns", "l")
    assert lease == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"
    nodes = rest.Resource("", "v1", "nodes", "Node", namespaced=False)
    assert nodes.object_path(None, "n1", "status") == "/api/v1/nodes/n1/status"
    with pytest.raises(ValueError, match="namespaced"):
        rest.CONFIG_MAPS.object_path(None, "x")


def test_a_watch_event_is_parsed_once_and_still_tracks_its_version(monkeypatch) -> None:
    """The client's own unmarshalling parsed every object twice (`raw_object`, then a
    dump and a parse for `object`)."""
    parses: list[str] = []
    real_loads = watching.json.loads

    def counting_loads(text: str, *args: Any, **kwargs: Any) -> Any:
        parses.append(text)
        return real_loads(text, *args, **kwargs)

    monkeypatch.setattr(watching.json, "loads", counting_loads)
    stream = watching._ParsedOnce(return_type="object")
    line = '{"type": "MODIFIED", "object": {"metadata": {"name": "a", "resourceVersion": "7"}}}'
    event = stream.unmarshal_event(line, "object")
    assert len(parses) == 1
    assert event["raw_object"] is event["object"]
    assert event["object"]["metadata"]["name"] == "a"
    assert stream.resource_version == "7"
    # ERROR events keep their Status in raw_object (the client's `stream` raises from
    # it) and move no version; blank and broken lines are skipped, as the client does.
    error = stream.unmarshal_event(
        '{"type": "ERROR", "object": {"code": 410, "reason": "Gone", "message": "old"}}', None
    )
    assert error["raw_object"]["code"] == 410
    assert stream.resource_version == "7"
    assert stream.unmarshal_event("  ", None) is None
    assert stream.unmarshal_event("{not json", None) is None
