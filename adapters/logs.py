"""The controller's process logs: one JSON object per line, built by `json.dumps`.

Log collectors (Loki, Elasticsearch, `kubectl logs | jq`) need each record to be one
valid JSON line whatever the message holds — quotes, newlines, a traceback — which a
`%`-format template cannot promise. Records about one order carry its `namespace`,
`name` and `uid` as fields of their own, so "everything about support/support-llm" is a
query, not a grep:

    log.info("plan applied", extra=logs.order_fields(uid=uid, namespace=ns, name=name))

or, for every record of a reconcile pass without touching each call, inside
`with logs.about_order(uid=..., namespace=..., name=...):`. The exception of
`log.exception` travels inside the record (`exc`), never as extra lines.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import IO, Any

__all__ = [
    "LEVELS",
    "NOISY_LOGGERS",
    "JsonFormatter",
    "about_order",
    "configure",
    "order_fields",
]

LEVELS = ("debug", "info", "warning", "error")

# Per-request and per-transition chatter from libraries would drown the decisions: at
# debug, cel-python logs every step of every selector (9 GB in 20 minutes on one costly
# selector, and a device's whole activation per line).
NOISY_LOGGERS = (
    "transitions",
    "httpx",
    "httpx2",
    "httpcore",
    "httpcore2",
    "alembic",
    "huggingface_hub",
    "urllib3",
    "celpy",
)

# `extra=` keys: LogRecord already has a `name` (the logger's), so the order's are prefixed.
_EXTRA = {"namespace": "order_namespace", "name": "order_name", "uid": "order_uid"}

_ORDER: ContextVar[Mapping[str, str] | None] = ContextVar("ai_inference_order", default=None)


def order_fields(
    *, uid: str | None = None, namespace: str | None = None, name: str | None = None
) -> dict[str, str]:
    """The `extra=` of a record about one order (fields left None are omitted)."""
    given = {"uid": uid, "namespace": namespace, "name": name}
    return {_EXTRA[key]: value for key, value in given.items() if value}


@contextlib.contextmanager
def about_order(
    *, uid: str | None = None, namespace: str | None = None, name: str | None = None
) -> Iterator[None]:
    """Every record logged in this thread (context) meanwhile names this order."""
    given = {"uid": uid, "namespace": namespace, "name": name}
    token = _ORDER.set({key: value for key, value in given.items() if value})
    try:
        yield
    finally:
        _ORDER.reset(token)


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "msg", [namespace, name, uid], [exc], [stack]}`."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        context = _ORDER.get() or {}
        for field, attribute in _EXTRA.items():
            value = getattr(record, attribute, None) or context.get(field)
            if value:
                doc[field] = str(value)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            doc["exc"] = record.exc_text
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        # default=str: an argument that is not JSON (an exception, a datetime) still logs.
        return json.dumps(doc, ensure_ascii=False, default=str)


def configure(level: str = "info", *, stream: IO[str] | None = None) -> logging.Handler:
    """Send every record at `level` or above to `stream` (stderr) as JSON lines.

    Replaces the root logger's handlers, so calling it twice does not double the lines.
    Returns the handler (tests read what it wrote).
    """
    if level.lower() not in LEVELS:
        raise ValueError(f"log level {level!r}: use one of {', '.join(LEVELS)}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    quiet = max(logging.WARNING, root.level)
    for noisy in NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(quiet)
    return handler
