"""A plain cluster, and a leader that never wedges: on a control plane of this module's own.

The session cluster carries the stand-in CRDs (ai-models, ModuleConfig, DRA) and its
Lease is the e2e controller's; deleting either there would break other tests. So this
module starts one more control plane with only the project's own CRDs, RBAC and
namespaces — what a cluster without Deckhouse, the ai-models module or DRA v1 serves —
and runs controllers against it, in-process and as `ai-inference controller` processes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

import store
from adapters import faults
from adapters.cluster import bootstrap, local
from adapters.cluster.identities import CONTROLLER_SA
from adapters.kubernetes import kinds
from adapters.kubernetes.controller import (
    LEASE_NAME,
    LEASE_NAMESPACE,
    Controller,
    LeadershipLost,
    own_identity,
)
from adapters.kubernetes.fencing import NotLeading
from adapters.kubernetes.manifests import Applier, load_documents, manifest_files
from adapters.kubernetes.settings import Source
from adapters.kubernetes.watching import Informer
from adapters.platform import install_module
from adapters.resources import resource_dir
from adapters.simulator.hub import StandInHub
from tests.support.controller_process import ControllerProcess, lease_holder
from tests.support.polling import eventually

pytestmark = pytest.mark.cluster

GROUP, VERSION = "ai.deckhouse.io", "v1alpha1"
QWEN_AWQ = "Qwen/Qwen2.5-32B-Instruct-AWQ"
HPA = "autoscaling/v2beta2"  # the local 1.20 server


# deploy/rbac/controller.yaml's ClusterRole of the controller.
CONTROLLER_ROLE = "d8:ai-inference:controller"


@dataclass
class Plain:
    state: local.ClusterState
    folder: Path

    def api(self, identity: str) -> ApiClient:
        return bootstrap.api_client(self.state.kubeconfig(identity))

    def holder(self) -> str | None:
        return lease_holder(self.api("admin"))


def _standin_crds() -> list[dict[str, Any]]:
    return load_documents(manifest_files(resource_dir("tests/crds")))


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plain]:
    folder = tmp_path_factory.mktemp("plain")
    state = local.up(folder)
    try:
        standin = {d["metadata"]["name"] for d in _standin_crds()}
        docs = [
            d
            for d in bootstrap.bootstrap_documents()
            if not (d["kind"] == "CustomResourceDefinition" and d["metadata"]["name"] in standin)
        ]
        with bootstrap.api_client(state.kubeconfig("admin")) as admin:
            Applier(admin).apply_all(docs)
            install_module(admin)
        yield Plain(state, folder)
    finally:
        local.down(folder)


@pytest.fixture
def no_lease(plain: Plain) -> Iterator[None]:
    """Each test campaigns for a Lease no one holds, and leaves none behind."""
    leases = client.CoordinationV1Api(plain.api("admin"))

    def delete() -> None:
        try:
            leases.delete_namespaced_lease(LEASE_NAME, LEASE_NAMESPACE)
        except ApiException as exc:
            assert exc.status == 404

    delete()
    yield
    delete()


def _order(name: str, model: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {"inferenceServiceClassName": "default-llm", "model": model},
    }


def _condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


# --- a plain cluster ----------------------------------------------------------------------


def _with_settings_file(
    plain: Plain, log: store.EventLog, tmp_path: Path, hub_url: str, *, discovery_period: float
) -> Controller:
    """A controller whose settings come from a file (no ModuleConfig): the hub, an ingressClass."""
    settings = tmp_path / "settings.yaml"
    settings.write_text(f"huggingFace: {{endpoint: '{hub_url}'}}\ningressClass: plain\n")
    return Controller(
        plain.api("controller"),
        log,
        settings=Source.from_file(settings),
        sync_timeout=20,
        hpa_api_version=HPA,
        discovery_period=discovery_period,
    )


def test_the_controller_serves_orders_without_catalog_module_config_or_dra(
    plain: Plain, no_lease: None, tmp_path: Path
) -> None:
    hub = StandInHub()
    log = store.open_log(f"sqlite:///{tmp_path / 'log.sqlite'}")
    controller = _with_settings_file(plain, log, tmp_path, hub.url, discovery_period=1.0)
    custom = client.CustomObjectsApi(plain.api("admin"))
    try:
        controller.start(wait=30)  # before: the catalog's informers never synced
        # Without a ModuleConfig the file is in force, and its hub is the one asked.
        assert controller.settings().ingress_class == "plain"
        assert controller.hub_endpoint == controller.settings().hugging_face.endpoint == hub.url
        assert not controller.cache.models.present and not controller.cache.device_classes.present

        create = custom.create_namespaced_custom_object
        create(GROUP, VERSION, "support", "inferenceservices", _order("hf", {
            "src": "HuggingFace", "ref": {"name": QWEN_AWQ},
        }))  # fmt: skip
        create(GROUP, VERSION, "support", "inferenceservices", _order("catalog", {
            "src": "ai-models", "ref": {"kind": "ClusterModel", "name": "qwen"},
        }))  # fmt: skip

        def get(name: str) -> dict[str, Any]:
            return dict(
                custom.get_namespaced_custom_object(
                    GROUP, VERSION, "support", "inferenceservices", name
                )
            )

        resolved = eventually(
            lambda: _condition(get("hf"), "ModelResolved"), what="hf order gets a status"
        )
        assert (resolved["status"], resolved["reason"]) == ("True", "ModelResolved")
        assert get("hf")["status"]["phase"]
        catalog = eventually(
            lambda: _condition(get("catalog"), "ModelResolved"), what="catalog order status"
        )
        assert (catalog["status"], catalog["reason"]) == ("False", "CatalogDisabled")
        assert "does not serve ClusterModel" in catalog["message"]
        assert controller.still_leading() and controller.alive()
    finally:
        controller.stop()
        log.close()
        hub.close()
        for name in ("hf", "catalog"):
            custom.delete_namespaced_custom_object(
                GROUP, VERSION, "support", "inferenceservices", name
            )
    assert plain.holder() == ""  # stop() released the Lease


def test_an_absent_kind_syncs_empty_and_is_picked_up_when_its_crd_appears(plain: Plain) -> None:
    admin = plain.api("admin")
    optional = Informer(admin, kinds.MODELS, optional=True, absent_poll=0.5)
    required = Informer(admin, kinds.MODELS)
    optional.start()
    required.start()
    crds = [d for d in _standin_crds() if d["spec"]["group"] == GROUP]
    extensions = client.ApiextensionsV1Api(admin)
    try:
        assert optional.wait_synced(10) and optional.objects() == []
        assert optional.present is False
        assert not required.wait_synced(1.0)  # a kind that must exist still blocks

        Applier(admin).apply_all(crds)
        model = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Model",
                 "metadata": {"name": "late"}, "spec": {}}  # fmt: skip
        custom = client.CustomObjectsApi(admin)
        eventually(lambda: _try_create(custom, model), what="the Model CRD to be served")
        eventually(lambda: optional.get_by_name("support", "late"), what="the Model cached")
        assert optional.present is True
    finally:
        for crd in crds:
            extensions.delete_custom_resource_definition(crd["metadata"]["name"])
        # The kind going away empties the cache again (a synthetic deletion).
        eventually(lambda: optional.present is False and optional.objects() == [], timeout=60)
        optional.stop()
        required.stop()


def _try_create(custom: client.CustomObjectsApi, body: dict[str, Any]) -> bool:
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, "support", "models", body)
    except ApiException as exc:
        if exc.status == 404:
            return False  # the CRD is not established yet
        raise
    return True


# --- leadership never wedges --------------------------------------------------------------


@contextlib.contextmanager
def _priority_classes_unlistable(plain: Plain) -> Iterator[None]:
    """The controller may not list PriorityClasses meanwhile: that cache never syncs (403,
    retried), whatever the machine's speed. A short sync timeout alone is not enough: on a
    loaded machine the caches of this small cluster could sync before it was checked."""
    rbac = client.RbacAuthorizationV1Api(plain.api("admin"))
    role = rbac.read_cluster_role(CONTROLLER_ROLE)
    kept = [r for r in role.rules if "priorityclasses" not in (r.resources or [])]
    rbac.patch_cluster_role(
        CONTROLLER_ROLE, {"rules": [rbac.api_client.sanitize_for_serialization(r) for r in kept]}
    )
    try:
        yield
    finally:
        rbac.patch_cluster_role(
            CONTROLLER_ROLE,
            {"rules": [rbac.api_client.sanitize_for_serialization(r) for r in role.rules]},
        )


def test_a_leader_whose_caches_do_not_sync_releases_the_lease(
    plain: Plain, no_lease: None, tmp_path: Path
) -> None:
    log = store.open_log(f"sqlite:///{tmp_path / 'log.sqlite'}")
    controller = Controller(plain.api("controller"), log, sync_timeout=3.0, identity="slow")
    try:
        with (
            _priority_classes_unlistable(plain),
            pytest.raises(LeadershipLost, match="caches did not sync"),
        ):
            controller.start(wait=40)  # before: a TimeoutError, still holding the Lease
        assert not controller.alive() and not controller.still_leading()
        eventually(lambda: plain.holder() == "", timeout=10, what="the Lease released")
    finally:
        controller.stop()
        log.close()


def test_a_leader_whose_log_fails_at_take_over_releases_the_lease(
    plain: Plain, no_lease: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log.sqlite"
    log = store.open_log(f"sqlite:///{path}")
    # Another writer holds the log: reads work, writes wait. The Lease is not taken: the
    # newest epoch is read as an append reads it, and that read fails (before, a plain
    # read passed, and the Lease was taken only to be released at the epoch's claim).
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    controller = Controller(plain.api("controller"), log, identity="blocked")
    try:
        with pytest.raises(TimeoutError):
            controller.start(wait=15)
        assert plain.holder() in (None, "") and not controller.lost.is_set()  # never taken

        # Writable when the floor is read, failing at the claim itself (a fail-over in
        # between): the Lease is taken, then released, and the process is to exit.
        def claim_fails(epoch: int) -> int:
            raise store.StoreUnavailable("the log went away at the claim")

        monkeypatch.setattr(log, "claim_epoch", claim_fails)
        blocker.execute("ROLLBACK")
        eventually(controller.lost.is_set, timeout=40, what="leadership given up")
        assert "take-over failed" in (controller.failure or "")
        assert not controller.alive()
        eventually(lambda: plain.holder() == "", timeout=10, what="the Lease released")
    finally:
        with contextlib.suppress(sqlite3.OperationalError):
            blocker.execute("ROLLBACK")
        blocker.close()
        controller.stop()
        log.close()


def test_a_stale_epoch_ends_leadership_like_a_lost_lease(
    plain: Plain, no_lease: None, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'log.sqlite'}"
    log = store.open_log(url)
    controller = Controller(
        plain.api("controller"),
        log,
        identity="old",
        discovery_period=1.0,
        sync_timeout=20,
        hpa_api_version=HPA,
    )
    custom = client.CustomObjectsApi(plain.api("admin"))
    try:
        controller.start(wait=30)
        with store.open_log(url) as newer:
            newer.claim_epoch(controller.epoch + 5)  # a newer leader wrote to the log
        name = f"stale-{uuid.uuid4().hex[:6]}"
        custom.create_namespaced_custom_object(
            GROUP, VERSION, "support", "inferenceservices",
            _order(name, {"src": "HuggingFace", "ref": {"name": QWEN_AWQ}}),
        )  # fmt: skip
        # The pass's first append meets the newer epoch: leadership ends, Lease released.
        eventually(controller.lost.is_set, what="leadership ended")
        assert not controller.still_leading() and not controller.alive()
        assert "newer controller" in (controller.failure or "")
        eventually(lambda: plain.holder() == "", timeout=10, what="the Lease released")
        custom.delete_namespaced_custom_object(GROUP, VERSION, "support", "inferenceservices", name)
    finally:
        controller.stop()
        log.close()


def _controller(plain: Plain, store_url: str, *extra: str) -> ControllerProcess:
    """`ai-inference controller` against the plain cluster as the controller's identity."""
    return ControllerProcess(plain.state.kubeconfig("controller"), store_url, *extra)


def test_on_sigterm_the_leader_hands_over_within_seconds(
    plain: Plain, no_lease: None, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'log.sqlite'}"
    first = _controller(plain, url)
    second: ControllerProcess | None = None
    try:
        eventually(first.leading_at, timeout=60, what="the first controller leads")
        second = _controller(plain, url)
        eventually(lambda: second.said_at("campaigning"), timeout=60, what="a standby")
        time.sleep(2.0)  # a renewal round or two: it has seen the Lease held
        assert second.leading_at() is None
        sent = time.monotonic()
        first.proc.send_signal(signal.SIGTERM)
        assert first.wait(30) == 0, first.stderr
        took = eventually(second.leading_at, timeout=30, what="the standby leads") - sent
        # The Lease lasts 15 s: only a released Lease lets the standby lead this soon.
        assert took < 8.0, f"standby led {took:.1f}s after SIGTERM"
    finally:
        first.kill()
        if second is not None:
            second.proc.send_signal(signal.SIGTERM)
            code = second.wait(30)
            second.kill()
            assert code == 0, second.stderr


def test_a_leader_that_cannot_work_exits_non_zero_and_frees_the_lease(
    plain: Plain, no_lease: None, tmp_path: Path
) -> None:
    with _priority_classes_unlistable(plain):
        proc = _controller(plain, f"sqlite:///{tmp_path / 'log.sqlite'}", "--sync-timeout=2")
        try:
            try:
                code = proc.wait(120)  # a loaded machine takes seconds just to import
            except subprocess.TimeoutExpired:
                proc.proc.send_signal(signal.SIGUSR1)  # every thread's stack, to see where
                time.sleep(2)
                raise AssertionError(f"no exit in 120 s:\n{proc.stderr[-8000:]}") from None
            assert code == 1, proc.stderr[-3000:]
            assert "caches did not sync" in proc.stderr
            assert plain.holder() == ""
        finally:
            proc.kill()


def _secret(name: str) -> dict[str, Any]:
    # A kind the controller's RBAC lets it create (its token Secrets).
    return {"metadata": {"name": name}, "stringData": {"written": "yes"}}


def test_after_the_lease_is_taken_the_old_leader_writes_nothing(
    plain: Plain, no_lease: None, tmp_path: Path
) -> None:
    log = store.open_log(f"sqlite:///{tmp_path / 'log.sqlite'}")
    controller = Controller(
        plain.api("controller"),
        log,
        identity="old",
        discovery_period=1.0,
        sync_timeout=20,
        hpa_api_version=HPA,
    )
    admin = plain.api("admin")
    leases, core = client.CoordinationV1Api(admin), client.CoreV1Api(admin)
    name = f"fence-{uuid.uuid4().hex[:6]}"
    try:
        controller.start(wait=30)
        writes = client.CoreV1Api(controller.write_api)  # what every write goes through
        writes.create_namespaced_secret("support", _secret(f"{name}-before"))
        # Another candidate takes the Lease (as after a partition): a fresh renewal.
        lease = leases.read_namespaced_lease(LEASE_NAME, LEASE_NAMESPACE)
        lease.spec.holder_identity = "new"
        lease.spec.renew_time = datetime.now(UTC)
        lease.spec.lease_transitions += 1
        leases.replace_namespaced_lease(LEASE_NAME, LEASE_NAMESPACE, lease)
        eventually(controller.lost.is_set, what="the old leader noticed")
        assert not controller.still_leading() and not controller.alive()
        with pytest.raises(NotLeading):
            writes.create_namespaced_secret("support", _secret(f"{name}-after"))
        assert writes.read_namespaced_secret(f"{name}-before", "support")  # reads work
        with pytest.raises(ApiException) as absent:
            core.read_namespaced_secret(f"{name}-after", "support")
        assert absent.value.status == 404
        assert plain.holder() == "new"  # the old leader did not release another's Lease
    finally:
        controller.stop()
        log.close()
        with contextlib.suppress(ApiException):
            core.delete_namespaced_secret(f"{name}-before", "support")


def test_a_module_config_appearing_later_replaces_the_file_and_re_points_the_hub(
    plain: Plain, no_lease: None, tmp_path: Path
) -> None:
    first, second = StandInHub(), StandInHub()
    log = store.open_log(f"sqlite:///{tmp_path / 'log.sqlite'}")
    controller = _with_settings_file(plain, log, tmp_path, first.url, discovery_period=0.5)
    admin = plain.api("admin")
    crds = [d for d in _standin_crds() if d["spec"]["group"] == "deckhouse.io"]
    custom = client.CustomObjectsApi(admin)
    try:
        controller.start(wait=30)
        assert controller.hub_endpoint == first.url
        Applier(admin).apply_all(crds)
        config = {
            "apiVersion": "deckhouse.io/v1alpha1",
            "kind": "ModuleConfig",
            "metadata": {"name": "ai-inference"},
            "spec": {"version": 1, "settings": {"huggingFace": {"endpoint": second.url}}},
        }
        eventually(
            lambda: _try_create_cluster(custom, "deckhouse.io", "moduleconfigs", config),
            what="the ModuleConfig CRD to be served",
        )
        eventually(lambda: controller.hub_endpoint == second.url, what="the hub re-pointed")
        in_force = controller.settings()
        assert in_force.hugging_face.endpoint == second.url  # what HF_ENDPOINT renders
        assert in_force.ingress_class == "nginx"  # the file no longer applies at all
    finally:
        controller.stop()
        log.close()
        first.close()
        second.close()
        extensions = client.ApiextensionsV1Api(admin)
        for crd in crds:
            extensions.delete_custom_resource_definition(crd["metadata"]["name"])


def _try_create_cluster(
    custom: client.CustomObjectsApi, group: str, plural: str, body: dict[str, Any]
) -> bool:
    try:
        custom.create_cluster_custom_object(group, "v1alpha1", plural, body)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


# --- two replicas with a forced overlap ---------------------------------------------------


def _epoch(proc: ControllerProcess) -> int:
    line = next(line for _, line in proc.lines if "controller leading, epoch" in line)
    return int(line.rsplit(" ", 1)[1])


def _frozen(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    return stat.rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.postgres
def test_a_leader_frozen_past_its_lease_writes_nothing_after_the_take_over(
    plain: Plain, no_lease: None, postgres_url: str
) -> None:
    """Two controllers on one PostgreSQL log. The leader freezes mid-pass, right after its
    first append (the crash hook's SIGSTOP, as a long GC pause or a stalled VM would);
    the standby takes over once the Lease expires and serves the order. Resumed, the old
    leader carries on with its pass as if it still led: its next write is refused (the
    fencing client or the log's epoch fence), it exits 1, and nothing it sent after the
    take-over is in the API server or in the log."""
    custom = client.CustomObjectsApi(plain.api("admin"))
    core = client.CoreV1Api(plain.api("admin"))
    kubeconfig = plain.state.kubeconfig("controller")
    old = ControllerProcess(kubeconfig, postgres_url, env={faults.ENV: "stop-after:append:1"})
    new: ControllerProcess | None = None
    name = f"overlap-{uuid.uuid4().hex[:6]}"
    log = store.open_log(postgres_url)
    try:
        eventually(old.leading_at, timeout=60, what="the first controller leads")
        new = _controller(plain, postgres_url)
        eventually(lambda: new.said_at("campaigning"), timeout=60, what="a standby")
        order = custom.create_namespaced_custom_object(
            GROUP, VERSION, "support", "inferenceservices",
            _order(name, {"src": "HuggingFace", "ref": {"name": QWEN_AWQ}}),
        )  # fmt: skip
        uid = order["metadata"]["uid"]
        eventually(lambda: _frozen(old.pid), timeout=60, what="the leader frozen mid-pass")
        old_epoch = _epoch(old)
        eventually(new.leading_at, timeout=60, what="the standby takes over")
        new_epoch = _epoch(new)
        assert new_epoch > old_epoch

        def served() -> dict[str, Any] | None:
            obj = custom.get_namespaced_custom_object(
                GROUP, VERSION, "support", "inferenceservices", name
            )
            records = log.read(uid)
            ours = records and records[-1].epoch == new_epoch
            return obj if ours and _condition(obj, "ModelResolved") else None

        eventually(served, timeout=60, what="the new leader serves the order")
        time.sleep(3.0)  # let it settle: nothing more to write
        before = custom.get_namespaced_custom_object(
            GROUP, VERSION, "support", "inferenceservices", name
        )
        events = core.list_namespaced_event("support", field_selector=f"involvedObject.uid={uid}")
        versions = [(r.version, r.epoch) for r in log.read(uid)]

        os.kill(old.pid, signal.SIGCONT)
        assert old.wait(60) == 1, old.stderr[-3000:]
        # It did try to write as the old leader, and was refused.
        refused = "not leading:" in old.stderr or "newer controller" in old.stderr
        assert refused, old.stderr[-3000:]
        time.sleep(2.0)  # a write it sent would have landed by now
        after = custom.get_namespaced_custom_object(
            GROUP, VERSION, "support", "inferenceservices", name
        )
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        assert after["status"] == before["status"]
        again = core.list_namespaced_event("support", field_selector=f"involvedObject.uid={uid}")
        assert [(e.metadata.name, e.count) for e in again.items] == [
            (e.metadata.name, e.count) for e in events.items
        ]
        records = log.read(uid)
        assert [(r.version, r.epoch) for r in records] == versions
        took_over = min(r.version for r in records if r.epoch == new_epoch)
        assert all(r.version < took_over for r in records if r.epoch == old_epoch)
        # The status is the new leader's: what it recorded as its projection of the log.
        projection = log.projection(uid)
        assert projection is not None and projection.status == after["status"]
        assert new.proc.poll() is None and plain.holder() not in ("", None)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(old.pid, signal.SIGCONT)
        old.kill()
        if new is not None:
            new.stop()
        log.close()
        with contextlib.suppress(ApiException):
            custom.delete_namespaced_custom_object(
                GROUP, VERSION, "support", "inferenceservices", name
            )


def test_the_lease_names_the_controllers_pod() -> None:
    """`kubectl get lease` says which pod leads, by the name `kubectl get pods` shows
    (POD_NAME, from the downward API), not by a hostname that may differ from it."""
    assert own_identity({"POD_NAME": "ai-inference-6f7c9-x2k4q"}) == (
        f"ai-inference-6f7c9-x2k4q-{os.getpid()}"
    )
    assert own_identity({}) == f"{socket.gethostname()}-{os.getpid()}"


def test_the_lease_is_in_the_controllers_own_namespace(
    plain: Plain, no_lease: None, tmp_path: Path
) -> None:
    """Installed in a namespace of its own choosing (an overlay's), the controller
    campaigns where its Role grants Leases: its own namespace, not the module's."""
    admin = plain.api("admin")
    core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    namespace = f"ai-elsewhere-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    rule = {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "list", "watch", "create", "update", "patch"],
    }
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "leases"}, "rules": [rule]})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "leases"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "leases"},
            "subjects": [{"kind": "User", "name": CONTROLLER_SA}],
        },
    )
    log = store.open_log(f"sqlite:///{tmp_path / 'log.sqlite'}")
    controller = Controller(
        plain.api("controller"),
        log,
        namespace=namespace,
        identity="elsewhere",
        sync_timeout=20,
        hpa_api_version=HPA,
    )
    try:
        controller.start(wait=30)
        leases = client.CoordinationV1Api(admin)
        assert leases.read_namespaced_lease(LEASE_NAME, namespace).spec.holder_identity == (
            "elsewhere"
        )
        assert plain.holder() is None  # none in the module's namespace
    finally:
        controller.stop()
        log.close()
        core.delete_namespace(namespace)
