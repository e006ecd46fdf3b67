"""The event log of the controller: one append-only stream of `fsm` events per order UID.

The façade the controller and the CLI import; everything else in the package is private
to it. Open with `open_log(url)` (which migrates the schema; `read_only=True` never
writes and wants the schema at this release's head), then:

    log = store.open_log("sqlite:///var/lib/ai-inference/log.sqlite")
    version = log.append(StreamKey(uid, ns, name), events, expected_version=0,
                         epoch=leader_epoch, recorded_at=now)
    history = log.read(uid)                      # list[RecordedEvent]
"""

from __future__ import annotations

from store.connecting import normalise_url
from store.errors import (
    SchemaError,
    StaleEpoch,
    StoreError,
    StoreUnavailable,
    StoreUnusable,
    StreamConflict,
    StreamDeleted,
    StreamNotFound,
    UndecodableEvent,
    UnreadableLog,
)
from store.log import EventLog, open_log
from store.records import Projection, RecordedEvent, Snapshot, StreamInfo, StreamKey

__all__ = [
    "EventLog",
    "Projection",
    "RecordedEvent",
    "SchemaError",
    "Snapshot",
    "StaleEpoch",
    "StoreError",
    "StoreUnavailable",
    "StoreUnusable",
    "StreamConflict",
    "StreamDeleted",
    "StreamInfo",
    "StreamKey",
    "StreamNotFound",
    "UndecodableEvent",
    "UnreadableLog",
    "normalise_url",
    "open_log",
]
