"""Watches under faults: a stream gone silent, 410 Gone after etcd was compacted and
restarted, the API server killed and started again. No change is missed; every order
converges (conftest.settled: live status at its generation, equal to the log's replay).

Each test makes its changes while the controller cannot hear them, so only the behaviour
under test can bring them: the watchdog (a silent stream would otherwise hang until the
90 s read timeout), the re-LIST after 410 with its synthetic deletions (a deleted order's
stream would otherwise never be closed), the reconnecting loop and, when the Lease went
with the API server, the documented exit and a restart.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

import store
from adapters.cluster import local
from adapters.kubernetes.watching import Timeouts
from tests.outages.plane import (
    GROUP,
    NS,
    PLURAL,
    QWEN_SMALL,
    VERSION,
    Plane,
    controller_process,
    converged,
    report,
    wait_leading,
)
from tests.support.controller_process import REPO
from tests.support.polling import eventually
from tests.support.relay import Relay

pytestmark = pytest.mark.cluster

CONVERGE = 240.0  # a bound, not a time: orders reach Ready in seconds on a quiet machine


def _etcd_revision(etcd_url: str) -> int:
    key = base64.b64encode(b"\0").decode()
    answer = httpx.post(f"{etcd_url}/v3/kv/range", json={"key": key}, timeout=5)
    return int(answer.json()["header"]["revision"])


def _compact(etcd_url: str) -> int:
    """Compact etcd's history up to its current revision; returns that revision."""
    revision = _etcd_revision(etcd_url)
    answer = httpx.post(
        f"{etcd_url}/v3/kv/compaction", json={"revision": revision, "physical": True}, timeout=10
    )
    answer.raise_for_status()
    return revision


def _answers_gone(plane: Plane, resource_version: str) -> bool:
    """Whether the API server answers a watch of orders from this RV with 410 Gone."""
    custom = client.CustomObjectsApi(plane.api("admin"))
    try:
        response = custom.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, watch=True, resource_version=resource_version,
            timeout_seconds=1, _preload_content=False, _request_timeout=(5, 10),
        )  # fmt: skip
    except ApiException as exc:
        return exc.status == 410
    lines = response.data.decode().splitlines()
    return any(
        (event := json.loads(line)).get("type") == "ERROR" and event["object"].get("code") == 410
        for line in lines
        if line.strip()
    )


def _verify(store_url: str) -> subprocess.CompletedProcess[str]:
    """`ai-inference verify`: every recorded status equals the replay of its stream."""
    return subprocess.run(
        [sys.executable, "-m", "adapters.cli.main", "verify", f"--store={store_url}"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip


def test_a_silent_stream_is_restarted_by_the_watchdog(
    clean: Plane, relay: Relay, tmp_path: Path
) -> None:
    plane = clean
    log = store.open_log(f"sqlite:///{tmp_path / 'log.sqlite'}")
    controller = plane.controller(
        log, plane.through(relay), watch_timeouts=Timeouts(inactivity=3.0)
    )
    try:
        controller.start(wait=60)
        uids = {name: plane.create(name) for name in ("quiet-keep", "quiet-change", "quiet-gone")}
        eventually(
            lambda: converged(plane, log, uids),
            timeout=CONVERGE, interval=0.5, what="three orders Ready",
        )  # fmt: skip
        orders = controller.cache.orders
        lists = orders.stats.lists

        # The connections open now stay open and say nothing more: the watch streams
        # hang (the client's read timeout is 90 s); other requests go on new connections.
        relay.silence()
        generation = plane.change_model("quiet-change", QWEN_SMALL)
        plane.delete("quiet-gone")
        plane.create("quiet-new")

        def heard() -> bool:
            changed = orders.get_by_name(NS, "quiet-change") or {}
            return (
                changed.get("metadata", {}).get("generation") == generation
                and orders.get_by_name(NS, "quiet-gone") is None
                and orders.get_by_name(NS, "quiet-new") is not None
            )

        # Heard well before the read timeout would have ended the stream: the watchdog
        # stopped it after 3 s of silence and the watch resumed from its RV.
        eventually(heard, timeout=45, interval=0.2, what="the changes made while silent")
        assert orders.stats.watchdog_stops >= 1
        assert orders.stats.lists == lists  # resumed from its RV: nothing needed a re-LIST
        eventually(
            lambda: converged(
                plane, log, ["quiet-keep", "quiet-change", "quiet-new"], [uids["quiet-gone"]]
            ),
            timeout=CONVERGE, interval=0.5, what="the orders after the silence",
        )  # fmt: skip
        assert controller.still_leading() and controller.alive()
    finally:
        controller.stop()
        log.close()


def test_gone_after_etcd_compaction_and_restart_relists_and_misses_nothing(
    clean: Plane, relay: Relay, tmp_path: Path
) -> None:
    plane = clean
    url = f"sqlite:///{tmp_path / 'log.sqlite'}"
    log = store.open_log(url)
    # Without a Lease: this test is about watches; the network is cut for longer than a
    # renewal may fail (leadership under outages is the API server test's).
    controller = plane.controller(
        log, plane.through(relay), leader_election=False, watch_timeouts=Timeouts(inactivity=2.0)
    )
    try:
        controller.start(wait=60)
        uids = {name: plane.create(name) for name in ("gone-keep", "gone-change", "gone-gone")}
        eventually(
            lambda: converged(plane, log, uids),
            timeout=CONVERGE, interval=0.5, what="three orders Ready",
        )  # fmt: skip
        orders = controller.cache.orders
        before = (orders.stats.gone, orders.stats.synthetic_deletions)
        behind = orders.resource_version
        assert behind is not None

        relay.silence(refuse_new=True)  # the controller hears and reaches nothing
        plane.change_model("gone-change", QWEN_SMALL)
        plane.delete("gone-gone")
        plane.create("gone-new")
        # After etcd's restart the API server's watch of orders resumes at the revision
        # after the last order write it saw; etcd refuses it, and the cache lists again,
        # only if that revision is below the compaction's. One write after the orders'
        # could leave it at the compaction's own revision (below only when some other
        # write, the garbage collector's say, came in between); two make it so. Then
        # etcd is compacted past every revision the controller has seen.
        orders_written = _etcd_revision(plane.state.etcd_url)
        core = client.CoreV1Api(plane.api("admin"))
        for _ in range(2):
            core.create_namespaced_config_map(
                "support", {"metadata": {"generateName": "compaction-"}, "data": {}}
            )
        assert _compact(plane.state.etcd_url) >= orders_written + 2
        # etcd restarted: the API server's watches of etcd resume from a compacted
        # revision, so its caches list again and end every watch; a watch resumed from
        # the controller's RV is answered 410 from then on.
        local.kill(plane.state, "etcd")
        local.start_again(plane.state, "etcd")
        eventually(
            lambda: _answers_gone(plane, behind),
            timeout=60, interval=0.5, what="the API server to answer 410 for the old RV",
        )  # fmt: skip
        relay.heal()

        live = ["gone-keep", "gone-change", "gone-new"]
        try:
            eventually(
                lambda: converged(plane, log, live, [uids["gone-gone"]]),
                timeout=CONVERGE, interval=0.5, what="the changes made while the watch was cut",
            )  # fmt: skip
        except AssertionError as exc:
            where = report(plane, log, live)
            raise AssertionError(f"{exc}\n{where}\n{orders.stats}") from None
        gone, synthetic = orders.stats.gone, orders.stats.synthetic_deletions
        assert gone > before[0]  # the watch was answered 410 and listed again
        assert synthetic > before[1]  # gone-gone was learnt from the diff, not an event
        assert controller.alive()
    finally:
        controller.stop()
        log.close()
    done = _verify(url)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_api_server_killed_and_started_again(clean: Plane, tmp_path: Path) -> None:
    plane = clean
    url = f"sqlite:///{tmp_path / 'log.sqlite'}"
    first = controller_process(plane, url)
    procs = [first]
    try:
        wait_leading(first)
        names = ["crash-keep", "crash-change", "crash-gone"]
        uids = {name: plane.create(name) for name in names}
        # Killed once the passes have begun, not before: once the order to be deleted has
        # its stream in the log. An order the controller never saw leaves nothing to
        # close, and its deletion would test nothing.
        with store.open_log(url, read_only=True) as log:
            eventually(
                lambda: log.stream(uids["crash-gone"]) is not None,
                timeout=60,
                interval=0.1,
                what="a pass over the order to be deleted",
            )
        local.kill(plane.state, "kube-apiserver")
        down = time.monotonic()
        local.start_again(plane.state, "kube-apiserver")
        outage = time.monotonic() - down
        # Changes just after it is back, while the controller reconnects.
        plane.change_model("crash-change", QWEN_SMALL)
        plane.delete("crash-gone")
        plane.create("crash-new")

        # docs/faults.md: a leader keeps working across the outage unless its renewals
        # failed for the renew deadline (10 s); then it exits 1 and its restart leads.
        def restarted_if_lost() -> None:
            code = first.proc.poll()
            if code is None or len(procs) > 1:
                return
            assert code == 1, first.stderr[-3000:]
            assert "controller stopped leading" in first.stderr, first.stderr[-3000:]
            assert outage > 6.0, f"lost the Lease after a {outage:.1f}s outage"
            procs.append(controller_process(plane, url))

        live = ["crash-keep", "crash-change", "crash-new"]
        with store.open_log(url, read_only=True) as log:

            def all_converged() -> bool:
                restarted_if_lost()
                return converged(plane, log, live, [uids["crash-gone"]])

            try:
                eventually(
                    all_converged,
                    timeout=CONVERGE, interval=0.5, what="every order after the restart",
                )  # fmt: skip
            except AssertionError as exc:
                where = report(plane, log, live, [uids["crash-gone"]])
                raise AssertionError(f"{exc}\n{where}\n{procs[-1].stderr[-6000:]}") from None
        assert procs[-1].proc.poll() is None, procs[-1].stderr[-3000:]
        kept = "lost: exited 1, restarted" if len(procs) > 1 else "kept"
        sys.stderr.write(f"API server down {outage:.1f}s; leadership {kept}\n")  # with -s
    finally:
        codes = [proc.stop() for proc in procs]
    assert codes[-1] == 0, procs[-1].stderr[-3000:]
    done = _verify(url)
    assert done.returncode == 0, done.stdout + done.stderr
