"""An answer shared by the devices that agree on what a selector read is the answer each
would get on its own (fsm/placement/cel_reads.py), whatever the selector reads: keys,
missing keys, unknown domains, maps sized, iterated or compared whole, errors."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from celpy import celtypes
from hypothesis import given, settings
from hypothesis import strategies as st

from fsm.placement import cel, cel_reads
from fsm.placement.capacity import Device
from fsm.quantity import parse_quantity

ATTR = "device.attributes['gpu.nvidia.com']"
CAP = "device.capacity['gpu.nvidia.com']"
EXPRESSIONS = [
    "device.driver == 'gpu.nvidia.com'",
    f"device.driver == 'gpu.nvidia.com' && {ATTR}.type == 'gpu'",
    f"{ATTR}.productName == 'A100' || {ATTR}.productName == 'T4'",
    f"has({ATTR}.mig) ? {ATTR}.mig : {ATTR}.type != 'mig'",
    f"'uuid' in {ATTR}",
    f"size({ATTR}) > 3",
    f"{ATTR}.exists(k, k == 'count')",
    f"{ATTR}.exists(k, {ATTR}[k] == 'gpu')",
    f"{ATTR} == {{'type': 'gpu', 'productName': 'A100'}}",
    f"{CAP}.memory.compareTo(quantity('60Gi')) >= 0",
    "device.attributes['example.com'].type == 'gpu'",  # an unknown domain: a missing key
    f"{ATTR}.type == 'gpu'",  # an error where the type is missing
    f"!device.allowMultipleAllocations && {ATTR}.count > 1",
    f"{ATTR}.count > 1 && {ATTR}.productName.startsWith('A')",
    f"{ATTR}.productName.lowerAscii().contains('a1')",  # cel_extensions.py
    f"{ATTR}.productName.charAt(3) == '0' || {ATTR}.type == 'gpu'",  # an error ORed
    f"sets.intersects(['gpu', 'vgpu'], [{ATTR}.type])",
    f"[{ATTR}.count, 2].max() == 2",
]


@st.composite
def devices(draw: st.DrawFn, index: int) -> Device:
    attributes: list[tuple[str, Any]] = []
    for name, values in (
        ("type", st.sampled_from(["gpu", "mig"])),
        ("productName", st.sampled_from(["A100", "T4"])),
        ("mig", st.booleans()),
        ("count", st.integers(0, 3)),
    ):
        if draw(st.booleans()):
            attributes.append((f"gpu.nvidia.com/{name}", draw(values)))
    if draw(st.booleans()):
        attributes.append(("gpu.nvidia.com/uuid", f"GPU-{index}"))  # its own, as real ones
    memory = draw(st.sampled_from([None, "40Gi", "80Gi"]))
    capacity = () if memory is None else (("gpu.nvidia.com/memory", parse_quantity(memory)),)
    return Device(
        driver=draw(st.sampled_from(["gpu.nvidia.com", "other.example.com"])),
        pool="node-a",
        name=f"gpu-{index}",
        node="node-a",
        attributes=tuple(sorted(attributes)),
        capacity=capacity,
        allow_multiple_allocations=draw(st.booleans()),
    )


def _alone(expression: str, device: Device) -> bool | str:
    """The answer with nothing shared: the program on the device's own activation."""
    try:
        result = cel._program(expression).evaluate(cel._activation(device))
    except Exception:  # celpy raises its errors, or returns them
        return "error"
    return bool(result) if isinstance(result, celtypes.BoolType) else "error"


def _shared(expression: str, device: Device) -> bool | str:
    try:
        return cel.evaluate(expression, device)
    except cel.SelectorError:
        return "error"


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_shared_answer_is_the_answer_the_device_gets_alone(data: st.DataObject) -> None:
    kept, cel._ANSWERS = cel._ANSWERS, cel_reads.Answers()  # each example starts empty
    try:
        fleet = [data.draw(devices(i)) for i in range(12)]
        for expression in EXPRESSIONS:
            for device in fleet:
                assert _shared(expression, device) == _alone(expression, device), (
                    expression,
                    device,
                )
    finally:
        cel._ANSWERS = kept


def test_identical_gpus_with_their_own_uuids_are_one_evaluation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = cel_reads.Answers()
    monkeypatch.setattr(cel, "_ANSWERS", answers)
    evaluations: list[str] = []
    real = answers.answer

    def counted(expression: str, device: Any, evaluate: Any) -> bool:
        def judged(reading: cel_reads.Reading) -> bool:
            evaluations.append(expression)
            return bool(evaluate(reading))

        return real(expression, device, judged)

    monkeypatch.setattr(answers, "answer", counted)
    gpus = [
        Device(
            driver="gpu.nvidia.com",
            pool="node-a",
            name=f"gpu-{i}",
            node="node-a",
            attributes=(
                ("gpu.nvidia.com/productName", "A100"),
                ("gpu.nvidia.com/type", "gpu"),
                ("gpu.nvidia.com/uuid", f"GPU-{i}"),
            ),
            capacity=(("gpu.nvidia.com/memory", Fraction(80 * 2**30)),),
        )
        for i in range(100)
    ]
    selector = f"device.driver == 'gpu.nvidia.com' && {ATTR}.type == 'gpu'"
    assert all(cel.evaluate(selector, gpu) for gpu in gpus)
    assert len(evaluations) == 1
    # A selector that reads the uuid tells each device apart, as it must.
    assert [cel.evaluate(f"{ATTR}.uuid == 'GPU-7'", gpu) for gpu in gpus].count(True) == 1
    assert len(evaluations) == 101
