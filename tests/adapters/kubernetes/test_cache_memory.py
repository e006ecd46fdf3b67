"""What the controller's cache keeps per order: only what its readers need, strings shared.

The trims (world.py's shapes) must never drop a field drift detection compares: every
variant rendering.py makes is cached and must still cover what was rendered, or the
controller would re-apply it on every pass. The bytes per order are measured with
tracemalloc on one Ready order's objects as the local API server served them
(fixtures/live_order.json, benchmarks/memory.py --capture), so a trim or the sharing
of strings that regresses fails here, as a count of bytes, not a time.
"""

from __future__ import annotations

import copy
import gc
import json
import re
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict
from workload_samples import FACTS, HF_REF, ORDER, PLAN, RECIPE, SETTINGS, policy

from adapters.kubernetes import converging, oldservers, sharing
from adapters.kubernetes.rendering import render_workload
from adapters.kubernetes.world import DEPLOYMENT_SHAPE, REPLICA_FAILURE, ClusterCache
from fsm.values import (
    Authentication,
    CatalogKind,
    EffectivePolicy,
    ExposureType,
    ModelRef,
    ModelSource,
    Plan,
    SharingMode,
    UpdateStrategy,
)
from tests.support import fakes

FIXTURE = Path(__file__).parent / "fixtures" / "live_order.json"
UID_LABEL = "ai.deckhouse.io/inference-service-uid"
UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

SHARED = PLAN.model_copy(
    update={"sharing_mode": SharingMode.SHARED, "share_percent": 50, "cpu": "2"}
)
MULTI = PLAN.model_copy(
    update={"accelerator_count": 2, "devices": ("gpu.nvidia.com/n/gpu-0", "gpu.nvidia.com/n/gpu-1")}
)
HF_WITH_SECRET = HF_REF.model_copy(update={"auth_secret_name": "hf", "auth_secret_key": "t"})
CATALOG = ModelRef(src=ModelSource.AI_MODELS, name="qwen-7b", kind=CatalogKind.MODEL)

VARIANTS = {
    "external-token-autoscaled": dict(pol=policy(max_replicas=3)),
    "cluster-local-fixed": dict(
        pol=policy(ExposureType.CLUSTER_LOCAL, Authentication.NONE, min_replicas=2, max_replicas=2)
    ),
    "priority-recreate": dict(
        pol=policy(priority="high", strategy=UpdateStrategy.RECREATE), plan=MULTI
    ),
    "shared-device": dict(plan=SHARED),
    "hf-secret-and-token-rotation": dict(ref=HF_WITH_SECRET, auth_secret_uid=True),
    "catalog-model": dict(ref=CATALOG),
    "old-server": dict(old_server=True, plan=MULTI),
}


def _rendered(
    pol: Any = None,
    plan: Any = PLAN,
    ref: ModelRef = HF_REF,
    auth_secret_uid: bool = False,
    old_server: bool = False,
) -> list[dict[str, Any]]:
    docs = render_workload(
        ORDER,
        plan,
        RECIPE,
        pol or policy(),
        ref,
        settings=SETTINGS,
        facts=FACTS,
        auth_secret=f"{ORDER.name}-auth" if auth_secret_uid else None,
        auth_secret_uid=str(uuid.uuid4()) if auth_secret_uid else None,
    )
    return [oldservers.for_old_server(doc) if old_server else doc for doc in docs]


def _managed(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in ("apiVersion", "kind")}


@pytest.mark.parametrize("variant", list(VARIANTS), ids=list(VARIANTS))
def test_the_cache_keeps_every_field_drift_detection_compares(variant: str) -> None:
    cache = fakes.world()
    for doc in _rendered(**VARIANTS[variant]):
        stored = fakes.put(cache, doc)
        cached = cache.children_of(ORDER.uid, ORDER.namespace, copy_=False)
        live = {converging.key_of(obj): obj for obj in cached}
        kept = live[converging.key_of(doc)]
        assert kept["metadata"]["uid"] == stored["metadata"]["uid"]
        assert converging.covers(kept, _managed(doc)), (doc["kind"], variant)
        assert converging.drifted([doc], live) == []


def _fixture() -> dict[str, Any]:
    return dict(json.loads(FIXTURE.read_text()))


def _live(kind: str) -> dict[str, Any]:
    return next(o for o in _fixture()["objects"] if o["kind"] == kind)


def _paths(value: Any, prefix: str = "") -> set[str]:
    if isinstance(value, dict):
        return {p for k, v in value.items() for p in _paths(v, f"{prefix}.{k}" if prefix else k)}
    if isinstance(value, list):
        return {p for item in value for p in _paths(item, f"{prefix}[]")} or {prefix}
    return {prefix}


def _allowed(shape: Any, prefix: str = "") -> set[str]:
    if shape is True:
        return {prefix}
    return {p for k, v in shape.items() for p in _allowed(v, f"{prefix}.{k}" if prefix else k)}


def _within(path: str, allowed: set[str]) -> bool:
    bare = path.replace("[]", "")
    return any(bare == a or bare.startswith(a + ".") for a in allowed)


def test_a_cached_deployment_holds_only_what_its_readers_need() -> None:
    cache = fakes.world()
    live = _live("Deployment")
    cache.deployments._apply("MODIFIED", copy.deepcopy(live))
    (cached,) = cache.deployments.objects(copy_=False)
    allowed = _allowed(DEPLOYMENT_SHAPE)
    assert {p for p in _paths(cached) if not _within(p, allowed)} == set()
    # Dropped: the server's defaults of the pod template and the status conditions.
    pod = cached["spec"]["template"]["spec"]
    assert "dnsPolicy" not in pod and "terminationMessagePath" not in pod["containers"][0]
    assert "conditions" not in cached["status"] and "managedFields" not in cached["metadata"]
    # Kept: what observing, acting and the arbiter read.
    counters = ("observedGeneration", "replicas", "updatedReplicas", "readyReplicas")
    assert cached["status"] == {k: live["status"][k] for k in (*counters, "availableReplicas")}
    assert cached["metadata"] == {k: v for k, v in live["metadata"].items() if k != "managedFields"}
    assert cached["spec"]["template"]["metadata"] == live["spec"]["template"]["metadata"]


def test_a_cached_deployment_keeps_why_its_pods_cannot_be_created_and_no_pod_name() -> None:
    """The ReplicaFailure condition (a LimitRange, a quota refusing the runtime's pods) is
    what the order says then; each try names a new pod, which the cache leaves out, so
    the tries change nothing the order reads."""
    kept = []
    for pod in ("llm-6c9f7d-x2b4k", "llm-6c9f7d-q9zzt"):
        live = _live("Deployment")
        live["status"]["conditions"] = [
            {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
            {
                "type": "ReplicaFailure",
                "status": "True",
                "reason": "FailedCreate",
                "message": f'pods "{pod}" is forbidden: maximum memory usage per Container '
                "is 1Gi, but limit is 8Gi",
            },
        ]
        cache = fakes.world()
        cache.deployments._apply("MODIFIED", live)
        (cached,) = cache.deployments.objects(copy_=False)
        kept.append(cached["status"])
    assert kept[0] == kept[1]
    assert kept[0][REPLICA_FAILURE] == (
        "a pod is forbidden: maximum memory usage per Container is 1Gi, but limit is 8Gi"
    )
    assert "conditions" not in kept[0]


def test_a_cached_claim_keeps_its_holder_devices_and_sharing() -> None:
    cache = fakes.world()
    live = _live("ResourceClaim")
    cache.resource_claims._apply("MODIFIED", copy.deepcopy(live))
    (cached,) = cache.resource_claims.objects(copy_=False)
    assert cached["status"] == {"allocation": {"devices": live["status"]["allocation"]["devices"]}}
    assert cached["metadata"]["labels"][UID_LABEL] == live["metadata"]["labels"][UID_LABEL]
    assert "requests" not in cached["spec"]["devices"]


def test_a_cached_pod_keeps_what_its_conditions_say_and_ready_pods_share_them() -> None:
    cache = fakes.world()
    live = _live("Pod")
    pods = [live]
    for i in (1, 2, 3):  # pods Ready a while after the first, each at another time
        later = copy.deepcopy(live)
        later["metadata"].update(name=f"other-{i}", uid=f"00000000-0000-0000-0000-00000000000{i}")
        for cond in later["status"]["conditions"]:
            cond["lastTransitionTime"] = f"2026-12-04T10:0{i}:00Z"
        pods.append(later)
    for pod in pods:
        cache.pods._apply("ADDED", json.loads(json.dumps(pod)))  # parsed anew, as watched
    first, _, third, fourth = (cache.pods.get(o["metadata"]["uid"], copy_=False) for o in pods)
    assert first is not None and third is not None and fourth is not None
    said = ("type", "status", "reason", "message")
    assert first["status"]["conditions"] == [
        {k: c[k] for k in said if k in c} for c in live["status"]["conditions"]
    ]
    assert first["status"]["phase"] == live["status"]["phase"]
    assert first["metadata"]["creationTimestamp"] == live["metadata"]["creationTimestamp"]
    # Their times are not read: Ready pods' conditions are one list in the cache (a list
    # of dicts from its third sighting on: compacting.py enters no part with a part new
    # to it, so the dicts are entered the second time, the list the third).
    assert third["status"]["conditions"] is fourth["status"]["conditions"]


def _copies(n: int) -> list[list[str]]:
    """One order's objects as JSON texts, under new UIDs and names for each of n orders."""
    fixture = _fixture()
    texts = [json.dumps(obj) for obj in fixture["objects"]]
    name = fixture["order"]["metadata"]["name"]
    uids = sorted({uid for text in texts for uid in UID.findall(text)})
    out = []
    for i in range(n):
        order = []
        for text in texts:
            copied = text
            for k, uid in enumerate(uids):
                copied = copied.replace(uid, str(uuid.UUID(int=(i << 16) + k + 1)))
            order.append(copied.replace(f'"{name}', f'"o{i:04d}-{name}'))
        out.append(order)
    return out


def _fed(cache: ClusterCache, texts: list[str]) -> None:
    for text in texts:
        obj = json.loads(text)  # one parse per object, as the watch parses each event
        labelled = UID_LABEL in (obj["metadata"].get("labels") or {})
        informer = fakes.informer_for(cache, obj["kind"], labelled)
        informer._apply("ADDED", obj)


# Measured here on 2026-12-04: 17.7 KB per Ready order with equal parts held once (33.2 KB
# on 2026-12-03 with only the strings shared, 75.4 KB before the strings were shared and
# the children trimmed). The bound leaves room for Python's versions, not for a trim or
# the sharing undone.
CACHE_BYTES_PER_ORDER = 21_000


def test_the_cache_holds_a_ready_order_in_a_bounded_number_of_bytes() -> None:
    n = 60
    orders = _copies(n)
    cache = fakes.world()
    _fed(cache, orders[0])  # the first order's strings are everyone's (keys, the image)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for texts in orders[1:]:
            _fed(cache, texts)
        gc.collect()
        per_order = (tracemalloc.get_traced_memory()[0] - before) / (n - 1)
    finally:
        tracemalloc.stop()
    assert len(cache.orders.uids()) == n and len(cache.pods.uids()) == n
    assert per_order <= CACHE_BYTES_PER_ORDER, f"{per_order:,.0f} bytes per order"


class _Holder(BaseModel):
    """An order's state in small: a frozen model holding frozen parts."""

    model_config = ConfigDict(frozen=True)
    policy: EffectivePolicy | None
    plan: Plan


def test_equal_parts_of_states_are_held_once_and_freed_with_them() -> None:
    table = sharing.Table()
    rendered = policy(max_replicas=3)
    twin = policy(max_replicas=3)  # equal, another object: another order's fold
    assert rendered == twin and rendered is not twin
    holder_a = sharing.shared_parts(_Holder(policy=rendered, plan=PLAN.model_copy()), table)
    holder_b = sharing.shared_parts(_Holder(policy=twin, plan=MULTI.model_copy()), table)
    assert holder_b == _Holder(policy=twin, plan=MULTI)  # the same value
    assert holder_b.policy is holder_a.policy  # held once
    assert holder_b.plan is not holder_a.plan  # unequal parts stay apart
    del holder_a, holder_b, rendered, twin
    gc.collect()
    assert len(table) == 0


def test_a_part_given_otherwise_explicitly_is_not_shared() -> None:
    # Which fields were given is part of a model (fsm/policy.py reads it): equal values
    # built from different fields are not interchangeable.
    table = sharing.Table()
    explicit = PLAN.model_copy(update={"cpu": PLAN.cpu})
    implicit = PLAN.model_copy()
    implicit.__pydantic_fields_set__.discard("cpu")
    assert explicit == implicit
    a = sharing.shared_parts(_Holder(policy=None, plan=explicit), table)
    b = sharing.shared_parts(_Holder(policy=None, plan=implicit), table)
    assert a.plan is not b.plan


def test_which_fields_were_given_is_held_once_and_copies_change_their_own() -> None:
    table = sharing.Table()
    a = sharing.shared_parts(_Holder(policy=None, plan=PLAN.model_copy()), table)
    b = sharing.shared_parts(_Holder(policy=None, plan=MULTI.model_copy()), table)
    assert a.model_fields_set == b.model_fields_set == {"policy", "plan"}
    assert a.model_fields_set is b.model_fields_set  # one set for both
    # A copy has its own set before it changes it (as the fold's does): `b` is untouched.
    c = a.model_copy(update={"plan": MULTI})
    c.__pydantic_fields_set__.discard("policy")
    assert b.model_fields_set == {"policy", "plan"} and a.model_fields_set == {"policy", "plan"}


class _SeenTable(sharing.Table):
    """A table that remembers which values it was asked to share."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[Any] = []

    def shared(self, value: Any) -> Any:
        self.asked.append(value)
        return super().shared(value)


def test_a_state_folded_from_a_kept_one_shares_only_the_parts_that_changed() -> None:
    table = _SeenTable()
    kept = sharing.shared_parts(_Holder(policy=policy(max_replicas=3), plan=PLAN), table)
    elsewhere = sharing.shared_parts(_Holder(policy=None, plan=MULTI.model_copy()), table)
    folded = kept.model_copy(update={"plan": MULTI.model_copy()})  # a fold moved the plan
    table.asked.clear()
    again = sharing.shared_parts(folded, table, kept=kept)
    assert again.policy is kept.policy
    assert again.plan is elsewhere.plan  # what changed is shared as before
    assert table.asked and not any(value is kept.policy for value in table.asked)
    # Without `kept`, every part is walked again (the answer is the same).
    table.asked.clear()
    assert sharing.shared_parts(folded, table).policy is kept.policy
    assert any(value is kept.policy for value in table.asked)
