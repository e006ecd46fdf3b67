"""The module settings: what an administrator tunes for the whole module, with defaults.

On a Deckhouse cluster they come from the `ModuleConfig` named `ai-inference`
(`deckhouse.io/v1alpha1`, `spec.settings`, validated there by openapi/config-values.yaml);
on a plain cluster from the controller's own configuration (the same mapping); with
neither, the defaults below apply (SPEC §2.4). Names follow the platform's own settings
(DECKHOUSE.md): `publicDomainTemplate`, `ingressClass`, the `https` block.

The controller reads the ModuleConfig from a watch. An edit that does not validate must
not take the module down: `reload` keeps the settings in force and returns the error for
the controller to report (an event on the ModuleConfig, a log line).

Who calls it: the controller's loop (exposure and probe timings), rendering.py (hosts,
TLS), the hub resolver (endpoint), policy (catalog on or off).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from fsm.values import Frozen, HttpsMode

__all__ = [
    "MODULE_CONFIG_API_VERSION",
    "MODULE_CONFIG_KIND",
    "MODULE_NAME",
    "SETTINGS_VERSION",
    "CatalogMode",
    "CatalogSettings",
    "CertManagerSettings",
    "CustomCertificateSettings",
    "HttpsSettings",
    "HuggingFaceSettings",
    "ProbeSettings",
    "Settings",
    "SettingsError",
    "StoreSettings",
    "reload",
]

MODULE_NAME = "ai-inference"
MODULE_CONFIG_API_VERSION = "deckhouse.io/v1alpha1"
MODULE_CONFIG_KIND = "ModuleConfig"
# A new module starts at settings version 1 with no conversions (DECKHOUSE.md).
SETTINGS_VERSION = 1


class SettingsError(ValueError):
    """Settings that cannot be used; the message names each offending field."""


class CatalogMode(StrEnum):
    ENABLED = "Enabled"
    NONE = "None"  # clusters without the ai-models module


class CatalogSettings(Frozen):
    mode: CatalogMode = CatalogMode.ENABLED


class CertManagerSettings(Frozen):
    cluster_issuer_name: str = Field(default="letsencrypt", min_length=1)


class CustomCertificateSettings(Frozen):
    secret_name: str | None = Field(default=None, min_length=1)


class HttpsSettings(Frozen):
    """The platform's https block; a module-level block replaces the global one whole."""

    mode: HttpsMode = HttpsMode.CERT_MANAGER
    cert_manager: CertManagerSettings = CertManagerSettings()
    custom_certificate: CustomCertificateSettings = CustomCertificateSettings()

    @model_validator(mode="after")
    def _custom_needs_a_secret(self) -> HttpsSettings:
        if self.mode is HttpsMode.CUSTOM_CERTIFICATE and not self.custom_certificate.secret_name:
            raise ValueError(
                "https.mode CustomCertificate needs https.customCertificate.secretName"
            )
        return self


class ProbeSettings(Frozen):
    """How the controller probes an order's inference API.

    How many consecutive failures make a serving order Failed is not a setting: it is
    the core's PROBE_FAILURE_THRESHOLD (3), because replaying a stream must judge its
    probe events by the rule they were recorded under.
    """

    interval_seconds: int = Field(default=10, ge=1, le=3600)
    timeout_seconds: int = Field(default=3, ge=1, le=60)

    @model_validator(mode="after")
    def _timeout_within_interval(self) -> ProbeSettings:
        # A probe that may outlast its interval would pile probes up on a hung endpoint.
        if self.timeout_seconds > self.interval_seconds:
            raise ValueError(
                f"probe.timeoutSeconds ({self.timeout_seconds}) exceeds "
                f"probe.intervalSeconds ({self.interval_seconds})"
            )
        return self


class HuggingFaceSettings(Frozen):
    endpoint: str = "https://huggingface.co"

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")) or len(value.split("://", 1)[1]) == 0:
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value.rstrip("/")


class StoreSettings(Frozen):
    """Where the event log lives. Rendered into the controller's `--store` argument by
    the module's Deployment; a running controller does not switch logs on a change."""

    url: str = Field(default="sqlite:////var/lib/ai-inference/events.sqlite", min_length=1)


class Settings(Frozen):
    """`ModuleConfig ai-inference .spec.settings`, every field defaulted."""

    catalog: CatalogSettings = CatalogSettings()
    public_domain_template: str = "%s.example.com"
    ingress_class: str = Field(default="nginx", min_length=1)
    https: HttpsSettings = HttpsSettings()
    probe: ProbeSettings = ProbeSettings()
    hugging_face: HuggingFaceSettings = HuggingFaceSettings()
    store: StoreSettings = StoreSettings()

    @field_validator("public_domain_template")
    @classmethod
    def _one_placeholder(cls, value: str) -> str:
        # `%` formatting would also expand %d or choke on a stray %: allow exactly one %s.
        if value.count("%s") != 1 or value.count("%") != 1:
            raise ValueError(f"{value!r} must contain %s exactly once and no other %")
        if "://" in value or "/" in value:
            raise ValueError(f"{value!r} must be a host name template, without scheme or path")
        return value

    @property
    def catalog_enabled(self) -> bool:
        return self.catalog.mode is CatalogMode.ENABLED

    def public_host(self, label: str) -> str:
        """The External host for a name built from an order and its namespace."""
        return self.public_domain_template % label

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | None) -> Settings:
        """The settings mapping itself (ModuleConfig `spec.settings`, or a config file's)."""
        try:
            return cls.model_validate(dict(settings or {}))
        except ValidationError as err:
            raise SettingsError(f"invalid module settings: {_problems(err)}") from err

    @classmethod
    def from_module_config(cls, obj: Mapping[str, Any] | None) -> Settings:
        """A ModuleConfig object as the API returns it; None (no ModuleConfig): defaults."""
        if obj is None:
            return cls()
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        name = (obj.get("metadata") or {}).get("name")
        if (api_version, kind, name) != (
            MODULE_CONFIG_API_VERSION,
            MODULE_CONFIG_KIND,
            MODULE_NAME,
        ):
            raise SettingsError(
                f"expected {MODULE_CONFIG_KIND} {MODULE_NAME!r} ({MODULE_CONFIG_API_VERSION}), "
                f"got {kind} {name!r} ({api_version})"
            )
        spec = obj.get("spec") or {}
        version = spec.get("version", SETTINGS_VERSION)
        if spec.get("settings") and version != SETTINGS_VERSION:
            raise SettingsError(
                f"ModuleConfig {MODULE_NAME}: settings version {version!r} is not understood "
                f"(this controller reads version {SETTINGS_VERSION})"
            )
        return cls.from_settings(spec.get("settings"))


def reload(previous: Settings, obj: Mapping[str, Any] | None) -> tuple[Settings, str | None]:
    """The new settings, or the previous ones and why the new ones were refused."""
    try:
        return Settings.from_module_config(obj), None
    except SettingsError as err:
        return previous, f"{err}; keeping the settings in force"


def _problems(err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        where = ".".join(_camel(p) for p in e["loc"]) or "settings"
        parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts)


def _camel(part: str | int) -> str:
    # pydantic reports aliases when validating by alias, but keep the message in the
    # user's spelling whichever way the field was matched.
    if isinstance(part, int):
        return str(part)
    head, *rest = part.split("_")
    return head + "".join(w.capitalize() for w in rest)
