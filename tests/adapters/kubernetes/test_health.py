"""The controller pod's probes: alive while it can work, ready only while leading."""

from __future__ import annotations

import httpx

from adapters.kubernetes.health import HealthServer


def test_ready_follows_leadership_and_alive_does_not() -> None:
    leading = False
    server = HealthServer(lambda: leading, host="127.0.0.1", port=0)
    server.start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        assert httpx.get(f"{base}/healthz").status_code == 200
        assert httpx.get(f"{base}/readyz").status_code == 503
        leading = True
        assert httpx.get(f"{base}/readyz").status_code == 200
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
