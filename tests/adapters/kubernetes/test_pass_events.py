"""The Kubernetes Events a pass records on the order: what `kubectl describe` shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsm.identity import OrderRef
from fsm.reasons import Reason
from tests.adapters.kubernetes.test_capacity_routing import _serving
from tests.adapters.kubernetes.test_pass import Bed
from tests.support.strategies import SERVING, klass, model, planned, run, spec


def test_a_healthy_rollout_tells_its_verdicts_not_its_steps(tmp_path: Path) -> None:
    """Kubernetes Events tell each judged verdict; `RolloutInProgress` and
    `AwaitingFirstProbe`, the steps every rollout passes, stay in the conditions (as
    Warnings they would alarm on every healthy order)."""
    bed = Bed(tmp_path, a100s=1)
    uid = bed.order("llm")
    bed.settle(uid)
    _serving(bed, uid, "llm", "gpu-0")
    bed.settle(uid)
    state = bed.reconciler.state_of(uid)
    shown = {str(c.reason) for c in state.conditions}
    assert "AwaitingFirstProbe" in shown  # the step is there, in the conditions
    told = [reason for reason, _ in bed.writer.events]
    assert told == ["ClassAdmitted", "ModelResolved", "PlanComputed", "WorkloadAvailable"]


@pytest.mark.parametrize(
    ("failed", "kind"),
    [(Reason.PLACEMENT_UNDECIDABLE, "Warning"), (Reason.NO_CAPACITY, "Normal")],
)
def test_a_held_plan_is_a_warning_when_its_recalculation_needs_someone(
    tmp_path: Path, failed: Reason, kind: str
) -> None:
    """Planned stays True on the plan in force; whether its Event alarms is the failed
    recalculation's to say: a class whose selection cannot be judged needs the admin,
    no room is waited for."""
    bed = Bed(tmp_path)
    serving = run(*SERVING)
    edited = (
        spec(20, 2, name="meta-llama/Llama-3.1-8B"),
        klass(21),
        model(22, name="meta-llama/Llama-3.1-8B"),
    )
    held = run(*edited, planned(23, failed, "recalculation failed"), state=serving)
    bed.reconciler.actor.tell(OrderRef("llm", "support", "uid-1"), serving, held)
    assert ("LaunchPlanInForce", kind) in bed.writer.event_types


def test_a_held_plan_whose_failure_comes_to_need_the_admin_is_told_again(tmp_path: Path) -> None:
    """Planned stays True with LaunchPlanInForce while its recalculation's failure moves
    from no room (waited for) to a selection that cannot be judged (the admin's): the
    same verdict in new words was no news, and the Normal Event of the wait stood."""
    bed = Bed(tmp_path)
    order = OrderRef("llm", "support", "uid-1")
    serving = run(*SERVING)
    edited = (
        spec(20, 2, name="meta-llama/Llama-3.1-8B"),
        klass(21),
        model(22, name="meta-llama/Llama-3.1-8B"),
    )
    waiting = run(*edited, planned(23, Reason.NO_CAPACITY, "no room"), state=serving)
    needs_admin = run(
        planned(24, Reason.PLACEMENT_UNDECIDABLE, "the selection cannot be judged"),
        state=waiting,
    )
    bed.reconciler.actor.tell(order, serving, waiting)
    assert ("LaunchPlanInForce", "Normal") in bed.writer.event_types
    told = len(bed.writer.event_types)
    bed.reconciler.actor.tell(order, waiting, needs_admin)
    assert ("LaunchPlanInForce", "Warning") in bed.writer.event_types[told:]
    told = len(bed.writer.event_types)
    again = run(planned(25, Reason.PLACEMENT_UNDECIDABLE, "still not judged"), state=needs_admin)
    bed.reconciler.actor.tell(order, needs_admin, again)
    assert bed.writer.event_types[told:] == []  # the same one to act: no news
