"""The store's own errors, so callers never catch a SQLAlchemy or driver exception.

Every failure of the event log reaches the caller as one of these, raised `from` the
library's exception (kept as `__cause__` for the logs), so the database library could be
replaced without touching the controller:

    StoreError
    ├── StreamConflict     the expected version is not the stream's head: another writer won
    ├── StaleEpoch         the append is stamped with a leader epoch older than one already seen
    ├── StreamNotFound     no stream has this uid
    ├── StreamDeleted      the order was deleted; its stream is read-only history now
    ├── UndecodableEvent   a stored event names an unknown type/version or fails to validate
    ├── StoreUnavailable   the database cannot be reached or stayed locked (retry later)
    └── StoreUnusable      the database answers, but retrying cannot help: a table gone, a
        │                  permission revoked, a corrupt file
        └── SchemaError    the migrations could not bring the schema to this code's head
            └── UnreadableLog  the log holds event types or versions this code cannot read

`StreamConflict` and `StaleEpoch` are the two answers a correct controller expects in
normal operation: on a conflict it re-reads and re-decides; on a stale epoch it has lost
the lease and must stop its workers. Of the database's own failures, `StoreUnavailable`
is worth waiting out and `StoreUnusable` is not: a process that meets it should say so
and stop rather than wait for a log that will not come back by itself.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "SchemaError",
    "StaleEpoch",
    "StoreError",
    "StoreUnavailable",
    "StoreUnusable",
    "StreamConflict",
    "StreamDeleted",
    "StreamNotFound",
    "UndecodableEvent",
    "UnreadableLog",
]


class StoreError(Exception):
    """Base of every error the event log raises."""


class StreamConflict(StoreError):
    """The stream's head is not the version the writer expected (a concurrent writer won)."""

    def __init__(self, uid: str, expected: int, actual: int | None) -> None:
        self.uid = uid
        self.expected = expected
        # None when the head could not be read after the failed append (informational only).
        self.actual = actual
        seen = "unknown" if actual is None else str(actual)
        super().__init__(f"stream {uid}: expected version {expected}, head is {seen}")


class StaleEpoch(StoreError):
    """An append (or claim) carries a leader epoch older than the newest the store has seen."""

    def __init__(self, epoch: int, current: int) -> None:
        self.epoch = epoch
        self.current = current
        super().__init__(f"leader epoch {epoch} is stale: the store has seen epoch {current}")


class StreamNotFound(StoreError):
    """No stream is recorded under this uid."""

    def __init__(self, uid: str) -> None:
        self.uid = uid
        super().__init__(f"no stream {uid}")


class StreamDeleted(StoreError):
    """The stream was marked deleted; it stays readable but takes no more events."""

    def __init__(self, uid: str) -> None:
        self.uid = uid
        super().__init__(f"stream {uid} belongs to a deleted order and takes no more events")


class UndecodableEvent(StoreError):
    """A stored event cannot be turned back into an `fsm` event by this code."""

    def __init__(self, uid: str, version: int, type_name: str, why: str) -> None:
        self.uid = uid
        self.version = version
        self.type_name = type_name
        super().__init__(f"stream {uid} v{version}: cannot decode {type_name!r}: {why}")


class StoreUnavailable(StoreError):
    """The database did not answer, refused the connection or stayed locked."""


class StoreUnusable(StoreError):
    """The database answered with a failure that asking again will not cure: a table
    missing, a permission denied, a corrupt file, an internal error of the server."""


class SchemaError(StoreUnusable):
    """The schema could not be migrated to the revision this code needs."""


class UnreadableLog(SchemaError):
    """The log holds events of types, or schema versions, this code cannot read: a newer
    release wrote them. A writer refuses such a log rather than fold past them."""

    def __init__(self, unreadable: Mapping[tuple[str, int], str]) -> None:
        self.unreadable = dict(unreadable)
        listed = ", ".join(
            f"{name} v{version} ({why})" for (name, version), why in sorted(unreadable.items())
        )
        super().__init__(
            f"the event log holds events this release cannot read: {listed}. A newer "
            f"release wrote them; run that release or a newer one, or restore the log "
            f"from before it ran"
        )
