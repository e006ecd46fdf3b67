"""Events: the facts an order's stream is made of.

Every event is a frozen pydantic model named in the past tense, registered under a stable
type name (never the class name, so classes can be renamed) and a schema version. The
store encodes `to_payload(event)` and, on read, lifts old payloads with the registered
upcasters before `from_payload` builds today's class. Time is data: every event carries
`observed_at`, the moment the controller observed what the event records.

No event may carry secret material: a Secret is named, never quoted.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, field_validator

__all__ = [
    "Event",
    "UnknownEventType",
    "event",
    "event_class",
    "from_payload",
    "registered_types",
    "to_payload",
    "upcast",
    "upcaster",
]

Payload = dict[str, Any]
E = TypeVar("E", bound="Event")


class UnknownEventType(LookupError):
    """A stored event names a type (or a version) this code does not know."""


class Event(BaseModel):
    """Base of every event. Subclasses are declared with `@event("TypeName", version=N)`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    TYPE: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1

    observed_at: datetime

    @field_validator("observed_at")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("observed_at must be timezone-aware")
        return value


_TYPES: dict[str, type[Event]] = {}
_UPCASTERS: dict[tuple[str, int], Callable[[Payload], Payload]] = {}


def event(type_name: str, *, version: int = 1) -> Callable[[type[E]], type[E]]:
    """Register an event class under a stable type name and its current schema version."""

    def register(cls: type[E]) -> type[E]:
        if type_name in _TYPES and _TYPES[type_name] is not cls:
            raise ValueError(f"event type {type_name!r} registered twice")
        cls.TYPE = type_name
        cls.VERSION = version
        _TYPES[type_name] = cls
        return cls

    return register


def upcaster(
    type_name: str, from_version: int
) -> Callable[[Callable[[Payload], Payload]], Callable[[Payload], Payload]]:
    """Register `fn(payload_vN) -> payload_vN+1` for one event type."""

    def register(fn: Callable[[Payload], Payload]) -> Callable[[Payload], Payload]:
        _UPCASTERS[(type_name, from_version)] = fn
        return fn

    return register


def event_class(type_name: str) -> type[Event]:
    try:
        return _TYPES[type_name]
    except KeyError:
        raise UnknownEventType(f"unknown event type {type_name!r}") from None


def registered_types() -> dict[str, type[Event]]:
    return dict(_TYPES)


def upcast(type_name: str, version: int, payload: Payload) -> Payload:
    """Lift a stored payload from `version` to the type's current version."""
    current = event_class(type_name).VERSION
    if version > current:
        raise UnknownEventType(f"{type_name} v{version} is newer than this code (v{current})")
    while version < current:
        try:
            step = _UPCASTERS[(type_name, version)]
        except KeyError:
            raise UnknownEventType(f"no upcaster for {type_name} v{version}") from None
        payload = step(dict(payload))
        version += 1
    return payload


def to_payload(evt: Event) -> Payload:
    """A JSON-compatible dict of the event's fields (datetimes as ISO strings)."""
    return evt.model_dump(mode="json")


def from_payload(type_name: str, version: int, payload: Payload) -> Event:
    return event_class(type_name).model_validate(upcast(type_name, version, payload))
