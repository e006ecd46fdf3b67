"""The reconcile pass against fake seams (tests/support/fakes.py): no server, milliseconds.

What a pass writes, counted: a new order's children applied once each and nothing when
nothing differs; a deleted or edited child applied again, exactly; what the class no
longer renders pruned; the status written only when the live one differs and never to a
namesake; capacity promised once when two workers plan at once; a model source blip
keeping a resolved order's facts and a Pending one retried soon.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

import store
from adapters.kubernetes import converging, errors, queueing
from adapters.kubernetes.acting import AUTH_SECRET_CONFLICT_RECHECK, NO_REPLICA_ANSWERS
from adapters.kubernetes.background import Background
from adapters.kubernetes.kinds import SECRETS, SERVICES
from adapters.kubernetes.reconciling import APPLY_RETRY, Reconciler
from adapters.kubernetes.rendering import AUTH_SECRET_UID_ANNOTATION, UID_LABEL
from adapters.kubernetes.settings import ProbeSettings, Settings
from adapters.kubernetes.world import ClusterCache
from adapters.probes.targets import SIMULATOR_ENDPOINT_ANNOTATION, AnnotatedPodTarget
from fsm import events as ev
from fsm.fold import fold
from fsm.identity import OrderRef
from fsm.reasons import CATALOGUE, ConditionStatus, ConditionType, Reason
from fsm.state import state_layout
from fsm.status import render_status
from fsm.values import EndpointType
from tests.support import fakes
from tests.support.planner_inputs import A100, GPU_CLASS, device_class, gpu, model, resource_slice
from tests.support.polling import eventually

REPO = Path(__file__).resolve().parents[3]
EMBEDDINGS = EndpointType.EMBEDDINGS
QWEN = "Qwen/Qwen2.5-0.5B-Instruct"
NOW = datetime(2026, 1, 1, tzinfo=UTC)

# A plain cluster's settings file naming a domain: External orders get an Ingress.
SETTINGS = Settings(publicDomainTemplate="%s.example.com")


def external_token_class(name: str = "conv") -> dict[str, Any]:
    return {
        "apiVersion": "ai.deckhouse.io/v1alpha1",
        "kind": "InferenceServiceClass",
        "metadata": {"name": name},
        "spec": {
            "modelPolicy": {"allowedEndpointTypes": ["Chat"]},
            "acceleratorPolicy": {
                "allowedPlacementTypes": ["WholeDevice"],
                "allowedSharingModes": ["Dedicated"],
                "maxAcceleratorCount": 1,
            },
            "exposurePolicy": {
                "type": "External",
                "authentication": "Token",
                "https": {"mode": "Disabled"},
            },
        },
    }


def order(name: str, klass: str = "conv") -> dict[str, Any]:
    return {
        "apiVersion": "ai.deckhouse.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": "support"},
        "spec": {
            "inferenceServiceClassName": klass,
            "model": {"src": "HuggingFace", "ref": {"name": QWEN}},
        },
    }


class Bed:
    def __init__(self, tmp: Path, a100s: int = 1) -> None:
        self.world: ClusterCache = fakes.world()
        self.writer = fakes.FakeWriter(self.world)
        self.hub = fakes.FakeHub(model(QWEN, params=0.5, weights_gb=1.0))
        self.log = store.open_log(f"sqlite:///{tmp / 'log.sqlite'}")
        self.log.claim_epoch(1)
        for path in sorted((REPO / "deploy/recipes").glob("*.yaml")):
            fakes.put(self.world, yaml.safe_load(path.read_text()))
        fakes.put(self.world, device_class("gpu.nvidia.com", GPU_CLASS))
        devices = [gpu(f"gpu-{i}", A100, "80Gi") for i in range(a100s)]
        fakes.put(self.world, resource_slice("node-a", *devices))
        fakes.put(self.world, external_token_class())
        self.reconciler = self.new_reconciler()

    def new_reconciler(self) -> Reconciler:
        """A reconciler over this cluster and log with nothing in memory (a new leader)."""
        return Reconciler(
            world=self.world,
            log_store=self.log,
            epoch=lambda: 1,
            writer=self.writer,  # type: ignore[arg-type]
            hub=self.hub,  # type: ignore[arg-type]
            targets=AnnotatedPodTarget(),
            settings=lambda: SETTINGS,
            clock=lambda: NOW,
        )

    def order(self, name: str, klass: str = "conv") -> str:
        return str(fakes.put(self.world, order(name, klass))["metadata"]["uid"])

    @contextlib.contextmanager
    def order_gone_on_the_server(self) -> Iterator[list[str]]:
        """The API server answers a read of any order with 404 (the cache still holds it):
        yields the names read, in order; the server has the orders again on exit."""
        read = self.writer.get
        asked: list[str] = []

        def deleted_on_the_server(resource: Any, namespace: str, name: str) -> Any:
            if resource.kind != "InferenceService":
                return read(resource, namespace, name)
            asked.append(name)
            return None

        self.writer.get = deleted_on_the_server  # type: ignore[method-assign]
        try:
            yield asked
        finally:
            self.writer.get = read  # type: ignore[method-assign]

    def settle(self, uid: str, passes: int = 3) -> Any:
        outcome = None
        for _ in range(passes):
            outcome = self.reconciler.reconcile(uid)
        return outcome

    def child(self, kind: str, name: str) -> dict[str, Any] | None:
        for informer in self.world.owned_kinds:
            if informer.resource.kind == kind:
                return informer.get_by_name("support", name)
        raise KeyError(kind)

    def conditions(self, uid: str) -> dict[str, dict[str, Any]]:
        """The order's status conditions as last written, by type."""
        return {c["type"]: c for c in self.world.orders.get(uid)["status"]["conditions"]}

    def foreign_token_secret(self, name: str) -> dict[str, Any]:
        """A Secret of the order `name`'s token name that the order does not own."""
        return fakes.put(
            self.world,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": f"{name}-auth", "namespace": "support"},
                "data": {"token": FOREIGN_TOKEN},
            },
        )

    def events(self, uid: str, kind: type[ev.Event]) -> list[Any]:
        return [r.event for r in self.log.read(uid) if isinstance(r.event, kind)]


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[Bed]:
    handle = Bed(tmp_path)
    yield handle
    handle.log.close()


CHILDREN = ["ResourceClaimTemplate", "Service", "Deployment", "Ingress"]
FOREIGN_TOKEN = "dXNlcnMtb3du"  # base64 of a value the order never made


def test_a_new_order_gets_each_child_once_and_a_quiet_pass_writes_nothing(bed: Bed) -> None:
    uid = bed.order("llm")
    bed.settle(uid)
    assert {kind: bed.writer.calls[("apply", kind)] for kind in CHILDREN} == dict.fromkeys(
        CHILDREN, 1
    )
    assert bed.writer.calls[("create", "Secret")] == 1
    # Live reads: the order itself, before its children are made, and the children an
    # apply would merge into if someone else's had their name (Actor._unclaimed). Its
    # token Secret is created without a read first (a 404 each new order paid); a
    # conflict reads it.
    assert bed.writer.reads == {"InferenceService": 1, "Service": 1, "Ingress": 1}
    # One status: the plan applied and its Deployment seen rolling out, both in the pass
    # that applied it (a status without them, then a second write, before).
    assert bed.writer.calls[("status", "InferenceService")] == 1
    before = bed.writer.writes
    bed.settle(uid, passes=5)
    assert bed.writer.writes == before


def test_a_pass_appends_once_per_effect_and_acts_only_on_what_the_log_holds(
    bed: Bed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass's decisions wait in it and are appended together before its next effect:
    every apply, token, probe and status write is made from a state the log holds in
    full (its version is the stream's head), and a new order's first pass appends once
    per effect, not once per event. The Events of a plan are told once the planning
    lock is released: they are requests, and other orders' plans wait on that lock."""
    actor = bed.reconciler.actor
    behind: list[str] = []

    def held(uid: str, state: Any, what: str) -> None:
        head = max((r.version for r in bed.log.read(uid)), default=0)
        if state.version != head:
            behind.append(f"{what} at version {state.version}, the log at {head}")

    def act(order: OrderRef, state: Any, command: Any, now: datetime) -> Any:
        held(order.uid, state, type(command).__name__)
        return real_act(order, state, command, now)

    def publish(order: OrderRef, state: Any, status: dict[str, Any]) -> bool:
        held(order.uid, state, "the status")
        return real_publish(order, state, status)

    def event(involved: Any, reason: str, message: str, **kwargs: Any) -> Any:
        if bed.reconciler.planning.lock.locked():
            behind.append(f"the Event {reason} sent while other plans wait")
        return real_event(involved, reason, message, **kwargs)

    real_act, real_publish, real_event = actor.act, actor.publish, bed.writer.event
    monkeypatch.setattr(actor, "act", act)
    monkeypatch.setattr(actor, "publish", publish)
    monkeypatch.setattr(bed.writer, "event", event)
    appends: list[list[str]] = []
    bed.log.observe_appends(lambda events, _s, _e: appends.append([e.TYPE for e in events]))

    uid = bed.order("llm")
    bed.reconciler.reconcile(uid)
    assert behind == []
    events = [e for batch in appends for e in batch]
    assert [r.event.TYPE for r in bed.log.read(uid)] == events  # nothing lost or doubled
    # One append before each effect: the token, the plan (kept under the planning lock),
    # the apply, the status. One per event before: eight.
    assert appends == [
        ["SpecObserved", "ClassResolved", "ModelResolved"],
        ["AuthSecretIssued"],
        ["PlanComputed"],
        ["WorkloadApplied", "WorkloadObserved", "EndpointPublished"],
    ]
    told = [reason for reason, _ in bed.writer.events]
    assert told == ["ClassAdmitted", "ModelResolved", "PlanComputed"]  # each once, in order
    bed.settle(uid)
    assert behind == []


def test_a_secret_of_the_tokens_name_not_the_orders_is_said_on_the_order(bed: Bed) -> None:
    """A Secret named `{order}-auth` that the order does not own (a user's, or a deleted
    order's the garbage collector has not removed yet) is never adopted: the order says
    why it waits, nothing is applied without its token, and it looks again (that Secret
    going away wakes nothing)."""
    foreign = bed.foreign_token_secret("llm")
    uid = bed.order("llm")
    outcome = bed.settle(uid)
    conditions = bed.conditions(uid)
    workload = conditions["WorkloadReady"]
    assert (workload["status"], workload["reason"]) == ("False", "AuthSecretConflict")
    assert "not owned by this order" in workload["message"]
    assert FOREIGN_TOKEN not in json.dumps(conditions)
    assert outcome == queueing.RequeueAfter(AUTH_SECRET_CONFLICT_RECHECK)
    assert bed.writer.calls[("apply", "Deployment")] == 0
    assert [reason for reason, _ in bed.writer.events].count("AuthSecretConflict") == 1
    assert bed.writer.get(SECRETS, "support", "llm-auth") == foreign  # left as it was
    meaning = CATALOGUE[Reason.AUTH_SECRET_CONFLICT].meaning
    assert f"every {AUTH_SECRET_CONFLICT_RECHECK:.0f} s" in meaning
    writes = bed.writer.writes
    bed.settle(uid)  # its looks again while the name is taken: said once, not again
    assert bed.writer.writes == writes

    fakes.drop(bed.world, foreign)
    bed.settle(uid)
    assert bed.writer.calls[("apply", "Deployment")] == 1
    assert bed.conditions(uid)["WorkloadReady"]["reason"] != "AuthSecretConflict"
    assert bed.world.token_secrets.get_by_name("support", "llm-auth") is not None


@pytest.mark.parametrize(
    ("kind", "refusal", "said"),
    [
        # The token's refusal is told by its status only: a Secret's error may quote data.
        ("Secret", errors.APIForbiddenError("forbidden: quota", status=403), "HTTP 403"),
        ("Deployment", errors.APIServerError("request timed out", status=500), "timed out"),
    ],
)
def test_a_refused_apply_is_said_on_the_order_and_tried_again_on_a_backoff(
    bed: Bed, kind: str, refusal: errors.APIError, said: str
) -> None:
    """The API server refusing the token Secret or a child (a quota, a namespace being
    deleted, a failed request) is the order's WorkloadApplyFailed, never a pass error; it
    is tried again on a growing backoff, as what refused it is not watched, and said once."""
    bed.writer.refusing[kind] = refusal
    uid = bed.order("llm")
    # The pass that recorded the refusal waits its backoff: a pass that acted looks again
    # at once, but not after a refusal (the next try would be refused the same).
    first = bed.settle(uid, passes=1)
    workload = bed.conditions(uid)["WorkloadReady"]
    assert (workload["status"], workload["reason"]) == ("False", "WorkloadApplyFailed")
    assert said in workload["message"]
    writes = bed.writer.writes
    second = bed.settle(uid, passes=1)
    assert isinstance(first, queueing.RequeueAfter) and isinstance(second, queueing.RequeueAfter)
    assert APPLY_RETRY.initial <= first.seconds <= 1.5 * APPLY_RETRY.initial
    assert second.seconds >= 1.6 * first.seconds  # doubled, whatever the jitter
    assert bed.writer.writes == writes  # the same refusal: nothing new to say
    assert bed.writer.calls[("apply", "Deployment")] == 0
    meaning = CATALOGUE[Reason.WORKLOAD_APPLY_FAILED].meaning
    assert f"from {APPLY_RETRY.initial:.0f} s doubling to {APPLY_RETRY.cap / 60:.0f} min" in meaning

    del bed.writer.refusing[kind]
    bed.settle(uid)
    assert bed.writer.calls[("apply", "Deployment")] == 1
    assert bed.conditions(uid)["WorkloadReady"]["reason"] != "WorkloadApplyFailed"
    # A new run of refusals (the Deployment deleted, its repair refused) backs off anew.
    bed.writer.refusing["Deployment"] = errors.APIServerError("etcd is gone", status=500)
    deployment = bed.child("Deployment", "llm")
    assert deployment is not None
    fakes.drop(bed.world, deployment)
    again = bed.settle(uid, passes=1)
    assert isinstance(again, queueing.RequeueAfter)
    assert APPLY_RETRY.initial <= again.seconds <= 1.5 * APPLY_RETRY.initial


def test_two_refusals_are_said_one_at_a_time_on_the_backoff(bed: Bed) -> None:
    """The token Secret and the Deployment both to be repaired and both refused, with
    different messages (a namespace being deleted, a webhook down): the first is said,
    the pass stops writing, and the next passes wait on the backoff, appending nothing."""
    uid = bed.order("llm")
    bed.settle(uid)
    for kind, name in (("Secret", "llm-auth"), ("Deployment", "llm")):
        child = bed.child(kind, name)
        assert child is not None
        fakes.drop(bed.world, child)
    bed.writer.refusing["Secret"] = errors.APIForbiddenError("namespace terminating", status=403)
    bed.writer.refusing["Deployment"] = errors.APIServerError("webhook down", status=500)
    first = bed.settle(uid, passes=1)
    assert isinstance(first, queueing.RequeueAfter) and first.seconds >= APPLY_RETRY.initial
    version = bed.log.stream(uid).version
    for _ in range(3):
        again = bed.settle(uid, passes=1)
        assert isinstance(again, queueing.RequeueAfter) and again.seconds >= APPLY_RETRY.initial
    assert bed.log.stream(uid).version == version
    assert bed.conditions(uid)["WorkloadReady"]["reason"] == "WorkloadApplyFailed"

    del bed.writer.refusing["Secret"]  # the next refusal is the Deployment's, said once
    bed.settle(uid, passes=1)
    assert "webhook down" in bed.conditions(uid)["WorkloadReady"]["message"]
    version = bed.log.stream(uid).version
    assert isinstance(bed.settle(uid, passes=1), queueing.RequeueAfter)
    assert bed.log.stream(uid).version == version


def test_a_token_secret_replaced_by_one_not_the_orders_is_never_rendered_onto(
    bed: Bed,
) -> None:
    """The order's token Secret deleted and a Secret of its name made by someone else:
    the runtime is not rendered onto it (its uid on the pods, its value as the key);
    the order says why, and once the name is free again gets a new token of its own."""
    uid = bed.order("llm")
    bed.settle(uid)

    def token_uid_on_the_pods() -> str:
        deployment = bed.child("Deployment", "llm")
        assert deployment is not None
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        return str(annotations[AUTH_SECRET_UID_ANNOTATION])

    ours = bed.world.token_secrets.get_by_name("support", "llm-auth")
    assert ours is not None
    marked = token_uid_on_the_pods()
    assert marked == ours["metadata"]["uid"]
    fakes.drop(bed.world, ours)
    foreign = bed.foreign_token_secret("llm")
    applies = bed.writer.calls[("apply", "Deployment")]
    bed.settle(uid)
    assert bed.conditions(uid)["WorkloadReady"]["reason"] == "AuthSecretConflict"
    assert bed.writer.calls[("apply", "Deployment")] == applies
    assert token_uid_on_the_pods() == marked != foreign["metadata"]["uid"]

    fakes.drop(bed.world, foreign)
    bed.settle(uid)
    renewed = bed.world.token_secrets.get_by_name("support", "llm-auth")
    assert renewed is not None
    assert renewed["metadata"]["uid"] not in (marked, foreign["metadata"]["uid"])
    assert token_uid_on_the_pods() == renewed["metadata"]["uid"]
    assert bed.conditions(uid)["WorkloadReady"]["reason"] != "AuthSecretConflict"


def test_a_pass_that_applied_the_workload_looks_again_at_once(bed: Bed) -> None:
    """It observed before the plan was in force, so it saw no workload then: it looks at
    the workload (and the endpoint) again once the plan is in force, and asks to run
    again for the rest. The apply's own watch event may never come (after a crash
    between the apply and its record, the objects are live already and the apply
    changes nothing), and our status write's echo wakes nothing."""
    uid = bed.order("llm")
    outcomes = [bed.reconciler.reconcile(uid)]
    while not bed.events(uid, ev.WorkloadApplied):
        outcomes.append(bed.reconciler.reconcile(uid))
        assert len(outcomes) < 5, outcomes
    assert outcomes[-1] == queueing.RequeueAfter(0.0)
    assert bed.events(uid, ev.WorkloadObserved)  # seen by the pass that applied it
    assert bed.events(uid, ev.EndpointPublished)


def test_each_status_write_names_the_order_it_was_decided_from(bed: Bed) -> None:
    """The writer takes a status write's answer for its own echo only when that answer
    holds nothing the pass's copy of the order did not (Writer.write_status): without
    the copy no echo is known, and each status write wakes its order once more."""
    uid = bed.order("llm")
    bed.settle(uid)
    assert len(bed.writer.status_bases) == 1  # one status write: see the test above
    for basis in bed.writer.status_bases:
        assert basis is not None and basis["metadata"]["uid"] == uid
        assert basis["spec"] == order("llm")["spec"]


def test_no_child_is_made_for_an_order_the_server_has_deleted(bed: Bed) -> None:
    """The cache still holds an order the API server no longer has (a watch reconnecting):
    a child made now would have a dangling owner that the garbage collector, not having
    seen that owner either, may keep for minutes."""
    uid = bed.order("llm")
    with bed.order_gone_on_the_server():
        bed.settle(uid)
    assert not [call for call in bed.writer.calls if call[0] == "apply"]
    bed.settle(uid)
    assert {kind: bed.writer.calls[("apply", kind)] for kind in CHILDREN} == dict.fromkeys(
        CHILDREN, 1
    )


def test_orders_of_one_class_and_model_hold_their_equal_state_parts_once(tmp_path: Path) -> None:
    bed = Bed(tmp_path, a100s=2)
    try:
        first, second = bed.order("one"), bed.order("two")
        bed.settle(first)
        bed.settle(second)
        states = bed.reconciler.states()
        a, b = states[first], states[second]
        assert a.policy is not None and a.model is not None and b.model is not None
        assert a.policy is b.policy and a.model.facts is b.model.facts  # held once
        assert a.applied_basis is b.applied_basis
        assert a.plan_in_force != b.plan_in_force  # their own devices, kept apart
        # Folding the log again gives the very same values (sharing changes no answer).
        refold = fold([r.event for r in bed.log.read(first)])
        assert refold == a
    finally:
        bed.log.close()


def test_a_token_secret_gone_with_its_order_is_not_made_again(bed: Bed) -> None:
    """The order deleted on the server, the cache still holding it (its watch
    reconnecting), and its token Secret collected by the garbage collector: the Secret's
    deletion wakes the order, and a Secret made again would be collected again and wake
    it again. A live read of the order comes first, once a pass; nothing is created."""
    uid = bed.order("llm")
    bed.settle(uid)
    assert bed.writer.calls[("create", "Secret")] == 1
    secret = bed.world.token_secrets.get_by_name("support", "llm-auth")
    assert secret is not None
    with bed.order_gone_on_the_server() as asked:
        fakes.drop(bed.world, secret)
        bed.settle(uid, passes=5)
    assert bed.writer.calls[("create", "Secret")] == 1
    assert asked == ["llm"] * 5

    # The order still there after all (a Secret deleted by hand): made again, once.
    bed.settle(uid)
    assert bed.writer.calls[("create", "Secret")] == 2
    assert bed.world.token_secrets.get_by_name("support", "llm-auth") is not None


@pytest.mark.parametrize("kind", CHILDREN)
def test_a_deleted_child_is_applied_again_exactly_once(bed: Bed, kind: str) -> None:
    uid = bed.order("llm")
    bed.settle(uid)
    child = bed.child(kind, "llm")
    assert child is not None
    fakes.drop(bed.world, child)
    before = bed.writer.calls[("apply", kind)]
    bed.settle(uid)
    assert bed.child(kind, "llm") is not None
    assert bed.writer.calls[("apply", kind)] == before + 1
    assert bed.reconciler.actor.repairs == 1
    assert len(bed.events(uid, ev.WorkloadApplied)) == 1  # a repair is not a new plan


def test_edits_are_reverted_but_fields_others_add_are_left(bed: Bed) -> None:
    uid = bed.order("llm")
    bed.settle(uid)
    deployment = bed.child("Deployment", "llm")
    assert deployment is not None
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["env"].append({"name": "SOMEONE_ELSES", "value": "1"})  # not ours: kept
    fakes.put(bed.world, deployment)
    before = bed.writer.writes
    bed.settle(uid)
    assert bed.writer.writes == before
    container["image"] = "evil/image:latest"  # ours: reverted
    fakes.put(bed.world, deployment)
    bed.settle(uid)
    live = bed.child("Deployment", "llm")
    assert live is not None
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] != "evil/image:latest"
    assert bed.writer.calls[("apply", "Deployment")] == 2


def test_an_edit_whose_model_is_still_being_asked_rewrites_no_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between an edit of the model and the new model's answer, the pass repairs the plan
    in force from what it was applied with: that is what runs, so nothing is written. The
    children once carried the live order's generation instead, and that pass re-applied
    the claim template, the Service and the Deployment with the old plan and the new
    generation, then the replan applied them again (the crash matrix's replan orders,
    three template patches where the clean run made two)."""
    bed = Bed(tmp_path, a100s=2)  # the rolling update's new pod beside the old one
    try:
        bigger = "Qwen/Qwen2.5-7B-Instruct"
        bed.hub.facts[bigger] = model(bigger, params=7.6, weights_gb=15.2)
        uid = bed.order("llm")
        bed.settle(uid)
        applied = {kind: bed.writer.calls[("apply", kind)] for kind in CHILDREN}
        # The rollout moves the Deployment as the deployment controller does: the pass
        # compares what it renders with the live objects again, not from its last note.
        deployment = bed.child("Deployment", "llm")
        assert deployment is not None
        annotations = deployment["metadata"].setdefault("annotations", {})
        annotations["deployment.kubernetes.io/revision"] = "1"
        fakes.put(bed.world, deployment)
        edited = order("llm")
        edited["metadata"].update(uid=uid, generation=2)
        edited["spec"]["model"]["ref"]["name"] = bigger
        fakes.put(bed.world, edited)
        background = bed.reconciler.background
        with monkeypatch.context() as answer_on_its_way:
            answer_on_its_way.setattr(background, "start", lambda key, call, tenant="": None)
            bed.reconciler.reconcile(uid)
        assert bed.events(uid, ev.SpecObserved)[-1].generation == 2
        assert not bed.events(uid, ev.ModelResolved)[1:]  # the answer is still on its way
        assert {kind: bed.writer.calls[("apply", kind)] for kind in CHILDREN} == applied
        bed.settle(uid)  # the answer: a new plan, applied once
        assert len(bed.events(uid, ev.WorkloadApplied)) == 2
        deployment = bed.child("Deployment", "llm")
        assert deployment is not None
        assert deployment["metadata"]["annotations"]["ai.deckhouse.io/order-generation"] == "2"
        assert bed.writer.calls[("apply", "Deployment")] == applied["Deployment"] + 1
    finally:
        bed.log.close()


def test_a_repair_pass_over_what_it_found_converged_renders_nothing(bed: Bed) -> None:
    uid = bed.order("llm")
    bed.settle(uid)
    converged = bed.reconciler.actor.converged
    hits, writes = converged.hits, bed.writer.writes
    bed.reconciler.reconcile(uid)
    assert converged.hits == hits + 1  # nothing moved: rendered and compared nothing
    # The Deployment's status moves (as in every rollout): what we manage is the same.
    deployment = bed.child("Deployment", "llm")
    assert deployment is not None
    fakes.put(bed.world, {**deployment, "status": {"observedGeneration": 1, "replicas": 1}})
    bed.reconciler.reconcile(uid)
    assert converged.hits == hits + 2
    assert bed.writer.writes == writes
    # An edit of a field we set is seen at once, and reverted.
    deployment["spec"]["replicas"] = 5
    fakes.put(bed.world, deployment)
    bed.reconciler.reconcile(uid)
    assert converged.hits == hits + 2
    assert bed.writer.calls[("apply", "Deployment")] == 2
    live = bed.child("Deployment", "llm")
    assert live is not None and live["spec"]["replicas"] == 1


def test_replicas_outside_the_bounds_are_put_back(bed: Bed) -> None:
    uid = bed.order("llm")
    bed.settle(uid)
    deployment = bed.child("Deployment", "llm")
    assert deployment is not None and deployment["spec"]["replicas"] == 1  # min = max = 1
    deployment["spec"]["replicas"] = 5
    fakes.put(bed.world, deployment)
    bed.settle(uid)
    live = bed.child("Deployment", "llm")
    assert live is not None and live["spec"]["replicas"] == 1
    assert bed.writer.calls[("apply", "Deployment")] == 2


def test_a_key_added_to_the_services_selector_is_removed(bed: Bed) -> None:
    """One more key in the Service's selector and it selects none of the order's pods:
    the endpoint goes dark, and the probe, through the Service, fails the order. Our
    keys were all there, so it was no drift. Server-side apply leaves a key another
    manager set (the fake's apply merges as 1.20 does): a merge patch removes it, and
    the passes after write nothing."""
    uid = bed.order("llm")
    bed.settle(uid)
    fakes.put(bed.world, _order_pod(uid))
    service = bed.child("Service", "llm")
    assert service is not None and service["spec"]["selector"] == {UID_LABEL: uid}
    service["spec"]["selector"]["tier"] = "nothing"
    fakes.put(bed.world, service)
    bed.settle(uid)
    live = bed.child("Service", "llm")
    assert live is not None and live["spec"]["selector"] == {UID_LABEL: uid}
    assert bed.writer.calls[("patch", "Service")] == 1
    assert bed.reconciler.actor.repairs == 1
    writes = bed.writer.writes
    bed.settle(uid)
    assert bed.writer.writes == writes
    # Keys others add to the pod template's labels select nothing more: left.
    deployment = bed.child("Deployment", "llm")
    assert deployment is not None
    deployment["spec"]["template"]["metadata"]["labels"]["team"] = "support"
    fakes.put(bed.world, deployment)
    bed.settle(uid)
    assert bed.writer.writes == writes


def _order_pod(uid: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "llm-0", "namespace": "support", "labels": {UID_LABEL: uid, **labels}},
        "spec": {"nodeName": "node-a"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _webhook_adds_a_selector_key(bed: Bed) -> None:
    """A mutating admission webhook that adds its key to every Service it admits."""
    apply, patch = bed.writer.apply, bed.writer.patch

    def admitted(written: dict[str, Any]) -> dict[str, Any]:
        if written.get("kind") != "Service":
            return written
        written["spec"]["selector"]["mesh.example.com/zone"] = "a"
        return fakes.put(bed.world, written)

    bed.writer.apply = lambda obj, **kw: admitted(apply(obj, **kw))  # type: ignore[method-assign]
    bed.writer.patch = lambda *args: admitted(patch(*args))  # type: ignore[method-assign]
    service = bed.child("Service", "llm")
    assert service is not None
    admitted(service)


def test_a_selector_key_a_webhook_adds_to_the_pods_too_is_left(bed: Bed) -> None:
    """It still selects the order's pods: not drift. Removed, the webhook put it back, and
    every pass applied and patched the Service again, for ever."""
    uid = bed.order("llm")
    bed.settle(uid)
    fakes.put(bed.world, _order_pod(uid, **{"mesh.example.com/zone": "a"}))
    _webhook_adds_a_selector_key(bed)
    writes = bed.writer.writes
    bed.settle(uid, passes=5)
    assert bed.writer.writes == writes


def test_a_selector_key_a_webhook_keeps_adding_is_said_and_backed_off(bed: Bed) -> None:
    """The pods do not carry it, so the Service selects none of them; the webhook puts it
    back as soon as it is removed. Said on the order, tried again on the backoff."""
    uid = bed.order("llm")
    bed.settle(uid)
    fakes.put(bed.world, _order_pod(uid))
    _webhook_adds_a_selector_key(bed)
    outcome = bed.reconciler.reconcile(uid)
    ready = bed.conditions(uid)["WorkloadReady"]
    assert ready["reason"] == "WorkloadApplyFailed"
    assert "put back as soon as it is removed" in ready["message"]
    assert isinstance(outcome, queueing.RequeueAfter) and outcome.seconds >= 1.0
    assert bed.writer.calls[("patch", "Service")] == 1


def _service_retyped(bed: Bed) -> str:
    """Order `llm` settled, then its Service retyped to ExternalName by someone: an edit
    apply cannot undo (the externalName stays), so the Service is to be made anew."""
    uid = bed.order("llm")
    bed.settle(uid)
    service = bed.child("Service", "llm")
    assert service is not None
    service["spec"].update(type="ExternalName", externalName="evil.example")
    fakes.put(bed.world, service)
    return uid


def test_a_service_retyped_to_external_name_is_made_anew(bed: Bed) -> None:
    uid = _service_retyped(bed)
    bed.settle(uid)
    live = bed.child("Service", "llm")
    assert live is not None and live["spec"]["type"] == "ClusterIP"
    assert bed.writer.calls[("delete", "Service")] == 1


def test_an_object_is_not_made_anew_for_an_order_the_server_no_longer_has(bed: Bed) -> None:
    """Making an object anew creates it, and a create for an order deleted a moment ago
    (the cache behind) is left to a garbage collector that may not know the owner yet:
    the order is read live first, as before any other create."""
    uid = _service_retyped(bed)
    with bed.order_gone_on_the_server() as asked:
        bed.settle(uid, passes=1)
    assert "llm" in asked
    assert bed.writer.calls[("delete", "Service")] == 0
    live = bed.child("Service", "llm")
    assert live is not None and live["spec"]["type"] == "ExternalName"


def test_a_service_of_the_orders_name_not_its_own_is_never_taken_over(bed: Bed) -> None:
    """A user's own Service named like the order: not in the cache (it has no order
    label), it is read before the apply, never adopted or rewritten;
    the order says why, and goes on once the name is free."""
    theirs = fakes.put(
        bed.world,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "llm", "namespace": "support"},
            "spec": {"selector": {"app": "theirs"}, "ports": [{"port": 80}]},
        },
    )
    uid = bed.order("llm")
    bed.settle(uid, passes=1)
    workload = bed.conditions(uid)["WorkloadReady"]
    assert workload["reason"] == "WorkloadApplyFailed"
    assert "Service support/llm exists and is not this order's" in workload["message"]
    assert bed.writer.get(SERVICES, "support", "llm") == theirs  # untouched

    fakes.drop(bed.world, theirs)
    bed.settle(uid)
    service = bed.child("Service", "llm")
    assert service is not None and service["metadata"]["uid"] != theirs["metadata"]["uid"]
    assert bed.conditions(uid)["WorkloadReady"]["reason"] != "WorkloadApplyFailed"


def test_a_users_copy_of_a_child_with_the_orders_label_is_never_taken_over(bed: Bed) -> None:
    """`kubectl replace --force` from a saved copy of the order's Service, owner references
    stripped: a new object, the user's, that carries the order's label (so it is in the
    cache). Applying over it would add our owner reference, and the garbage collector
    would delete it with the order. It is left alone and the order says why."""
    uid = bed.order("llm")
    bed.settle(uid)
    ours = bed.child("Service", "llm")
    assert ours is not None
    fakes.drop(bed.world, ours)
    theirs = copy.deepcopy(ours)
    theirs["metadata"].pop("ownerReferences")
    theirs["metadata"]["uid"] = "users-own-service"
    theirs["spec"]["ports"][0]["port"] = 8080  # their edit: drift, if it were ours
    fakes.put(bed.world, theirs)
    applies, repairs = bed.writer.calls[("apply", "Service")], bed.reconciler.actor.repairs
    bed.settle(uid, passes=1)
    assert bed.writer.calls[("apply", "Service")] == applies
    assert bed.reconciler.actor.repairs == repairs  # a repair refused repaired nothing
    kept = bed.child("Service", "llm")
    assert kept is not None and kept["metadata"]["uid"] == "users-own-service"
    assert "ownerReferences" not in kept["metadata"]
    workload = bed.conditions(uid)["WorkloadReady"]
    assert workload["reason"] == "WorkloadApplyFailed"
    assert "Service support/llm exists and is not this order's" in workload["message"]

    fakes.drop(bed.world, kept)  # the user deletes it: the order's own is made again
    bed.settle(uid)
    made = bed.child("Service", "llm")
    assert made is not None and converging.owned_by(made, uid)


@pytest.mark.parametrize("kind", CHILDREN)
def test_a_child_whose_owner_references_were_removed_is_owned_again(bed: Bed, kind: str) -> None:
    """`kubectl replace` of a trimmed manifest, or a GitOps tool, removes the owner
    references of the order's own child: the same object, which our field manager
    applied (its managedFields say so). It is applied again, which puts the owner
    reference back; it was taken for a user's copy, the order went Pending while it
    served, and after the order's deletion the child (a Deployment and its GPU pods)
    lived on."""
    uid = bed.order("llm")
    bed.settle(uid)
    child = bed.child(kind, "llm")
    assert child is not None
    child["metadata"].pop("ownerReferences")
    fakes.put(bed.world, child)
    applies = bed.writer.calls[("apply", kind)]
    bed.settle(uid)
    live = bed.child(kind, "llm")
    assert live is not None and live["metadata"]["uid"] == child["metadata"]["uid"]
    assert converging.owned_by(live, uid)
    assert bed.writer.calls[("apply", kind)] == applies + 1
    assert bed.reconciler.actor.repairs == 1
    assert bed.conditions(uid)["WorkloadReady"]["reason"] != "WorkloadApplyFailed"
    writes = bed.writer.writes
    bed.settle(uid)
    assert bed.writer.writes == writes


def test_a_child_controlled_by_something_else_is_never_taken(bed: Bed) -> None:
    """Our label, our apply in its history, and another controller now (someone moved
    it under their own object): not the order's to take back."""
    uid = bed.order("llm")
    bed.settle(uid)
    service = bed.child("Service", "llm")
    assert service is not None
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u", "controller": True}
    service["metadata"]["ownerReferences"] = [other]
    fakes.put(bed.world, service)
    applies = bed.writer.calls[("apply", "Service")]
    bed.settle(uid, passes=1)
    assert bed.writer.calls[("apply", "Service")] == applies
    assert "is not this order's" in bed.conditions(uid)["WorkloadReady"]["message"]


def test_a_token_secret_whose_owner_reference_was_removed_is_made_again(bed: Bed) -> None:
    """The order's token Secret, its owner reference removed: the controller made it (a
    create under its field manager), so it is the order's, made again with the same
    token (Secrets are never patched: RBAC gives create and delete) and its owner
    reference; the pods roll to it. It was an AuthSecretConflict for ever, and outlived
    the order. A user's copy of it (`kubectl replace --force`: made by their client)
    stays a conflict."""
    uid = bed.order("llm")
    bed.settle(uid)
    ours = bed.child("Secret", "llm-auth")
    assert ours is not None
    ours["metadata"].pop("ownerReferences")
    fakes.put(bed.world, ours)
    bed.settle(uid)
    made = bed.child("Secret", "llm-auth")
    assert made is not None and converging.owned_by(made, uid)
    assert made["metadata"]["uid"] != ours["metadata"]["uid"]
    assert made["data"] == ours["data"]  # callers keep their token
    deployment = bed.child("Deployment", "llm")
    assert deployment is not None
    marked = deployment["spec"]["template"]["metadata"]["annotations"]
    assert marked[AUTH_SECRET_UID_ANNOTATION] == made["metadata"]["uid"]
    assert bed.conditions(uid)["WorkloadReady"]["reason"] != "AuthSecretConflict"
    writes = bed.writer.writes
    bed.settle(uid)
    assert bed.writer.writes == writes

    fakes.drop(bed.world, made)
    copied = copy.deepcopy(made)
    copied["metadata"].pop("ownerReferences")
    copied["metadata"]["uid"] = "users-own-secret"
    fakes.put(bed.world, copied)
    bed.settle(uid, passes=1)
    assert bed.conditions(uid)["WorkloadReady"]["reason"] == "AuthSecretConflict"
    kept = bed.child("Secret", "llm-auth")
    assert kept is not None and kept["metadata"]["uid"] == "users-own-secret"


def test_children_relabelled_to_another_order_are_labelled_back(bed: Bed) -> None:
    """The order's Service and token Secret given another order's UID label: both still
    in the cache (it selects on the label's presence), their event wakes their owner too
    (test_world_routing.py), and its pass puts the labels back: the Service by an apply,
    the Secret made again with the same token (Secrets are never patched). The Secret
    kept the other order's label for ever: it was found by name and owned."""
    uid = bed.order("llm")
    other = bed.order("other")
    bed.settle(uid)
    for kind, name in (("Service", "llm"), ("Secret", "llm-auth")):
        child = bed.child(kind, name)
        assert child is not None
        child["metadata"]["labels"][UID_LABEL] = other
        fakes.put(bed.world, child)
    token = bed.child("Secret", "llm-auth")
    bed.settle(uid)
    for kind, name in (("Service", "llm"), ("Secret", "llm-auth")):
        child = bed.child(kind, name)
        assert child is not None and child["metadata"]["labels"][UID_LABEL] == uid, kind
        assert converging.owned_by(child, uid)
    made = bed.child("Secret", "llm-auth")
    assert token is not None and made is not None and made["data"] == token["data"]
    writes = bed.writer.writes
    bed.settle(uid)
    assert bed.writer.writes == writes


def test_a_manifest_the_api_refuses_on_its_own_leaves_what_runs(bed: Bed) -> None:
    """A 422 from the manifest itself (a recipe's env name the API refuses): making the
    object anew would fail the same, so the live one is not deleted; the order says why."""
    uid = bed.order("llm")
    bed.settle(uid)
    deployment = bed.child("Deployment", "llm")
    assert deployment is not None
    deployment["spec"]["replicas"] = 5  # drift: the next pass applies
    fakes.put(bed.world, deployment)
    invalid = "spec.template.spec.containers[0].env[2].name: Invalid value: 'A=B'"
    bed.writer.refusing["Deployment"] = errors.APIInvalidError(invalid, status=422)
    bed.settle(uid, passes=1)
    assert bed.writer.calls[("delete", "Deployment")] == 0
    assert bed.child("Deployment", "llm") is not None
    workload = bed.conditions(uid)["WorkloadReady"]
    assert workload["reason"] == "WorkloadApplyFailed" and "A=B" in workload["message"]


def test_a_refusal_that_says_something_new_each_time_still_waits_its_backoff(bed: Bed) -> None:
    """A webhook or a server that names a request, or a generated object, in each refusal:
    each is a new event, which made the pass look again at once, and the apply was tried
    again at once, for ever. The backoff is the retry, whatever the message."""
    uid = bed.order("llm")
    bed.settle(uid)
    deployment = bed.child("Deployment", "llm")
    assert deployment is not None
    deployment["spec"]["replicas"] = 5  # drift: the next pass applies
    fakes.put(bed.world, deployment)
    delays = []
    for attempt in range(4):
        said = f'admission webhook "policy.example" denied the request {attempt}'
        bed.writer.refusing["Deployment"] = errors.APIForbiddenError(said, status=403)
        outcome = bed.reconciler.reconcile(uid)
        assert isinstance(outcome, queueing.RequeueAfter)
        delays.append(outcome.seconds)
    floors = [APPLY_RETRY.delay(n, rand=lambda: 0.0) for n in (1, 2, 3, 4)]  # 5, 10, 20, 40
    assert all(floor <= delay for floor, delay in zip(floors, delays, strict=True)), delays
    assert len(bed.events(uid, ev.WorkloadApplyFailed)) == 4  # each said, once


def test_a_deleted_token_secret_is_made_again_and_rolls_the_pods(bed: Bed) -> None:
    uid = bed.order("llm")
    bed.settle(uid)
    secret = bed.child("Secret", "llm-auth")
    assert secret is not None
    fakes.drop(bed.world, secret)
    bed.settle(uid)
    fresh = bed.child("Secret", "llm-auth")
    assert fresh is not None and fresh["metadata"]["uid"] != secret["metadata"]["uid"]
    deployment = bed.child("Deployment", "llm")
    assert deployment is not None
    marked = deployment["spec"]["template"]["metadata"]["annotations"]
    assert marked["ai.deckhouse.io/auth-secret-uid"] == fresh["metadata"]["uid"]
    assert bed.writer.calls[("create", "Secret")] == 2


def test_switching_the_class_to_cluster_local_without_token_prunes(tmp_path: Path) -> None:
    # A new policy replans, and a replan never offers the place the order holds: room
    # for a second device.
    bed = Bed(tmp_path, a100s=2)
    uid = bed.order("llm")
    bed.settle(uid)
    klass = bed.world.classes.get_by_name(None, "conv")
    assert klass is not None
    klass["spec"]["exposurePolicy"] = {"type": "ClusterLocal", "authentication": "None"}
    klass["metadata"]["generation"] = 2
    fakes.put(bed.world, klass)
    bed.settle(uid)
    assert bed.child("Ingress", "llm") is None
    assert bed.child("Secret", "llm-auth") is None
    assert bed.child("Service", "llm") is not None
    assert bed.writer.calls[("delete", "Ingress")] == 1
    assert bed.writer.calls[("delete", "Secret")] == 1
    before = bed.writer.writes
    bed.settle(uid)
    assert bed.writer.writes == before
    bed.log.close()


def test_the_ingress_tls_secret_goes_with_it_also_after_a_failed_delete(tmp_path: Path) -> None:
    """cert-manager's Secret for the order's Ingress is deleted with the Ingress. Its
    delete refused once (a 5xx) must not orphan it, a private key with it: only the
    Ingress being there makes a pass look for it, so the Ingress waits for it."""
    bed = Bed(tmp_path, a100s=2)
    uid = bed.order("llm")
    bed.settle(uid)
    ingress = bed.child("Ingress", "llm")
    assert ingress is not None
    tls = "llm-tls"
    fakes.put(bed.world, _issued(tls, ingress["spec"]["rules"][0]["host"]))
    delete, refused = bed.writer.delete, []

    def refusing_once(resource: Any, namespace: str | None, name: str, uid_: str) -> bool:
        if name == tls and not refused:
            refused.append(name)
            raise errors.APIServerError("etcdserver: request timed out", status=500)
        return delete(resource, namespace, name, uid_)

    bed.writer.delete = refusing_once  # type: ignore[method-assign]
    _exposure(bed, NONE_LOCAL, 2)
    bed.settle(uid)
    assert refused == [tls]
    assert bed.child("Ingress", "llm") is None
    assert bed.writer.get(SECRETS, "support", tls) is None
    bed.log.close()


def _issued(name: str, host: str, made: str | None = None) -> dict[str, Any]:
    """A Secret cert-manager issued, for a certificate of `host`, at `made`."""
    annotations = {"cert-manager.io/certificate-name": name, "cert-manager.io/alt-names": host}
    meta: dict[str, Any] = {"name": name, "namespace": "support", "annotations": annotations}
    if made is not None:
        meta["creationTimestamp"] = made
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "kubernetes.io/tls"}


INGRESS_MADE = "2026-12-07T10:00:00Z"


@pytest.mark.parametrize(
    ("host", "made", "kept"),
    [
        ("shop.example.com", "2026-12-07T09:00:00Z", True),  # the tenant's, made before
        ("llm-support.old.example.org", "2026-12-07T10:00:07Z", False),  # ours, old domain
    ],
    ids=["tenants-own-certificate", "issued-for-the-host-before-the-domain-changed"],
)
def test_the_ingress_takes_only_the_tls_secret_issued_for_it(
    tmp_path: Path, host: str, made: str, kept: bool
) -> None:
    """The tenant's own certificate, for a host of its own, in a Secret named as the
    order's would be: cert-manager names a Certificate after its Secret too, so that
    annotation alone took it for the order's and deleted it with the order's Ingress.
    One cert-manager issued for the Ingress, for the host it had before the domain
    changed, still goes with it: else a private key was left behind."""
    bed = Bed(tmp_path, a100s=2)
    uid = bed.order("llm")
    bed.settle(uid)
    ingress = bed.child("Ingress", "llm")
    assert ingress is not None
    ingress["metadata"]["creationTimestamp"] = INGRESS_MADE
    fakes.put(bed.world, ingress)
    fakes.put(bed.world, _issued("llm-tls", host, made))
    _exposure(bed, NONE_LOCAL, 2)
    bed.settle(uid)
    assert bed.child("Ingress", "llm") is None
    assert (bed.writer.get(SECRETS, "support", "llm-tls") is not None) is kept
    bed.log.close()


def _exposure(
    bed: Bed, exposure: dict[str, Any], generation: int, scaling: dict[str, int] | None = None
) -> None:
    klass = bed.world.classes.get_by_name(None, "conv")
    assert klass is not None
    klass["spec"]["exposurePolicy"] = exposure
    if scaling is not None:
        klass["spec"]["scalingPolicy"] = scaling
    klass["metadata"]["generation"] = generation
    fakes.put(bed.world, klass)


TOKEN_EXTERNAL = {"type": "External", "authentication": "Token", "https": {"mode": "Disabled"}}
NONE_LOCAL = {"type": "ClusterLocal", "authentication": "None"}


@pytest.mark.parametrize(
    ("before", "after"), [(TOKEN_EXTERNAL, NONE_LOCAL), (NONE_LOCAL, TOKEN_EXTERNAL)]
)
def test_a_failed_replan_leaves_the_status_and_the_token_on_the_workload_in_force(
    bed: Bed, before: dict[str, Any], after: dict[str, Any]
) -> None:
    # One device: the replan the new minimum asks for finds no room, and the order serves
    # on as it was applied, the new exposure with it (an exposure edited alone is the
    # plan in force rendered again: test_policy_edits.py). The status says how to reach
    # that workload (not the new spec's way), and the token Secret is kept or not as that
    # workload needs: never made for the new spec and pruned again in every pass.
    _exposure(bed, before, 1)
    uid = bed.order("llm")
    bed.settle(uid)
    served = bed.world.orders.get(uid)["status"]
    _exposure(bed, after, 2, scaling={"minReplicas": 2, "maxReplicas": 2})
    writes = bed.writer.writes
    bed.settle(uid, passes=4)
    status = bed.world.orders.get(uid)["status"]
    planned = next(c for c in status["conditions"] if c["type"] == "Planned")
    assert planned["reason"] == "LaunchPlanInForce"
    assert status["endpoint"]["type"] == served["endpoint"]["type"]
    assert status.get("authSecretName") == served.get("authSecretName")
    token = before is TOKEN_EXTERNAL
    assert (bed.child("Secret", "llm-auth") is not None) is token
    assert bed.writer.calls[("delete", "Secret")] == 0
    # An Event and a status write for the failed replan; nothing made or pruned.
    assert bed.writer.writes - writes == 2


def test_a_failed_replan_onto_another_contract_says_the_one_served(bed: Bed) -> None:
    # A chat model edited into an embeddings one: no room for the replan, the chat model
    # serves on, and the contract in the status is the one a client gets.
    klass = bed.world.classes.get_by_name(None, "conv")
    assert klass is not None
    klass["spec"]["modelPolicy"]["allowedEndpointTypes"] = ["Chat", "Embeddings"]
    fakes.put(bed.world, klass)
    embedder = "BAAI/bge-m3"
    bed.hub.facts[embedder] = model(embedder, params=0.6, weights_gb=2.3, types=[EMBEDDINGS])
    uid = bed.order("llm")
    bed.settle(uid)
    assert bed.world.orders.get(uid)["status"]["model"] == {"endpointType": "Chat"}
    edited = order("llm")
    edited["metadata"].update(uid=uid, generation=2)
    edited["spec"]["model"]["ref"]["name"] = embedder
    fakes.put(bed.world, edited)
    bed.settle(uid)
    status = bed.world.orders.get(uid)["status"]
    planned = next(c for c in status["conditions"] if c["type"] == "Planned")
    assert planned["reason"] == "LaunchPlanInForce"
    assert status["model"] == {"endpointType": "Chat"}


def test_the_status_of_a_recreated_namesake_is_never_the_old_ones(bed: Bed) -> None:
    uid = bed.order("llm")
    bed.settle(uid)
    old = bed.world.orders.get(uid)
    assert old is not None
    fakes.drop(bed.world, old)
    newer = bed.order("llm")  # same name, another UID, not yet reconciled
    assert newer != uid
    state = bed.reconciler.state_of(uid)
    written = bed.reconciler.actor.publish(
        OrderRef("llm", "support", uid), state, dict(render_status(state))
    )
    assert not written
    assert "status" not in (bed.world.orders.get(newer) or {})


def test_two_workers_never_promise_one_device_twice(tmp_path: Path) -> None:
    bed = Bed(tmp_path, a100s=1)
    uids = [bed.order(name) for name in ("first", "second")]
    start = threading.Barrier(2)

    def work(uid: str) -> None:
        start.wait()
        bed.settle(uid, passes=1)

    threads = [threading.Thread(target=work, args=(uid,)) for uid in uids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    planned = [uid for uid in uids if bed.events(uid, ev.PlanComputed)]
    failed = [uid for uid in uids if bed.events(uid, ev.PlanFailed)]
    assert len(planned) == 1 and len(failed) == 1
    (verdict,) = bed.events(failed[0], ev.PlanFailed)
    assert verdict.reason.value == "NoCapacity"
    bed.log.close()


def _new_leader(bed: Bed) -> None:
    bed.reconciler = bed.new_reconciler()


@pytest.mark.parametrize("lost", ["new-leader", "stream-conflict"])
def test_a_plan_the_log_holds_is_promised_even_before_its_order_is_passed_over(
    bed: Bed, lost: str
) -> None:
    # The first order is planned on the only device; its claim is not allocated yet. The
    # second order's pass comes first after a take-over (or after the first's state was
    # dropped for a conflict): the first's plan still holds the device.
    first = bed.order("first")
    bed.settle(first)
    assert bed.events(first, ev.PlanComputed)
    if lost == "new-leader":
        _new_leader(bed)
    else:
        bed.reconciler.forget(first)
    second = bed.order("second")
    bed.settle(second, passes=1)
    assert not bed.events(second, ev.PlanComputed)
    (verdict,) = bed.events(second, ev.PlanFailed)
    assert verdict.reason.value == "NoCapacity"


def test_a_snapshot_is_taken_only_from_the_fold_that_wrote_it(bed: Bed) -> None:
    uid = bed.order("llm")
    bed.settle(uid)
    full = fold([r.event for r in bed.log.read(uid)])
    assert full.applied_at is not None
    head = full.version
    # An older fold's snapshot: no tag, and a field the fold now computes left out.
    older = full.model_dump(mode="json", exclude={"applied_at"})
    bed.log.save_snapshot(uid, head, older)
    _new_leader(bed)
    assert bed.reconciler.state_of(uid).applied_at == full.applied_at
    # This fold's snapshot is taken as it is (here, told apart by the name in it).
    tagged = {"layout": state_layout(), "state": {**older, "name": "from-the-snapshot"}}
    bed.log.save_snapshot(uid, head, tagged)
    _new_leader(bed)
    assert bed.reconciler.state_of(uid).name == "from-the-snapshot"


def test_the_orders_a_new_leader_folds_for_the_planner_are_folded_once_each(
    bed: Bed, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A log failure half-way leaves the rest for the next look; none is folded twice.
    uids = [bed.order(name) for name in ("a", "b", "c")]
    for uid in uids:
        bed.settle(uid, passes=1)
    _new_leader(bed)
    folded: list[str] = []
    fold_for_real = bed.reconciler._folded

    def flaky(uid: str) -> Any:
        folded.append(uid)
        if len(folded) == 2:
            raise store.StoreUnavailable("the log went away")
        return fold_for_real(uid)

    monkeypatch.setattr(bed.reconciler, "_folded", flaky)
    with pytest.raises(store.StoreUnavailable):
        bed.reconciler.states()
    assert set(bed.reconciler.states()) == set(uids)
    bed.reconciler.states()
    assert sorted(folded) == sorted([*uids, folded[1]])  # the failed one again, once


def test_an_order_deleted_while_no_one_led_promises_nothing(bed: Bed) -> None:
    first = bed.order("first")
    bed.settle(first)
    _new_leader(bed)
    fakes.drop(bed.world, bed.world.orders.get(first))
    second = bed.order("second")
    bed.settle(second, passes=1)
    assert bed.events(second, ev.PlanComputed)


def test_a_plan_that_stops_holding_room_says_so_to_whom_it_refused(tmp_path: Path) -> None:
    """An order planned onto the last device whose claim is never made (deleted before,
    or its plan dropped once its class was tried) frees that room with no claim or slice
    event: the orders it was refused to waited for their resync, minutes. The reconciler
    says when a plan stops holding room, and the controller wakes the capacity waiters."""
    bed = Bed(tmp_path, a100s=1)
    freed: list[str] = []
    bed.reconciler.demand_freed = lambda: freed.append("freed")
    first = bed.order("first")
    bed.settle(first)
    second = bed.order("second")
    bed.settle(second)
    (refused,) = bed.events(second, ev.PlanFailed)
    assert refused.reason.value == "NoCapacity"
    bed.settle(first)
    assert freed == []  # nothing changed: nobody is woken
    fakes.drop(bed.world, bed.world.orders.get(first))
    bed.settle(first, passes=1)
    assert freed == ["freed"]
    bed.settle(second, passes=1)
    assert bed.events(second, ev.PlanComputed)


def test_a_hub_blip_keeps_a_planned_order_and_a_pending_one_is_retried_soon(bed: Bed) -> None:
    uid = bed.order("llm")
    bed.settle(uid)
    bed.hub.down = True
    bed.settle(uid)
    assert not bed.events(uid, ev.ModelFailed)
    assert len(bed.events(uid, ev.PlanComputed)) == 1
    assert any("unreachable" in message for _, message in bed.writer.events)
    pending = bed.order("other")
    outcome = bed.reconciler.reconcile(pending)
    assert isinstance(outcome, queueing.RequeueAfter) and outcome.seconds <= 5
    (failed,) = bed.events(pending, ev.ModelFailed)
    assert failed.reason.value == "ModelSourceUnreachable"


def test_a_class_edit_during_a_hub_outage_keeps_the_facts_of_the_same_model(
    tmp_path: Path,
) -> None:
    """The model resolved, its workload applied; the user names another class and the
    hub is away at that moment. The facts resolved for that very model are judged under
    the new class: before, the edit's new generation lost them, and the order was
    Pending with ModelSourceUnreachable until the hub came back."""
    bed = Bed(tmp_path, a100s=2)  # room for the replan beside the place it holds
    uid = bed.order("llm")
    bed.settle(uid)
    fakes.put(bed.world, external_token_class("conv2"))
    edited = copy.deepcopy(bed.world.orders.get(uid))
    edited["spec"]["inferenceServiceClassName"] = "conv2"
    edited["metadata"]["generation"] = 2
    fakes.put(bed.world, edited)
    bed.hub.down = True
    bed.settle(uid)
    state = bed.reconciler.state_of(uid)
    assert state.generation == 2 and not bed.events(uid, ev.ModelFailed)
    resolved = state.condition(ConditionType.MODEL_RESOLVED)
    assert resolved is not None and resolved.status is ConditionStatus.TRUE
    assert "unreachable, keeping the facts" in resolved.message
    assert len(bed.events(uid, ev.PlanComputed)) == 2  # replanned under the new class


# --- probes off the workers -------------------------------------------------------------


class HeldEndpoint:
    """An OpenAI-style endpoint on 127.0.0.1 that answers only once released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.asked = threading.Event()
        self.asks = 0
        self.status = 200
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                endpoint.asks += 1
                endpoint.asked.set()
                endpoint.release.wait(30)
                body = json.dumps({"object": "list", "data": [{"id": QWEN}]}).encode()
                self.send_response(endpoint.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def serving(bed: Bed, uid: str, url: str) -> None:
    """The order's Deployment rolled out and one Ready pod answering at `url`."""
    deployment = bed.child("Deployment", "llm")
    assert deployment is not None
    generation = deployment["metadata"]["generation"]
    deployment["status"] = {
        "replicas": 1,
        "readyReplicas": 1,
        "availableReplicas": 1,
        "updatedReplicas": 1,
        "observedGeneration": generation,
    }
    fakes.put(bed.world, deployment)
    fakes.put(
        bed.world,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "llm-0",
                "namespace": "support",
                "labels": {"ai.deckhouse.io/inference-service-uid": uid},
                "annotations": {SIMULATOR_ENDPOINT_ANNOTATION: url},
            },
            "spec": {"nodeName": "node-a"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        },
    )


def test_a_hung_endpoint_never_holds_a_worker(tmp_path: Path) -> None:
    bed = Bed(tmp_path)
    woken: list[str] = []
    bed.reconciler.background = background = Background(woken.append, workers=2)
    bed.reconciler.actor._background = background
    held = HeldEndpoint()
    try:
        uid = bed.order("llm")
        bed.settle(uid)
        serving(bed, uid, held.url)
        bed.settle(uid)  # the pass starts the probe and returns while it hangs
        assert held.asked.wait(10)
        assert not bed.events(uid, ev.ProbeSucceeded)
        assert background.busy(("probe", uid))
        held.release.set()
        eventually(lambda: woken, timeout=10, what="the probe's end to wake the order")
        assert woken == [uid]
        bed.settle(uid, passes=1)
        (succeeded,) = bed.events(uid, ev.ProbeSucceeded)
        assert succeeded.observed_at == NOW
    finally:
        held.close()
        background.stop()
        bed.log.close()


def test_a_deletion_whose_mark_failed_is_marked_by_the_next_pass(bed: Bed) -> None:
    """The log fails between the Deleted event and the stream's deletion mark (as when its
    database goes away between two writes): the retried pass still marks the stream, as
    deleted when the deletion was recorded, not when the log answered again."""
    clock = [NOW]
    bed.reconciler._clock = lambda: clock[0]
    uid = bed.order("llm")
    bed.settle(uid)
    clock[0] = NOW + timedelta(minutes=5)
    fakes.drop(bed.world, bed.world.orders.get(uid))
    # A real failure of the database for this one statement, until the trigger is dropped.
    with bed.log.engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TRIGGER refuse_mark BEFORE UPDATE OF deleted_at ON streams "
            "WHEN NEW.deleted_at IS NOT NULL "
            "BEGIN SELECT RAISE(ABORT, 'the database went away'); END"
        )
    with pytest.raises(store.StoreError):
        bed.reconciler.reconcile(uid)
    assert isinstance(bed.events(uid, ev.OrderDeleted)[0], ev.OrderDeleted)  # recorded...
    assert bed.log.stream(uid).deleted_at is None  # ...but not marked
    with bed.log.engine.begin() as conn:
        conn.exec_driver_sql("DROP TRIGGER refuse_mark")
    clock[0] = NOW + timedelta(minutes=35)  # the log answers again half an hour later
    assert bed.reconciler.reconcile(uid) == queueing.Done()
    (deleted,) = bed.events(uid, ev.OrderDeleted)
    # Before: never marked (a live order); then marked at 00:35, while `history` said 00:05.
    assert bed.log.stream(uid).deleted_at == deleted.observed_at == NOW + timedelta(minutes=5)


def test_a_serving_order_is_probed_on_a_timer_and_an_unchanged_answer_wakes_nothing(
    tmp_path: Path,
) -> None:
    """With hundreds of Ready orders, a pass per probe was most of the idle CPU: now a
    probe that answers as before costs the probe alone, and only news wakes the order."""
    bed = Bed(tmp_path)
    fast = Settings(probe=ProbeSettings(interval_seconds=1, timeout_seconds=1))  # Ready: 3 s
    bed.reconciler._settings = bed.reconciler.actor._settings = lambda: fast
    bed.reconciler._clock = lambda: datetime.now(UTC)  # a probe is told apart by its time
    woken: list[str] = []
    bed.reconciler.background = background = Background(woken.append, workers=2)
    bed.reconciler.actor._background = background
    endpoint = HeldEndpoint()
    endpoint.release.set()
    try:
        uid = bed.order("llm")
        bed.settle(uid)
        serving(bed, uid, endpoint.url)
        bed.settle(uid)
        eventually(lambda: woken, timeout=10, what="the first answer to wake the order")
        bed.settle(uid, passes=1)  # records it, and arms the next probe
        assert len(bed.events(uid, ev.ProbeSucceeded)) == 1
        outcome = bed.settle(uid, passes=1)  # a pass of a serving order, nothing new
        assert isinstance(outcome, queueing.Done)  # none is due again for the probe's sake
        woken.clear()
        asked = endpoint.asks
        eventually(lambda: endpoint.asks > asked, timeout=15, what="the next probe")
        threading.Event().wait(0.5)  # its answer handled
        assert woken == []
        endpoint.status = 500  # news: the order is woken and the failure recorded
        eventually(lambda: woken, timeout=15, what="a failed probe to wake the order")
        assert woken == [uid]
        bed.settle(uid, passes=1)
        assert len(bed.events(uid, ev.ProbeFailed)) == 1
    finally:
        endpoint.close()
        background.stop()
        bed.log.close()


def _served_then_lost(bed: Bed, *, restarted: bool) -> str:
    """An order served by a probe on 127.0.0.1, then every replica lost: at the same
    rollout (the runtime down), or at a new one (`restarted`: its pods made anew, as
    after a token rotation or `kubectl rollout restart`). Then, on the bed's clock, a
    pass every half second for 50 s, as a crash-looping or starting pod's updates
    would wake it."""
    clock = [NOW]
    bed.reconciler._clock = lambda: clock[0]
    endpoint = HeldEndpoint()
    endpoint.release.set()
    try:
        uid = bed.order("llm")
        bed.settle(uid)
        serving(bed, uid, endpoint.url)
        bed.settle(uid)
        assert bed.world.orders.get(uid)["status"]["phase"] == "Ready"
        deployment = bed.child("Deployment", "llm")
        assert deployment is not None
        deployment["status"] |= {"readyReplicas": 0, "availableReplicas": 0}
        if restarted:
            deployment["metadata"]["generation"] += 1
            deployment["status"]["observedGeneration"] = deployment["metadata"]["generation"]
        fakes.put(bed.world, deployment)
        pod = bed.world.pods_of(uid, "support")[0]
        pod["status"] = {"conditions": [{"type": "Ready", "status": "False"}]}
        fakes.put(bed.world, pod)
        for _ in range(100):
            clock[0] += timedelta(seconds=0.5)
            bed.settle(uid, passes=1)
    finally:
        endpoint.close()
    return uid


def test_a_runtime_down_after_ready_fails_at_the_probes_pace(bed: Bed) -> None:
    """Every replica lost at the rollout seen complete (RolledOut): nothing can answer
    the probe, and the failures it records come at the probe's own intervals, however
    often the pods' churn wakes the order."""
    uid = _served_then_lost(bed, restarted=False)
    served_at = bed.events(uid, ev.ProbeSucceeded)[-1].observed_at
    failed = [e.observed_at for e in bed.events(uid, ev.ProbeFailed)]
    assert len(failed) == 3  # then Failed: a repeated failure is no news
    ready, failing = 3 * 10, 10 / 2  # the default interval's Ready and failing paces
    assert (failed[0] - served_at).total_seconds() >= ready
    assert all((b - a).total_seconds() >= failing for a, b in itertools.pairwise(failed))
    status = bed.world.orders.get(uid)["status"]
    assert status["phase"] == "Failed"
    assert bed.conditions(uid)["WorkloadReady"]["reason"] == "RolledOut"
    assert NO_REPLICA_ANSWERS in bed.conditions(uid)["Ready"]["message"]


def test_pods_made_anew_after_ready_are_a_rollout_not_a_failure(bed: Bed) -> None:
    """The Deployment at a new generation (a token rotated, a rollout restart, a repair)
    restarts its pods: Pending while they start, and no probe failure recorded."""
    uid = _served_then_lost(bed, restarted=True)
    assert bed.world.orders.get(uid)["status"]["phase"] == "Pending"
    assert bed.conditions(uid)["WorkloadReady"]["reason"] == "RolloutInProgress"
    assert bed.events(uid, ev.ProbeFailed) == []


def _image(deployment: dict[str, Any] | None) -> str:
    assert deployment is not None
    return str(deployment["spec"]["template"]["spec"]["containers"][0]["image"])


def test_a_recipe_made_unusable_with_no_other_leaves_the_workload_as_applied(bed: Bed) -> None:
    """An administrator's edit the controller refuses (an argument naming a placeholder
    it does not fill), then the recipe deleted: with no other recipe for the model, the
    workload runs on as applied and the order says which recipe and why; the recipe back,
    the order is whole again. None of it is a replan."""
    uid = bed.order("llm")
    bed.settle(uid)
    (planned,) = bed.events(uid, ev.PlanComputed)
    name = planned.plan.recipe
    recipe = bed.world.recipes.get_by_name(None, name)
    assert recipe is not None
    original = json.loads(json.dumps(recipe))
    recipe["spec"]["args"] = [*recipe["spec"].get("args", []), "--max-num-seqs={maxNumSeqs}"]
    fakes.put(bed.world, recipe)
    deployment = bed.child("Deployment", "llm")
    bed.settle(uid)
    (failed,) = bed.events(uid, ev.WorkloadApplyFailed)
    assert f"LaunchRecipe {name!r}" in failed.message and "maxNumSeqs" in failed.message
    assert "refused" in failed.message and "gone" not in failed.message
    assert bed.child("Deployment", "llm") == deployment  # runs on as applied

    fakes.drop(bed.world, recipe)
    bed.settle(uid)
    gone = bed.conditions(uid)["WorkloadReady"]
    assert gone["reason"] == "WorkloadApplyFailed"
    assert f"launch recipe {name!r} is gone" in gone["message"]
    writes = bed.writer.writes
    bed.settle(uid)
    assert bed.writer.writes == writes  # said once: passes while it stays gone write nothing

    fakes.put(bed.world, original)
    bed.settle(uid)
    assert bed.conditions(uid)["WorkloadReady"]["reason"] != "WorkloadApplyFailed"
    assert bed.child("Deployment", "llm") == deployment
    assert bed.events(uid, ev.RecipeReplaced) == [] and bed.events(uid, ev.PlanFailed) == []
    assert bed.world.orders.get(uid)["status"]["resolved"]["replanCount"] == 0
    writes = bed.writer.writes
    bed.settle(uid)
    assert bed.writer.writes == writes  # whole again: the passes after write nothing


def test_a_recipe_made_unusable_is_replaced_on_the_same_place(bed: Bed) -> None:
    """A recipe deleted under a serving order: the workload rolls out on the best recipe
    left, on the devices it holds, as a recipe's edit would. A new recipe alone moves
    nothing (a serving order is not replanned because the world changed)."""
    uid = bed.order("llm")
    bed.settle(uid)
    (planned,) = bed.events(uid, ev.PlanComputed)
    recipe = bed.world.recipes.get_by_name(None, planned.plan.recipe)
    assert recipe is not None
    spare = json.loads(json.dumps(recipe))
    spare["metadata"] = {"name": "vllm-spare"}
    spare["spec"]["image"] = "vllm/vllm-openai:spare"
    spare["spec"]["preference"] = int(spare["spec"].get("preference", 0)) - 1
    fakes.put(bed.world, spare)
    deployment = bed.child("Deployment", "llm")
    bed.settle(uid)
    assert bed.child("Deployment", "llm") == deployment

    fakes.drop(bed.world, recipe)
    bed.settle(uid)
    (replaced,) = bed.events(uid, ev.RecipeReplaced)
    assert replaced.recipe == planned.plan.recipe and "is gone" in replaced.message
    assert replaced.plan.recipe == "vllm-spare"
    assert replaced.plan.devices == planned.plan.devices
    assert bed.events(uid, ev.WorkloadApplyFailed) == []
    assert _image(bed.child("Deployment", "llm")) == "vllm/vllm-openai:spare"
    status = bed.world.orders.get(uid)["status"]
    assert status["resolved"]["recipe"] == "vllm-spare" and status["resolved"]["replanCount"] == 0
    assert len(bed.events(uid, ev.PlanComputed)) == 1
    # Replaced once: the passes after it write nothing.
    writes = bed.writer.writes
    bed.settle(uid)
    assert bed.writer.writes == writes
    assert len(bed.events(uid, ev.RecipeReplaced)) == 1


def _tool_flags(deployment: dict[str, Any] | None) -> list[str]:
    assert deployment is not None
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return [
        a for a in args if a.split("=")[0] in ("--enable-auto-tool-choice", "--tool-call-parser")
    ]


def test_a_recipe_edited_to_turn_tool_calling_off_is_said_in_the_status(bed: Bed) -> None:
    """An admin turns tool calling off on the recipe an order runs on. The Deployment is
    rendered from the recipe as it is, so its runtime lost the flags, and the status went
    on saying `toolCallingSupported: true` (the plan's, from the recipe as it was) to the
    clients that trust it. The plan follows the recipe (`RecipeReplaced` by itself, not a
    replan), the Deployment rolled once; turned on again, the same."""
    uid = bed.order("llm")
    bed.settle(uid)
    (planned,) = bed.events(uid, ev.PlanComputed)
    assert planned.plan.tool_calling_supported
    assert _tool_flags(bed.child("Deployment", "llm"))
    recipe = bed.world.recipes.get_by_name(None, planned.plan.recipe)
    assert recipe is not None
    enabled = copy.deepcopy(recipe["spec"]["toolCalling"])
    applies = bed.writer.calls[("apply", "Deployment")]

    recipe["spec"]["toolCalling"] = {"enabled": False}
    fakes.put(bed.world, recipe)
    bed.settle(uid)
    status = bed.world.orders.get(uid)["status"]
    assert status["endpoint"]["toolCallingSupported"] is False
    assert _tool_flags(bed.child("Deployment", "llm")) == []
    assert bed.writer.calls[("apply", "Deployment")] == applies + 1  # rolled once
    (replaced,) = bed.events(uid, ev.RecipeReplaced)
    assert replaced.recipe == replaced.plan.recipe == planned.plan.recipe
    assert replaced.plan == planned.plan.model_copy(update={"tool_calling_supported": False})
    assert status["resolved"]["recipe"] == planned.plan.recipe
    assert status["resolved"]["replanCount"] == 0 and len(bed.events(uid, ev.PlanComputed)) == 1
    writes = bed.writer.writes
    bed.settle(uid)
    assert bed.writer.writes == writes  # followed once: the passes after write nothing

    recipe["spec"]["toolCalling"] = enabled
    fakes.put(bed.world, recipe)
    bed.settle(uid)
    status = bed.world.orders.get(uid)["status"]
    assert status["endpoint"]["toolCallingSupported"] is True
    assert _tool_flags(bed.child("Deployment", "llm"))
    assert bed.writer.calls[("apply", "Deployment")] == applies + 2
    assert len(bed.events(uid, ev.RecipeReplaced)) == 2
    assert status["resolved"]["replanCount"] == 0

    recipe["spec"]["image"] = "vllm/vllm-openai:edited"  # an edit the plan says nothing of
    fakes.put(bed.world, recipe)
    bed.settle(uid)
    assert _image(bed.child("Deployment", "llm")) == "vllm/vllm-openai:edited"
    assert bed.writer.calls[("apply", "Deployment")] == applies + 3
    assert len(bed.events(uid, ev.RecipeReplaced)) == 2


def test_a_status_written_but_not_recorded_is_recorded_by_the_next_pass(bed: Bed) -> None:
    """The log fails between the status write and its record (the projection `list` and
    `verify` read): the next passes find the live status already right and wrote
    nothing, so the record stayed behind for good (`list --reason ClassNotFound` empty,
    `verify` content). It is recorded once the live status is found to be it, and a
    settled pass after that writes nothing more."""
    uid = bed.order("llm")
    bed.settle(uid, passes=5)
    for obj in bed.world.classes.objects():
        fakes.drop(bed.world, obj)
    with bed.log.engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TRIGGER refuse_projection BEFORE UPDATE ON projections "
            "BEGIN SELECT RAISE(ABORT, 'the database went away'); END"
        )
    with pytest.raises(store.StoreError):
        bed.reconciler.reconcile(uid)
    with bed.log.engine.begin() as conn:
        conn.exec_driver_sql("DROP TRIGGER refuse_projection")
    live = bed.world.orders.get(uid)["status"]
    assert live["conditions"][0]["reason"] == "ClassNotFound"
    assert bed.log.projection(uid).status != live  # written, not recorded
    bed.settle(uid, passes=3)
    projection = bed.log.projection(uid)
    assert projection.status == bed.world.orders.get(uid)["status"]
    assert projection.version == bed.log.stream(uid).version
    writes = bed.writer.writes
    bed.settle(uid, passes=2)
    assert bed.writer.writes == writes


def test_a_copy_of_a_child_in_another_namespace_is_not_the_orders(bed: Bed) -> None:
    """A user copies the order's Service and a pod into another namespace (owner
    references stripped, the order's label kept). Counted among the order's children, the
    copy hid its own Service (the last by UID won), and a serving order went Pending with
    WorkloadApplyFailed naming its own, untouched Service as someone else's; the copied
    pod's scheduler message was the order's."""
    uid = bed.order("llm")
    bed.settle(uid)
    before = bed.conditions(uid)["WorkloadReady"]
    ours = bed.child("Service", "llm")
    assert ours is not None
    clone = copy.deepcopy(ours)
    clone["metadata"].update(namespace="staging", uid="ffffffff-copy")  # sorts last
    clone["metadata"].pop("ownerReferences")
    fakes.put(bed.world, clone)
    pending = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "clone-1", "namespace": "staging", "labels": {UID_LABEL: uid}},
        "spec": {},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient memory.",
                }
            ],
        },
    }
    fakes.put(bed.world, pending)
    assert bed.world.pods_of(uid, "support") == []
    assert {c["metadata"]["namespace"] for c in bed.world.children_of(uid, "support")} == {
        "support"
    }
    bed.settle(uid, passes=2)
    assert bed.conditions(uid)["WorkloadReady"]["reason"] == before["reason"]


def test_a_recipe_edited_to_a_runtime_without_a_key_never_serves_a_token_order_open(
    bed: Bed,
) -> None:
    """An admin edits the runtime of the recipe a Token order runs on to one the
    controller cannot give the key to (TEI reads --api-key). Rendered anyway, it was
    given VLLM_API_KEY, which it ignores, and answered anyone. With no other recipe the
    apply is refused and says why (the pods run on as last applied); with one, the
    order moves to it on the place it holds."""
    uid = bed.order("llm")
    bed.settle(uid)
    (planned,) = bed.events(uid, ev.PlanComputed)
    recipe = bed.world.recipes.get_by_name(None, planned.plan.recipe)
    assert recipe is not None
    others = [
        r
        for r in bed.world.recipes.objects()
        if r["metadata"]["name"] != recipe["metadata"]["name"]
    ]
    for other in others:  # first, the edited recipe is the only one
        fakes.drop(bed.world, other)
    keyed = json.loads(json.dumps(recipe))
    edited = json.loads(json.dumps(recipe))
    edited["spec"]["runtime"] = "text-embeddings-inference"
    fakes.put(bed.world, edited)
    deployment = bed.child("Deployment", "llm")
    bed.settle(uid)
    assert bed.child("Deployment", "llm") == deployment  # not re-rendered open
    failed = bed.conditions(uid)["WorkloadReady"]
    assert failed["reason"] == "WorkloadApplyFailed"
    assert "cannot be given the API key" in failed["message"]

    keyed["metadata"] = {"name": "vllm-spare"}
    fakes.put(bed.world, keyed)
    bed.settle(uid)
    (replaced,) = bed.events(uid, ev.RecipeReplaced)
    assert replaced.plan.recipe == "vllm-spare" and "cannot be given the API key" in (
        replaced.message
    )
    assert replaced.plan.devices == planned.plan.devices
    runtime = bed.child("Deployment", "llm")
    assert runtime is not None
    env = {e["name"] for e in runtime["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "VLLM_API_KEY" in env


def test_a_disowned_child_no_longer_rendered_is_pruned(bed: Bed) -> None:
    """The order's Ingress, its owner references removed (a trimmed `kubectl replace`),
    then the class switched to ClusterLocal: nothing renders it, and nothing owned it, so
    it was never pruned and the endpoint stayed public (and outlived the order)."""
    _exposure(bed, TOKEN_EXTERNAL, 1)
    uid = bed.order("llm")
    bed.settle(uid)
    ingress = bed.child("Ingress", "llm")
    assert ingress is not None
    ingress["metadata"].pop("ownerReferences")
    fakes.put(bed.world, ingress)
    _exposure(bed, NONE_LOCAL, 2)
    bed.settle(uid)
    assert bed.child("Ingress", "llm") is None
    writes = bed.writer.writes
    bed.settle(uid)
    assert bed.writer.writes == writes


def test_a_users_copy_no_longer_rendered_is_left(bed: Bed) -> None:
    """The same Ingress made by the user's client (no apply of ours in its history): not
    the order's to prune."""
    _exposure(bed, TOKEN_EXTERNAL, 1)
    uid = bed.order("llm")
    bed.settle(uid)
    ingress = bed.child("Ingress", "llm")
    assert ingress is not None
    copied = copy.deepcopy(ingress)
    copied["metadata"].pop("ownerReferences")
    copied["metadata"]["uid"] = "users-copy"
    fakes.drop(bed.world, ingress)
    fakes.put(bed.world, copied)
    _exposure(bed, NONE_LOCAL, 2)
    bed.settle(uid)
    assert bed.child("Ingress", "llm") is not None
    assert bed.writer.calls[("delete", "Ingress")] == 0


@pytest.mark.parametrize("pass_before_pods", [False, True])
def test_a_selector_key_let_be_while_no_pod_is_removed_when_pods_come(
    bed: Bed, pass_before_pods: bool
) -> None:
    """With no pod, a key added to the selector misses nothing and is let be; a pass then
    found the workload converged, and its note (which does not see pods) held when the
    pods came without the key: the Service stayed dark for good."""
    uid = bed.order("llm")
    bed.settle(uid)
    service = bed.child("Service", "llm")
    assert service is not None
    service["spec"]["selector"]["tier"] = "nothing"
    fakes.put(bed.world, service)
    if pass_before_pods:
        bed.settle(uid)
    fakes.put(bed.world, _order_pod(uid))
    bed.settle(uid)
    live = bed.child("Service", "llm")
    assert live is not None and live["spec"]["selector"] == {UID_LABEL: uid}


def test_a_selector_key_kept_back_does_not_hold_the_rest_of_an_edit(bed: Bed) -> None:
    """A mesh webhook installed under a serving order, then the order edited: the Service
    (rendered first) gets the webhook's key, which its old pod lacks. Refused there, the
    Deployment, whose new pods would carry it, was never applied: the edit never rolled
    out. Now the rest is applied, and the refusal said after."""
    uid = bed.order("llm")
    bed.settle(uid)
    fakes.put(bed.world, _order_pod(uid))
    bed.settle(uid)
    _webhook_adds_a_selector_key(bed)
    fakes.put(bed.world, external_token_class("conv2"))
    edited = copy.deepcopy(bed.world.orders.get(uid))
    edited["spec"]["inferenceServiceClassName"] = "conv2"
    edited["metadata"]["generation"] = 2
    fakes.put(bed.world, edited)
    bed.settle(uid, passes=1)
    deployment = bed.child("Deployment", "llm")
    assert deployment is not None
    assert deployment["metadata"]["annotations"]["ai.deckhouse.io/order-generation"] == "2"
    assert bed.conditions(uid)["WorkloadReady"]["reason"] == "WorkloadApplyFailed"


def test_an_ended_pod_without_a_webhooks_selector_key_is_not_one_to_select(bed: Bed) -> None:
    """A mesh webhook's key on the Service and the running pod; an evicted pod kept from
    before the webhook lacks it. Counted, it made the key look like one that selects
    nothing: the order read WorkloadApplyFailed, the Service rewritten on every backoff."""
    uid = bed.order("llm")
    bed.settle(uid)
    fakes.put(bed.world, _order_pod(uid, **{"mesh.example.com/zone": "a"}))
    evicted = _order_pod(uid)
    evicted["metadata"]["name"] = "llm-old"
    evicted["status"] = {"phase": "Failed", "reason": "Evicted"}
    fakes.put(bed.world, evicted)
    _webhook_adds_a_selector_key(bed)
    writes = bed.writer.writes
    bed.settle(uid)
    assert bed.conditions(uid)["WorkloadReady"]["reason"] != "WorkloadApplyFailed"
    assert bed.writer.writes == writes
