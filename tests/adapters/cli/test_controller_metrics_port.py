"""A taken metrics port costs the controller its /metrics, not its work, and says so."""

from __future__ import annotations

import logging
import socket

import httpx

from adapters.cli import controller_cmd


def test_a_busy_port_is_logged_and_metrics_are_off(caplog) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))  # 0.0.0.0:port, where the controller binds, is then taken
        holder.listen()
        port = holder.getsockname()[1]
        with caplog.at_level(logging.ERROR):
            assert controller_cmd._serve_metrics(port) is None
    assert f"cannot serve /metrics on port {port}" in caplog.text


def test_a_free_port_serves() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    served = controller_cmd._serve_metrics(port)
    assert served is not None
    try:
        answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert answer.status_code == 200 and "ai_inference_leader " in answer.text
    finally:
        served.stop()
