"""The controller pod's probes: alive always, ready only while leading."""

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
