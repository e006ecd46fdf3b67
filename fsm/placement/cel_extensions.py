"""Kubernetes' CEL libraries that cel-python lacks, for DeviceClass selectors (cel.py).

Kubernetes 1.34 compiles DRA selectors in its base CEL environment
(k8s.io/apiserver/pkg/cel/environment/base.go) extended with `cel.bind`
(k8s.io/dynamic-resource-allocation/cel/compile.go). cel.py registers the Quantity and
Semver libraries; this module adds, as cel-go v0.26 and Kubernetes define them:

- cel-go's strings extension at version 2 (`ext.Strings(ext.StringsVersion(2))`):
  `charAt`, `indexOf`, `lastIndexOf`, `lowerAscii`, `upperAscii`, `replace`, `split`,
  `substring`, `trim`, `join`, `strings.quote`. Indexes count code points, as Go's
  `[]rune` does. `format` is left out (see docs/planner.md);
- Kubernetes' list library (`library.Lists`): `isSorted`, `sum`, `min`, `max`, and
  `indexOf` / `lastIndexOf` on lists;
- cel-go's sets extension (`ext.Sets()`): `sets.contains`, `sets.equivalent`,
  `sets.intersects`.

Every function is pure. A wrong type raises TypeError (celpy's "no such overload"); a
runtime error Kubernetes reports is returned as a CELEvalError carrying cel-go's message,
so `true || <error>` stays true as in CEL. Where Kubernetes' answer could not be matched
exactly (an empty `sum()`, whose zero depends on the static type; lists mixing kinds,
where cel-go ignores the failed comparison) the function errs: the class cannot be
judged, never judged wrongly.

cel-python parses `sets.contains(a, b)` as a method `contains` of a variable `sets`, and
treats `.min()` and `.reduce()` as macros of its own; `adapt` rewrites a compiled program
so that the first calls the namespaced function, `.min()` calls Kubernetes' `min`, and
`.reduce()` (not in Kubernetes' CEL) is undeclared. cel.py calls it on every program.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any

from celpy import celtypes
from celpy.evaluation import CELEvalError

__all__ = ["FUNCTIONS", "adapt"]

_INT64 = (-(2**63), 2**63 - 1)
_UINT64 = (0, 2**64 - 1)

# Go's strings.TrimSpace: unicode.IsSpace (White_Space), not Python's str.isspace,
# which also counts U+001C..U+001F.
_GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_QUOTED = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"no such overload: string expected, not {type(value).__name__}")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, celtypes.IntType):
        raise TypeError(f"no such overload: int expected, not {type(value).__name__}")
    return int(value)


def _items(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"no such overload: list expected, not {type(value).__name__}")
    return list(value)


def _out_of_range(index: int) -> CELEvalError:
    return CELEvalError(f"index out of range: {index}")


# --- cel-go ext.Strings, version 2 ---------------------------------------------------


def _char_at(target: Any, index: Any) -> Any:
    text, i = _text(target), _int(index)
    if i < 0 or i > len(text):
        return _out_of_range(i)
    return celtypes.StringType(text[i : i + 1])


def _string_index_of(text: str, sub: str, offset: int | None) -> Any:
    if offset is None:
        return celtypes.IntType(text.find(sub))
    if sub == "":
        return celtypes.IntType(offset)
    if offset < 0:
        return _out_of_range(offset)
    if offset >= len(text):
        return celtypes.IntType(-1)
    return celtypes.IntType(text.find(sub, offset))


def _string_last_index_of(text: str, sub: str, offset: int | None) -> Any:
    if offset is None:
        return celtypes.IntType(text.rfind(sub))  # '' is found at the end, as in cel-go
    if sub == "":
        return celtypes.IntType(offset)
    if offset < 0:
        return _out_of_range(offset)
    if offset >= len(text):
        return celtypes.IntType(-1)
    return celtypes.IntType(text.rfind(sub, 0, offset + len(sub)))  # a start <= offset


def _replace(target: Any, old: Any, new: Any, limit: Any = None) -> Any:
    count = -1 if limit is None else _int(limit)
    return celtypes.StringType(_text(target).replace(_text(old), _text(new), max(count, -1)))


def _split(target: Any, separator: Any, limit: Any = None) -> Any:
    text, sep = _text(target), _text(separator)
    n = -1 if limit is None else _int(limit)
    if n == 0:
        parts: list[str] = []
    elif sep == "":  # Go's explode: one part per code point, the last one the rest
        n = len(text) if n < 0 or n > len(text) else n
        parts = [*text[: n - 1], text[n - 1 :]] if n > 0 else []
    else:
        parts = text.split(sep, n - 1 if n > 0 else -1)
    return celtypes.ListType(celtypes.StringType(part) for part in parts)


def _substring(target: Any, start: Any, end: Any = None) -> Any:
    text, begin = _text(target), _int(start)
    stop = len(text) if end is None else _int(end)
    if end is not None and begin > stop:
        return CELEvalError(f"invalid substring range. start: {begin}, end: {stop}")
    for index in (begin, stop):
        if index < 0 or index > len(text):
            return _out_of_range(index)
    return celtypes.StringType(text[begin:stop])


def _join(target: Any, separator: Any = None) -> Any:
    sep = "" if separator is None else _text(separator)
    items = _items(target)
    for item in items:
        if not isinstance(item, str):
            return CELEvalError(f"join: invalid input: {item}")
    return celtypes.StringType(sep.join(items))


def _quote(value: Any) -> Any:
    # Go ranges over the string's runes: a lone surrogate is not a valid rune.
    runes = ("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in _text(value))
    return celtypes.StringType('"' + "".join(_QUOTED.get(c, c) for c in runes) + '"')


# --- Kubernetes' list library --------------------------------------------------------


def _equal(a: Any, b: Any) -> bool:
    """CEL's heterogeneous equality (cel-go's `Equal`): numbers by value, else by kind."""
    if isinstance(a, celtypes.BoolType) or isinstance(b, celtypes.BoolType):
        return type(a) is type(b) and bool(a) == bool(b)
    if _number(a) and _number(b):
        return not (_nan(a) or _nan(b)) and _key(a) == _key(b)
    if isinstance(a, str) and isinstance(b, str):
        return str(a) == str(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        pairs = list(b.items())
        return len(a) == len(pairs) and all(
            any(_equal(k, bk) and _equal(v, bv) for bk, bv in pairs) for k, v in a.items()
        )
    return type(a) is type(b) and bool(a == b)


def _number(value: Any) -> bool:
    return isinstance(value, celtypes.IntType | celtypes.UintType | celtypes.DoubleType)


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _key(value: Any) -> Any:
    """The plain Python value, which orders as CEL does (int and float exactly)."""
    if isinstance(value, float):
        return float(value)
    if isinstance(value, int):  # IntType, UintType, BoolType
        return int(value)
    return str(value) if isinstance(value, str) else bytes(value)


def _comparable(name: str, items: list[Any]) -> list[Any]:
    """Elements of one kind that orders (numbers, strings, bools, bytes), no NaN. cel-go
    would skip a failed comparison between kinds silently; here that is an error."""
    kinds = {
        "number" if _number(x) else type(x)
        for x in items
        if _number(x) or isinstance(x, str | bytes | celtypes.BoolType)
    }
    if len(kinds) != 1 or any(not (_number(x) or type(x) in kinds) for x in items):
        raise TypeError(f"no such overload: {name} of a list of mixed or unordered values")
    if any(_nan(x) for x in items):
        raise TypeError(f"no such overload: {name}: NaN values cannot be ordered")
    return [_key(x) for x in items]


def _is_sorted(target: Any) -> Any:
    items = _items(target)
    keys = _comparable("isSorted", items) if items else []
    return celtypes.BoolType(all(a <= b for a, b in itertools.pairwise(keys)))


def _extreme(name: str, better: Callable[[Any, Any], bool]) -> Callable[[Any], Any]:
    def pick(target: Any) -> Any:
        items = _items(target)
        if not items:
            return CELEvalError(f"{name} called on empty list")
        keys = _comparable(name, items)
        best = 0
        for i, key in enumerate(keys):
            if better(key, keys[best]):  # strictly: the first of equals wins, as in Kubernetes
                best = i
        return items[best]

    return pick


def _sum(target: Any) -> Any:
    items = _items(target)
    for kind, bounds, overflow in (
        (celtypes.IntType, _INT64, "integer overflow"),
        (celtypes.UintType, _UINT64, "unsigned integer overflow"),
        (celtypes.DoubleType, None, ""),
    ):
        if items and all(type(x) is kind for x in items):
            total: Any = 0.0 if bounds is None else 0
            for item in items:
                total += item.real
                if bounds is not None and not bounds[0] <= total <= bounds[1]:
                    return CELEvalError(overflow)
            return kind(total)
    # An empty list's zero is 0, 0u, 0.0 or 0s by the list's static type, which a
    # program without a type checker does not know.
    raise TypeError("no such overload: sum of an empty list or of mixed or unsummable values")


def _index_of(target: Any, item: Any, offset: Any = None) -> Any:
    if isinstance(target, str):
        start = None if offset is None else _int(offset)
        return _string_index_of(target, _text(item), start)
    if offset is not None:
        raise TypeError("no such overload: list.indexOf(item, offset)")
    items = _items(target)
    return celtypes.IntType(next((i for i, x in enumerate(items) if _equal(x, item)), -1))


def _last_index_of(target: Any, item: Any, offset: Any = None) -> Any:
    if isinstance(target, str):
        start = None if offset is None else _int(offset)
        return _string_last_index_of(target, _text(item), start)
    if offset is not None:
        raise TypeError("no such overload: list.lastIndexOf(item, offset)")
    items = _items(target)
    found = (i for i in reversed(range(len(items))) if _equal(items[i], item))
    return celtypes.IntType(next(found, -1))


# --- cel-go ext.Sets -----------------------------------------------------------------


def _contains_all(container: Any, sub: Any) -> bool:
    items = _items(container)
    return all(any(_equal(x, wanted) for x in items) for wanted in _items(sub))


def _intersects(a: Any, b: Any) -> Any:
    others = _items(b)
    return celtypes.BoolType(any(_equal(x, y) for x in _items(a) for y in others))


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "charAt": _char_at,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "lowerAscii": lambda s: celtypes.StringType(_text(s).translate(_LOWER)),
    "upperAscii": lambda s: celtypes.StringType(_text(s).translate(_UPPER)),
    "replace": _replace,
    "split": _split,
    "substring": _substring,
    "trim": lambda s: celtypes.StringType(_text(s).strip(_GO_SPACE)),
    "join": _join,
    "strings.quote": _quote,
    "isSorted": _is_sorted,
    "sum": _sum,
    "@min": _extreme("min", lambda a, b: a < b),  # `.min()`, renamed by `adapt`
    "max": _extreme("max", lambda a, b: a > b),
    "sets.contains": lambda a, b: celtypes.BoolType(_contains_all(a, b)),
    "sets.equivalent": lambda a, b: celtypes.BoolType(_contains_all(a, b) and _contains_all(b, a)),
    "sets.intersects": _intersects,
}

_NAMESPACED = frozenset(name for name in FUNCTIONS if "." in name)
_RENAMED = {"min": "@min", "reduce": "@reduce"}  # celpy's own macros; @reduce: undeclared


def adapt(ast: Any) -> Any:
    """Rewrite a compiled cel-python program (its lark tree, in place) to call this
    module's namespaced functions and Kubernetes' `min`; returns it."""
    for node in list(ast.iter_subtrees_topdown()):
        if node.data != "member_dot_arg":
            continue
        target, method, *arguments = node.children
        qualified = f"{_bare_name(target)}.{method.value}"  # "None.x" unless bare
        if qualified in _NAMESPACED:  # `sets.contains(a, b)`: a call, not a method
            call = type(node)("ident_arg", [method.update(value=qualified), *arguments])
            node.data, node.children = "primary", [call]
        elif method.value in _RENAMED:
            node.children[1] = method.update(value=_RENAMED[method.value])
    return ast


def _bare_name(member: Any) -> str | None:
    """`sets` for the tree of a bare identifier `sets`, else None."""
    node = member
    for rule in ("member", "primary", "ident"):
        if getattr(node, "data", None) != rule or len(node.children) != 1:
            return None
        node = node.children[0]
    return str(node.value)
