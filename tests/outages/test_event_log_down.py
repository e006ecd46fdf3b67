"""The event log's PostgreSQL stopped for 30 s: under load, and when a standby could lead.

A private server (tests/outages/private_pg.py) is really stopped — sessions terminated,
new connections refused — and started again; the shared one on :5432 is left alone.
Oracles: the controller process never dies of it (a leader keeps its Lease, a standby
does not take one it could not use); after the return every order converges
(plane.settled: live status at its generation and equal to its stream's replay), the
deletion made meanwhile is recorded, `ai-inference verify` passes; passes that met the
log down parked at the log gate and one prober asked for the log (counted).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest

import store
from adapters import metrics
from tests.outages.plane import (
    QWEN_SMALL,
    Plane,
    controller_process,
    converged,
    wait_leading,
)
from tests.outages.private_pg import PrivatePostgres
from tests.support.controller_process import REPO
from tests.support.polling import eventually

pytestmark = pytest.mark.cluster

OUTAGE = 30.0
CONVERGE = 240.0  # a bound, not a time


@pytest.fixture(scope="module")
def pg() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    try:
        server.start()
        yield server
    finally:
        server.remove()


@pytest.fixture
def pg_url(pg: PrivatePostgres) -> Iterator[str]:
    """A fresh database on the private server; the server is running again afterwards."""
    name = f"outage_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(
        host="127.0.0.1", port=pg.port, user="postgres", dbname="postgres", autocommit=True
    ) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield pg.url.rsplit("/", 1)[0] + f"/{name}"
    if not pg.running():
        pg.start()
    with psycopg.connect(
        host="127.0.0.1", port=pg.port, user="postgres", dbname="postgres", autocommit=True
    ) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _verify(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "adapters.cli.main", "verify", f"--store={url}"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip


def test_the_log_down_for_30s_under_load(clean: Plane, pg: PrivatePostgres, pg_url: str) -> None:
    plane = clean
    log = store.open_log(pg_url)
    controller = plane.controller(log)
    try:
        controller.start(wait=60)
        uids = {name: plane.create(name) for name in ("db-keep", "db-change", "db-gone")}
        eventually(
            lambda: converged(plane, log, uids),
            timeout=CONVERGE, interval=0.5, what="three orders Ready",
        )  # fmt: skip

        pg.stop()
        # Load while the log is down: a new order, a new generation, a deletion.
        uids["db-new"] = plane.create("db-new")
        for step in (
            lambda: plane.change_model("db-change", QWEN_SMALL),
            lambda: plane.delete("db-gone"),
            lambda: None,
        ):
            time.sleep(OUTAGE / 3)
            step()
            # No crash: the leader stays, and keeps its Lease (it is not the log's).
            assert controller.alive() and controller.still_leading()
            assert metrics.REGISTRY.get_sample_value("ai_inference_log_unreachable") == 1
        gate = controller.log_gate.stats
        during = (gate.closings, gate.failed_passes, gate.probes)
        pg.start()
        back = time.monotonic()
        # The backlog drains once the log answers: the prober's next read (at most 10 s
        # apart) opens the gate and enqueues every parked order at once (before: per-order
        # backoffs, bumped by every wake-up, of 80-160 s after a 30 s outage).
        eventually(lambda: not controller.log_gate.closed, timeout=30, what="the gate open")
        reopened = time.monotonic() - back
        eventually(
            lambda: converged(
                plane, log, ["db-keep", "db-change", "db-new"], [uids["db-gone"]]
            ),
            timeout=CONVERGE, interval=0.5, what="the backlog to drain after the log's return",
        )  # fmt: skip
        assert controller.alive() and controller.still_leading()
        assert metrics.REGISTRY.get_sample_value("ai_inference_log_unreachable") == 0
    finally:
        controller.stop()
        log.close()
    # Passes met the log down once each and parked; one prober asked for the log on its
    # backoff (0.5 s doubling to 10 s: ~7 reads in 30 s), not a retry per order.
    closings, failed, probes = during
    assert closings == 1 and 1 <= failed <= 4 and probes <= 10, during
    assert reopened < 15, f"the gate opened {reopened:.0f}s after the log's return"
    done = _verify(pg_url)
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_standby_leads_while_the_log_is_down(
    clean: Plane, pg: PrivatePostgres, pg_url: str
) -> None:
    plane = clean
    first = controller_process(plane, pg_url)
    procs = [first]
    try:
        wait_leading(first)
        uids = {name: plane.create(name) for name in ("takeover-a", "takeover-b")}
        with store.open_log(pg_url, read_only=True) as log:
            eventually(
                lambda: converged(plane, log, uids),
                timeout=CONVERGE, interval=0.5, what="two orders Ready",
            )  # fmt: skip
        second = controller_process(plane, pg_url)
        procs.append(second)
        eventually(lambda: second.said_at("campaigning") is not None, timeout=60, what="a standby")

        pg.stop()
        assert first.stop() == 0, first.stderr[-3000:]  # SIGTERM: the Lease is released
        plane.create("takeover-new")
        # The standby could take the free Lease at once, but not the log's epoch: it must
        # not lead (a leader that cannot append wedges the module) and must not die.
        late = controller_process(plane, pg_url)
        procs.append(late)
        deadline = time.monotonic() + OUTAGE
        while time.monotonic() < deadline:
            assert second.leading_at() is None, second.stderr[-3000:]
            assert second.proc.poll() is None, second.stderr[-3000:]
            assert plane.holder() == ""
            time.sleep(1.0)
        # A controller started while the log is down exits 1 at once, saying why.
        assert late.wait(60) == 1
        assert "cannot open the event log" in late.stderr, late.stderr[-3000:]
        assert "Traceback" not in late.stderr, late.stderr[-3000:]

        pg.start()
        wait_leading(second, timeout=60)
        with store.open_log(pg_url, read_only=True) as log:
            eventually(
                lambda: converged(plane, log, ["takeover-a", "takeover-b", "takeover-new"]),
                timeout=CONVERGE, interval=0.5, what="the orders under the new leader",
            )  # fmt: skip
    finally:
        codes = [proc.stop() for proc in procs]
    assert codes[1] == 0, second.stderr[-3000:]
    done = _verify(pg_url)
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_standby_leads_while_the_log_takes_no_writes(
    clean: Plane, pg: PrivatePostgres, pg_url: str
) -> None:
    """The database answers but refuses writes (a fail-over's old primary, a database
    set read-only): the standby's look at the log before it takes the Lease read the
    epoch as any reader may, took the Lease, failed to claim the epoch and exited 1, and
    so again after each restart. It must ask as an append would, and wait."""
    plane = clean
    name = pg_url.rsplit("/", 1)[1]
    first = controller_process(plane, pg_url)
    procs = [first]
    try:
        wait_leading(first)
        second = controller_process(plane, pg_url)
        procs.append(second)
        eventually(lambda: second.said_at("campaigning") is not None, timeout=60, what="a standby")
        pg.set_read_only(name, True)
        assert first.stop() == 0, first.stderr[-3000:]
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            assert second.leading_at() is None, second.stderr[-3000:]
            assert second.proc.poll() is None, second.stderr[-3000:]
            assert plane.holder() == ""
            time.sleep(1.0)
        pg.set_read_only(name, False)
        wait_leading(second, timeout=60)
    finally:
        codes = [proc.stop() for proc in procs]
    assert codes[1] == 0, second.stderr[-3000:]
