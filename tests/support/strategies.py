"""Sample values and hypothesis strategies for an order's observations and event streams.

Reused by the store's tests: `order_streams()` draws valid event sequences — produced
the way the controller produces them, by running random observations through `decide`
and `evolve` — and `raw_event_streams()` draws any events in any order, for the fold's
totality. The sample values (`policy`, `facts`, `plan`, ...) double as the nouns of the
table tests.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from fsm import events as ev
from fsm import observations as ob
from fsm.decide import decide
from fsm.fold import evolve
from fsm.machine import Leaf, Summary
from fsm.reasons import CATALOGUE, ConditionStatus, ConditionType, Reason
from fsm.state import OrderState
from fsm.values import (
    AcceleratorPolicy,
    Authentication,
    Candidate,
    ClassOutcome,
    Constraints,
    EffectivePolicy,
    EndpointType,
    ExposurePolicy,
    ExposureType,
    ModelFacts,
    ModelFormat,
    ModelOutcome,
    ModelPolicy,
    ModelRef,
    ModelSource,
    PlacementMode,
    Plan,
    PlanOutcome,
    SharingMode,
)

__all__ = [
    "AVAILABLE",
    "PLANNED",
    "REPLANNED_AND_FAILED",
    "RESOLVED",
    "ROLLING",
    "SERVING",
    "T0",
    "applied",
    "at",
    "expected_leaf",
    "facts",
    "klass",
    "model",
    "model_ref",
    "observation_runs",
    "observations",
    "order_streams",
    "plan",
    "planned",
    "policy",
    "probe",
    "raw_event_streams",
    "reasons_of",
    "run",
    "scaling",
    "spec",
    "workload",
]

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
R = Reason
T = ConditionStatus.TRUE


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def model_ref(name: str = "Qwen/Qwen2.5-7B-Instruct") -> ModelRef:
    return ModelRef(src=ModelSource.HUGGING_FACE, name=name)


def policy(
    class_name: str | None = "default-llm",
    *,
    token: bool = True,
    max_replicas: int = 2,
    priority: str | None = "inference-normal",
) -> EffectivePolicy:
    return EffectivePolicy(
        class_name=class_name,
        model_policy=None
        if class_name is None
        else ModelPolicy(allowed_endpoint_types=(EndpointType.CHAT,)),
        accelerator=AcceleratorPolicy(),
        exposure=ExposurePolicy(
            type=ExposureType.EXTERNAL,
            authentication=Authentication.TOKEN if token else Authentication.NONE,
        ),
        constraints=Constraints(
            min_replicas=1, max_replicas=max_replicas, priority_class_name=priority
        ),
    )


def facts(name: str = "Qwen/Qwen2.5-7B-Instruct", *, parameters: int = 7_600_000_000) -> ModelFacts:
    return ModelFacts(
        source=ModelSource.HUGGING_FACE,
        name=name,
        endpoint_types=(EndpointType.CHAT,),
        format=ModelFormat.SAFETENSORS,
        parameter_count=parameters,
        weights_bytes=15_200_000_000,
        supports_tool_calling=True,
    )


def plan(
    device_class: str = "nvidia-a100",
    *,
    share: int | None = None,
    tools: bool = True,
    count: int = 1,
    devices: tuple[str, ...] | None = None,
) -> Plan:
    return Plan(
        device_class=device_class,
        accelerator_product_name="NVIDIA A100 80GB PCIe",
        accelerator_memory_gib=80,
        accelerator_count=count,
        placement_mode=PlacementMode.WHOLE_DEVICE,
        sharing_mode=SharingMode.DEDICATED if share is None else SharingMode.SHARED,
        share_percent=share,
        recipe="vllm-nvidia-bf16",
        cpu="4",
        memory="24Gi",
        model_volume="40Gi",
        tool_calling_supported=tools,
        devices=(f"gpu.nvidia.com/node1/{device_class}-0",) if devices is None else devices,
    )


def reasons_of(condition: ConditionType, status: ConditionStatus) -> list[Reason]:
    return [r for r, i in CATALOGUE.items() if i.condition is condition and i.status is status]


def expected_leaf(s: Summary) -> Leaf:
    """The oracle: where the conditions say the order is, read straight off them."""
    t = ConditionStatus.TRUE
    pending = (Leaf.PENDING_CLASS, Leaf.PENDING_MODEL, Leaf.PENDING_PLAN, Leaf.PENDING_WORKLOAD)
    for index, leaf in enumerate(pending):
        if s[index][0] is not t:
            return leaf
    if s[4][1] is Reason.SERVICE_UNHEALTHY:
        return Leaf.FAILED
    if s[4][0] is not t:
        return Leaf.PENDING_PROBE
    if s[5][1] is Reason.SCALE_UP_BLOCKED:
        return Leaf.DEGRADED_SCALE_UP_BLOCKED
    if s[5][1] is Reason.CAPACITY_TAKEN_BY_PRIORITY:
        return Leaf.DEGRADED_CAPACITY_TAKEN
    if s[2][1] is Reason.LAUNCH_PLAN_IN_FORCE:
        return Leaf.READY_PLAN_IN_FORCE
    return Leaf.READY_SERVING


def run(*observations: ob.Observation, state: OrderState | None = None) -> OrderState:
    """Feed observations through decide and evolve, as the controller does."""
    state = state or OrderState()
    for o in observations:
        for event in decide(state, o):
            state = evolve(state, event)
    return state


# --- observation builders: the steps of an order's life, for the table tests ----------


def spec(
    t: float, generation: int = 1, class_name: str | None = "default-llm", name: str = "m"
) -> ob.SpecSeen:
    return ob.SpecSeen(
        at=at(t),
        generation=generation,
        model_ref=model_ref(name) if name != "m" else model_ref(),
        class_name=class_name,
        name="support-llm",
        namespace="support",
    )


def klass(
    t: float, reason: Reason = R.CLASS_ADMITTED, class_name: str | None = "default-llm"
) -> ob.ClassJudged:
    ok = CATALOGUE[reason].status is T
    return ob.ClassJudged(
        at=at(t), outcome=ClassOutcome(reason=reason, policy=policy(class_name) if ok else None)
    )


LLAMA = "meta-llama/Llama-3.1-8B"


def model(
    t: float,
    reason: Reason = R.MODEL_RESOLVED,
    endpoint: EndpointType | None = EndpointType.CHAT,
    *,
    name: str | None = None,
) -> ob.ModelJudged:
    """The model judged; `name`: the facts of that model (another model's facts ask the
    planner something new), else the default's."""
    ok = reason is R.MODEL_RESOLVED
    found = (facts(name) if name else facts()) if ok else None
    outcome = ModelOutcome(reason=reason, facts=found, endpoint_type=endpoint if ok else None)
    return ob.ModelJudged(at=at(t), outcome=outcome)


def planned(
    t: float, reason: Reason = R.PLAN_COMPUTED, message: str = "", device_class: str = "nvidia-a100"
) -> ob.PlanJudged:
    ok = reason is R.PLAN_COMPUTED
    outcome = PlanOutcome(reason=reason, message=message, plan=plan(device_class) if ok else None)
    return ob.PlanJudged(at=at(t), outcome=outcome)


def applied(t: float, device_class: str = "nvidia-a100") -> ob.ApplySucceeded:
    return ob.ApplySucceeded(at=at(t), plan=plan(device_class))


def workload(
    t: float,
    available: int = 1,
    unallocated_since: float | None = None,
    *,
    rolled_out: bool = False,
    desired: int = 1,
    rollout: str = "d/1",
) -> ob.WorkloadSeen:
    since = None if unallocated_since is None else at(unallocated_since)
    return ob.WorkloadSeen(
        at=at(t),
        desired=desired,
        ready=available,
        available=available,
        unallocated_since=since,
        rollout=rollout,
        rolled_out=rolled_out,
    )


def probe(t: float, ok: bool = True) -> ob.ProbeResult:
    return ob.ProbeResult(
        at=at(t), ok=ok, status_code=200 if ok else 503, error="" if ok else "unavailable"
    )


def scaling(t: float, reason: Reason) -> ob.ScalingSeen:
    taken = "analytics/batch" if reason is R.CAPACITY_TAKEN_BY_PRIORITY else None
    return ob.ScalingSeen(at=at(t), reason=reason, taken_by=taken, replicas=1 if taken else 0)


RESOLVED = (spec(0), klass(1), model(2))
PLANNED = (*RESOLVED, planned(3))
ROLLING = (*PLANNED, ob.AuthSecretSeen(at=at(4), name="support-llm-auth"), applied(5))
AVAILABLE = (
    *ROLLING,
    workload(6),
    ob.EndpointSeen(at=at(7), url="https://x.example.com", type=ExposureType.EXTERNAL),
)
SERVING = (*AVAILABLE, probe(8))
REPLANNED_AND_FAILED = (
    *SERVING,
    spec(20, 2, name=LLAMA),
    klass(21),
    model(22, name=LLAMA),
    planned(23, R.NO_CAPACITY, "no A100 free"),
)


# --- observation strategies ------------------------------------------------------------
# Small pools, so that repeats (the heartbeats decide must swallow) are frequent.

_REFS = (model_ref(), model_ref("meta-llama/Llama-3.1-8B"))
_CLASS_NAMES = ("default-llm", "support", None)
# Edits the planner reads nothing of (the token aside, the ceiling) and one it does (the
# priority class): answered by the plan the order has, or recalculated.
_POLICIES = (
    policy(),
    policy("support", token=False, max_replicas=4),
    policy(None),
    policy(priority="inference-high"),
)
_FACTS = (facts(), facts("meta-llama/Llama-3.1-8B", parameters=8_000_000_000))
_PLANS = (plan(), plan("nvidia-t4-mps", share=50, tools=False), plan("mig-1g10gb"))
_CANDIDATES = (
    Candidate(
        device_class="nvidia-a100", product_name="NVIDIA A100", lost_because=Reason.NO_CAPACITY
    ),
    Candidate(
        device_class="nvidia-t4",
        lost_because=Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY,
        detail="16 GiB",
    ),
)

_class_outcomes = st.one_of(
    st.builds(
        ClassOutcome,
        reason=st.sampled_from(reasons_of(ConditionType.CLASS_RESOLVED, ConditionStatus.TRUE)),
        policy=st.sampled_from(_POLICIES),
    ),
    st.builds(
        ClassOutcome,
        reason=st.sampled_from(reasons_of(ConditionType.CLASS_RESOLVED, ConditionStatus.FALSE)),
        message=st.sampled_from(("", "class gone")),
    ),
)
_model_outcomes = st.one_of(
    st.builds(
        ModelOutcome,
        reason=st.just(Reason.MODEL_RESOLVED),
        facts=st.sampled_from(_FACTS),
        endpoint_type=st.sampled_from((EndpointType.CHAT, None)),
    ),
    st.builds(
        ModelOutcome,
        reason=st.sampled_from(reasons_of(ConditionType.MODEL_RESOLVED, ConditionStatus.FALSE)),
    ),
)
_plan_outcomes = st.one_of(
    st.builds(
        PlanOutcome,
        reason=st.just(Reason.PLAN_COMPUTED),
        plan=st.sampled_from(_PLANS),
        candidates=st.just(_CANDIDATES[:1]),
    ),
    st.builds(
        PlanOutcome,
        reason=st.sampled_from(reasons_of(ConditionType.PLANNED, ConditionStatus.FALSE)),
        message=st.sampled_from(("", "no free A100")),
        candidates=st.just(_CANDIDATES),
    ),
)


def _observation(kind: str, when: datetime, state: OrderState, draw: Any) -> ob.Observation:
    """One observation of `kind`, using the state where a real controller would."""
    match kind:
        case "spec":
            generation = max(state.generation, 1) + draw(st.sampled_from((0, 0, 1)))
            return ob.SpecSeen(
                at=when,
                generation=generation,
                model_ref=draw(st.sampled_from(_REFS)),
                class_name=draw(st.sampled_from(_CLASS_NAMES)),
                name="support-llm",
                namespace="support",
            )
        case "class":
            return ob.ClassJudged(at=when, outcome=draw(_class_outcomes))
        case "model":
            return ob.ModelJudged(at=when, outcome=draw(_model_outcomes))
        case "plan":
            keyless = draw(st.sampled_from(((), (plan().recipe,))))
            return ob.PlanJudged(at=when, outcome=draw(_plan_outcomes), keyless_recipes=keyless)
        case "apply":
            applied = state.plan if state.plan is not None else draw(st.sampled_from(_PLANS))
            return ob.ApplySucceeded(at=when, plan=applied)
        case "apply_failed":
            return ob.ApplyFailed(
                at=when,
                message=draw(st.sampled_from(("quota exceeded", "forbidden"))),
                reason=draw(
                    st.sampled_from(
                        (
                            Reason.WORKLOAD_APPLY_FAILED,
                            Reason.CERTIFICATE_SECRET_MISSING,
                            Reason.AUTH_SECRET_CONFLICT,
                        )
                    )
                ),
            )
        case "workload":
            desired = draw(st.integers(0, 3))
            available = draw(st.integers(0, desired))
            unallocated = (
                None if available else draw(st.sampled_from((None, when - timedelta(seconds=300))))
            )
            return ob.WorkloadSeen(
                at=when,
                desired=desired,
                ready=available,
                available=available,
                unallocated_since=unallocated,
                rollout=draw(st.sampled_from(("d/1", "d/2", "e/1"))),
                rolled_out=available == desired and draw(st.booleans()),
            )
        case "endpoint":
            return ob.EndpointSeen(
                at=when, url="https://support-llm-support.example.com", type=ExposureType.EXTERNAL
            )
        case "secret":
            return ob.AuthSecretSeen(at=when, name="support-llm-auth")
        case "probe":
            ok = draw(st.booleans())
            return ob.ProbeResult(
                at=when, ok=ok, status_code=200 if ok else 503, error="" if ok else "unavailable"
            )
        case "scaling":
            reason = draw(
                st.sampled_from(
                    (
                        Reason.SCALING_WITHIN_BOUNDS,
                        Reason.SCALE_UP_BLOCKED,
                        Reason.CAPACITY_TAKEN_BY_PRIORITY,
                    )
                )
            )
            taken_by = (
                "analytics/batch-llm" if reason is Reason.CAPACITY_TAKEN_BY_PRIORITY else None
            )
            return ob.ScalingSeen(
                at=when, reason=reason, taken_by=taken_by, replicas=1 if taken_by else 0
            )
        case "recipe":  # the plan's recipe withdrawn (or a recipe no plan names)
            named = state.plan.recipe if state.plan is not None else "vllm-nvidia-bf16"
            return ob.RecipeUnusable(
                at=when,
                recipe=draw(st.sampled_from((named, "llamacpp-nvidia-gguf"))),
                message=draw(st.sampled_from(("gone", "refused (args)"))),
                replacement=draw(st.sampled_from(("vllm-spare", "vllm-nvidia-bf16"))),
                tool_calling_supported=draw(st.booleans()),
            )
        case "recipe_edited":  # the plan's recipe (or another) edited: tool calling
            named = state.plan.recipe if state.plan is not None else "vllm-nvidia-bf16"
            return ob.RecipeEdited(
                at=when,
                recipe=draw(st.sampled_from((named, "llamacpp-nvidia-gguf"))),
                tool_calling_supported=draw(st.booleans()),
            )
        case "deleted":
            return ob.Deleted(at=when)
    raise AssertionError(kind)


# Weighted: the happy path's steps come often, deletion rarely.
_KINDS = (
    ["spec"] * 2
    + ["class", "model", "plan", "apply", "workload", "probe", "probe"] * 3
    + ["endpoint", "secret", "scaling", "scaling", "apply_failed", "recipe", "recipe_edited"]
    + ["deleted"]
)


# After the order served: probes come often, so a failure streak (Failed) and a recovery
# are drawn as often as the rest.
_SERVED_KINDS = _KINDS + ["probe"] * 8


@st.composite
def observation_runs(draw: Any, max_steps: int = 40) -> list[ob.Observation]:
    """Observations a controller could make, in time order, starting with the spec.

    Half the runs start from an order that served (SERVING): drawn from the spec on, the
    steps to Ready came in order too rarely (under 2 % of runs were ever Ready, none
    Failed), and the fold's shortcuts on a serving order went untested."""
    state = OrderState()
    out: list[ob.Observation] = []
    kinds, seconds = _KINDS, 0.0
    if draw(st.booleans()):
        for o in SERVING:
            out.append(o)
            for event in decide(state, o):
                state = evolve(state, event)
        kinds, seconds = _SERVED_KINDS, 10.0
    steps = draw(st.integers(1, max_steps))
    for i in range(steps):
        seconds += draw(st.sampled_from((1.0, 5.0, 30.0, 200.0)))
        kind = "spec" if i == 0 and not out else draw(st.sampled_from(kinds))
        o = _observation(kind, at(seconds), state, draw)
        out.append(o)
        for event in decide(state, o):
            state = evolve(state, event)
    return out


@st.composite
def observations(draw: Any, state: OrderState) -> ob.Observation:
    """One more observation after `state` (time moves on from its last event)."""
    last = state.last_event_at or T0
    when = last + timedelta(seconds=draw(st.sampled_from((0.0, 1.0, 30.0, 200.0))))
    return _observation(draw(st.sampled_from(_KINDS)), when, state, draw)


@st.composite
def order_streams(draw: Any, max_steps: int = 40) -> list[ev.Event]:
    """A valid event stream: what decide recorded for a random run of observations."""
    state = OrderState()
    events: list[ev.Event] = []
    for o in draw(observation_runs(max_steps)):
        for event in decide(state, o):
            events.append(event)
            state = evolve(state, event)
    return events


def _b(cls: type[ev.Event], **fields: Any) -> st.SearchStrategy[ev.Event]:
    return st.builds(cls, observed_at=st.just(T0), **fields)


_FALSE_PLANNED = reasons_of(ConditionType.PLANNED, ConditionStatus.FALSE)
_RAW: tuple[st.SearchStrategy[ev.Event], ...] = (
    _b(
        ev.SpecObserved,
        generation=st.integers(1, 4),
        model_ref=st.sampled_from(_REFS),
        class_name=st.sampled_from(_CLASS_NAMES),
        name=st.just("o"),
    ),
    _b(
        ev.ClassResolved,
        class_name=st.sampled_from(_CLASS_NAMES),
        policy=st.sampled_from(_POLICIES),
        reason=st.sampled_from(reasons_of(ConditionType.CLASS_RESOLVED, ConditionStatus.TRUE)),
    ),
    _b(
        ev.ClassFailed,
        class_name=st.sampled_from(_CLASS_NAMES),
        reason=st.sampled_from(reasons_of(ConditionType.CLASS_RESOLVED, ConditionStatus.FALSE)),
    ),
    _b(ev.ModelResolved, facts=st.sampled_from(_FACTS)),
    _b(
        ev.ModelFailed,
        reason=st.sampled_from(reasons_of(ConditionType.MODEL_RESOLVED, ConditionStatus.FALSE)),
    ),
    _b(ev.PlanComputed, plan=st.sampled_from(_PLANS)),
    _b(ev.PlanFailed, reason=st.sampled_from(_FALSE_PLANNED), candidates=st.just(_CANDIDATES)),
    _b(ev.WorkloadApplied, plan=st.sampled_from(_PLANS)),
    _b(
        ev.WorkloadApplyFailed,
        message=st.just("refused"),
        reason=st.sampled_from([Reason.WORKLOAD_APPLY_FAILED, Reason.CERTIFICATE_SECRET_MISSING]),
    ),
    _b(
        ev.WorkloadObserved,
        desired_replicas=st.sampled_from((0, 2)),
        available_replicas=st.integers(0, 2),
        unallocated_since=st.sampled_from((None, T0)),
        rollout=st.sampled_from(("d/1", "d/2")),
    ),
    _b(ev.WorkloadRolledOut, rollout=st.sampled_from(("d/1", "d/2"))),
    _b(
        ev.EndpointPublished,
        url=st.just("https://x.example.com"),
        type=st.sampled_from(ExposureType),
    ),
    _b(ev.AuthSecretIssued, name=st.just("o-auth")),
    _b(ev.ProbeSucceeded),
    _b(ev.ProbeFailed, error=st.just("timeout")),
    _b(ev.ScalingBlocked),
    _b(ev.CapacityTaken, taken_by=st.just("b/high")),
    _b(ev.ScalingRecovered),
    _b(ev.DeviceClassTried, device_class=st.sampled_from([p.device_class for p in _PLANS])),
    _b(ev.RecipeReplaced, recipe=st.just("vllm-old"), plan=st.sampled_from(_PLANS)),
    _b(ev.OrderDeleted),
)


@st.composite
def raw_event_streams(draw: Any, max_size: int = 30) -> list[ev.Event]:
    """Any events in any order (time still moves forward): the fold must take them all."""
    kinds = draw(st.lists(st.sampled_from(range(len(_RAW))), max_size=max_size))
    return [
        draw(_RAW[k]).model_copy(update={"observed_at": at(i * 10)}) for i, k in enumerate(kinds)
    ]
