"""Quantities and parameter counts: the exact parsing the planner's comparisons rely on."""

from __future__ import annotations

from fractions import Fraction

import pytest

from fsm.quantity import (
    GIB,
    QuantityError,
    format_count,
    format_gib,
    gib_rounded,
    parse_parameter_count,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("80Gi", 80 * 2**30, id="binary-gi"),
        pytest.param("9856Mi", 9856 * 2**20, id="mig-slice-mi"),
        pytest.param("1.5Ki", 1536, id="fractional-binary"),
        pytest.param("500m", Fraction(1, 2), id="milli"),
        pytest.param("100u", Fraction(1, 10_000), id="micro"),
        pytest.param("2k", 2000, id="kilo"),
        pytest.param("16G", 16 * 10**9, id="giga-decimal"),
        pytest.param("1e3", 1000, id="exponent"),
        pytest.param("25E-1", Fraction(5, 2), id="negative-exponent"),
        pytest.param("2E", 2 * 10**18, id="exa-not-exponent"),
        pytest.param("14", 14, id="plain"),
        pytest.param("-1Gi", -(2**30), id="signed"),
        pytest.param(".5", Fraction(1, 2), id="leading-dot"),
        pytest.param(7, 7, id="int"),
    ],
)
def test_quantities_parse_exactly(text: str | int, expected: Fraction | int) -> None:
    assert parse_quantity(text) == expected


# Hostile input (issue #10): 5,000 digits passed the grammar, then int() raised ValueError
# (Python's 4,300-digit limit) instead of QuantityError; a huge exponent ran for ever.
HUGE = "9" * 5000


def short(text: str) -> str:
    return repr(text) if len(text) < 20 else f"{text[:4]}…({len(text)} chars)"


@pytest.mark.parametrize(
    "text",
    ["", "Gi", "80GB", "1.2.3", "ten", "1 Gi", "5Kib", HUGE + "Gi", "1." + HUGE, "1e999999999"],
    ids=short,
)
def test_malformed_quantities_are_refused(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("500M", 500_000_000, id="million"),
        pytest.param("1B", 1_000_000_000, id="billion"),
        pytest.param("8b", 8_000_000_000, id="lowercase"),
        pytest.param("1.5T", 1_500_000_000_000, id="fractional-trillion"),
        pytest.param("0.5B", 500_000_000, id="half-billion"),
        pytest.param("70G", 70_000_000_000, id="g-as-billion"),
        pytest.param("125K", 125_000, id="thousand"),
        pytest.param("1000", 1000, id="bare"),
        pytest.param(7, 7, id="int"),
    ],
)
def test_parameter_counts(text: str | int, expected: int) -> None:
    assert parse_parameter_count(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "0", "0B", "1.5", "B", "1Gi", "many", "-1B", "1e9", "²", HUGE, HUGE + "B", "1." + HUGE],
    ids=short,
)
def test_malformed_parameter_counts_are_refused(text: str) -> None:
    with pytest.raises(QuantityError) as refused:
        parse_parameter_count(text)
    assert len(str(refused.value)) < 200  # quoted in a condition: never the whole value


@pytest.mark.parametrize(
    ("amount", "rounded"),
    [
        pytest.param(80 * GIB, 80, id="whole"),
        pytest.param(9856 * 2**20, 10, id="mig-1g10gb-up"),
        pytest.param(15 * GIB + GIB // 4, 15, id="quarter-down"),
        pytest.param(GIB // 2, 1, id="half-up"),
    ],
)
def test_gib_rounded_half_up(amount: int, rounded: int) -> None:
    assert gib_rounded(amount) == rounded


@pytest.mark.parametrize(
    ("amount", "text"),
    [
        pytest.param(24 * GIB, "24Gi", id="exact"),
        pytest.param(24 * GIB + 1, "25Gi", id="a-byte-more-rounds-up"),
        pytest.param(0, "1Gi", id="never-zero"),
    ],
)
def test_format_gib_rounds_up(amount: int, text: str) -> None:
    assert format_gib(amount) == text


@pytest.mark.parametrize(
    ("amount", "text"),
    [(4, "4"), (Fraction(1, 2), "500m"), (Fraction(3, 2), "1500m")],
    ids=["cores", "half", "one-and-a-half"],
)
def test_format_count(amount: Fraction | int, text: str) -> None:
    assert format_count(amount) == text
