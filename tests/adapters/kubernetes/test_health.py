"""The controller pod's probes: alive always, ready as leader and as standby alike."""

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
