"""What the order's pods say of a runtime container that does not start (observing.py).

Said the same from one try to the next, or each back-off step would be a new event and
a status write: a crash loop's changing back-off and a pull's changing error are left
out, and ErrImagePull and ImagePullBackOff, which take turns, read as one."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.kubernetes.observing import workload_pods
from adapters.kubernetes.world import POD_SHAPE, shaped


def _pod(name: str, *containers: dict[str, Any]) -> dict[str, Any]:
    pod = {
        "metadata": {"name": name, "namespace": "support", "uid": f"uid-{name}"},
        "status": {"phase": "Running", "containerStatuses": list(containers)},
    }
    return dict(shaped(pod, POD_SHAPE))  # as the cache keeps it


def _waiting(reason: str, message: str = "", **more: Any) -> dict[str, Any]:
    return {
        "name": "runtime",
        "image": "registry.example/vllm:0.9",
        "state": {"waiting": {"reason": reason, "message": message}},
        **more,
    }


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (
            _waiting(
                "CrashLoopBackOff",
                "back-off 40s restarting failed container=runtime pod=llm-1",
                lastState={"terminated": {"reason": "OOMKilled", "exitCode": 137}},
            ),
            'container "runtime": CrashLoopBackOff (last exit: OOMKilled)',
        ),
        (
            _waiting("ErrImagePull", "rpc error: dial tcp: i/o timeout"),
            'container "runtime": ImagePullBackOff (image "registry.example/vllm:0.9")',
        ),
        (
            _waiting("ImagePullBackOff", 'Back-off pulling image "registry.example/vllm:0.9"'),
            'container "runtime": ImagePullBackOff (image "registry.example/vllm:0.9")',
        ),
        (
            _waiting("CreateContainerConfigError", 'secret "llm-auth" not found'),
            'container "runtime": CreateContainerConfigError: secret "llm-auth" not found',
        ),
        (_waiting("ContainerCreating"), None),  # a start under way
        ({"name": "runtime", "state": {"running": {"startedAt": "2026-12-07T10:00:00Z"}}}, None),
    ],
    ids=["crash loop", "pull error", "pull back-off", "config error", "creating", "running"],
)
def test_a_container_that_does_not_start_is_said_the_same_each_try(
    status: dict[str, Any], said: str | None
) -> None:
    assert workload_pods([_pod("llm-1", status)]).not_starting == said


def test_of_several_pods_one_is_told_the_same_whichever_comes_first() -> None:
    crash = _waiting("CrashLoopBackOff")
    pull = _waiting("ImagePullBackOff")
    one = workload_pods([_pod("a", crash), _pod("b", pull)]).not_starting
    assert one == workload_pods([_pod("b", pull), _pod("a", crash)]).not_starting
