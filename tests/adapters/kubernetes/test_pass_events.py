"""The Kubernetes Events a pass records on the order: what `kubectl describe` shows."""

from __future__ import annotations

from pathlib import Path

from tests.adapters.kubernetes.test_capacity_routing import _serving
from tests.adapters.kubernetes.test_pass import Bed


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
