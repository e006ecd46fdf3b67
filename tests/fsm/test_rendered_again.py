"""An edit the planner reads nothing of is the plan the order has, rendered again.

The planner reads the model's facts and contract, the accelerator policy, the minimum
replicas, the priority class and, through the recipe, whether a token is checked
(`PlanRequest`). An edit of anything else (how the endpoint is published, the replica
ceiling, the update strategy, the Secret the hub token is read from) asks it nothing
new. A replan then is offered no room but elsewhere (SPEC §3.1): on a full cluster it
failed, and the edit never reached the workload (a public Ingress kept after a switch to
ClusterLocal, an endpoint left without a token), or on a free one it moved a serving
order for nothing.
"""

from __future__ import annotations

from dataclasses import replace

from fsm import observations as ob
from fsm.effects import ApplyWorkload, effects
from fsm.reasons import ConditionStatus, ConditionType, Reason
from fsm.state import OrderState, serving_basis
from fsm.status import render_status
from fsm.values import (
    ClassOutcome,
    EffectivePolicy,
    EndpointType,
    ExposurePolicy,
    ExposureType,
    ModelOutcome,
    ModelRef,
    ModelSource,
    PlanOutcome,
    UpdateStrategy,
)
from tests.support.strategies import (
    REPLANNED_AND_FAILED,
    SERVING,
    at,
    facts,
    klass,
    model,
    plan,
    planned,
    policy,
    run,
    spec,
)

NO_ROOM = (Reason.NO_CAPACITY, "no A100 free")


def _class_edit(t: float, new: EffectivePolicy) -> tuple[ob.Observation, ...]:
    """The class edited (a new generation of it, the order's spec unchanged)."""
    return (
        ob.ClassJudged(at=at(t), outcome=ClassOutcome(reason=Reason.CLASS_ADMITTED, policy=new)),
    )


def _apply(state: OrderState) -> ApplyWorkload:
    (apply,) = [c for c in effects(state) if isinstance(c, ApplyWorkload)]
    return apply


def _planned(state: OrderState) -> tuple[ConditionStatus, Reason]:
    cond = state.condition(ConditionType.PLANNED)
    assert cond is not None
    return cond.status, cond.reason


def test_withdrawing_public_exposure_is_applied_on_the_place_held_with_no_room_elsewhere() -> None:
    serving = run(*SERVING)
    local = policy().model_copy(
        update={"exposure": ExposurePolicy(type=ExposureType.CLUSTER_LOCAL)}
    )
    edited = run(*_class_edit(20, local), planned(21, *NO_ROOM), state=serving)
    assert edited.plan == edited.plan_in_force == serving.plan_in_force
    assert _planned(edited) == (ConditionStatus.TRUE, Reason.PLAN_COMPUTED)
    assert edited.replan_count == 0  # nothing was recalculated
    apply = _apply(edited)
    assert (apply.repair, apply.plan, apply.policy) == (False, serving.plan_in_force, local)
    assert apply.auth_secret_name is None  # the token goes with the exposure that checked it
    done = run(ob.ApplySucceeded(at=at(22), plan=plan()), state=edited)
    assert done.applied_basis is not None and done.applied_basis.policy == local
    assert _apply(done).repair  # applied: from now on compared, not rolled out again
    # What the endpoint observer, the probe and the token Secret's keeping read:
    assert serving_basis(done).policy == local


def test_a_new_replica_ceiling_reaches_the_workload_and_the_status() -> None:
    serving = run(*SERVING)
    wider = policy(max_replicas=4)
    edited = run(*_class_edit(20, wider), planned(21, *NO_ROOM), state=serving)
    assert _apply(edited).policy.constraints.max_replicas == 4
    done = run(ob.ApplySucceeded(at=at(22), plan=plan()), state=edited)
    assert render_status(done)["constraints"]["maxReplicas"] == 4
    assert done.replan_count == 0


def test_a_token_asked_of_a_held_recipe_that_cannot_take_one_is_a_replan() -> None:
    """Token authentication on a runtime that cannot be given a key: the held plan's
    recipe does not answer it; the planner must find one that can (here it fails, and
    the order serves on as it was: LaunchPlanInForce)."""
    serving = run(*SERVING)
    open_ = policy(token=False)
    keyless = run(*_class_edit(10, open_), planned(11), state=serving)  # answered: no key
    done = run(ob.ApplySucceeded(at=at(12), plan=plan()), state=keyless)
    tokened = policy(token=True)
    judged = ob.PlanJudged(
        at=at(21),
        outcome=planned(21, *NO_ROOM).outcome,
        keyless_recipes=(plan().recipe,),
    )
    edited = run(*_class_edit(20, tokened), judged, state=done)
    assert _planned(edited) == (ConditionStatus.TRUE, Reason.LAUNCH_PLAN_IN_FORCE)
    assert edited.replan_count == 1
    # The same edit on a recipe that takes a key is the held plan's.
    answered = run(*_class_edit(20, tokened), planned(21, *NO_ROOM), state=done)
    assert _planned(answered) == (ConditionStatus.TRUE, Reason.PLAN_COMPUTED)
    assert _apply(answered).auth_secret_name is not None


def test_an_update_strategy_edit_is_rendered_on_the_place_held() -> None:
    serving = run(*SERVING)
    recreate = policy().model_copy(update={"update_strategy": UpdateStrategy.RECREATE})
    edited = run(*_class_edit(20, recreate), planned(21, *NO_ROOM), state=serving)
    assert _apply(edited).policy.update_strategy is UpdateStrategy.RECREATE


def test_an_auth_secret_ref_edit_renders_the_held_plan_with_the_new_secret() -> None:
    serving = run(*SERVING)
    renamed = ModelRef(
        src=ModelSource.HUGGING_FACE,
        name="Qwen/Qwen2.5-7B-Instruct",
        auth_secret_name="hf-new",
    )
    edit = replace(spec(20, 2), model_ref=renamed)
    edited = run(edit, klass(21), model(22), planned(23, *NO_ROOM), state=serving)
    assert edited.replan_count == 0
    apply = _apply(edited)
    assert (apply.plan, apply.model_ref) == (serving.plan_in_force, renamed)


def test_an_edit_undone_is_still_nothing_to_apply() -> None:
    """Rendered as the plan in force was applied: compared (a repair), not rolled out."""
    serving = run(*SERVING)
    local = policy().model_copy(
        update={"exposure": ExposurePolicy(type=ExposureType.CLUSTER_LOCAL)}
    )
    edited = run(*_class_edit(20, local), planned(21, *NO_ROOM), state=serving)
    back = run(*_class_edit(30, policy()), planned(31, *NO_ROOM), state=edited)
    assert _apply(back).repair
    assert back.plan_revision == back.applied_revision


def test_a_fact_the_planner_does_not_read_changing_upstream_moves_nothing() -> None:
    """The hub re-read: a new chat template or context window at a new commit. Not a
    question for the planner: the order stays where it runs, room elsewhere or not."""
    serving = run(*SERVING)
    for changed in (
        {"context_window_tokens": 131072},
        {"supports_tool_calling": False},
        {"architecture": "Qwen2ForCausalLM"},
    ):
        reread = facts().model_copy(update={"revision": "new-commit", **changed})
        judged = ob.ModelJudged(
            at=at(20),
            outcome=ModelOutcome(
                reason=Reason.MODEL_RESOLVED, facts=reread, endpoint_type=EndpointType.CHAT
            ),
        )
        elsewhere = PlanOutcome(
            reason=Reason.PLAN_COMPUTED, plan=plan(devices=("gpu.nvidia.com/n1/a100-1",))
        )
        moved = run(judged, ob.PlanJudged(at=at(21), outcome=elsewhere), state=serving)
        assert _apply(moved).plan == serving.plan_in_force, changed
        assert moved.replan_count == 0


def test_a_recipe_replaced_and_not_applied_yet_is_kept_by_the_plan_that_answers() -> None:
    """A pass sees the recipe withdrawn (its replacement planned, not applied) and a class
    edit the planner reads nothing of: the answer is the place held on the new recipe,
    not the withdrawn one (whose apply would fail), nor a tool-calling flag gone stale."""
    serving = run(*SERVING)
    local = policy().model_copy(
        update={"exposure": ExposurePolicy(type=ExposureType.CLUSTER_LOCAL)}
    )
    withdrawn = ob.RecipeUnusable(
        at=at(20),
        recipe=plan().recipe,
        message="launch recipe gone",
        replacement="vllm-nvidia-twin",
        tool_calling_supported=False,
    )
    edited = run(*_class_edit(20, local), withdrawn, planned(21, *NO_ROOM), state=serving)
    apply = _apply(edited)
    assert (apply.plan.recipe, apply.plan.tool_calling_supported) == ("vllm-nvidia-twin", False)
    assert apply.plan.devices == plan().devices and apply.policy == local
    assert edited.replan_count == 0


def test_a_recipe_replaced_under_a_failed_replan_survives_its_retries() -> None:
    failed = run(*REPLANNED_AND_FAILED)
    edited = ob.RecipeEdited(at=at(30), recipe=plan().recipe, tool_calling_supported=False)
    retried = run(edited, planned(31, Reason.NO_CAPACITY, "no A100 free (2 seen)"), state=failed)
    assert retried.plan is not None and retried.plan.tool_calling_supported is False
    assert _apply(retried).plan.tool_calling_supported is False
    assert _planned(retried) == (ConditionStatus.TRUE, Reason.LAUNCH_PLAN_IN_FORCE)


def test_an_edit_the_planner_reads_nothing_of_is_no_recalculation_whatever_the_retry_says() -> None:
    failed = run(*REPLANNED_AND_FAILED)
    assert failed.replan_count == 1
    wider = policy(max_replicas=4)
    for message in ("no A100 free", "no A100 free (3 seen)"):
        retried = run(*_class_edit(30, wider), planned(31, *NO_ROOM[:1], message), state=failed)
        assert retried.replan_count == 1, message
