"""Exposure end to end: the platform's global settings as fallbacks, and the copy of a
CustomCertificate Secret an order's Ingress names.

Against the real API server: the ModuleConfigs `global` and `ai-inference` are made and
edited as an administrator would, the certificate Secret a class names lives in the
controller's namespace (d8-ai-inference), the ones the module's and the global block
name in d8-system (the global one, the platform's own, is never copied), and every
answer is read from the live objects and the order's status. ModuleConfigs, classes
and Secrets made here are removed afterwards. Last, a ModuleConfig the platform's
schema admits and the controller refuses: told on the object itself.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adapters.kubernetes.manifests import Applier
from adapters.platform import LocalPlatform
from tests.e2e.capacity import module_config
from tests.e2e.conftest import GROUP, VERSION, Orders, delete_and_wait, forced_passes, wait_for

pytestmark = pytest.mark.cluster

NS = "support"
MODULE_NS = "d8-ai-inference"
PLATFORM_NS = "d8-system"  # where Deckhouse keeps the global block's certificate
QWEN_SMALL = "Qwen/Qwen2.5-0.5B-Instruct"


@pytest.fixture
def admin(platform: LocalPlatform) -> client.ApiClient:
    return platform.api("admin")


@pytest.fixture
def orders(platform: LocalPlatform, admin_orders: Orders) -> Iterator[Callable[[str], None]]:
    made: list[str] = []
    yield made.append
    for name in made:
        delete_and_wait(platform, admin_orders, NS, name)


def _ingress(platform: LocalPlatform, name: str) -> Any:
    try:
        return client.NetworkingV1Api(platform.api("admin")).read_namespaced_ingress(name, NS)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _spec(class_name: str) -> dict[str, Any]:
    """An order of the small model under `class_name`."""
    return {
        "inferenceServiceClassName": class_name,
        "model": {"src": "HuggingFace", "ref": {"name": QWEN_SMALL}},
    }


def _host(platform: LocalPlatform, name: str) -> str | None:
    ingress = _ingress(platform, name)
    return None if ingress is None else str(ingress.spec.rules[0].host)


def _url(alice: Orders, name: str) -> str | None:
    obj = alice.get(NS, name) or {}
    return ((obj.get("status") or {}).get("endpoint") or {}).get("url")


# --- the global settings as fallbacks -----------------------------------------------------


def test_an_ingress_host_follows_the_global_domain_unless_the_module_sets_its_own(
    platform: LocalPlatform, alice: Orders, admin: client.ApiClient, orders: Any
) -> None:
    name = "ex-global"
    label = f"{name}-{NS}"
    global_domain = {"modules": {"publicDomainTemplate": "%s.global.test", "placement": {}}}
    with (
        module_config(admin, "global", global_domain, version=2) as put_global,
        module_config(admin, "ai-inference", {"probe": {"intervalSeconds": 10}}) as put_module,
    ):
        orders(name)
        alice.create(NS, name, _spec("default-llm"))
        # The module's settings name no domain: the platform's applies.
        wait_for(
            lambda: _host(platform, name) == f"{label}.global.test",
            timeout=90,
            what="the Ingress on the global domain",
        )
        wait_for(lambda: _url(alice, name) == f"https://{label}.global.test", timeout=30)

        # The module's own domain wins over the platform's.
        put_module({"publicDomainTemplate": "%s.module.test"})
        wait_for(
            lambda: _host(platform, name) == f"{label}.module.test",
            timeout=30,
            what="the Ingress on the module's domain",
        )
        wait_for(lambda: _url(alice, name) == f"https://{label}.module.test", timeout=30)

        # Unset again: back to the platform's, and a change of the platform's is followed.
        put_module({"probe": {"intervalSeconds": 10}})
        put_global({"modules": {"publicDomainTemplate": "%s.global2.test"}})
        wait_for(
            lambda: _host(platform, name) == f"{label}.global2.test",
            timeout=30,
            what="the Ingress on the edited global domain",
        )

        # An invalid global block is refused: the one in force stays, and so does the host.
        put_global({"modules": {"publicDomainTemplate": "%s.Global.test"}})
        wait_for(
            lambda: (
                "Global" in str((platform.controller.cache.global_settings() or {}).get("spec"))
            ),
            timeout=10,
            what="the controller's cache to hold the invalid global block",
        )
        assert platform.controller.settings().public_domain_template == "%s.global2.test"
        assert _host(platform, name) == f"{label}.global2.test"
        # ...and it does not hold back an edit of the module's own settings.
        put_module({"publicDomainTemplate": "%s.module2.test"})
        wait_for(
            lambda: _host(platform, name) == f"{label}.module2.test",
            timeout=30,
            what="the module's edit taken while the global block is invalid",
        )

        # An invalid module block keeps the module's last good settings, still under the
        # platform's block as it is now: a global edit is followed all the same.
        put_global({"modules": {"publicDomainTemplate": "%s.global2.test"}})
        put_module({"probe": {"intervalSeconds": 10}})
        wait_for(lambda: _host(platform, name) == f"{label}.global2.test", timeout=30)
        put_module({"probe": {"intervalSeconds": 10, "timeoutSeconds": 0}})
        wait_for(
            lambda: "timeoutSeconds" in str(platform.controller.cache.module_settings()),
            timeout=10,
            what="the controller's cache to hold the invalid module block",
        )
        put_global({"modules": {"publicDomainTemplate": "%s.global3.test"}})
        wait_for(
            lambda: _host(platform, name) == f"{label}.global3.test",
            timeout=30,
            what="the global edit taken while the module's block is invalid",
        )
        assert platform.controller.settings().probe.timeout_seconds == 3


# --- the CustomCertificate copy -----------------------------------------------------------


CERT_1 = {"tls.crt": "EXCERT-ONE-cert-bytes", "tls.key": "EXKEY-ONE-private-key-bytes"}
CERT_2 = {"tls.crt": "EXCERT-TWO-cert-bytes", "tls.key": "EXKEY-TWO-private-key-bytes"}
MARKERS = ("EXKEY-ONE", "EXKEY-TWO", "EXCERT-ONE", "EXCERT-TWO")


def _tls_secret(name: str, data: dict[str, str], namespace: str = MODULE_NS) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "kubernetes.io/tls",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def _class(name: str, https: dict[str, Any] | None) -> dict[str, Any]:
    """An External class; `https` None: the settings' block applies."""
    exposure = {"type": "External", "authentication": "None"}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceServiceClass",
        "metadata": {"name": name},
        "spec": {
            "modelPolicy": {"allowedEndpointTypes": ["Chat"]},
            "exposurePolicy": exposure if https is None else {**exposure, "https": https},
        },
    }


def _copy(core: client.CoreV1Api, name: str) -> Any:
    try:
        return core.read_namespaced_secret(f"{name}-certificate", NS)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _decoded(secret: Any) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}


def test_a_custom_certificate_is_copied_kept_equal_repaired_and_pruned(
    platform: LocalPlatform,
    alice: Orders,
    admin: client.ApiClient,
    orders: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    core = client.CoreV1Api(admin)
    custom = client.CustomObjectsApi(admin)
    source, class_name, name = "ex-wildcard", "ex-custom-tls", "ex-custom"
    custom_https = {"mode": "CustomCertificate", "customCertificate": {"secretName": source}}
    Applier(admin).apply_all([_class(class_name, custom_https)])
    try:
        orders(name)
        alice.create(NS, name, _spec(class_name))
        # No source yet: a named reason on the order, and no retry storm.
        obj = alice.wait_phase(NS, name, "Pending", reason="CertificateSecretMissing", timeout=90)
        workload = next(c for c in obj["status"]["conditions"] if c["type"] == "WorkloadReady")
        assert workload["status"] == "False" and source in workload["message"]
        uid = obj["metadata"]["uid"]
        version = platform.log.stream(uid).version
        forced_passes(platform, uid, passes=3)
        assert platform.log.stream(uid).version == version  # passes record nothing new
        assert _copy(core, name) is None

        # The source appears: the copy is made, as the order's child, and the Ingress names it.
        core.create_namespaced_secret(MODULE_NS, _tls_secret(source, CERT_1))
        made = wait_for(lambda: _copy(core, name), timeout=90, what="the copy")
        assert made.type == "kubernetes.io/tls" and _decoded(made) == CERT_1
        owner = made.metadata.owner_references[0]
        assert (owner.kind, owner.uid, owner.controller) == ("InferenceService", uid, True)
        assert made.metadata.labels["ai.deckhouse.io/inference-service-uid"] == uid
        ingress = wait_for(lambda: _ingress(platform, name), timeout=30, what="the Ingress")
        assert ingress.spec.tls[0].secret_name == f"{name}-certificate"
        alice.wait_phase(NS, name, "Ready", timeout=120)

        # An update of the source reaches the copy (a new copy: Secrets are never patched).
        core.replace_namespaced_secret(source, MODULE_NS, _tls_secret(source, CERT_2))
        followed = wait_for(
            lambda: (c := _copy(core, name)) is not None and _decoded(c) == CERT_2 and c,
            timeout=90,
            what="the copy to follow the source",
        )
        assert followed.metadata.uid != made.metadata.uid

        # A deleted copy is made again, equal to the source.
        core.delete_namespaced_secret(f"{name}-certificate", NS)
        repaired = wait_for(
            lambda: (
                (c := _copy(core, name)) is not None
                and c.metadata.uid != followed.metadata.uid
                and c
            ),
            timeout=30,
            what="the copy repaired",
        )
        assert _decoded(repaired) == CERT_2

        # The class switches to CertManager: the copy is pruned, the Ingress names cert-manager's.
        cert_manager = {"mode": "CertManager", "certManager": {"clusterIssuerName": "selfsigned"}}
        custom.patch_cluster_custom_object(
            GROUP,
            VERSION,
            "inferenceserviceclasses",
            class_name,
            {"spec": {"exposurePolicy": {"https": cert_manager}}},
        )
        wait_for(lambda: _copy(core, name) is None, timeout=60, what="the copy pruned")
        wait_for(
            lambda: (
                (i := _ingress(platform, name)) is not None
                and i.spec.tls[0].secret_name == f"{name}-tls"
            ),
            timeout=30,
            what="the Ingress on cert-manager's Secret",
        )
        assert core.read_namespaced_secret(source, MODULE_NS).data  # the source is left alone

        # https Disabled: the TLS block and the issuer's annotation, set before, are gone.
        custom.patch_cluster_custom_object(
            GROUP,
            VERSION,
            "inferenceserviceclasses",
            class_name,
            {"spec": {"exposurePolicy": {"https": {"mode": "Disabled"}}}},
        )
        wait_for(
            lambda: (
                (i := _ingress(platform, name)) is not None
                and not i.spec.tls
                and "cert-manager.io/cluster-issuer" not in (i.metadata.annotations or {})
            ),
            timeout=60,
            what="the Ingress without TLS",
        )

        # Its data never reached the status, the Events, the event log or the logs.
        obj = alice.get(NS, name)
        events = core.list_namespaced_event(NS).items
        told = " ".join(f"{e.reason} {e.message}" for e in events)
        assert "CertificateSecretMissing" in told  # the Events did tell the story
        logged = "\n".join(r.getMessage() for r in caplog.records)
        assert logged, "the controller logged nothing to scan"
        payloads = repr([r.event for r in platform.log.read(uid)])
        for marker in MARKERS:
            for where, text in (
                ("status", str(obj)),
                ("events", told),
                ("event log", payloads),
                ("logs", logged),
            ):
                assert marker not in text, f"{marker} reached the {where}"
                encoded = base64.b64encode(marker.encode()).decode()[:12]
                assert encoded not in text, f"{marker} (base64) reached the {where}"
    finally:
        try:
            custom.delete_cluster_custom_object(
                GROUP, VERSION, "inferenceserviceclasses", class_name
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
        try:
            core.delete_namespaced_secret(source, MODULE_NS)
        except ApiException as exc:
            if exc.status != 404:
                raise


def test_the_modules_certificate_is_copied_from_d8_system_the_platforms_never(
    platform: LocalPlatform,
    alice: Orders,
    admin: client.ApiClient,
    orders: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The module's own ModuleConfig names a certificate Deckhouse keeps in d8-system: the
    copy is made from there and follows it. The global `modules.https` block's certificate
    is the platform's own (its sites' wildcard, Dex's among them) and is never copied into
    a tenant's namespace, where its editors would read the key: without the module's
    block, the copy goes and the Ingress asks for TLS on the ingress controller's default
    certificate."""
    core = client.CoreV1Api(admin)
    source, class_name, name = "ex-platform-wildcard", "ex-settings-https", "ex-platform-tls"
    module_source = "ex-module-wildcard"
    platform_ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PLATFORM_NS}}
    Applier(admin).apply_all(
        [
            platform_ns,
            _tls_secret(source, CERT_1, PLATFORM_NS),
            _tls_secret(module_source, CERT_1, PLATFORM_NS),
            _class(class_name, None),
        ]
    )
    custom_https = {"mode": "CustomCertificate", "customCertificate": {"secretName": source}}
    platform_block = {"modules": {"publicDomainTemplate": "%s.global.test", "https": custom_https}}
    module_https = {**custom_https, "customCertificate": {"secretName": module_source}}
    caplog.set_level(logging.WARNING, logger="adapters.kubernetes.controller")
    try:
        with module_config(admin, "global", platform_block, version=2):
            with module_config(admin, "ai-inference", {"https": module_https}):
                orders(name)
                alice.create(NS, name, _spec(class_name))
                made = wait_for(lambda: _copy(core, name), timeout=90, what="the copy")
                assert _decoded(made) == CERT_1
                annotations = made.metadata.annotations
                assert annotations["ai.deckhouse.io/certificate-source"] == (
                    f"{PLATFORM_NS}/{module_source}"
                )
                ingress = wait_for(lambda: _ingress(platform, name), timeout=30, what="the Ingress")
                assert ingress.spec.tls[0].secret_name == f"{name}-certificate"

                # The platform's rotation reaches the copy.
                core.replace_namespaced_secret(
                    module_source, PLATFORM_NS, _tls_secret(module_source, CERT_2, PLATFORM_NS)
                )
                wait_for(
                    lambda: (c := _copy(core, name)) is not None and _decoded(c) == CERT_2,
                    timeout=90,
                    what="the copy to follow the module's Secret",
                )

            # The global block in force: its certificate is not copied, the copy goes.
            wait_for(
                lambda: (
                    (i := _ingress(platform, name)) is not None
                    and i.spec.tls is not None
                    and i.spec.tls[0].secret_name is None
                ),
                timeout=90,
                what="the Ingress on the default certificate",
            )
            served = _ingress(platform, name)
            assert [t.hosts for t in served.spec.tls] == [[served.spec.rules[0].host]]
            wait_for(lambda: _copy(core, name) is None, timeout=90, what="the copy pruned")
            # The administrator reads why in the controller's log.
            assert "is not copied into tenants' namespaces" in caplog.text
    finally:
        core.delete_namespaced_secret(source, PLATFORM_NS)
        core.delete_namespaced_secret(module_source, PLATFORM_NS)
        client.CustomObjectsApi(admin).delete_cluster_custom_object(
            GROUP, VERSION, "inferenceserviceclasses", class_name
        )


def _told_on_module_config(admin: client.ApiClient) -> list[tuple[str, str, str, int]]:
    """(reason, type, message, count) of the Events about ModuleConfig ai-inference."""
    return [
        (e.reason, e.type, e.message, e.count)
        for e in client.CoreV1Api(admin).list_namespaced_event("default").items
        if (e.involved_object.kind, e.involved_object.name) == ("ModuleConfig", "ai-inference")
    ]


def test_a_module_config_the_controller_refuses_says_so_on_itself(
    platform: LocalPlatform, admin: client.ApiClient
) -> None:
    """A probe timeout longer than its interval passes the schema (openapi cannot compare
    two fields): the previous settings stay in force, and the ModuleConfig gets one
    Warning naming the fields, not one per edit that keeps the same fault; an edit the
    controller takes is told too."""
    good = {"probe": {"intervalSeconds": 10, "timeoutSeconds": 3}}
    bad = {"probe": {"intervalSeconds": 5, "timeoutSeconds": 9}}
    with module_config(admin, "ai-inference", good) as put:
        wait_for(
            lambda: platform.controller.settings().probe.timeout_seconds == 3 or None,
            what="the good settings in force",
        )
        before = len(_told_on_module_config(admin))
        put(bad)
        # Only newer Events: an earlier test's refusal is one of this ModuleConfig's too.
        refused = wait_for(
            lambda: (
                [e for e in _told_on_module_config(admin)[before:] if e[0] == "SettingsRefused"]
                or None
            ),
            what="the SettingsRefused Event",
        )
        ((_, kind, message, count),) = refused
        assert kind == "Warning" and count == 1
        assert "probe.timeoutSeconds (9) exceeds" in message, message
        assert platform.controller.settings().probe.timeout_seconds == 3  # the previous

        # The same fault under another edit: not told again.
        also_bad = {**bad, "ingressClass": "other"}
        put(also_bad)
        cache = platform.controller.cache.module_configs
        wait_for(
            lambda: (
                (cache.get_by_name(None, "ai-inference") or {}).get("spec", {}).get("settings")
                == also_bad
                or None
            ),
            what="the second edit in the cache",
        )
        put(good)
        wait_for(
            lambda: (
                [e for e in _told_on_module_config(admin)[before:] if e[0] == "SettingsAccepted"]
                or None
            ),
            what="the SettingsAccepted Event",
        )
        told = _told_on_module_config(admin)
        assert [e[0] for e in told[before:]] == ["SettingsRefused", "SettingsAccepted"], told
        assert [e[3] for e in told[before:]] == [1, 1], told
