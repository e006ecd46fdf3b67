"""The device-allocation grace period: injectable, and counted from the plan's apply.

A pod of an earlier plan still pending through the rollout must not use up the grace of
the plan applied after it (seen end to end: the second device class was marked tried
0.15 s after the first). The verdict is an event (DeviceClassTried), so the grace the
controller passed never matters to a replay.
"""

from __future__ import annotations

import pytest

from fsm import effects
from fsm import events as ev
from fsm import observations as ob
from fsm.decide import decide
from fsm.reasons import Reason
from fsm.state import DEVICE_ALLOCATION_GRACE_SECONDS, OrderState
from tests.support.strategies import ROLLING, applied, at, planned, run


def waiting(
    t: float, since: float, grace: float = DEVICE_ALLOCATION_GRACE_SECONDS
) -> ob.WorkloadSeen:
    return ob.WorkloadSeen(
        at=at(t), desired=1, ready=0, available=0, unallocated_since=at(since), grace_seconds=grace
    )


def tried(state: OrderState, o: ob.WorkloadSeen) -> bool:
    return any(isinstance(e, ev.DeviceClassTried) for e in decide(state, o))


@pytest.mark.parametrize(
    ("t", "grace", "expected"),
    [(8.9, 3, False), (9, 3, True), (6 + DEVICE_ALLOCATION_GRACE_SECONDS, None, True)],
    ids=["within-injected", "past-injected", "default"],
)
def test_the_grace_the_controller_passes_decides(
    t: float, grace: float | None, expected: bool
) -> None:
    o = waiting(t, 6) if grace is None else waiting(t, 6, grace)
    assert tried(run(*ROLLING), o) is expected


def test_a_replanned_class_gets_its_grace_from_its_own_apply() -> None:
    first = run(*ROLLING, waiting(10, 6, grace=3))
    assert first.tried_device_classes == ("nvidia-a100",)
    second = run(planned(11, device_class="mig-1g10gb"), applied(12, "mig-1g10gb"), state=first)
    # The old pod (waiting since 6) is still pending: 13 s is past 6 + 3, not past 12 + 3.
    assert not tried(second, waiting(13, 6, grace=3))
    assert tried(second, waiting(15, 6, grace=3))
    recheck = next(
        c
        for c in effects.effects(
            run(waiting(13, 6, grace=3), state=second), allocation_grace_seconds=3
        )
        if isinstance(c, effects.Recheck)
    )
    # The last event is the apply at 12 (the pod's wait is not news): look again at 15.
    assert recheck.after_seconds == pytest.approx(3.0)


def test_a_workload_whose_plan_was_dropped_is_released_until_a_plan_is_applied() -> None:
    """Its pods waited past the grace and no plan replaced it: its Deployment goes, or its
    pods take a device the planner counts free for others the moment one frees."""
    waited = DEVICE_ALLOCATION_GRACE_SECONDS + 10
    dropped = run(*ROLLING, waiting(waited, 5))
    assert dropped.plan_in_force is None
    exhausted = run(planned(waited + 1, Reason.RESOURCE_CLAIM_EXHAUSTED), state=dropped)
    assert exhausted.plan is None
    commands = effects.effects(exhausted)
    assert effects.ReleaseWorkload() in commands
    assert not [c for c in commands if isinstance(c, effects.ApplyWorkload)]
    # A plan on another class replaces it: applied, not released.
    replanned = run(planned(waited + 2, device_class="nvidia-l4"), state=dropped)
    assert effects.ReleaseWorkload() not in effects.effects(replanned)
    # Until anything is applied there is nothing to release.
    assert effects.ReleaseWorkload() not in effects.effects(run(*ROLLING[:-1]))
    back = run(applied(waited + 3, "nvidia-l4"), state=replanned)
    assert effects.ReleaseWorkload() not in effects.effects(back)
