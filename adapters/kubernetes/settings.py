"""The module settings: what an administrator tunes for the whole module, with defaults.

On a Deckhouse cluster they come from the `ModuleConfig` named `ai-inference`
(`deckhouse.io/v1alpha1`, `spec.settings`, validated there by openapi/config-values.yaml);
on a plain cluster from the controller's `--settings FILE` (the same mapping, as YAML);
with neither, the defaults below apply (SPEC §2.4). Names follow the platform's own
settings (DECKHOUSE.md): `publicDomainTemplate`, `ingressClass`, the `https` block.

`Source` says which wins: the ModuleConfig's settings when it exists, else the file's
(never merged, so a Deckhouse cluster has one source of truth), then the controller's
flags on top of either (what an operator typed for this process is the most specific).
Below the module's own, the platform's global `modules.*` exposure settings
(`publicDomainTemplate`, `ingressClass`, `https`; read from the ModuleConfig `global` by
global_settings.py) fill what the module leaves unset — `with_fallbacks`, where an `https`
block of the module's replaces the global one whole. Then the defaults: IngressClass
nginx, https CertManager with letsencrypt, and no host template (no Ingress is made).
Every mapping, whatever its origin, is checked against deploy/openapi/config-values.yaml
itself (the schema Deckhouse applies) and then read by the models below.

The controller reads the ModuleConfig from a watch. An edit that does not validate must
not take the module down: the previous settings stay in force, and the controller says
why on the ModuleConfig (a Warning Event naming the offending fields, settings_report.py)
and in its log. `reload` does the same for one ModuleConfig: it returns the settings in
force and why the new ones were refused.

Who calls it: the controller's loop (exposure and probe timings), rendering.py (hosts,
TLS), the hub resolver (endpoint), policy (catalog on or off).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import yaml
from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator

from adapters.kubernetes import hosts
from adapters.probes.http import shown_url
from adapters.resources import resource_dir
from fsm.identity import OBJECT_NAME_PATTERN
from fsm.values import Frozen, HttpsMode

__all__ = [
    "EXPOSURE_KEYS",
    "MODULE_CONFIG_API_VERSION",
    "MODULE_CONFIG_KIND",
    "MODULE_NAME",
    "PLATFORM_CERTIFICATE_NAMESPACE",
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
    "Source",
    "StoreSettings",
    "module_config_settings",
    "reload",
    "schema",
    "with_fallbacks",
]

MODULE_NAME = "ai-inference"
MODULE_CONFIG_API_VERSION = "deckhouse.io/v1alpha1"
MODULE_CONFIG_KIND = "ModuleConfig"
# A new module starts at settings version 1 with no conversions (DECKHOUSE.md).
SETTINGS_VERSION = 1
DEFAULT_PROBE_TIMEOUT = 3  # seconds, or the probe interval when that is shorter
# The settings the platform's global `modules.*` block may supply when the module's don't.
EXPOSURE_KEYS = ("publicDomainTemplate", "ingressClass", "https")
# Where Deckhouse keeps the Secret a module's or the global `https.customCertificate` names.
PLATFORM_CERTIFICATE_NAMESPACE = "d8-system"


class SettingsError(ValueError):
    """Settings that cannot be used; the message names each offending field."""


class CatalogMode(StrEnum):
    ENABLED = "Enabled"
    NONE = "None"  # clusters without the ai-models module


class CatalogSettings(Frozen):
    mode: CatalogMode = CatalogMode.ENABLED


class CertManagerSettings(Frozen):
    cluster_issuer_name: str = Field(
        default="letsencrypt", min_length=1, max_length=253, pattern=OBJECT_NAME_PATTERN
    )


class CustomCertificateSettings(Frozen):
    secret_name: str | None = Field(
        default=None, min_length=1, max_length=253, pattern=OBJECT_NAME_PATTERN
    )
    # Where that Secret is: not a setting but where the block came from (Source.resolve).
    # None: the controller's own namespace (a block of the file or the flags); a block of
    # the ModuleConfig or the platform's global one names a Secret of
    # PLATFORM_CERTIFICATE_NAMESPACE, where Deckhouse has every module read it.
    _secret_namespace: str | None = PrivateAttr(default=None)
    # The platform's global block: its certificate (the wildcard of the platform's own
    # sites, Dex's among them) is never copied into a tenant's namespace, where the
    # namespace's editors would read its key; Ingresses get the ingress controller's
    # default certificate instead (rendering.effective_https).
    _platform_wide: bool = PrivateAttr(default=False)

    @property
    def secret_namespace(self) -> str | None:
        return self._secret_namespace

    @property
    def platform_wide(self) -> bool:
        return self._platform_wide

    def kept_in(self, namespace: str, *, platform_wide: bool = False) -> CustomCertificateSettings:
        """The same block, its Secret in `namespace`; `platform_wide`: the global one's."""
        moved = self.model_copy()
        moved._secret_namespace = namespace
        moved._platform_wide = platform_wide
        return moved


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
    timeout_seconds: int = Field(default=DEFAULT_PROBE_TIMEOUT, ge=1, le=60)

    @model_validator(mode="before")
    @classmethod
    def _default_timeout_within_interval(cls, data: Any) -> Any:
        # `intervalSeconds: 2` alone is a valid request: the default timeout shrinks to
        # fit it rather than turning the whole settings block down.
        if not isinstance(data, Mapping) or {"timeoutSeconds", "timeout_seconds"} & data.keys():
            return data
        interval = data.get("intervalSeconds", data.get("interval_seconds"))
        if isinstance(interval, int) and 1 <= interval < DEFAULT_PROBE_TIMEOUT:
            return {**data, "timeoutSeconds": interval}
        return data

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
        # Parsed as the hub client will: one it cannot parse made every HuggingFace order
        # read ModelMetadataInvalid, blaming the model, with no word on the settings.
        # Shown without a `user:password@`: the message reaches Events and the log.
        try:
            url = httpx.URL(value)
        except httpx.InvalidURL as err:
            raise ValueError(f"{shown_url(value)!r} is not a URL ({err})") from None
        if url.scheme not in ("http", "https") or not url.host or any(c.isspace() for c in value):
            raise ValueError(f"{shown_url(value)!r} is not an http(s) URL with a host")
        return value.rstrip("/")


class StoreSettings(Frozen):
    """Where the event log lives. Rendered into the controller's `--store` argument by
    the module's Deployment; a running controller does not switch logs on a change."""

    url: str = Field(default="sqlite:////var/lib/ai-inference/events.sqlite", min_length=1)


class Settings(Frozen):
    """`ModuleConfig ai-inference .spec.settings`, every field defaulted."""

    catalog: CatalogSettings = CatalogSettings()
    # None: neither the module nor the platform names a domain, so no Ingress is made.
    public_domain_template: str | None = None
    ingress_class: str = Field(default="nginx", min_length=1)
    https: HttpsSettings = HttpsSettings()
    probe: ProbeSettings = ProbeSettings()
    hugging_face: HuggingFaceSettings = HuggingFaceSettings()
    store: StoreSettings = StoreSettings()
    # Read by the module's templates (replicas), not by the controller: accepted here so a
    # ModuleConfig that sets it is valid. None: the platform's global mode decides.
    high_availability: bool | None = None

    @field_validator("public_domain_template")
    @classmethod
    def _one_placeholder(cls, value: str | None) -> str | None:
        if value is None:
            return None
        # `%` formatting would also expand %d or choke on a stray %: allow exactly one %s.
        if value.count("%s") != 1 or value.count("%") != 1:
            raise ValueError(f"{value!r} must contain %s exactly once and no other %")
        if "://" in value or "/" in value:
            raise ValueError(f"{value!r} must be a host name template, without scheme or path")
        if hosts.room(value) < hosts.SHORTEST_ROOM:
            raise ValueError(
                f"{value!r}: the text beside %s leaves fewer than {hosts.SHORTEST_ROOM} of "
                "its DNS label's 63 characters for the order's name"
            )
        # Each would be taken, and then be wrong for every External order: a label past 63
        # is a host no DNS serves and no certificate names (the API server takes it); a
        # host past 253 the API server refuses, and every serving order went Pending.
        long = [part for part in value.split(".") if "%s" not in part and len(part) > 63]
        if long:
            raise ValueError(f"{value!r}: the label {long[0][:20]!r}... is over 63 characters")
        longest = len(value) - len("%s") + hosts.room(value)
        if longest > hosts.HOST_LIMIT:
            raise ValueError(
                f"{value!r}: its hosts would be up to {longest} characters, over the "
                f"{hosts.HOST_LIMIT} of a DNS name"
            )
        return value

    @property
    def catalog_enabled(self) -> bool:
        return self.catalog.mode is CatalogMode.ENABLED

    def public_host(self, name: str, namespace: str) -> str | None:
        """The External host of the order `name` in `namespace`: its label (hosts.py) made
        to fit the template's DNS label; None without a host template."""
        template = self.public_domain_template
        if template is None:
            return None
        return template % hosts.host_label(name, namespace, hosts.room(template))

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | None) -> Settings:
        """The settings mapping itself (ModuleConfig `spec.settings`, or a config file's)."""
        mapping = dict(settings or {})
        try:
            parsed = cls.model_validate(mapping)
        except ValidationError as err:
            raise SettingsError(f"invalid module settings: {_problems(err)}") from err
        # The reader's messages are the friendlier; the schema is what Deckhouse enforces
        # (e.g. a lower-case host template), so a file may not pass what a ModuleConfig can't.
        problems = _schema_problems(mapping)
        if problems:
            raise SettingsError(f"invalid module settings: {problems}")
        return parsed

    @classmethod
    def from_module_config(cls, obj: Mapping[str, Any] | None) -> Settings:
        """A ModuleConfig object as the API returns it; None (no ModuleConfig): defaults."""
        if obj is None:
            return cls()
        return cls.from_settings(module_config_settings(obj))


def module_config_settings(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """`spec.settings` of the ModuleConfig, after checking it is ours and its version."""
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
    settings = spec.get("settings")
    if settings is not None and not isinstance(settings, Mapping):
        raise SettingsError(f"ModuleConfig {MODULE_NAME}: spec.settings is not a mapping")
    return settings


@functools.cache
def schema() -> dict[str, Any]:
    """deploy/openapi/config-values.yaml: the schema of `spec.settings` (and of the file)."""
    path = resource_dir("deploy") / "openapi" / "config-values.yaml"
    return dict(yaml.safe_load(path.read_text("utf-8")))


def _schema_problems(mapping: Mapping[str, Any]) -> str:
    # The OpenAPI subset the file uses (type, enum, pattern, bounds) is JSON Schema; x-*
    # keys are ignored by the validator. Settings hold no secrets, so values may be quoted.
    validator = jsonschema.Draft7Validator(schema())
    errors = sorted(validator.iter_errors(mapping), key=lambda e: list(map(str, e.path)))
    return "; ".join(
        f"{'.'.join(map(str, e.path)) or 'settings'}: {e.message[:200]}" for e in errors
    )


def _merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def with_fallbacks(module: Mapping[str, Any], fallbacks: Mapping[str, Any]) -> dict[str, Any]:
    """The module's settings with the platform's global exposure settings under them.

    Each of publicDomainTemplate, ingressClass and https the module's mapping leaves
    unset (absent or null) is taken from `fallbacks` (the global block); an `https` the
    module sets replaces the global one whole, never merged field by field. What neither
    sets is left to the defaults of `Settings`.
    """
    out = copy.deepcopy(dict(module))
    for key in EXPOSURE_KEYS:
        if out.get(key) is None and fallbacks.get(key) is not None:
            out[key] = copy.deepcopy(fallbacks[key])
        elif out.get(key) is None:
            out.pop(key, None)
    return out


@dataclass(frozen=True)
class Source:
    """Where the controller's settings come from: a file's mapping and flag overrides.

    `resolve(module_config, fallbacks)` is the settings in force: the ModuleConfig's when
    there is one, else the file's, with `overrides` (the flags, in the settings' own
    shape, e.g. `{"huggingFace": {"endpoint": ...}}`) merged on top, and the platform's
    global exposure settings (`fallbacks`) under both. Raises SettingsError.
    """

    file_settings: Mapping[str, Any] | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_file(cls, path: Path | str, overrides: Mapping[str, Any] | None = None) -> Source:
        """A YAML file holding what `spec.settings` would (empty file: defaults)."""
        try:
            loaded = yaml.safe_load(Path(path).read_text("utf-8"))
        except (OSError, yaml.YAMLError) as err:
            raise SettingsError(f"settings file {path}: {err}") from err
        if loaded is not None and not isinstance(loaded, Mapping):
            raise SettingsError(f"settings file {path}: expected a mapping of settings")
        source = cls(loaded, dict(overrides or {}))
        source.resolve(None)  # refuse a bad file at start, not at the first reload
        return source

    def overridden(self, more: Mapping[str, Any]) -> Source:
        """The same source with `more` merged over its overrides."""
        return Source(self.file_settings, _merge(self.overrides, more))

    def resolve(
        self,
        module_config: Mapping[str, Any] | None,
        fallbacks: Mapping[str, Any] | None = None,
    ) -> Settings:
        base = (
            module_config_settings(module_config)
            if module_config is not None
            else self.file_settings
        )
        mine = _merge(base or {}, self.overrides)
        resolved = Settings.from_settings(with_fallbacks(mine, fallbacks or {}))
        if _kept_by_the_platform(module_config, mine, self.overrides, fallbacks or {}):
            https = resolved.https
            kept = https.custom_certificate.kept_in(
                PLATFORM_CERTIFICATE_NAMESPACE,
                platform_wide=mine.get("https") is None,  # the global block's, not the module's
            )
            moved = https.model_copy(update={"custom_certificate": kept})
            resolved = resolved.model_copy(update={"https": moved})
        return resolved


def _kept_by_the_platform(
    module_config: Mapping[str, Any] | None,
    mine: Mapping[str, Any],
    overrides: Mapping[str, Any],
    fallbacks: Mapping[str, Any],
) -> bool:
    """Whether the https block in force is one Deckhouse's: its ModuleConfig's or the
    global one. Deckhouse keeps the CustomCertificate Secret of either in d8-system (its
    `copy_custom_certificate` hook reads it there for every module); a block from the
    file or the flags, on a cluster without Deckhouse, names one of the controller's."""
    if overrides.get("https") is not None:
        return False
    if mine.get("https") is not None:
        return module_config is not None
    return fallbacks.get("https") is not None


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
