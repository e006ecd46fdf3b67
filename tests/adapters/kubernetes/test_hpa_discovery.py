"""Which HPA API the controller writes, from the server's `autoscaling` group: the
newest it serves, and never a failed start when it serves none (an optional kind).
The real 1.20 server's answer is in test_rendering_cluster.py; here, the other servers'."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client

from adapters.kubernetes import oldservers


def _serving(monkeypatch: pytest.MonkeyPatch, answer: Any) -> None:
    class Autoscaling:
        def __init__(self, _api: Any) -> None:
            pass

        def get_api_group(self) -> Any:
            if isinstance(answer, Exception):
                raise answer
            versions = [SimpleNamespace(group_version=v) for v in answer]
            return SimpleNamespace(versions=versions)

    monkeypatch.setattr(client, "AutoscalingApi", Autoscaling)


@pytest.mark.parametrize(
    ("served", "chosen"),
    [
        (["autoscaling/v1", "autoscaling/v2", "autoscaling/v2beta2"], "autoscaling/v2"),
        (["autoscaling/v1", "autoscaling/v2beta2"], "autoscaling/v2beta2"),  # before 1.23
        (["autoscaling/v1"], "autoscaling/v2"),  # none of ours: the start goes on
    ],
)
def test_the_newest_served_and_never_a_failed_start(
    monkeypatch: pytest.MonkeyPatch, served: list[str], chosen: str
) -> None:
    _serving(monkeypatch, served)
    assert oldservers.hpa_api_version(None) == chosen  # type: ignore[arg-type]


def test_a_server_without_the_autoscaling_group_does_not_hold_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _serving(monkeypatch, client.ApiException(status=404, reason="Not Found"))
    assert oldservers.hpa_api_version(None) == "autoscaling/v2"  # type: ignore[arg-type]
    _serving(monkeypatch, client.ApiException(status=503, reason="Unavailable"))
    with pytest.raises(client.ApiException):  # an outage is not an answer
        oldservers.hpa_api_version(None)  # type: ignore[arg-type]
