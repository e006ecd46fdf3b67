"""The controller converges (issue: level-based repair, pruning, capacity promised once).

Against the real API server with the simulator: owned objects deleted or edited are put
back, what the class no longer allows is removed, a burst of orders never gets one
device twice, a class tried for lack of devices is tried again when capacity appears,
a hub outage does not demote a Ready order, and a refused apply is tried again until
it passes. Every test counts the controller's
writes (its one Writer) or repairs, so a loop that writes forever fails.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from adapters.kubernetes.rendering import AUTH_SECRET_UID_ANNOTATION, UID_LABEL
from adapters.platform import LocalPlatform
from adapters.probes.targets import AnnotatedPodTarget
from adapters.simulator.hub import StandInHub
from fsm import events as ev
from fsm.fold import fold
from fsm.identity import OrderRef
from tests.e2e.capacity import (
    L4,
    QWEN_SMALL,
    class_ready,
    class_spec,
    events_of,
    extra_capacity,
    gpu_node,
    hf,
    product_class,
)
from tests.e2e.conftest import Admin, Orders, forced_passes, pass_errors, wait_for

pytestmark = pytest.mark.cluster

GROUP, VERSION, CLASSES = "ai.deckhouse.io", "v1alpha1", "inferenceserviceclasses"
NS = "support"


def external_token(device_classes: list[str]) -> dict[str, Any]:
    spec = class_spec(device_classes)
    spec["exposurePolicy"] = {
        "type": "External",
        "authentication": "Token",
        "https": {"mode": "Disabled"},
    }
    return spec


@contextmanager
def l4_class(
    platform: LocalPlatform,
    admin: Admin,
    name: str,
    spec: Callable[[list[str]], dict[str, Any]],
    gpus: int = 1,
) -> Iterator[None]:
    """A node of `gpus` L4s, a device class `{name}-l4` selecting them, and class `name`
    (`spec` of that device class) Ready; all of it gone after."""
    node = gpu_node(f"{name}-node", [(L4, "24Gi")] * gpus)
    with extra_capacity(platform, [node], [product_class(f"{name}-l4", L4)]):
        admin.create_class(name, spec([f"{name}-l4"]))
        class_ready(platform, name)
        yield


def settle(platform: LocalPlatform, uid: str, passes: int = 5) -> int:
    """Passes over the order, each to its end; the controller's writes meanwhile."""
    return forced_passes(platform, uid, passes)


def rolled_out(admin: Admin, name: str) -> bool:
    status = admin.apps.read_namespaced_deployment(name, NS).status
    return (
        (status.updated_replicas or 0)
        == (status.replicas or 0)
        == (status.available_replicas or 0)
        >= 1
    )


def live_uid(read: Any) -> str | None:
    try:
        return str(read().metadata.uid)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def recreated(read: Any, old: str) -> str:
    return wait_for(
        lambda: uid if (uid := live_uid(read)) not in (None, old) else None,
        timeout=30,
        what="the object to be made again",
    )


def phases(platform: LocalPlatform, uid: str, after: int) -> set[str]:
    """Phases the order's status passed through since log version `after`."""
    records = list(platform.log.read(uid))
    seen = set()
    state = fold([r.event for r in records[:after]])
    for record in records[after:]:
        state = fold([record.event], start=state)
        seen.add(str(state.phase))
    return seen


@pytest.mark.timeout(240)
def test_deleted_and_edited_children_come_back_with_no_false_phase(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    with l4_class(platform, admin, "e2e-conv", external_token):
        uid = orders(
            "conv-repair", {"inferenceServiceClassName": "e2e-conv", "model": hf(QWEN_SMALL)}
        )
        alice.wait_phase(NS, "conv-repair", "Ready", timeout=90)
        assert settle(platform, uid) == 0  # quiet: nothing differs, nothing is written
        version = platform.log.stream(uid).version  # type: ignore[union-attr]
        actor = platform.controller.reconciler.actor
        core, apps = admin.core, admin.apps
        net = client.NetworkingV1Api(admin.api)
        custom = admin.custom
        readers = {
            "Service": lambda: core.read_namespaced_service("conv-repair", NS),
            "Ingress": lambda: net.read_namespaced_ingress("conv-repair", NS),
            "ResourceClaimTemplate": lambda: custom.get_namespaced_custom_object(
                "resource.k8s.io", "v1", NS, "resourceclaimtemplates", "conv-repair"
            ),
        }
        deleters = {
            "Service": lambda: core.delete_namespaced_service(
                "conv-repair", NS, _preload_content=False
            ),
            "Ingress": lambda: net.delete_namespaced_ingress(
                "conv-repair", NS, _preload_content=False
            ),
            "ResourceClaimTemplate": lambda: custom.delete_namespaced_custom_object(
                "resource.k8s.io", "v1", NS, "resourceclaimtemplates", "conv-repair"
            ),
        }
        for kind, read in readers.items():
            repairs = actor.repairs
            old = live_uid(lambda r=read: _Meta(r()))
            assert old is not None
            deleters[kind]()
            recreated(lambda r=read: _Meta(r()), old)
            # Counted once the apply's echo is back in the cache, after the server has it.
            wait_for(
                lambda r=repairs: actor.repairs == r + 1 or None,
                timeout=10,
                what=f"{kind}: one apply repairs it",
            )
            assert settle(platform, uid) == 0, f"{kind}: writes after the repair settled"
            assert actor.repairs == repairs + 1, f"{kind}: one apply repairs it"

        assert phases(platform, uid, version) <= {"Ready"}  # no false phase on the way
        # An edit the apply reverts: the runtime's env (a real rollout, twice: the edit's
        # and the revert's), and the Service retyped.
        apps.patch_namespaced_deployment(
            "conv-repair",
            NS,
            {
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "runtime",
                                    "env": [{"name": "HF_HOME", "value": "/tmp/elsewhere"}],
                                }
                            ]
                        }
                    }
                }
            },
        )

        def env_restored() -> bool:
            dep = apps.read_namespaced_deployment("conv-repair", NS)
            env = {e.name: e.value for e in dep.spec.template.spec.containers[0].env or []}
            return env.get("HF_HOME") not in (None, "/tmp/elsewhere")

        wait_for(env_restored, timeout=30, what="the runtime's env reverted")

        wait_for(lambda: rolled_out(admin, "conv-repair"), timeout=90, what="the rollout")
        alice.wait_phase(NS, "conv-repair", "Ready", timeout=90)
        core.patch_namespaced_service(
            "conv-repair", NS, {"spec": {"type": "ExternalName", "externalName": "evil.example"}}
        )
        wait_for(
            lambda: core.read_namespaced_service("conv-repair", NS).spec.type == "ClusterIP",
            timeout=30,
            what="the Service typed ClusterIP again",
        )
        assert settle(platform, uid, passes=8) == 0
        obj = alice.get(NS, "conv-repair")
        assert obj is not None and obj["status"]["phase"] == "Ready"
        assert len(events_of(platform, uid, ev.WorkloadApplied)) == 1  # repairs, no new plan


class _Meta:
    """`live_uid` reads `.metadata.uid` of generated models and of dicts alike."""

    def __init__(self, obj: Any) -> None:
        uid = obj["metadata"]["uid"] if isinstance(obj, dict) else obj.metadata.uid
        self.metadata = type("M", (), {"uid": uid})


@pytest.mark.timeout(300)
def test_a_rotated_token_reaches_the_runtime(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    with l4_class(platform, admin, "e2e-rot", external_token):
        uid = orders(
            "conv-rotate", {"inferenceServiceClassName": "e2e-rot", "model": hf(QWEN_SMALL)}
        )
        alice.wait_phase(NS, "conv-rotate", "Ready", timeout=90)
        core = admin.core
        old = core.read_namespaced_secret("conv-rotate-auth", NS)
        old_token = base64.b64decode(old.data["token"]).decode()
        core.delete_namespaced_secret("conv-rotate-auth", NS, _preload_content=False)
        new_uid = recreated(
            lambda: core.read_namespaced_secret("conv-rotate-auth", NS), old.metadata.uid
        )

        def rolled() -> bool:
            dep = admin.apps.read_namespaced_deployment("conv-rotate", NS)
            marked = (dep.spec.template.metadata.annotations or {}).get(
                "ai.deckhouse.io/auth-secret-uid"
            )
            return (
                marked == new_uid
                and (dep.status.updated_replicas or 0) >= 1
                and (dep.status.available_replicas or 0) >= 1
                and (dep.status.replicas or 0) == (dep.status.updated_replicas or 0)
            )

        wait_for(rolled, timeout=90, what="the pods rolled to the new token")
        alice.wait_phase(NS, "conv-rotate", "Ready", timeout=90)
        new_token = base64.b64decode(
            core.read_namespaced_secret("conv-rotate-auth", NS).data["token"]
        ).decode()
        assert new_token != old_token
        url = _stub_url(platform, uid, new_uid)
        assert (
            httpx.get(
                f"{url}/v1/models", headers={"Authorization": f"Bearer {new_token}"}, timeout=5
            ).status_code
            == 200
        )
        assert (
            httpx.get(
                f"{url}/v1/models", headers={"Authorization": f"Bearer {old_token}"}, timeout=5
            ).status_code
            == 401
        )


@pytest.mark.timeout(300)
def test_a_token_secret_stripped_of_its_labels_is_made_again_with_its_token(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    """The controller finds its Secrets by label: one whose labels someone removed left
    its cache, and every pass tried to make it again (a create answered 409) while the
    probe, which reads the token from the cache, never ran. It is made again with the
    same token (callers hold it; the controller may not patch Secrets), the pods roll to
    it, and the passes after write nothing."""
    with l4_class(platform, admin, "e2e-lbl", external_token):
        uid = orders(
            "conv-unlabel", {"inferenceServiceClassName": "e2e-lbl", "model": hf(QWEN_SMALL)}
        )
        alice.wait_phase(NS, "conv-unlabel", "Ready", timeout=90)
        core, name = admin.core, "conv-unlabel-auth"
        before = core.read_namespaced_secret(name, NS)
        core.patch_namespaced_secret(name, NS, {"metadata": {"labels": {UID_LABEL: None}}})
        wait_for(
            lambda: (
                (core.read_namespaced_secret(name, NS).metadata.labels or {}).get(UID_LABEL) == uid
                or None
            ),
            timeout=60,
            what="the Secret made again, labelled",
        )
        after = core.read_namespaced_secret(name, NS)
        assert after.data == before.data and after.metadata.uid != before.metadata.uid
        wait_for(lambda: rolled_out(admin, "conv-unlabel") or None, what="the pods rolled")
        wait_for(
            lambda: settle(platform, uid, 3) == 0 or None,
            timeout=60,
            what="passes that write nothing",
        )
        tokens = platform.controller.cache.token_secrets
        assert tokens.get_by_name(NS, name) is not None
        alice.wait_phase(NS, "conv-unlabel", "Ready", timeout=30)


def _stub_url(platform: LocalPlatform, uid: str, secret_uid: str | None = None) -> str:
    """A Ready pod's stub; with `secret_uid`, a pod rolled to that token Secret (a pod of
    the old ReplicaSet may still look Ready in the cache when its stub has stopped)."""

    def url() -> str | None:
        pods = [
            pod
            for pod in platform.controller.cache.pods_of(uid, NS)
            if secret_uid is None
            or (pod["metadata"].get("annotations") or {}).get(AUTH_SECRET_UID_ANNOTATION)
            == secret_uid
        ]
        return AnnotatedPodTarget().resolve(OrderRef("x", NS, uid), pods)

    return wait_for(url, timeout=30, what="a Ready pod's stub")


@pytest.mark.timeout(300)
def test_a_class_switched_to_cluster_local_without_token_prunes_and_back(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    with l4_class(platform, admin, "e2e-prune", external_token, gpus=2):
        orders("conv-prune", {"inferenceServiceClassName": "e2e-prune", "model": hf(QWEN_SMALL)})
        alice.wait_phase(NS, "conv-prune", "Ready", timeout=90)
        core, net = admin.core, client.NetworkingV1Api(admin.api)
        assert live_uid(lambda: net.read_namespaced_ingress("conv-prune", NS))
        assert live_uid(lambda: core.read_namespaced_secret("conv-prune-auth", NS))

        def set_exposure(exposure: dict[str, Any]) -> None:
            admin.custom.patch_cluster_custom_object(
                GROUP, VERSION, CLASSES, "e2e-prune", {"spec": {"exposurePolicy": exposure}}
            )

        set_exposure({"type": "ClusterLocal", "authentication": "None", "https": None})
        wait_for(
            lambda: (
                live_uid(lambda: net.read_namespaced_ingress("conv-prune", NS)) is None
                and live_uid(lambda: core.read_namespaced_secret("conv-prune-auth", NS)) is None
            ),
            timeout=60,
            what="the Ingress and the token Secret pruned",
        )

        def tokenless() -> bool:
            # What was rendered for the token and is no longer: left live, the pods would
            # go on asking for a token, and a restarted one would wait for the gone Secret.
            template = (
                client.AppsV1Api(admin.api)
                .read_namespaced_deployment("conv-prune", NS)
                .spec.template
            )
            env = [e.name for c in template.spec.containers for e in c.env or []]
            annotations = template.metadata.annotations or {}
            return "VLLM_API_KEY" not in env and AUTH_SECRET_UID_ANNOTATION not in annotations

        wait_for(tokenless, timeout=60, what="the token's env and annotation dropped")

        def ready_without_token() -> dict[str, Any] | None:
            # Published after the prune and the apply: the status of before is Ready too.
            obj = alice.wait_phase(NS, "conv-prune", "Ready", timeout=90)
            return None if obj["status"].get("authSecretName") else obj

        wait_for(ready_without_token, timeout=60, what="a Ready status without a token")
        assert live_uid(lambda: core.read_namespaced_service("conv-prune", NS))  # kept

        set_exposure({"type": "External", "authentication": "Token", "https": {"mode": "Disabled"}})
        wait_for(
            lambda: (
                live_uid(lambda: net.read_namespaced_ingress("conv-prune", NS))
                and live_uid(lambda: core.read_namespaced_secret("conv-prune-auth", NS))
            ),
            timeout=60,
            what="the Ingress and the token Secret back",
        )
        # The new token's UID rolls the pods: wait for that before counting writes.
        wait_for(lambda: rolled_out(admin, "conv-prune"), timeout=90, what="the rollout")
        obj = alice.wait_phase(NS, "conv-prune", "Ready", timeout=90)
        assert settle(platform, obj["metadata"]["uid"]) == 0


@pytest.mark.timeout(300)
def test_a_class_turning_to_an_hpa_never_drops_a_running_replica(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    """Fixed replicas (min = max = 2) become an HPA's (max 4): the Deployment's apply
    stops setting replicas. Server-side apply removes a field only its applier owned, so
    the count fell to the default of 1 — a running replica killed — unless it is handed
    over first. Every count the Deployment passes through is watched."""
    # Four devices: a replan is never offered the place the order holds (SPEC 3.1).
    fixed = {"minReplicas": 2, "maxReplicas": 2}
    with l4_class(
        platform, admin, "e2e-handover", lambda classes: class_spec(classes, scaling=fixed), gpus=4
    ):
        spec = {"inferenceServiceClassName": "e2e-handover", "model": hf(QWEN_SMALL)}
        orders("conv-handover", spec)
        alice.wait_phase(NS, "conv-handover", "Ready", timeout=90)
        wait_for(lambda: rolled_out(admin, "conv-handover"), timeout=90, what="two replicas")
        apps = admin.apps
        before = apps.read_namespaced_deployment("conv-handover", NS)
        assert before.spec.replicas == 2

        counts: list[int] = []
        stop = threading.Event()

        def watch_counts() -> None:
            version = before.metadata.resource_version
            while not stop.is_set():
                for event in watch.Watch().stream(
                    apps.list_namespaced_deployment,
                    NS,
                    field_selector="metadata.name=conv-handover",
                    resource_version=version,
                    timeout_seconds=2,
                ):
                    counts.append(event["object"].spec.replicas)
                    version = event["object"].metadata.resource_version

        watcher = threading.Thread(target=watch_counts, daemon=True)
        watcher.start()
        try:
            scaling = {"minReplicas": 2, "maxReplicas": 4}
            admin.custom.patch_cluster_custom_object(
                GROUP, VERSION, CLASSES, "e2e-handover", {"spec": {"scalingPolicy": scaling}}
            )
            autoscaling = client.AutoscalingV1Api(admin.api)
            wait_for(
                lambda: live_uid(
                    lambda: autoscaling.read_namespaced_horizontal_pod_autoscaler(
                        "conv-handover", NS
                    )
                ),
                timeout=60,
                what="the HPA",
            )

            def applied_without_replicas() -> bool:
                fields = apps.read_namespaced_deployment("conv-handover", NS).metadata
                return not any(
                    m.manager == "ai-inference"
                    and m.operation == "Apply"
                    and "f:replicas" in (m.fields_v1 or {}).get("f:spec", {})
                    for m in fields.managed_fields
                )

            wait_for(applied_without_replicas, timeout=60, what="the apply without replicas")

            # A pass publishes its status after its applies: wait for it, do not read once.
            def published_bounds() -> dict[str, Any] | None:
                obj = alice.wait_phase(NS, "conv-handover", "Ready", timeout=90)
                return obj if obj["status"]["constraints"]["maxReplicas"] == 4 else None

            obj = wait_for(published_bounds, timeout=60, what="the status's maxReplicas of 4")
            # Handed over once: passes after it come to write nothing (a handover loop
            # writes in every pass). Counted as a window with none: `settle` counts every
            # order's writes, and one other write (a probe's status, elsewhere) is not this.
            wait_for(
                lambda: settle(platform, obj["metadata"]["uid"]) == 0 or None,
                timeout=60,
                what="passes over the order that write nothing (no handover loop)",
            )
        finally:
            stop.set()
            watcher.join(timeout=10)
        assert counts, "the watch saw no change of the Deployment"
        assert min(counts) == 2, f"the replica count went through {counts}"
        assert apps.read_namespaced_deployment("conv-handover", NS).spec.replicas == 2


@pytest.mark.timeout(300)
def test_a_users_deployment_of_the_orders_name_is_named_on_the_order(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    """A Deployment's selector is immutable, so the API server refuses the apply over a
    user's own Deployment of the order's name whole: nothing is taken. The order said
    only the API's "field is immutable"; it says whose the Deployment is."""
    with l4_class(platform, admin, "e2e-taken-dep", class_spec):
        apps = admin.apps
        labels = {"app": "theirs"}
        theirs = client.V1Deployment(
            metadata=client.V1ObjectMeta(name="conv-taken-dep"),
            spec=client.V1DeploymentSpec(
                replicas=0,
                selector=client.V1LabelSelector(match_labels=labels),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=labels),
                    spec=client.V1PodSpec(containers=[client.V1Container(name="x", image="x")]),
                ),
            ),
        )
        made = apps.create_namespaced_deployment(NS, theirs)
        try:
            spec = {"inferenceServiceClassName": "e2e-taken-dep", "model": hf(QWEN_SMALL)}
            orders("conv-taken-dep", spec)
            wait_for(
                lambda: (
                    any(
                        c["type"] == "WorkloadReady"
                        and "Deployment support/conv-taken-dep exists and is not this order's"
                        in c["message"]
                        for c in ((alice.get(NS, "conv-taken-dep") or {}).get("status") or {}).get(
                            "conditions", []
                        )
                    )
                    or None
                ),
                timeout=60,
                what="the order saying the Deployment's name is taken",
            )
            deployment = apps.read_namespaced_deployment("conv-taken-dep", NS)
            assert deployment.metadata.uid == made.metadata.uid
            assert not deployment.metadata.owner_references
        finally:
            apps.delete_namespaced_deployment("conv-taken-dep", NS, _preload_content=False)
        alice.wait_phase(NS, "conv-taken-dep", "Ready", timeout=120)


@pytest.mark.timeout(300)
def test_a_users_service_of_the_orders_name_is_never_taken_over(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    """The user's own Service has the name the order's would: the controller's cache
    does not show it (no order label), and a forced apply took it over — its selector
    rewritten, the order's owner reference added, deleted with the order. It is left as
    it is; the order says why, and is served once the name is free."""
    with l4_class(platform, admin, "e2e-taken", class_spec):
        core = admin.core
        theirs = client.V1Service(
            metadata=client.V1ObjectMeta(name="conv-taken"),
            spec=client.V1ServiceSpec(
                selector={"app": "theirs"}, ports=[client.V1ServicePort(port=8080)]
            ),
        )
        made = core.create_namespaced_service(NS, theirs)
        try:
            orders(
                "conv-taken", {"inferenceServiceClassName": "e2e-taken", "model": hf(QWEN_SMALL)}
            )
            obj = wait_for(
                lambda: (
                    (o := alice.get(NS, "conv-taken"))
                    and any(
                        c["type"] == "WorkloadReady"
                        and "Service support/conv-taken exists and is not this order's"
                        in c["message"]
                        for c in (o.get("status") or {}).get("conditions", [])
                    )
                    and o
                ),
                timeout=60,
                what="the order saying the Service's name is taken",
            )
            assert obj["status"]["phase"] == "Pending"
            # Said once: passes while the name stays taken write nothing more. (Each is
            # a refusal, and lengthens the backoff the order is served after.)
            assert settle(platform, obj["metadata"]["uid"], passes=2) == 0
            service = core.read_namespaced_service("conv-taken", NS)
            assert service.metadata.uid == made.metadata.uid
            assert service.spec.selector == {"app": "theirs"}
            assert not service.metadata.owner_references
            managers = {m.manager for m in service.metadata.managed_fields or []}
            assert "ai-inference" not in managers  # not one field written
        finally:
            core.delete_namespaced_service("conv-taken", NS, _preload_content=False)
        alice.wait_phase(NS, "conv-taken", "Ready", timeout=120)
        service = core.read_namespaced_service("conv-taken", NS)
        assert service.metadata.uid != made.metadata.uid
        assert service.metadata.owner_references[0].uid == obj["metadata"]["uid"]


@pytest.mark.timeout(300)
def test_a_burst_never_promises_a_device_twice(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    """Three orders wait for a class that does not exist yet; creating it wakes all three
    at once on both workers: two devices, so two Ready and exactly one NoCapacity at once,
    and no order ever waits for devices it was promised."""
    node = gpu_node("e2e-burst-node", [(L4, "24Gi"), (L4, "24Gi")])
    with extra_capacity(platform, [node], [product_class("e2e-burst-l4", L4)]):
        names = ["conv-burst-a", "conv-burst-b", "conv-burst-c"]
        uids = {
            name: orders(name, {"inferenceServiceClassName": "e2e-burst", "model": hf(QWEN_SMALL)})
            for name in names
        }
        for name in names:
            alice.wait_phase(NS, name, "Pending", reason="ClassNotFound", timeout=60)
        admin.create_class("e2e-burst", class_spec(["e2e-burst-l4"]))

        def settled() -> dict[str, str] | None:
            found = {
                n: ((alice.get(NS, n) or {}).get("status") or {}).get("phase", "") for n in names
            }
            ready = [n for n, p in found.items() if p == "Ready"]
            return found if len(ready) == 2 else None

        wait_for(settled, timeout=120, what="two of three orders Ready")
        for uid in uids.values():
            assert settle(platform, uid, passes=3) == 0  # the NoCapacity one included
        no_capacity = []
        for name, uid in uids.items():
            planned = events_of(platform, uid, ev.PlanComputed)
            failed = [
                e for e in events_of(platform, uid, ev.PlanFailed) if e.reason.value == "NoCapacity"
            ]
            waited = [
                e for e in events_of(platform, uid, ev.WorkloadObserved) if e.unallocated_since
            ]
            assert not waited, f"{name} waited for devices it was promised"
            assert not events_of(platform, uid, ev.DeviceClassTried)
            if failed:
                assert not planned, f"{name} was planned and then had no capacity"
                no_capacity.append(name)
        assert len(no_capacity) == 1


@pytest.mark.timeout(300)
def test_capacity_added_to_an_exhausted_order_makes_it_ready_with_no_edit(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    reconciler = platform.controller.reconciler
    before = reconciler.allocation_grace_seconds
    reconciler.allocation_grace_seconds = 3.0
    cordoned = gpu_node("e2e-add-cordoned", [(L4, "24Gi")], cordoned=True)
    try:
        with extra_capacity(platform, [cordoned], [product_class("e2e-add-l4", L4)]) as publish:
            admin.create_class("e2e-add", class_spec(["e2e-add-l4"]))
            class_ready(platform, "e2e-add")
            uid = orders(
                "conv-add", {"inferenceServiceClassName": "e2e-add", "model": hf(QWEN_SMALL)}
            )
            alice.wait_phase(NS, "conv-add", "Pending", reason="ResourceClaimExhausted", timeout=90)
            fresh = gpu_node("e2e-add-fresh", [(L4, "24Gi")])
            publish([cordoned, fresh], [product_class("e2e-add-l4", L4)])
            alice.wait_phase(NS, "conv-add", "Ready", timeout=120)
            (retried,) = events_of(platform, uid, ev.DeviceClassRetried)
            assert retried.device_class == "e2e-add-l4"
            obj = alice.get(NS, "conv-add")
            assert obj is not None and obj["metadata"]["generation"] == 1  # no edit
            assert settle(platform, uid) == 0
    finally:
        reconciler.allocation_grace_seconds = before


@pytest.mark.timeout(300)
def test_a_hub_outage_does_not_demote_a_ready_order(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    with l4_class(platform, admin, "e2e-blip", class_spec):
        uid = orders(
            "conv-blip", {"inferenceServiceClassName": "e2e-blip", "model": hf(QWEN_SMALL)}
        )
        alice.wait_phase(NS, "conv-blip", "Ready", timeout=90)
        hub = platform.hub
        host, port = hub.url.removeprefix("http://").rsplit(":", 1)
        hub.close()
        writes = platform.controller.writer.writes
        try:
            resolver = platform.controller._hub
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                resolver.clear_cache()  # every pass asks the (unreachable) hub
                platform.controller.queue.add(uid)
                obj = alice.get(NS, "conv-blip")
                assert obj is not None and obj["status"]["phase"] == "Ready"
                time.sleep(1.0)
            model = next(
                c
                for c in alice.get(NS, "conv-blip")["status"]["conditions"]  # type: ignore[index]
                if c["type"] == "ModelResolved"
            )
            assert (model["status"], model["reason"]) == ("True", "ModelResolved")
            assert "unreachable" in model["message"]
            # One status and one Warning Event say so, however many passes ask the hub.
            assert platform.controller.writer.writes - writes <= 2
        finally:
            platform.hub = StandInHub(host=host, port=int(port))
        resolver.clear_cache()
        platform.controller.queue.add(uid)
        wait_for(
            lambda: (
                "unreachable"
                not in next(
                    c["message"]
                    for c in (alice.get(NS, "conv-blip") or {})["status"]["conditions"]
                    if c["type"] == "ModelResolved"
                )
            ),
            timeout=30,
            what="the plain message back",
        )
        assert len(events_of(platform, uid, ev.PlanComputed)) == 1  # never replanned


@pytest.mark.timeout(240)
def test_a_quota_refusing_the_token_is_said_and_lifted_the_order_is_ready_on_its_own(
    platform: LocalPlatform, alice: Orders, admin: Admin, orders: Any
) -> None:
    """A ResourceQuota on Secrets refuses the order's token Secret (403, "exceeded
    quota"). The order says so, and no pass raises; once the quota is gone it is Ready
    with no edit: nothing it watches changed, so the apply backoff brings it."""
    quota = {"metadata": {"name": "e2e-no-secrets"}, "spec": {"hard": {"secrets": "0"}}}
    with l4_class(platform, admin, "e2e-quota", external_token):
        errors_before = pass_errors()
        admin.core.create_namespaced_resource_quota(NS, quota)
        # Its usage, as the quota controller (not run here) would count it: without one
        # the API server enforces nothing.
        admin.core.patch_namespaced_resource_quota_status(
            "e2e-no-secrets", NS, {"status": {"hard": {"secrets": "0"}, "used": {"secrets": "0"}}}
        )
        try:
            uid = orders(
                "conv-quota", {"inferenceServiceClassName": "e2e-quota", "model": hf(QWEN_SMALL)}
            )
            refused = alice.wait_phase(
                NS, "conv-quota", "Pending", reason="WorkloadApplyFailed", timeout=60
            )
        finally:
            admin.core.delete_namespaced_resource_quota("e2e-no-secrets", NS)
        workload = next(c for c in refused["status"]["conditions"] if c["type"] == "WorkloadReady")
        assert workload["status"] == "False" and "HTTP 403" in workload["message"]
        ready = alice.wait_phase(NS, "conv-quota", "Ready", timeout=120)
        assert ready["metadata"]["generation"] == 1  # no edit
        assert len(events_of(platform, uid, ev.WorkloadApplyFailed)) == 1  # said once
        assert pass_errors() == errors_before
