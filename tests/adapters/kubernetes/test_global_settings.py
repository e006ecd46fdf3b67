"""The platform's global exposure settings under the module's own: precedence and checks."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.kubernetes import global_settings
from adapters.kubernetes.settings import Settings, SettingsError, Source, with_fallbacks
from fsm.values import HttpsMode


def global_config(modules: dict[str, Any] | None, **settings: Any) -> dict[str, Any]:
    """`ModuleConfig global` as Deckhouse keeps it: other settings beside `modules`."""
    body: dict[str, Any] = {"highAvailability": False, **settings}
    if modules is not None:
        body["modules"] = {"placement": {}, "resourcesRequests": {}, **modules}
    return {
        "apiVersion": "deckhouse.io/v1alpha1",
        "kind": "ModuleConfig",
        "metadata": {"name": "global"},
        "spec": {"version": 2, "settings": body},
    }


def module_config(settings: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "deckhouse.io/v1alpha1",
        "kind": "ModuleConfig",
        "metadata": {"name": "ai-inference"},
        "spec": {"version": 1, "enabled": True, "settings": settings},
    }


CUSTOM = {"mode": "CustomCertificate", "customCertificate": {"secretName": "wild"}}
GLOBAL = {
    "publicDomainTemplate": "%s.global.test",
    "ingressClass": "global-nginx",
    "https": CUSTOM,
}

# (module's settings, global block) -> (host template, ingress class, https mode, issuer, secret)
PRECEDENCE = {
    "defaults": ({}, {}, (None, "nginx", HttpsMode.CERT_MANAGER, "letsencrypt", None)),
    "global-fills-all": (
        {},
        GLOBAL,
        ("%s.global.test", "global-nginx", HttpsMode.CUSTOM_CERTIFICATE, "letsencrypt", "wild"),
    ),
    "module-wins-each": (
        {
            "publicDomainTemplate": "%s.module.test",
            "ingressClass": "module-nginx",
            "https": {"mode": "Disabled"},
        },
        GLOBAL,
        ("%s.module.test", "module-nginx", HttpsMode.DISABLED, "letsencrypt", None),
    ),
    "module-domain-global-rest": (
        {"publicDomainTemplate": "%s.module.test"},
        GLOBAL,
        ("%s.module.test", "global-nginx", HttpsMode.CUSTOM_CERTIFICATE, "letsencrypt", "wild"),
    ),
    # A module https block replaces the global one whole: its missing issuer is the
    # default's, never the global block's, and the global secret does not leak in.
    "module-https-replaces-global-whole": (
        {"https": {"mode": "CertManager"}},
        {"https": {**CUSTOM, "certManager": {"clusterIssuerName": "global-issuer"}}},
        (None, "nginx", HttpsMode.CERT_MANAGER, "letsencrypt", None),
    ),
    "global-https-taken-whole": (
        {"ingressClass": "module-nginx"},
        {"https": {"mode": "CertManager", "certManager": {"clusterIssuerName": "selfsigned"}}},
        (None, "module-nginx", HttpsMode.CERT_MANAGER, "selfsigned", None),
    ),
    # An explicit null is "not set": the global value applies.
    "module-null-is-unset": (
        {"publicDomainTemplate": None},
        {"publicDomainTemplate": "%s.global.test"},
        ("%s.global.test", "nginx", HttpsMode.CERT_MANAGER, "letsencrypt", None),
    ),
}


@pytest.mark.parametrize("case", list(PRECEDENCE))
def test_module_settings_override_the_global_ones_which_override_the_defaults(
    case: str,
) -> None:
    module, fallbacks, expected = PRECEDENCE[case]
    settings = Settings.from_settings(with_fallbacks(module, fallbacks))
    got = (
        settings.public_domain_template,
        settings.ingress_class,
        settings.https.mode,
        settings.https.cert_manager.cluster_issuer_name,
        settings.https.custom_certificate.secret_name,
    )
    assert got == expected


def test_with_fallbacks_leaves_its_inputs_and_other_settings_alone() -> None:
    module = {"probe": {"intervalSeconds": 20}, "https": {"mode": "OnlyInURI"}}
    fallbacks = {"https": dict(CUSTOM), "ingressClass": "g"}
    merged = with_fallbacks(module, fallbacks)
    assert merged == {
        "probe": {"intervalSeconds": 20},
        "https": {"mode": "OnlyInURI"},
        "ingressClass": "g",
    }
    assert module == {"probe": {"intervalSeconds": 20}, "https": {"mode": "OnlyInURI"}}
    assert fallbacks == {"https": CUSTOM, "ingressClass": "g"}


def test_the_source_puts_the_global_block_under_the_file_the_module_config_and_the_flags() -> None:
    fallbacks = global_settings.exposure_of(global_config(GLOBAL))
    source = Source({"ingressClass": "from-file"}, {"https": {"mode": "OnlyInURI"}})
    from_file = source.resolve(None, fallbacks)
    assert from_file.ingress_class == "from-file"  # the module's (its file) wins
    assert from_file.public_domain_template == "%s.global.test"  # unset there: global
    assert from_file.https.mode is HttpsMode.ONLY_IN_URI  # a flag is a module-level block
    assert from_file.https.custom_certificate.secret_name is None  # global's not merged in
    from_config = source.resolve(module_config({"publicDomainTemplate": "%s.mc.test"}), fallbacks)
    assert from_config.public_domain_template == "%s.mc.test"
    assert from_config.ingress_class == "global-nginx"  # the file no longer applies
    assert source.resolve(None).public_domain_template is None  # no global: the default


def test_deckhouses_certificates_are_read_where_the_platform_keeps_them() -> None:
    """Deckhouse keeps the Secret its global `modules.https.customCertificate` names, and
    the one a module's ModuleConfig names, in d8-system; one the file or the flags name
    (a cluster without Deckhouse) is in the controller's namespace."""
    fallbacks = global_settings.exposure_of(global_config({"https": CUSTOM}))
    platform = Source().resolve(None, fallbacks).https.custom_certificate
    assert (platform.secret_namespace, platform.secret_name) == ("d8-system", "wild")
    assert platform.platform_wide  # the platform's own: never copied to a tenant
    own_https = {"mode": "CustomCertificate", "customCertificate": {"secretName": "own"}}
    for source, config, namespace in (
        (Source({"https": own_https}), None, None),  # the file's block
        (Source(), module_config({"https": own_https}), "d8-system"),  # the ModuleConfig's
        (Source({"https": CUSTOM}), module_config({"https": own_https}), "d8-system"),
        (Source({}, {"https": own_https}), None, None),  # flags
        (Source({}, {"https": own_https}), module_config({}), None),  # flags over a config
    ):
        for globally in (fallbacks, {}):
            mine = source.resolve(config, globally).https.custom_certificate
            assert (mine.secret_namespace, mine.secret_name) == (namespace, "own")
            assert not mine.platform_wide  # the module's own: named for its orders
    # A ModuleConfig without a block: the global one, from d8-system.
    unset = Source().resolve(module_config({}), fallbacks).https.custom_certificate
    assert (unset.secret_namespace, unset.secret_name) == ("d8-system", "wild")
    assert unset.platform_wide
    # A block the module sets in another mode replaces the global one whole: none read.
    moved_away = Source({"https": {"mode": "OnlyInURI"}}).resolve(None, fallbacks)
    assert moved_away.https.custom_certificate.secret_name is None
    assert moved_away.https.custom_certificate.secret_namespace is None
    # Where the Secret is counts as a change of the settings (the workload is redone).
    assert Source().resolve(None, fallbacks) != Settings.from_settings(fallbacks)


def test_only_the_three_exposure_settings_are_read_from_the_global_config() -> None:
    block = global_settings.exposure_of(
        global_config({**GLOBAL, "placement": {"customTolerationKeys": ["x"]}}, storageClass="s")
    )
    assert block == GLOBAL


@pytest.mark.parametrize(
    "obj",
    [None, global_config(None), global_config({}), {**global_config(None), "spec": {}}],
    ids=["no-module-config", "no-modules", "empty-modules", "no-settings"],
)
def test_a_global_config_without_exposure_settings_gives_no_fallbacks(
    obj: dict[str, Any] | None,
) -> None:
    assert global_settings.exposure_of(obj) == {}


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (global_config({"publicDomainTemplate": "example.com"}), "publicDomainTemplate"),
        (global_config({"publicDomainTemplate": "%s.Example.com"}), "publicDomainTemplate"),
        (global_config({"https": {"mode": "CustomCertificate"}}), "secretName"),
        (global_config({"https": {"mode": "Sometimes"}}), "https.mode"),
        (global_config({"ingressClass": "Not_A_Name"}), "ingressClass"),
        (global_config({"https": "on"}), "https"),
        ({**global_config(None), "spec": {"settings": {"modules": ["x"]}}}, "not a mapping"),
        ({**global_config({}), "metadata": {"name": "ai-inference"}}, "expected ModuleConfig"),
    ],
    ids=[
        "no-placeholder",
        "upper-case",
        "custom-without-secret",
        "https-mode",
        "class-pattern",
        "https-not-a-block",
        "modules-not-a-mapping",
        "not-global",
    ],
)
def test_a_bad_global_block_is_refused_naming_the_field(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        global_settings.exposure_of(obj)


def test_reload_keeps_the_global_block_in_force_when_the_new_one_is_invalid() -> None:
    current = global_settings.exposure_of(global_config(GLOBAL))
    kept, error = global_settings.reload(current, global_config({"ingressClass": "Bad_Name"}))
    assert kept == current
    assert error is not None and "ingressClass" in error and "keeping" in error
    fresh, error = global_settings.reload(current, global_config({"ingressClass": "other"}))
    assert (fresh, error) == ({"ingressClass": "other"}, None)
    gone, error = global_settings.reload(current, None)  # the ModuleConfig deleted
    assert (gone, error) == ({}, None)
