"""The codec between `fsm` events and the bytes of the log: msgpack of the event's payload.

The log stores `(type, schema version, payload bytes)` beside each other, so decoding
needs no class names and old versions are lifted by the upcasters `fsm.events` registers
(never rewritten in place). Only the recorder calls this module; it is public so the
audit tools can decode a raw row the same way.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgpack
from pydantic import ValidationError

from fsm import events
from store.errors import UndecodableEvent

__all__ = ["Encoded", "decode", "encode"]


class Encoded(NamedTuple):
    """What the log stores of one event, besides its envelope."""

    type_name: str
    schema_version: int
    payload: bytes


def encode(evt: events.Event) -> Encoded:
    """Encode an event as its registered type, current schema version and msgpack bytes."""
    cls = type(evt)
    if not cls.TYPE or events.registered_types().get(cls.TYPE) is not cls:
        # An unregistered class would be written under a name nothing can read back.
        raise TypeError(f"{cls.__qualname__} is not registered with @event(...)")
    packed: bytes = msgpack.packb(events.to_payload(evt), use_bin_type=True)
    return Encoded(cls.TYPE, cls.VERSION, packed)


def decode(
    type_name: str, schema_version: int, payload: bytes, *, uid: str = "?", version: int = 0
) -> events.Event:
    """Decode stored bytes, upcasting old schema versions; `uid`/`version` label errors."""
    try:
        data: Any = msgpack.unpackb(payload, raw=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise UndecodableEvent(uid, version, type_name, f"bad msgpack: {exc}") from exc
    if not isinstance(data, dict):
        raise UndecodableEvent(uid, version, type_name, "payload is not a map")
    try:
        return events.from_payload(type_name, schema_version, data)
    except events.UnknownEventType as exc:
        raise UndecodableEvent(uid, version, type_name, str(exc)) from exc
    except ValidationError as exc:
        raise UndecodableEvent(uid, version, type_name, f"invalid payload: {exc}") from exc
