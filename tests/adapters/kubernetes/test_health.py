"""The controller pod's probes: alive while it can work; ready as leader and as standby alike."""

from __future__ import annotations

import httpx

from adapters.kubernetes.health import HealthServer


def test_ready_is_not_leadership_and_alive_is_neither() -> None:
    serving, leading = False, False
    server = HealthServer(lambda: serving, leading=lambda: leading, host="127.0.0.1", port=0)
    server.start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        assert httpx.get(f"{base}/healthz").status_code == 200
        assert httpx.get(f"{base}/readyz").status_code == 503
        serving = True  # campaigning for the Lease: a standby takes part in a rollout
        standby = httpx.get(f"{base}/readyz")
        assert (standby.status_code, standby.text) == (200, "standby\n")
        leading = True
        leader = httpx.get(f"{base}/readyz")
        assert (leader.status_code, leader.text) == (200, "leading\n")
        serving = False  # leadership lost: the process is on its way out
        assert httpx.get(f"{base}/readyz").status_code == 503
        assert httpx.get(f"{base}/healthz").status_code == 200
        assert httpx.get(f"{base}/metrics-not-here").status_code == 404
    finally:
        server.stop()


def test_alive_fails_once_the_controller_cannot_work() -> None:
    alive = True
    server = HealthServer(lambda: False, alive=lambda: alive, host="127.0.0.1", port=0)
    server.start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        assert httpx.get(f"{base}/healthz").status_code == 200
        alive = False  # e.g. its caches did not sync and it gave the Lease up
        answer = httpx.get(f"{base}/healthz")
        assert (answer.status_code, answer.text) == (503, "cannot work\n")
    finally:
        server.stop()
