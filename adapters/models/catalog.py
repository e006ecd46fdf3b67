"""Read model facts from the ai-models catalog: `Model` (namespaced) and `ClusterModel`.

The catalog module resolves, downloads and publishes models itself; the controller only
reads the result from the object's status. `facts_from_catalog` is the pure part (an
object as a dict in, a ModelLookup out) and is what the controller calls on objects from
its watch cache; `CatalogReader` is the thin direct read for callers without a cache.
`catalog_gate` maps `settings.catalog.mode: None` to CatalogDisabled.

Fields read (docs/model-sources.md lists them for administrators):
`status.phase`, the `Ready` condition, `status.observedGeneration`,
`status.resolved.{format, quantization, parameterCount, architecture,
contextWindowTokens, supportedEndpointTypes, supportedFeatures}`,
`status.artifact.{sizeBytes, digest}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Protocol, TypeVar

import urllib3
from kubernetes.client.exceptions import ApiException

from adapters.models.lookup import ModelFound, ModelLookup, ModelUnavailable, short_name
from fsm.reasons import Reason
from fsm.values import (
    INT64_MAX,
    CatalogKind,
    EndpointType,
    ModelFacts,
    ModelFormat,
    ModelRef,
    ModelSource,
    Quantization,
)

__all__ = [
    "GROUP",
    "PLURALS",
    "TOOL_CALLING",
    "VERSION",
    "CatalogReader",
    "CustomObjects",
    "catalog_gate",
    "catalog_target",
    "facts_from_catalog",
    "foreign_model_refusal",
]

GROUP = "ai.deckhouse.io"
VERSION = "v1alpha1"
PLURALS = {CatalogKind.MODEL: "models", CatalogKind.CLUSTER_MODEL: "clustermodels"}
TOOL_CALLING = "ToolCalling"
READY = "Ready"

E = TypeVar("E", bound=StrEnum)


class _Invalid(ValueError):
    pass


def catalog_gate(settings: Mapping[str, Any] | None) -> ModelUnavailable | None:
    """CatalogDisabled when the module settings turn the catalog off, else None.

    `settings` is ModuleConfig `spec.settings` (or the controller's own configuration);
    only `catalog.mode: None` disables: an absent block keeps the catalog on.
    """
    catalog = (settings or {}).get("catalog")
    mode = catalog.get("mode") if isinstance(catalog, Mapping) else None
    if mode == "None":
        return ModelUnavailable(
            Reason.CATALOG_DISABLED,
            "The order names an ai-models catalog model, but the catalog integration is off "
            "(settings.catalog.mode: None): name a HuggingFace model instead, or ask the "
            "administrator to turn the catalog on.",
        )
    return None


def foreign_model_refusal(ref: ModelRef, order_namespace: str) -> ModelUnavailable | None:
    """ModelNamespaceForbidden when the ref names a Model in another namespace, else None.

    The rule (docs/model-sources.md, "A Model in another namespace"): an order reads a
    `Model` only in its own namespace, and a model shared across namespaces is a
    `ClusterModel`, which only a cluster administrator publishes. Two reasons, one rule:
    a tenant's Model is that tenant's (its facts are not echoed into another tenant's
    status), and the runtime could not load it anyway — ai-models mounts a Model named by
    the pod's `ai.deckhouse.io/model` annotation from the pod's own namespace, so the
    facts and the weights would come from two different objects. Nothing is read: the
    refusal is decided from the ref alone.
    """
    if ref.kind is not CatalogKind.MODEL or not ref.namespace:
        return None
    if ref.namespace == order_namespace:
        return None
    return ModelUnavailable(
        Reason.MODEL_NAMESPACE_FORBIDDEN,
        f"spec.model.ref names a Model in namespace {ref.namespace!r}, but an order reads a "
        f"Model only in its own namespace ({order_namespace!r}); a model shared between "
        "namespaces is a ClusterModel (ask the cluster administrator to publish one)",
    )


def catalog_target(ref: ModelRef, order_namespace: str) -> tuple[CatalogKind, str | None, str]:
    """(kind, namespace, name) of the object a catalog ref names.

    A Model's namespace defaults to the order's (and may only be the order's, see
    `foreign_model_refusal`); a ClusterModel has none.
    """
    if ref.kind is None:
        raise ValueError("an ai-models ref needs kind Model or ClusterModel")
    if ref.kind is CatalogKind.CLUSTER_MODEL:
        return ref.kind, None, ref.name
    return ref.kind, ref.namespace or order_namespace, ref.name


def _label(kind: str, namespace: str | None, name: str) -> str:
    return f"{kind} '{namespace}/{name}'" if namespace else f"{kind} '{name}'"


def facts_from_catalog(obj: Mapping[str, Any]) -> ModelLookup:
    """Facts of a catalog object read from the API, or why there are none yet."""
    meta = obj.get("metadata") or {}
    label = _label(str(obj.get("kind", "Model")), meta.get("namespace"), str(meta.get("name")))
    status = obj.get("status") or {}
    if not isinstance(status, Mapping):
        # A catalog of another version (or a hand-written object) may carry anything here.
        return ModelUnavailable(
            Reason.MODEL_METADATA_INVALID,
            f"{label} has a status that is not an object ({type(status).__name__}).",
        )
    phase = status.get("phase")
    conditions = status.get("conditions")
    ready = next(
        (
            c
            for c in (conditions if isinstance(conditions, list) else [])
            if isinstance(c, Mapping) and c.get("type") == READY
        ),
        None,
    )
    if phase != READY:
        why = f": {ready.get('message')}" if ready and ready.get("message") else ""
        return ModelUnavailable(
            Reason.MODEL_NOT_READY,
            f"{label} is in phase {phase or '(none yet)'}, not Ready{why}.",
        )
    if ready is not None and ready.get("status") != "True":
        return ModelUnavailable(
            Reason.MODEL_NOT_READY,
            f"{label} is in phase Ready but its Ready condition is {ready.get('status')} "
            f"({ready.get('reason') or 'no reason'}: {ready.get('message') or 'no message'}).",
        )
    generation, observed = meta.get("generation"), status.get("observedGeneration")
    if isinstance(generation, int) and isinstance(observed, int) and observed < generation:
        return ModelUnavailable(
            Reason.MODEL_NOT_READY,
            f"{label} changed (generation {generation}) and the catalog has not processed "
            f"the change yet (status describes generation {observed}).",
        )
    resolved = status.get("resolved")
    if not isinstance(resolved, Mapping) or not resolved:
        return ModelUnavailable(
            Reason.MODEL_METADATA_INVALID, f"{label} is Ready but has no status.resolved."
        )
    artifact = status.get("artifact")
    artifact = artifact if isinstance(artifact, Mapping) else {}
    try:
        fmt = _enum(ModelFormat, resolved.get("format"), "format") or ModelFormat.UNKNOWN
        facts = ModelFacts(
            source=ModelSource.AI_MODELS,
            name=str(meta.get("name")),
            endpoint_types=_known(
                EndpointType, resolved.get("supportedEndpointTypes"), "supportedEndpointTypes"
            ),
            format=fmt,
            quantization=_quantization(resolved.get("quantization"), fmt),
            parameter_count=_count(resolved.get("parameterCount"), "parameterCount"),
            weights_bytes=_count(artifact.get("sizeBytes"), "artifact.sizeBytes"),
            architecture=short_name(resolved.get("architecture")),
            context_window_tokens=_count(
                resolved.get("contextWindowTokens"), "contextWindowTokens"
            ),
            supports_tool_calling=TOOL_CALLING
            in _strings(resolved.get("supportedFeatures"), "supportedFeatures"),
            revision=short_name(artifact.get("digest")),
        )
    except _Invalid as invalid:
        return ModelUnavailable(
            Reason.MODEL_METADATA_INVALID, f"{label} is Ready but its status {invalid}."
        )
    return ModelFound(facts)


def _enum(enum: type[E], value: object, field: str) -> E | None:
    if value is None or value == "":
        return None
    for member in enum:
        if str(value).lower() == member.value.lower():
            return member
    raise _Invalid(f"{field} {_clip(value)} is not one of {', '.join(m.value for m in enum)}")


def _quantization(value: object, fmt: ModelFormat) -> Quantization:
    if fmt is ModelFormat.GGUF:
        return Quantization.GGUF  # the catalog may name the GGUF level (Q4_K_M): one recipe kind
    return _enum(Quantization, value, "quantization") or Quantization.NONE


def _strings(value: object, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Invalid(f"{field} is not a list")
    return [str(v) for v in value]


def _known(enum: type[E], value: object, field: str) -> tuple[E, ...]:
    # Unknown entries are skipped, not fatal: a newer catalog may know more contracts.
    known = {m.value.lower(): m for m in enum}
    return tuple(known[v.lower()] for v in _strings(value, field) if v.lower() in known)


def _count(value: object, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise _Invalid(f"{field} {value!r} is not a count")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.isascii() and value.isdigit():
        # ASCII only: "²".isdigit() holds, but int("²") raises.
        if len(value) > len(str(INT64_MAX)):
            raise _Invalid(f"{field} ({len(value)} digits) is larger than any count")
        number = int(value)
    else:
        raise _Invalid(f"{field} {_clip(value)} is not a count")
    if number < 0:
        raise _Invalid(f"{field} {value!r} is negative")
    if number > INT64_MAX:
        # The event log keeps counts as 64-bit integers; no model is this large.
        raise _Invalid(f"{field} {_clip(number)} is larger than any count")
    # Zero is a Go controller's "not known" (a field without omitempty): taken as a count,
    # a 70B model of "0 parameters" passed any class's maxParameterCount.
    return number or None


def _clip(value: object, limit: int = 60) -> str:
    """A value's repr short enough for a condition message."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


class CustomObjects(Protocol):
    """The two reads of kubernetes' CustomObjectsApi the reader needs (the test seam)."""

    def get_cluster_custom_object(
        self, group: str, version: str, plural: str, name: str, **kwargs: Any
    ) -> Any: ...

    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, **kwargs: Any
    ) -> Any: ...


class CatalogReader:
    """Reads one catalog object straight from the API server and maps it."""

    def __init__(self, api: CustomObjects, *, request_timeout: float = 5.0) -> None:
        self._api = api
        self._timeout = request_timeout

    def read(self, ref: ModelRef, order_namespace: str) -> ModelLookup:
        if ref.kind is None:
            return ModelUnavailable(
                Reason.MODEL_NOT_FOUND, "The ai-models ref names no kind (Model or ClusterModel)."
            )
        refused = foreign_model_refusal(ref, order_namespace)
        if refused is not None:
            return refused
        kind, namespace, name = catalog_target(ref, order_namespace)
        label = _label(kind.value, namespace, name)
        plural = PLURALS[kind]
        try:
            if namespace is None:
                obj = self._api.get_cluster_custom_object(
                    GROUP, VERSION, plural, name, _request_timeout=self._timeout
                )
            else:
                obj = self._api.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural, name, _request_timeout=self._timeout
                )
        except ApiException as refused:
            return self._refused(label, refused)
        except (urllib3.exceptions.HTTPError, OSError) as down:
            return ModelUnavailable(
                Reason.MODEL_SOURCE_UNREACHABLE,
                f"The API server did not answer reading {label} ({type(down).__name__}); "
                "retrying later.",
            )
        if not isinstance(obj, Mapping):
            return ModelUnavailable(
                Reason.MODEL_METADATA_INVALID, f"{label} was read as {type(obj).__name__}."
            )
        return facts_from_catalog(obj)

    @staticmethod
    def _refused(label: str, refused: ApiException) -> ModelUnavailable:
        status = getattr(refused, "status", None)
        if status == 404:
            return ModelUnavailable(
                Reason.MODEL_NOT_FOUND,
                f"{label} does not exist in the ai-models catalog (or the catalog module is "
                "not installed): check spec.model.ref.",
            )
        if status in (401, 403):
            return ModelUnavailable(
                Reason.MODEL_SOURCE_UNREACHABLE,
                f"The controller may not read {label} (HTTP {status}): its RBAC lacks the "
                "ai-models catalog; the administrator must grant it.",
            )
        return ModelUnavailable(
            Reason.MODEL_SOURCE_UNREACHABLE,
            f"The API server answered HTTP {status} reading {label}; retrying later.",
        )
