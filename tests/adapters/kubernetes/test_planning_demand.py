"""Other orders' plans as demand in the planner's snapshot (adapters/kubernetes/planning.py):
a plan counts for as long as a workload runs it, whatever happened to the order's class.

Against the pass's fake seams (tests/adapters/kubernetes/test_pass.py's `Bed`): one A100,
an order planned onto it whose pod still waits for its claim, then its class gone.
"""

from __future__ import annotations

from pathlib import Path

from fsm import events as ev
from tests.adapters.kubernetes.test_pass import Bed, external_token_class
from tests.support import fakes


def test_a_running_plan_whose_class_fails_still_holds_its_devices(tmp_path: Path) -> None:
    bed = Bed(tmp_path, a100s=1)
    klass = fakes.put(bed.world, external_token_class("first-class"))
    first = bed.order("first", klass="first-class")
    bed.settle(first)
    assert bed.events(first, ev.WorkloadApplied)  # its pod waits: no claim allocated yet
    fakes.drop(bed.world, klass)
    bed.settle(first)
    assert bed.events(first, ev.ClassFailed)
    # The workload keeps running on what it was applied with (fsm.effects: the repair),
    # so its pod still waits for the A100 its plan named...
    assert bed.child("Deployment", "first") is not None
    second = bed.order("second")
    bed.settle(second, passes=1)
    # ...and the A100 is not promised to a second order as well.
    assert not bed.events(second, ev.PlanComputed)
    assert [e.reason.value for e in bed.events(second, ev.PlanFailed)] == ["NoCapacity"]
    bed.log.close()
