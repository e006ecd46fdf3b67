"""Kubernetes quantities and model parameter counts, parsed exactly.

The planner reads device memory from ResourceSlices (`capacity.memory.value: 80Gi`),
CEL selectors compare quantities (`quantity('40Gi')`), and a class caps models with
`maxParameterCount: 1.5T`. All of them are parsed here, into exact rationals (never
floats, so `9856Mi` stays exact and a comparison never flips on rounding), and the
planner's estimates are written back as quantity strings (`24Gi`, `4`).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = [
    "GIB",
    "MIB",
    "QuantityError",
    "format_count",
    "format_gib",
    "gib_rounded",
    "parse_parameter_count",
    "parse_quantity",
]

MIB = 2**20
GIB = 2**30

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
# The grammar of k8s.io/apimachinery resource.Quantity: a signed decimal number, then a
# binary-SI suffix, a decimal-SI suffix, or a decimal exponent (e3, E-2).
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<exponent>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)
_COUNT = re.compile(r"^(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[kKmMbBgGtT]?)$")
_COUNT_UNITS = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
# Longer numbers (or exponents) describe no device and no model; refusing them keeps a
# hostile value (a 5,000-digit count, "1e999999999") from costing seconds or memory.
_MAX_NUMBER_CHARS = 40
_MAX_EXPONENT = 40


class QuantityError(ValueError):
    """A string is not a Kubernetes quantity (or not a parameter count)."""


def parse_quantity(text: str | int | float) -> Fraction:
    """`"80Gi"` -> 85899345920, `"500m"` -> 1/2, `"1e3"` -> 1000; exact."""
    if isinstance(text, bool):
        raise QuantityError(f"{text!r} is not a quantity")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        return Fraction(str(text))
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise QuantityError(f"{_clip(text)} is not a Kubernetes quantity (e.g. 80Gi, 500m, 1e3)")
    if len(match["number"]) > _MAX_NUMBER_CHARS:
        raise QuantityError(f"{_clip(text)} has more digits than any quantity of a device")
    number = Fraction(match["number"])
    if match["exponent"]:
        exponent = match["exponent"][1:]
        if len(exponent.lstrip("+-")) > 3 or abs(int(exponent)) > _MAX_EXPONENT:
            raise QuantityError(f"{_clip(text)} has an exponent beyond any quantity of a device")
        return number * Fraction(10) ** int(exponent)
    suffix = match["suffix"] or ""
    return number * (_BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])


def parse_parameter_count(text: str | int) -> int:
    """`"500M"` -> 500_000_000, `"1B"` -> 10**9, `"1.5T"` -> 1.5 * 10**12.

    Units are decimal and case-insensitive: K thousand, M million, B (or G) billion,
    T trillion; a bare number is a count. Zero or a fraction of a parameter is refused.
    """
    if isinstance(text, bool):
        raise QuantityError(f"{text!r} is not a parameter count")
    if isinstance(text, int):
        value = Fraction(text)
    else:
        match = _COUNT.match(text.strip())
        if match is None:
            raise QuantityError(
                f"{_clip(text)} is not a parameter count; write it as 500M, 8B or 1.5T"
            )
        if len(match["number"]) > _MAX_NUMBER_CHARS:
            raise QuantityError(
                f"{_clip(text)} has more digits than any parameter count; write it as 500M, "
                "8B or 1.5T"
            )
        value = Fraction(match["number"]) * _COUNT_UNITS[match["unit"].lower()]
    if value <= 0 or value.denominator != 1:
        raise QuantityError(f"{_clip(text)} is not a positive whole number of parameters")
    return int(value)


def _clip(text: object, limit: int = 40) -> str:
    """A value's repr short enough to quote in a condition message."""
    shown = repr(text)
    return shown if len(shown) <= limit else f"{shown[:limit]}… ({len(shown)} characters)"


def gib_rounded(amount: Fraction | int) -> int:
    """Bytes to whole GiB, half up: a MIG `1g.10gb` slice (9856Mi) reports 10."""
    return math.floor(Fraction(amount) / GIB + Fraction(1, 2))


def format_gib(amount: Fraction | int) -> str:
    """Bytes to a quantity in whole GiB, rounded up so a request never falls short."""
    return f"{max(1, math.ceil(Fraction(amount) / GIB))}Gi"


def format_count(amount: Fraction | int) -> str:
    """A CPU count as a quantity: whole cores plain (`4`), fractions in millicores."""
    value = Fraction(amount)
    if value.denominator == 1:
        return str(value.numerator)
    return f"{math.ceil(value * 1000)}m"
