"""The end-to-end platform: the real API server with the controller, simulator and hub.

One platform per session; every test works with its own order names and cleans up, and
the namespace user's steps run as `alice` under her RBAC.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adapters import metrics
from adapters.platform import LocalPlatform
from tests.support import polling

T = TypeVar("T")
GROUP, VERSION, PLURAL = "ai.deckhouse.io", "v1alpha1", "inferenceservices"
CLASSES = "inferenceserviceclasses"


def wait_for(fn: Callable[[], T | None], *, timeout: float = 60, what: str = "") -> T:
    return polling.eventually(fn, timeout=timeout, interval=0.25, what=what)


def forced_passes(platform: LocalPlatform, uid: str, passes: int = 3) -> int:
    """Run `passes` passes over the order, one after another, each to its end; the
    controller's writes meanwhile, every order's (a request that changes nothing counts
    too), so the caller needs the rest of the cluster quiet. A pass that raises fails the
    test (an erring pass writes nothing either, and would pass for a quiet one)."""
    queue, writer = platform.controller.queue, platform.controller.writer
    before = writer.writes
    for _ in range(passes):
        queue.add(uid)
        wait_for(lambda: not queue.busy(uid), timeout=30, what=f"a pass over {uid} to end")
        assert queue.failures(uid) == 0, f"a pass over {uid} raised (the controller's log says)"
    return writer.writes - before


def pass_errors() -> float:
    """Passes that raised so far in this process, orders' and classes'
    (`ai_inference_reconcile_total{outcome="error"}`)."""
    return sum(metrics.PASSES.labels(kind, "error")._value.get() for kind in ("order", "class"))


class Orders:
    """Order helpers as a given identity."""

    def __init__(self, api: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api)

    def create(self, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceService",
            "metadata": {"name": name},
            "spec": spec,
        }
        return dict(
            self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        )

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(
                self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch_spec(self, namespace: str, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, {"spec": spec}
        )

    def delete(self, namespace: str, name: str) -> None:
        try:
            self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def wait_phase(
        self,
        namespace: str,
        name: str,
        phase: str,
        *,
        timeout: float = 90,
        reason: str | None = None,
    ) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            obj = self.get(namespace, name)
            status = (obj or {}).get("status") or {}
            if status.get("phase") != phase:
                return None
            if reason is not None and reason not in [
                c["reason"] for c in status.get("conditions", [])
            ]:
                return None
            return obj

        return wait_for(reached, timeout=timeout, what=f"{namespace}/{name} {phase} {reason or ''}")


def conditions(obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["type"], c["status"], c["reason"]) for c in obj["status"]["conditions"]]


# The package's: it stops when the last e2e test is done, so a controller of its own does
# not run on into the tests after it (the benchmark's smoke run starts its own).
@pytest.fixture(scope="package")
def platform(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPlatform]:
    _wait_for_namespaces_to_go(client.CoreV1Api(cluster.api_client("admin")))
    folder = tmp_path_factory.mktemp("platform")
    # A Secret an order names (a user's HF token, a CustomCertificate) is read again every
    # 2 s, not 30: the tests that edit one wait for that read, and the refresh itself is
    # tested on its own (tests/adapters/kubernetes/test_secret_lookup.py).
    local = LocalPlatform(cluster.state, f"sqlite:///{folder / 'log.sqlite'}", secret_refresh=2.0)
    local.start()
    yield local
    local.stop()


def _wait_for_namespaces_to_go(core: client.CoreV1Api) -> None:
    """Earlier suites delete their namespaces without waiting. An order left in one that
    is terminating is this controller's too: it would try, and fail, to make the order's
    children there until the namespace is gone, and those writes would count in the
    tests below that ask for none (`forced_passes`)."""

    def none_terminating() -> bool:
        return all(ns.status.phase != "Terminating" for ns in core.list_namespace().items)

    wait_for(none_terminating, timeout=180, what="earlier suites' namespaces to go")


@pytest.fixture
def alice(platform: LocalPlatform) -> Orders:
    return Orders(platform.api("alice"))


@pytest.fixture
def admin_orders(platform: LocalPlatform) -> Orders:
    return Orders(platform.api("admin"))


def delete_and_wait(
    platform: LocalPlatform, orders: Orders, namespace: str, name: str, *, timeout: float = 60
) -> None:
    """Delete an order and wait until its pods and device claims are gone too.

    The next test plans against the same capacity: a claim the garbage collector has not
    removed yet would still hold its device.
    """
    obj = orders.get(namespace, name)
    orders.delete(namespace, name)
    if obj is None:
        return
    uid = obj["metadata"]["uid"]
    cache = platform.controller.cache

    def gone() -> bool:
        claims = [
            c
            for c in cache.resource_claims.objects()
            if ((c.get("metadata") or {}).get("labels") or {}).get(
                "ai.deckhouse.io/inference-service-uid"
            )
            == uid
        ]
        return (
            orders.get(namespace, name) is None and not cache.pods_of(uid, namespace) and not claims
        )

    wait_for(gone, timeout=timeout, what=f"{namespace}/{name} and its pods and claims to go")


class Admin:
    """The administrator's side of a test: classes and DeviceClasses, deleted on close."""

    def __init__(self, platform: LocalPlatform) -> None:
        self.api = platform.api("admin")
        self.custom = client.CustomObjectsApi(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.core = client.CoreV1Api(self.api)
        self._made: list[tuple[str, str, str, str]] = []

    def create_class(self, name: str, spec: dict[str, Any]) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceServiceClass",
            "metadata": {"name": name},
            "spec": spec,
        }
        self.custom.create_cluster_custom_object(GROUP, VERSION, CLASSES, body)
        self._made.append((GROUP, VERSION, CLASSES, name))

    def create_device_class(self, name: str, selectors: list[str]) -> None:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": e}} for e in selectors]},
        }
        self.custom.create_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", body)
        self._made.append(("resource.k8s.io", "v1", "deviceclasses", name))

    def close(self) -> None:
        for group, version, plural, name in reversed(self._made):
            try:
                self.custom.delete_cluster_custom_object(group, version, plural, name)
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def deployment(self, namespace: str, name: str) -> Any:
        try:
            return self.apps.read_namespaced_deployment(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def runtime_args(self, namespace: str, name: str) -> list[str]:
        deployment = self.deployment(namespace, name)
        container = next(c for c in deployment.spec.template.spec.containers if c.name == "runtime")
        return list(container.args or [])

    def pods(self, namespace: str, uid: str) -> list[Any]:
        selector = f"ai.deckhouse.io/inference-service-uid={uid}"
        return list(self.core.list_namespaced_pod(namespace, label_selector=selector).items)


@pytest.fixture(name="admin")
def admin_fixture(platform: LocalPlatform) -> Iterator[Admin]:
    handle = Admin(platform)
    yield handle
    handle.close()


@pytest.fixture(name="orders")
def orders_fixture(
    alice: Orders, admin_orders: Orders
) -> Iterator[Callable[[str, dict[str, Any]], str]]:
    """alice's orders in `support`; each is deleted (and gone) after the test."""
    made: list[str] = []

    def create(name: str, spec: dict[str, Any]) -> str:
        made.append(name)
        obj = alice.create("support", name, spec)
        return str(obj["metadata"]["uid"])

    yield create
    for name in made:
        alice.delete("support", name)

    def gone() -> bool:
        return all(admin_orders.get("support", name) is None for name in made)

    wait_for(gone, timeout=30, what="deletion of the test's orders")
