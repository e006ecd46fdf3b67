"""Every event type's payload schema, frozen per version.

A stored event is decoded by the code of every later release, and an older release
refuses a log only by the types and versions it holds (`fsm.events.cannot_read`). So a
payload that changes at the same version breaks one or the other without a word: a
field made required fails to decode old events, a field added makes an older release
fail on new ones it was told it could read. A change must bump the type's version and
add an upcaster from the old one (fsm/events.py); then record the new schemas with

    AI_INFERENCE_RECORD_EVENT_SCHEMAS=1 .venv/bin/python -m pytest tests/fsm/test_event_schemas.py

which refuses to record a changed schema at an unchanged version. An enumeration (a
reason, a mode) may gain values at the same version, and never lose one: a stored event
may hold it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from fsm import events as ev

FROZEN = Path(__file__).parent / "fixtures" / "event_schemas.json"


def _shape(schema: Any) -> Any:
    """The schema without its prose (a docstring edit is no change of the payload) and
    without its enumerations' values (checked apart: they may grow)."""
    if isinstance(schema, dict):
        left_out = ("description", "title", "enum")
        return {k: _shape(v) for k, v in schema.items() if k not in left_out}
    if isinstance(schema, list):
        return [_shape(v) for v in schema]
    return schema


def _values(schema: Any) -> set[str]:
    """Every enumerated value the schema names."""
    if isinstance(schema, dict):
        found = {str(v) for v in schema.get("enum", ())}
        return found.union(*(_values(v) for k, v in schema.items() if k != "enum"))
    if isinstance(schema, list):
        return set().union(*(_values(v) for v in schema))
    return set()


def current() -> dict[str, dict[str, Any]]:
    out = {}
    for name, cls in sorted(ev.registered_types().items()):
        if cls.__module__ != ev.__name__:
            continue  # a test's own type (tests/store/store_samples.py), not the log's
        schema = cls.model_json_schema()
        shape = json.dumps(_shape(schema), sort_keys=True).encode()
        out[name] = {
            "version": cls.VERSION,
            "shape": hashlib.sha256(shape).hexdigest(),
            "values": sorted(_values(schema)),
        }
    return out


def test_no_payload_changes_at_the_same_version() -> None:
    frozen = json.loads(FROZEN.read_text(encoding="utf-8"))
    now = current()
    unversioned = sorted(
        name
        for name, seen in now.items()
        if name in frozen
        and frozen[name]["version"] == seen["version"]
        and frozen[name]["shape"] != seen["shape"]
    )
    assert not unversioned, (
        f"the payload of {', '.join(unversioned)} changed at the same version: bump the "
        "version and add an upcaster (fsm/events.py), then record (this module's docstring)"
    )
    gone = sorted(frozen.keys() - now.keys())
    assert not gone, f"{', '.join(gone)} no longer registered: stored events could not be read"
    lost = {
        name: sorted(set(frozen[name]["values"]) - set(seen["values"]))
        for name, seen in now.items()
        if name in frozen and frozen[name]["version"] == seen["version"]
    }
    lost = {name: values for name, values in lost.items() if values}
    assert not lost, f"values a stored event may hold are gone: {lost}"
    if os.environ.get("AI_INFERENCE_RECORD_EVENT_SCHEMAS") == "1":
        FROZEN.write_text(json.dumps(now, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    assert now == frozen, "event schemas changed (a version bumped, values added): record them"


def test_every_version_below_the_current_one_has_an_upcaster() -> None:
    for name, cls in ev.registered_types().items():
        assert ev.cannot_read(name, 1) is None, name
        assert ev.cannot_read(name, cls.VERSION) is None, name
