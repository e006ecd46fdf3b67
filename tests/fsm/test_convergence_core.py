"""The core's side of convergence: a model-source blip keeps a resolved order's facts, a
new upstream revision alone does not replan, a tried device class is tried again when it
offers more, and pods pending for CPU or taints are named apart from devices."""

from __future__ import annotations

from fsm import effects
from fsm import events as ev
from fsm import observations as ob
from fsm.decide import STALE_FACTS_NOTE, decide, needs_plan
from fsm.reasons import ConditionStatus, ConditionType, Phase, Reason
from fsm.status import render_status
from fsm.values import ModelOutcome
from tests.support.strategies import (
    AVAILABLE,
    REPLANNED_AND_FAILED,
    ROLLING,
    SERVING,
    applied,
    at,
    facts,
    klass,
    model,
    run,
    spec,
)

R = Reason


def unreachable(t: float) -> ob.ModelJudged:
    return ob.ModelJudged(
        at=at(t),
        outcome=ModelOutcome(reason=Reason.MODEL_SOURCE_UNREACHABLE, message="connect refused"),
    )


def test_a_hub_blip_keeps_a_ready_order_ready_and_says_so() -> None:
    blip = run(*SERVING, unreachable(20))
    cond = blip.condition(ConditionType.MODEL_RESOLVED)
    assert cond is not None
    assert (cond.status, cond.reason) == (ConditionStatus.TRUE, Reason.MODEL_RESOLVED)
    assert STALE_FACTS_NOTE in cond.message and "connect refused" in cond.message
    assert blip.phase is Phase.READY
    assert blip.model is not None and blip.model.facts == facts()
    assert not needs_plan(blip)
    # The same blip seen again adds nothing; the hub back restores the plain message.
    assert decide(blip, unreachable(21)) == []
    back = run(model(22), state=blip)
    restored = back.condition(ConditionType.MODEL_RESOLVED)
    assert restored is not None and STALE_FACTS_NOTE not in restored.message
    assert back.replan_count == run(*SERVING).replan_count


def test_a_pending_order_that_never_resolved_does_fail_on_a_blip() -> None:
    state = run(spec(0), klass(1), unreachable(2))
    cond = state.condition(ConditionType.MODEL_RESOLVED)
    assert cond is not None and cond.reason is Reason.MODEL_SOURCE_UNREACHABLE


def test_a_new_upstream_revision_alone_does_not_replan() -> None:
    serving = run(*SERVING)
    assert serving.model is not None
    newer = facts().model_copy(update={"revision": "f00d"})
    outcome = ModelOutcome(
        reason=Reason.MODEL_RESOLVED, facts=newer, endpoint_type=serving.model.endpoint_type
    )
    assert decide(serving, ob.ModelJudged(at=at(20), outcome=outcome)) == []


def test_pods_pending_for_cpu_do_not_use_up_the_device_grace() -> None:
    seen = ob.WorkloadSeen(
        at=at(500), desired=1, ready=0, available=0, unschedulable="0/1 nodes: Insufficient cpu."
    )
    state = run(*ROLLING, seen)
    cond = state.condition(ConditionType.WORKLOAD_READY)
    assert cond is not None and cond.reason is Reason.PODS_UNSCHEDULABLE
    assert "Insufficient cpu" in cond.message
    assert state.tried_device_classes == ()


def _tried(free: int) -> tuple[ob.Observation, ...]:
    return (
        *ROLLING,
        ob.WorkloadSeen(
            at=at(200),
            desired=1,
            ready=0,
            available=0,
            unallocated_since=at(6),
            grace_seconds=120,
            free_units=free,
        ),
    )


def test_a_tried_class_is_tried_again_when_it_offers_more() -> None:
    tried = run(*_tried(0))
    assert tried.tried_device_classes == ("nvidia-a100",)
    assert tried.tried_free_units == (("nvidia-a100", 0),)
    same = ob.CapacitySeen(at=at(210), free_units=(("nvidia-a100", 0),))
    assert decide(tried, same) == []
    more = ob.CapacitySeen(at=at(220), free_units=(("nvidia-a100", 100), ("other", 400)))
    (retried,) = decide(tried, more)
    assert isinstance(retried, ev.DeviceClassRetried) and retried.device_class == "nvidia-a100"
    after = run(more, state=tried)
    assert after.tried_device_classes == () and after.tried_free_units == ()


def test_classes_not_tried_are_never_retried() -> None:
    state = run(*AVAILABLE)
    assert decide(state, ob.CapacitySeen(at=at(30), free_units=(("nvidia-a100", 900),))) == []


def test_a_token_name_taken_holds_every_apply_until_the_orders_own_secret_is_back() -> None:
    """A serving order whose token Secret was replaced by one not its own: nothing is
    applied (a render would read that Secret's uid and value), and its own Secret made
    again under the same name is news that lets the apply through."""
    taken = ob.ApplyFailed(
        at=at(20),
        message="Secret support/llm-auth exists and is not owned by this order",
        reason=Reason.AUTH_SECRET_CONFLICT,
    )
    held = run(*SERVING, taken)
    cond = held.condition(ConditionType.WORKLOAD_READY)
    assert cond is not None
    assert (cond.status, cond.reason) == (ConditionStatus.FALSE, Reason.AUTH_SECRET_CONFLICT)
    assert not [c for c in effects.effects(held) if isinstance(c, effects.ApplyWorkload)]
    assert held.auth_secret_name is not None
    again = ob.AuthSecretSeen(at=at(21), name=held.auth_secret_name)
    assert [type(e) for e in decide(held, again)] == [ev.AuthSecretIssued]
    back = run(again, state=held)
    assert back.apply_error is None
    applies = [c for c in effects.effects(back) if isinstance(c, effects.ApplyWorkload)]
    assert applies and applies[0].auth_secret_name == held.auth_secret_name
    assert decide(back, ob.AuthSecretSeen(at=at(22), name=held.auth_secret_name)) == []


def _withdrawn(
    t: float, recipe: str = "vllm-nvidia-bf16", replacement: str = "vllm-spare"
) -> ob.RecipeUnusable:
    return ob.RecipeUnusable(
        at=at(t),
        recipe=recipe,
        message=f"launch recipe {recipe!r} is gone",
        replacement=replacement,
        tool_calling_supported=False,
    )


def test_a_withdrawn_recipe_is_replaced_on_the_same_place_once() -> None:
    """A recipe deleted or refused under a serving order: the same place on the recipe
    given, applied as a new plan revision; not a replan. A recipe the plan does not name
    is no news, and the replacement seen again adds nothing."""
    serving = run(*SERVING)
    assert decide(serving, _withdrawn(20, "llamacpp-nvidia-gguf")) == []
    (replaced,) = decide(serving, _withdrawn(20))
    assert isinstance(replaced, ev.RecipeReplaced) and replaced.recipe == "vllm-nvidia-bf16"
    assert "'vllm-spare' instead" in replaced.message
    after = run(_withdrawn(20), state=serving)
    assert serving.plan is not None and after.plan is not None
    assert after.plan == serving.plan.model_copy(
        update={"recipe": "vllm-spare", "tool_calling_supported": False}
    )
    assert after.plan.devices == serving.plan.devices  # the place it holds
    assert decide(after, _withdrawn(21)) == []
    assert not needs_plan(after) and after.replan_count == serving.replan_count
    (apply,) = [c for c in effects.effects(after) if isinstance(c, effects.ApplyWorkload)]
    assert apply.plan == after.plan and not apply.repair
    assert after.phase is Phase.READY  # still serving while it rolls out

    rolled = run(ob.ApplySucceeded(at=at(22), plan=after.plan), state=after)
    assert rolled.plan_in_force == after.plan and rolled.applied_revision == rolled.plan_revision


def test_a_withdrawn_recipe_under_a_failed_replan_is_replaced_in_the_plan_in_force() -> None:
    """The replan keeps failing (LaunchPlanInForce) and is still retried; the plan in
    force moves to the replacement recipe meanwhile, with the basis it was applied with."""
    failed = run(*REPLANNED_AND_FAILED)
    assert failed.plan == failed.plan_in_force and needs_plan(failed)
    after = run(_withdrawn(30), state=failed)
    assert after.plan is not None and after.plan.recipe == "vllm-spare"
    (apply,) = [c for c in effects.effects(after) if isinstance(c, effects.ApplyWorkload)]
    assert apply.plan == after.plan and apply.model_ref == failed.applied_basis.model_ref  # type: ignore[union-attr]
    rolled = run(ob.ApplySucceeded(at=at(31), plan=after.plan), state=after)
    cond = rolled.condition(ConditionType.PLANNED)
    assert cond is not None and cond.reason is Reason.LAUNCH_PLAN_IN_FORCE
    assert rolled.plan_in_force == after.plan and needs_plan(rolled)
    assert rolled.applied_basis == failed.applied_basis


def _edited(t: float, tools: bool = False, recipe: str = "vllm-nvidia-bf16") -> ob.RecipeEdited:
    return ob.RecipeEdited(at=at(t), recipe=recipe, tool_calling_supported=tools)


def test_a_recipe_edited_to_turn_tool_calling_off_is_followed_by_the_plan() -> None:
    """An admin turns tool calling off on the recipe a serving order runs on: the
    workload is rendered from the recipe as it is, so the plan (and the status clients
    trust) follows it: the same place on the same recipe, one new plan revision to
    apply, not a replan. A recipe the plan does not name, or an edit that leaves the
    flag as the plan has it, is no news; the edit seen again adds nothing."""
    serving = run(*SERVING)
    assert serving.plan is not None and serving.plan.tool_calling_supported
    assert render_status(serving)["endpoint"]["toolCallingSupported"] is True
    assert decide(serving, _edited(20, recipe="llamacpp-nvidia-gguf")) == []
    assert decide(serving, _edited(20, tools=True)) == []
    (replaced,) = decide(serving, _edited(20))
    assert isinstance(replaced, ev.RecipeReplaced) and replaced.recipe == "vllm-nvidia-bf16"
    assert "turn tool calling off" in replaced.message
    assert replaced.plan == serving.plan.model_copy(update={"tool_calling_supported": False})

    after = run(_edited(20), state=serving)
    assert after.plan == replaced.plan and after.plan_revision == serving.plan_revision + 1
    assert render_status(after)["endpoint"]["toolCallingSupported"] is False
    assert render_status(after)["resolved"]["replanCount"] == serving.replan_count
    assert decide(after, _edited(21)) == []
    assert not needs_plan(after)
    (apply,) = [c for c in effects.effects(after) if isinstance(c, effects.ApplyWorkload)]
    assert apply.plan == after.plan and not apply.repair
    assert after.phase is Phase.READY  # still serving while it rolls out
    rolled = run(ob.ApplySucceeded(at=at(22), plan=after.plan), state=after)
    assert rolled.plan_in_force == after.plan and rolled.applied_revision == rolled.plan_revision
    assert rolled.phase is Phase.READY

    back = run(_edited(30, tools=True), state=rolled)
    assert back.plan == serving.plan and back.replan_count == serving.replan_count
    assert render_status(back)["endpoint"]["toolCallingSupported"] is True


def test_a_recipe_edited_under_a_failed_replan_is_followed_by_the_plan_in_force() -> None:
    """The replan keeps failing (LaunchPlanInForce); the plan in force follows its
    recipe's edit, applied with the basis it was applied with."""
    failed = run(*REPLANNED_AND_FAILED)
    assert failed.plan is not None and failed.plan == failed.plan_in_force
    after = run(_edited(30), state=failed)
    assert after.plan is not None and not after.plan.tool_calling_supported
    assert after.plan.devices == failed.plan.devices
    (apply,) = [c for c in effects.effects(after) if isinstance(c, effects.ApplyWorkload)]
    assert apply.plan == after.plan and apply.model_ref == failed.applied_basis.model_ref  # type: ignore[union-attr]
    rolled = run(ob.ApplySucceeded(at=at(31), plan=after.plan), state=after)
    cond = rolled.condition(ConditionType.PLANNED)
    assert cond is not None and cond.reason is Reason.LAUNCH_PLAN_IN_FORCE
    assert rolled.plan_in_force == after.plan and rolled.replan_count == failed.replan_count


def test_an_apply_error_under_a_failed_replan_applies_the_plan_in_force_as_it_was() -> None:
    """After a failed replan (LaunchPlanInForce), an apply refused once (a quota, a
    blip) is retried with what the plan in force was applied with: the edited model
    never reaches the old plan's place."""
    failed = run(*REPLANNED_AND_FAILED)
    refused = run(ob.ApplyFailed(at=at(30), message="exceeded quota"), state=failed)
    (apply,) = [c for c in effects.effects(refused) if isinstance(c, effects.ApplyWorkload)]
    assert failed.applied_basis is not None and failed.model_ref is not None
    assert apply.model_ref == failed.applied_basis.model_ref != failed.model_ref
    assert apply.facts == failed.applied_basis.facts
    assert apply.plan == failed.plan_in_force and apply.reclaims == ()


def test_a_repair_refused_while_an_edit_waits_for_its_model_keeps_the_running_model() -> None:
    """The model edited, the hub not yet asked about it (no plan for it), and a repair
    of the running workload refused once: the retry still runs the model the plan in
    force was made for, never the edited one on a place no planner judged for it."""
    edited = run(*SERVING, spec(20, 2, name="meta-llama/Llama-3.1-8B"), klass(21))
    refused = run(ob.ApplyFailed(at=at(22), message="exceeded quota"), state=edited)
    (apply,) = [c for c in effects.effects(refused) if isinstance(c, effects.ApplyWorkload)]
    running = run(*SERVING)
    assert running.applied_basis is not None and refused.model_ref != running.model_ref
    assert apply.model_ref == running.applied_basis.model_ref
    assert apply.generation == running.applied_basis.generation
    assert apply.plan == running.plan_in_force
    # Applied again, the state says what runs: the basis of that very apply.
    back = run(applied(23), state=refused)
    assert back.applied_basis == running.applied_basis


def test_a_new_plan_is_rendered_from_what_it_was_computed_from() -> None:
    """A plan computed for one spec, then the spec edited before it was applied: the plan
    goes out with the model it was made for (the edit has a plan of its own coming), and
    the state records that basis, so the two never disagree."""
    planned_for_a = run(*SERVING[:-4])  # planned, the token seen, not yet applied
    assert planned_for_a.attempt is not None and planned_for_a.attempt.ok
    edited = run(spec(10, 2, name="meta-llama/Llama-3.1-8B"), state=planned_for_a)
    (apply,) = [c for c in effects.effects(edited) if isinstance(c, effects.ApplyWorkload)]
    assert apply.model_ref == planned_for_a.attempt.basis.model_ref != edited.model_ref
    assert apply.generation == planned_for_a.attempt.basis.generation
    assert run(applied(11), state=edited).applied_basis == planned_for_a.attempt.basis


def test_a_serving_order_whose_repair_is_refused_is_still_probed() -> None:
    """A repair refused (a quota on a drifted child, a recipe gone with no replacement)
    leaves the workload applied before running: it is probed on, so a runtime that dies
    meanwhile is known when the apply goes through, not hidden behind the apply error."""
    refused = run(*SERVING, ob.ApplyFailed(at=at(20), message="exceeded quota"))
    cond = refused.condition(ConditionType.WORKLOAD_READY)
    assert cond is not None and cond.status is ConditionStatus.FALSE
    (probe,) = [c for c in effects.effects(refused) if isinstance(c, effects.ScheduleProbe)]
    assert probe.after_seconds == effects.ProbeTimings().ready_seconds
    # Never served: nothing runs to probe.
    never = run(*ROLLING, ob.ApplyFailed(at=at(20), message="exceeded quota"))
    assert not [c for c in effects.effects(never) if isinstance(c, effects.ScheduleProbe)]
