"""The platform's global exposure settings: `ModuleConfig global`, read as fallbacks.

On Deckhouse the ModuleConfig named `global` (`deckhouse.io/v1alpha1`) holds settings
every module inherits unless it sets its own. Three of them concern us, under
`spec.settings.modules`: `publicDomainTemplate`, `ingressClass` and the `https` block
(DECKHOUSE.md, "Exposure settings the platform already has"). `exposure_of` picks those
three out — nothing else of the global settings is read — and checks them by the same
rules as the module's own (settings.py: the models and deploy/openapi/config-values.yaml),
so a bad global block is refused before it reaches a Ingress. `settings.with_fallbacks`
then puts them under the module's settings.

An edit that does not validate must not take exposure down: `reload` keeps the block in
force and returns why the new one was refused, for the controller to report — as
settings.reload does for the module's own ModuleConfig. A plain cluster has no global
ModuleConfig (nor the kind): no fallbacks, and the defaults apply.

Who calls it: the controller, on every change of a ModuleConfig it reads.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from adapters.kubernetes.settings import (
    EXPOSURE_KEYS,
    MODULE_CONFIG_API_VERSION,
    MODULE_CONFIG_KIND,
    Settings,
    SettingsError,
)

__all__ = ["GLOBAL_NAME", "exposure_of", "reload"]

GLOBAL_NAME = "global"


def exposure_of(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    """The global ModuleConfig's publicDomainTemplate, ingressClass and https, checked;
    `{}` without a ModuleConfig or when it sets none of them. Raises SettingsError."""
    if obj is None:
        return {}
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    name = (obj.get("metadata") or {}).get("name")
    if (api_version, kind, name) != (MODULE_CONFIG_API_VERSION, MODULE_CONFIG_KIND, GLOBAL_NAME):
        raise SettingsError(
            f"expected {MODULE_CONFIG_KIND} {GLOBAL_NAME!r} ({MODULE_CONFIG_API_VERSION}), "
            f"got {kind} {name!r} ({api_version})"
        )
    # The global settings' version is the platform's, not ours: the three fields read here
    # have kept their shape, so it is not checked.
    settings = (obj.get("spec") or {}).get("settings")
    if settings is None:
        return {}
    if not isinstance(settings, Mapping):
        raise SettingsError(f"ModuleConfig {GLOBAL_NAME}: spec.settings is not a mapping")
    modules = settings.get("modules")
    if modules is None:
        return {}
    if not isinstance(modules, Mapping):
        raise SettingsError(f"ModuleConfig {GLOBAL_NAME}: settings.modules is not a mapping")
    block = {key: modules[key] for key in EXPOSURE_KEYS if modules.get(key) is not None}
    try:
        Settings.from_settings(block)  # the module's own rules, so both refuse alike
    except SettingsError as err:
        detail = str(err).removeprefix("invalid module settings: ")
        raise SettingsError(
            f"ModuleConfig {GLOBAL_NAME}: invalid settings.modules: {detail}"
        ) from err
    return copy.deepcopy(block)


def reload(
    previous: Mapping[str, Any], obj: Mapping[str, Any] | None
) -> tuple[dict[str, Any], str | None]:
    """The new global block, or the previous one and why the new one was refused."""
    try:
        return exposure_of(obj), None
    except SettingsError as err:
        return dict(previous), f"{err}; keeping the global settings in force"
