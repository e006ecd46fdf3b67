"""Hypothesis strategies drawn from a CRD's own openAPIV3Schema, with hostile values (Acto).

`from_schema(schema)` walks the structural schema the API server validates with and draws
JSON values from it: `type`, `properties`/`required`, `items` with `minItems`, `enum`,
`pattern` (Python's `re` reads these RE2 patterns the same way), `minLength`/`maxLength`,
`minimum`/`maximum` and the int32/int64 formats, `format: date-time`, and the Kubernetes
extensions that change what a valid value is: `x-kubernetes-list-type: set` (unique items),
`map` (unique `x-kubernetes-list-map-keys`), `x-kubernetes-preserve-unknown-fields`
(extra keys of any JSON), `x-kubernetes-int-or-string`. `anyOf`/`allOf`/`not` are not
followed: they constrain combinations, and judging those is the API server's job — what it
refuses is counted by the tests, not avoided.

Values lean to the edges Acto found bugs at, most of them still inside the schema (so the
server accepts them and the controller must cope): maximum-length strings, unicode,
bidi and zero-width characters, digit strings of thousands of digits, the bounds of each
integer format. One object in five has one value, anywhere in it, that leaves the schema
(`WRONG`: a value of another type, a number past int64) so refusals are exercised too.
`overrides` replaces the strategy at a dotted path (`spec.model.ref.name`), and makes that
field present (None: absent) — how a test ties objects together (an order naming a class
that exists) without giving up the rest of the schema.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from hypothesis import strategies as st

__all__ = ["HOSTILE_TEXT", "WRONG", "from_schema"]

_LEAVE = [False] * 4 + [True]
# Values of the wrong type, or numbers no int64 holds.
WRONG = ["not-an-object", ["a", "list"], {"an": "object"}, True, 10**30, -1.5, 10**4000, "²"]
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)

# Text the controller must carry through messages, logs and the event log unharmed.
HOSTILE_TEXT = [
    "²",  # a digit to str.isdigit(), not to int()
    "٣٤",  # Arabic-Indic digits: \d matches them, [0-9] does not
    "🦙 llama",
    "\u202etxt.exe",  # right-to-left override
    "a\u200bb",  # zero-width space
    "e\u0301",  # a combining accent
    "line\nbreak",
    "carriage\rreturn",
    "tab\there",
    "nul\x00byte",
    "{modelPath} {port} {{}}",  # the recipe's own placeholders
    "%s %d %(name)s",  # logging's
    "$(rm -rf /) `id` ${HOME}",
    "'; DROP TABLE events; --",
    "../../etc/passwd",
    "<script>alert(1)</script>",
    # (No PEM here: tokens in the tests are PEM, and a secret scan would find this.)
    "9" * 5000,
    "x" * 4096,
]


def from_schema(
    schema: Mapping[str, Any],
    *,
    overrides: Mapping[str, st.SearchStrategy[Any] | None] | None = None,
    wrong: bool = True,
    path: str = "",
) -> st.SearchStrategy[Any]:
    """Values for `schema`; `wrong=False` keeps every value inside it (as far as the
    keywords listed above go)."""
    overrides = overrides or {}
    override = overrides.get(path)
    if override is not None:
        return override
    valid = _valid(schema, overrides, path)
    if not wrong or path:
        return valid
    # One object in five has one value that leaves the schema; the rest stay acceptable.
    # (sampled_from, not integers: hypothesis draws an integer's bounds far too often.)
    return st.tuples(valid, st.sampled_from(_LEAVE), st.randoms(use_true_random=False)).map(
        _break_one
    )


def _break_one(drawn: tuple[Any, bool, random.Random]) -> Any:
    value, leave, rnd = drawn
    if not leave:
        return value
    places: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        children = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in list(children):
            places.append((node, key))
            if isinstance(child, dict | list):
                walk(child)

    if isinstance(value, dict | list):
        walk(value)
    places = [(n, k) for n, k in places if k not in ("apiVersion", "kind", "metadata")]
    if not places:
        return value
    node, key = rnd.choice(places)
    node[key] = rnd.choice(WRONG)
    return value


def _valid(
    schema: Mapping[str, Any],
    overrides: Mapping[str, st.SearchStrategy[Any] | None],
    path: str,
) -> st.SearchStrategy[Any]:
    if "enum" in schema:
        return st.sampled_from(list(schema["enum"]))
    if schema.get("x-kubernetes-int-or-string"):
        return st.integers(*INT32) | _string({}, path)
    kind = schema.get("type")
    if kind == "object":
        return _object(schema, overrides, path)
    if kind == "array":
        return _array(schema, overrides, path)
    if kind == "string":
        return _string(schema, path)
    if kind == "integer":
        return _integer(schema)
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False, width=32)
    if kind == "boolean":
        return st.booleans()
    return _json()  # no type: x-kubernetes-preserve-unknown-fields


def _object(
    schema: Mapping[str, Any],
    overrides: Mapping[str, st.SearchStrategy[Any] | None],
    path: str,
) -> st.SearchStrategy[Any]:
    here = {name: f"{path}.{name}" if path else name for name in schema.get("properties") or {}}
    # An override makes its field present; an override of None leaves it out.
    properties = {
        n: p
        for n, p in (schema.get("properties") or {}).items()
        if overrides.get(here[n], 0) is not None
    }
    required = set(schema.get("required") or []) | {n for n in properties if here[n] in overrides}

    def child(name: str) -> st.SearchStrategy[Any]:
        return from_schema(properties[name], overrides=overrides, wrong=False, path=here[name])

    drawn = st.fixed_dictionaries(
        {name: child(name) for name in properties if name in required},
        optional={name: child(name) for name in properties if name not in required},
    )
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        extra = st.dictionaries(st.text(min_size=1, max_size=12), _json(), max_size=3)
        return st.tuples(drawn, extra).map(lambda pair: {**pair[1], **pair[0]})
    return drawn


def _array(
    schema: Mapping[str, Any],
    overrides: Mapping[str, st.SearchStrategy[Any] | None],
    path: str,
) -> st.SearchStrategy[Any]:
    items = schema.get("items") or {}
    element = from_schema(items, overrides=overrides, wrong=False, path=f"{path}[]")
    low = int(schema.get("minItems", 0))
    high = int(schema.get("maxItems", low + 4))
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "set":
        return st.lists(element, min_size=low, max_size=high, unique_by=_frozen)
    if list_type == "map":
        keys = list(schema.get("x-kubernetes-list-map-keys") or [])
        return st.lists(
            element,
            min_size=low,
            max_size=high,
            unique_by=lambda e: tuple(
                _frozen(e.get(k)) if isinstance(e, dict) else _frozen(e) for k in keys
            ),
        )
    return st.lists(element, min_size=low, max_size=high)


def _string(schema: Mapping[str, Any], path: str) -> st.SearchStrategy[str]:
    low = int(schema.get("minLength", 0))
    high = schema.get("maxLength")
    fits = (lambda s: low <= len(s) <= high) if high is not None else (lambda s: len(s) >= low)
    if schema.get("format") == "date-time":
        return st.datetimes(
            min_value=datetime(1970, 1, 1), max_value=datetime(9999, 1, 1), timezones=st.just(UTC)
        ).map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%SZ"))
    pattern = schema.get("pattern")
    if pattern is not None:
        matching = st.from_regex(pattern, fullmatch=True).filter(fits)
        if high is None:
            return matching
        # The longest value the pattern allows, made from a drawn one.
        return matching | matching.map(lambda s: _stretch(s, int(high), pattern)).filter(fits)
    plain = st.text(min_size=low, max_size=min(int(high or 64), 64))
    hostile = st.sampled_from(HOSTILE_TEXT).map(lambda s: s[: int(high)] if high else s)
    at_limit = st.just("x" * int(high)) if high is not None else st.just("y" * 10_000)
    return st.one_of(plain, plain, hostile, at_limit).filter(fits)


def _stretch(text: str, length: int, pattern: str) -> str:
    """`text` padded to `length` with a character the pattern keeps matching, or as is."""
    import re  # noqa: PLC0415 - only here

    for pad in "a0x9":
        middle = max(1, len(text) // 2)
        longer = text[:middle] + pad * (length - len(text)) + text[middle:]
        if re.fullmatch(pattern, longer):
            return longer
    return text


def _integer(schema: Mapping[str, Any]) -> st.SearchStrategy[int]:
    low, high = INT32 if schema.get("format") == "int32" else INT64
    low = int(schema.get("minimum", low))
    high = int(schema.get("maximum", high))
    return st.one_of(st.integers(low, high), st.sampled_from([low, high]), st.integers(low, 8))


def _json() -> st.SearchStrategy[Any]:
    return st.recursive(
        st.none() | st.booleans() | st.integers(*INT64) | st.text(max_size=16),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=6,
    )


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value
