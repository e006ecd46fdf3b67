"""Module settings: defaults, a ModuleConfig's settings, and refusals that keep the old ones."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.kubernetes.settings import (
    CatalogMode,
    Settings,
    SettingsError,
    reload,
)
from fsm.values import HttpsMode


def module_config(settings: dict[str, Any] | None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"enabled": True, **spec}
    if settings is not None:
        body.setdefault("version", 1)
        body["settings"] = settings
    return {
        "apiVersion": "deckhouse.io/v1alpha1",
        "kind": "ModuleConfig",
        "metadata": {"name": "ai-inference"},
        "spec": body,
    }


def test_without_a_module_config_the_defaults_apply() -> None:
    settings = Settings.from_module_config(None)
    assert settings == Settings.from_module_config(module_config(None))
    assert settings.catalog.mode is CatalogMode.ENABLED and settings.catalog_enabled
    assert settings.public_domain_template == "%s.example.com"
    assert settings.ingress_class == "nginx"
    assert settings.https.mode is HttpsMode.CERT_MANAGER
    assert settings.https.cert_manager.cluster_issuer_name == "letsencrypt"
    assert settings.https.custom_certificate.secret_name is None
    assert (settings.probe.interval_seconds, settings.probe.timeout_seconds) == (10, 3)
    assert settings.hugging_face.endpoint == "https://huggingface.co"


def test_every_setting_is_read_in_the_platforms_spelling() -> None:
    settings = Settings.from_module_config(
        module_config(
            {
                "catalog": {"mode": "None"},
                "publicDomainTemplate": "%s.apps.corp.internal",
                "ingressClass": "public",
                "https": {"mode": "CustomCertificate", "customCertificate": {"secretName": "w"}},
                "probe": {"intervalSeconds": 30, "timeoutSeconds": 5},
                "huggingFace": {"endpoint": "http://127.0.0.1:8081/"},
            }
        )
    )
    assert not settings.catalog_enabled
    assert settings.public_host("a-b") == "a-b.apps.corp.internal"
    assert settings.ingress_class == "public"
    assert settings.https.mode is HttpsMode.CUSTOM_CERTIFICATE
    assert settings.https.custom_certificate.secret_name == "w"
    assert settings.probe.interval_seconds == 30
    assert settings.hugging_face.endpoint == "http://127.0.0.1:8081"


def test_a_module_https_block_replaces_the_default_whole() -> None:
    settings = Settings.from_settings({"https": {"mode": "OnlyInURI"}})
    assert settings.https.mode is HttpsMode.ONLY_IN_URI
    assert settings.https.cert_manager.cluster_issuer_name == "letsencrypt"  # its own default


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"publicDomainTemplate": "example.com"}, "publicDomainTemplate"),
        ({"publicDomainTemplate": "%s.%s.example.com"}, "exactly once"),
        ({"publicDomainTemplate": "https://%s.example.com"}, "without scheme"),
        ({"catalog": {"mode": "Off"}}, "catalog.mode"),
        ({"https": {"mode": "CustomCertificate"}}, "customCertificate.secretName"),
        ({"https": {"mode": "Sometimes"}}, "https.mode"),
        ({"probe": {"timeoutSeconds": 0}}, "probe.timeoutSeconds"),
        ({"probe": {"intervalSeconds": 2, "timeoutSeconds": 5}}, "exceeds"),
        ({"huggingFace": {"endpoint": "ftp://hub"}}, "huggingFace.endpoint"),
        ({"ingresClass": "typo"}, "ingresClass"),
    ],
    ids=[
        "no-placeholder",
        "two-placeholders",
        "scheme-in-template",
        "catalog-mode",
        "custom-without-secret",
        "https-mode",
        "zero-timeout",
        "timeout-beyond-interval",
        "hub-scheme",
        "unknown-field",
    ],
)
def test_invalid_settings_are_refused_with_the_field_named(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_module_config(module_config(settings))


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({**module_config({}), "kind": "ConfigMap"}, "expected ModuleConfig"),
        ({**module_config({}), "metadata": {"name": "other"}}, "'other'"),
        (module_config({"ingressClass": "x"}, version=2), "version 2"),
    ],
    ids=["wrong-kind", "wrong-name", "future-version"],
)
def test_not_our_module_config(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_module_config(obj)


def test_reload_keeps_the_settings_in_force_when_the_new_ones_are_invalid() -> None:
    current = Settings.from_settings({"ingressClass": "public"})
    kept, error = reload(current, module_config({"probe": {"timeoutSeconds": -1}}))
    assert kept is current
    assert error is not None and "probe.timeoutSeconds" in error and "keeping" in error
    updated, error = reload(current, module_config({"ingressClass": "internal"}))
    assert (updated.ingress_class, error) == ("internal", None)
