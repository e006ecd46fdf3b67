"""Module settings: defaults, a ModuleConfig's settings, and refusals that keep the old ones."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from adapters.cli import controller_cmd
from adapters.kubernetes.settings import (
    CatalogMode,
    Settings,
    SettingsError,
    Source,
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
    # No host template unless the module or the platform names one: no Ingress is made.
    assert settings.public_domain_template is None and settings.public_host("a", "b") is None
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
    assert settings.public_host("a", "b") == "a-b.apps.corp.internal"
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
        ({"publicDomainTemplate": f"%s.{'a' * 64}.test"}, "over 63 characters"),
        (
            {"publicDomainTemplate": "%s." + ".".join(["a" * 60] * 3) + ".example.test"},
            "over the 253",
        ),
        ({"catalog": {"mode": "Off"}}, "catalog.mode"),
        ({"https": {"mode": "CustomCertificate"}}, "customCertificate.secretName"),
        ({"https": {"certManager": {"clusterIssuerName": ""}}}, "clusterIssuerName"),
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
        "template-label-over-63",  # a host no DNS serves; the API server takes it
        "template-hosts-over-253",  # the API server refuses every order's Ingress
        "catalog-mode",
        "custom-without-secret",
        "empty-issuer",
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


def test_an_interval_below_the_default_timeout_brings_the_timeout_down_with_it() -> None:
    # Only the defaulted timeout follows: one the user set beyond the interval is refused.
    settings = Settings.from_module_config(module_config({"probe": {"intervalSeconds": 2}}))
    assert (settings.probe.interval_seconds, settings.probe.timeout_seconds) == (2, 2)
    settings = Settings.from_module_config(module_config({"probe": {"intervalSeconds": 30}}))
    assert settings.probe.timeout_seconds == 3


def test_reload_keeps_the_settings_in_force_when_the_new_ones_are_invalid() -> None:
    current = Settings.from_settings({"ingressClass": "public"})
    kept, error = reload(current, module_config({"probe": {"timeoutSeconds": -1}}))
    assert kept is current
    assert error is not None and "probe.timeoutSeconds" in error and "keeping" in error
    updated, error = reload(current, module_config({"ingressClass": "internal"}))
    assert (updated.ingress_class, error) == ("internal", None)


# --- without a ModuleConfig: a file and flags (settings.Source) ------------------------


def write_settings(tmp_path: Any, text: str) -> Any:
    path = tmp_path / "settings.yaml"
    path.write_text(text, "utf-8")
    return path


def test_a_file_holds_what_spec_settings_would(tmp_path: Any) -> None:
    path = write_settings(
        tmp_path,
        "publicDomainTemplate: '%s.apps.corp.internal'\n"
        "https: {mode: Disabled}\n"
        "ingressClass: public\n"
        "probe: {intervalSeconds: 20, timeoutSeconds: 4}\n"
        "huggingFace: {endpoint: 'http://127.0.0.1:9/'}\n",
    )
    settings = Source.from_file(path).resolve(None)
    assert settings.public_host("x", "y") == "x-y.apps.corp.internal"
    assert settings.https.mode is HttpsMode.DISABLED
    assert settings.ingress_class == "public"
    assert (settings.probe.interval_seconds, settings.probe.timeout_seconds) == (20, 4)
    assert settings.hugging_face.endpoint == "http://127.0.0.1:9"


def test_an_empty_file_is_the_defaults(tmp_path: Any) -> None:
    assert Source.from_file(write_settings(tmp_path, "")).resolve(None) == Settings()


def test_a_module_config_replaces_the_file_and_flags_win_over_both(tmp_path: Any) -> None:
    path = write_settings(tmp_path, "ingressClass: from-file\nprobe: {intervalSeconds: 30}\n")
    source = Source.from_file(path, {"huggingFace": {"endpoint": "http://127.0.0.1:7"}})
    from_file = source.resolve(None)
    assert from_file.ingress_class == "from-file" and from_file.probe.interval_seconds == 30
    from_config = source.resolve(module_config({"ingressClass": "from-config"}))
    assert from_config.ingress_class == "from-config"
    assert from_config.probe.interval_seconds == 10  # not merged with the file's
    for settings in (from_file, from_config):
        assert settings.hugging_face.endpoint == "http://127.0.0.1:7"


def test_flags_merge_into_a_block_rather_than_replace_it(tmp_path: Any) -> None:
    path = write_settings(tmp_path, "probe: {intervalSeconds: 30, timeoutSeconds: 9}\n")
    settings = Source.from_file(path, {"probe": {"timeoutSeconds": 5}}).resolve(None)
    assert (settings.probe.interval_seconds, settings.probe.timeout_seconds) == (30, 5)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("ingresClass: typo\n", "ingresClass", id="unknown-field"),
        pytest.param("probe: {timeoutSeconds: 0}\n", "probe.timeoutSeconds", id="bound"),
        pytest.param("- a list\n", "expected a mapping", id="not-a-mapping"),
        pytest.param("ingressClass: [unclosed\n", "settings file", id="not-yaml"),
        # Only the schema forbids these (the reader alone would take them).
        pytest.param(
            "publicDomainTemplate: '%s.Example.com'\n", "publicDomainTemplate", id="upper"
        ),
        pytest.param("ingressClass: Not_A_Name\n", "ingressClass", id="class-pattern"),
        pytest.param(
            f"publicDomainTemplate: '%s.{'a' * 64}.test'\n", "publicDomainTemplate", id="label"
        ),
    ],
)
def test_a_bad_file_is_refused_at_start_with_the_field_named(
    tmp_path: Any, text: str, message: str
) -> None:
    with pytest.raises(SettingsError, match=message):
        Source.from_file(write_settings(tmp_path, text))


def test_a_module_config_is_checked_against_the_same_schema() -> None:
    with pytest.raises(SettingsError, match="publicDomainTemplate"):
        Settings.from_module_config(module_config({"publicDomainTemplate": "%s.Example.com"}))


def test_the_controllers_flags_become_overrides() -> None:
    parser = argparse.ArgumentParser()
    controller_cmd.register(parser.add_subparsers())
    args = parser.parse_args(
        [
            "controller",
            "--public-domain-template=%s.corp",
            "--https-mode=OnlyInURI",
            "--ingress-class=public",
            "--hub-endpoint=http://127.0.0.1:5",
            "--probe-interval=15",
        ]
    )
    overrides = controller_cmd.setting_overrides(args)
    assert overrides == {
        "publicDomainTemplate": "%s.corp",
        "https": {"mode": "OnlyInURI"},
        "ingressClass": "public",
        "huggingFace": {"endpoint": "http://127.0.0.1:5"},
        "probe": {"intervalSeconds": 15},
    }
    settings = Source(None, overrides).resolve(None)
    assert settings.https.mode is HttpsMode.ONLY_IN_URI and settings.probe.timeout_seconds == 3


def test_a_refused_hub_endpoint_is_named_without_its_credentials() -> None:
    """The message reaches an Event and the log (a refused ModuleConfig)."""
    with pytest.raises(SettingsError) as refused:
        Settings.from_settings({"huggingFace": {"endpoint": "ftp://mirror:s3cret@hub.corp/x"}})
    assert "s3cret" not in str(refused.value)
    assert "ftp://hub.corp/x" in str(refused.value)


@pytest.mark.parametrize(
    "endpoint",
    ["http://user:hunter2@[::1", "https://exa mple.invalid", "http://", "https://:8080/hub"],
)
def test_a_hub_endpoint_the_client_cannot_use_is_refused_with_the_settings(endpoint: str) -> None:
    """Admitted, it made every HuggingFace order read ModelMetadataInvalid (blaming the
    model, again every 30 s) and the ModuleConfig got no word; one with a space in its
    host was looked up in DNS, escaped to %20."""
    with pytest.raises(SettingsError) as refused:
        Settings.from_settings({"huggingFace": {"endpoint": endpoint}})
    assert "hunter2" not in str(refused.value)
    assert "huggingFace" in str(refused.value) or "URL" in str(refused.value)


def test_a_hub_endpoint_with_a_path_and_a_port_is_kept() -> None:
    settings = Settings.from_settings({"huggingFace": {"endpoint": "http://127.0.0.1:8080/hub/"}})
    assert settings.hugging_face.endpoint == "http://127.0.0.1:8080/hub"
