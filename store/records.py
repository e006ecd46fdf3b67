"""The values the event log hands out and takes in: stream keys, envelopes, snapshots.

Plain frozen values with no database behind them, so the controller and the audit CLI can
hold and compare them freely. `Snapshot` and `Projection` are named tuples: they unpack
as `(version, dict)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

from fsm.events import Event

__all__ = ["Projection", "RecordedEvent", "Snapshot", "StreamInfo", "StreamKey"]


class StreamKey(NamedTuple):
    """Who a stream belongs to: the order's UID (its identity) and its namespace/name.

    The namespace/name are stored when the stream is created and used only for look-up;
    an order deleted and re-created under the same name has a new UID, so a new stream.
    """

    uid: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """One stream as listed: its key, when it began, whether its order is gone, its head."""

    uid: str
    namespace: str
    name: str
    created_at: datetime
    deleted_at: datetime | None
    version: int

    @property
    def key(self) -> StreamKey:
        return StreamKey(self.uid, self.namespace, self.name)

    @property
    def deleted(self) -> bool:
        return self.deleted_at is not None


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """The envelope of one stored event and the event decoded with today's classes.

    `schema_version` is the version the event was written with; `event` has already been
    upcast to the current one.
    """

    position: int
    stream_uid: str
    version: int
    event_id: UUID
    type_name: str
    schema_version: int
    recorded_at: datetime
    epoch: int
    event: Event


class Snapshot(NamedTuple):
    """A folded state, JSON-shaped, and the stream version it covers (events 1..version).

    The state's layout belongs to the fold that wrote it: the controller stores
    `{"layout": fsm.state.state_layout(), "state": ...}` and refolds from the first event
    when the tag is not its own.
    """

    version: int
    state: dict[str, Any]


class Projection(NamedTuple):
    """The status last written to the API for a stream and the version it was computed at."""

    version: int
    status: dict[str, Any]
