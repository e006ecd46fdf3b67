"""DeviceClass selectors evaluated as the scheduler does, Kubernetes' CEL library included."""

from __future__ import annotations

import pytest

from fsm.placement import cel
from fsm.placement.capacity import Device
from tests.support.planner_inputs import (
    GPU_CLASS,
    MIG_CLASS,
    device_class,
    gpu,
    mig,
    resource_slice,
    snapshot,
)

A100 = "NVIDIA A100 80GB PCIe"


def _devices() -> tuple[Device, Device]:
    snap = snapshot(
        slices=[
            resource_slice(
                "node1",
                gpu("gpu-0", A100, "80Gi", cudaComputeCapability={"version": "8.0.0"}),
                mig("gpu-1-mig-1g10gb-19-0", A100, "1g.10gb", "9856Mi"),
            )
        ]
    )
    whole, partition = snap.devices
    return whole, partition


WHOLE, PARTITION = _devices()
CAP = "device.capacity['gpu.nvidia.com']"
ATTR = "device.attributes['gpu.nvidia.com']"


@pytest.mark.parametrize(
    ("expression", "whole", "partition"),
    [
        pytest.param(GPU_CLASS, True, False, id="gpu-class"),
        pytest.param(MIG_CLASS, False, True, id="mig-class"),
        pytest.param(f"{CAP}.memory.compareTo(quantity('40Gi')) >= 0", True, False, id="compareTo"),
        pytest.param(
            f"{CAP}.memory.isGreaterThan(quantity('9Gi'))", True, True, id="isGreaterThan"
        ),
        pytest.param(f"{CAP}.memory.isLessThan(quantity('10Gi'))", False, True, id="isLessThan"),
        pytest.param(
            f"{CAP}.memory.compareTo(quantity('80Gi')) == 0", True, False, id="equal-quantity"
        ),
        pytest.param(f"{ATTR}.productName.startsWith('NVIDIA A100')", True, True, id="string-fn"),
        pytest.param(f"{ATTR}.profile == '1g.10gb'", None, True, id="unknown-key-errs-on-gpu"),
        pytest.param(
            f"has({ATTR}.cudaComputeCapability) && "
            f"{ATTR}.cudaComputeCapability.isGreaterThan(semver('7.5.0'))",
            True,
            False,
            id="semver-attribute",
        ),
        pytest.param(
            f"has({ATTR}.cudaComputeCapability) && {ATTR}.cudaComputeCapability.major() == 8",
            True,
            False,
            id="semver-major",
        ),
        pytest.param(
            "device.attributes['other.example.com'].size() == 0",
            True,
            True,
            id="unknown-domain-empty",
        ),
        pytest.param(
            "has(device.attributes['other.example.com'].x)",
            False,
            False,
            id="has-in-unknown-domain",
        ),
        pytest.param(
            "semver('1.2.3-rc.1').isLessThan(semver('1.2.3'))", True, True, id="prerelease-below"
        ),
        pytest.param("semver('v1.2', true).minor() == 2", True, True, id="normalized-semver"),
        pytest.param("isQuantity('10Gi') && !isQuantity('10GB')", True, True, id="isQuantity"),
        pytest.param(
            "quantity('1.5Gi').add(quantity('512Mi')).compareTo(quantity('2Gi')) == 0",
            True,
            True,
            id="add",
        ),
        pytest.param("quantity('2k').sub(500).asInteger() == 1500", True, True, id="sub-int"),
        pytest.param("!device.allowMultipleAllocations", True, True, id="allow-multiple"),
    ],
)
def test_selectors(expression: str, whole: bool | None, partition: bool) -> None:
    judged_as(expression, whole, partition)


def judged_as(expression: str, whole: bool | None, partition: bool | None) -> None:
    """`expression`'s verdict on the whole GPU and on the MIG partition (None: it cannot
    be judged, a SelectorError)."""
    for device, expected in ((WHOLE, whole), (PARTITION, partition)):
        if expected is None:
            with pytest.raises(cel.SelectorError):
                cel.evaluate(expression, device)
        else:
            assert cel.evaluate(expression, device) is expected, device.name


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        pytest.param("device.driver ==", "does not parse", id="syntax"),
        pytest.param(f"{ATTR}.noSuchAttribute == 'x'", "no such member", id="unknown-key"),
        pytest.param(f"{ATTR}.productName", "not a bool", id="non-bool"),
        pytest.param(
            "quantity('lots').sign() == 1", "not a Kubernetes quantity", id="bad-quantity"
        ),
        pytest.param(
            f"{ATTR}.productName.compareTo(quantity('1'))", "no such overload", id="wrong-type"
        ),
        pytest.param("cel.bind(x, 1, x == 1)", "bind", id="cel-bind-unsupported"),
    ],
)
def test_selector_errors_are_selector_errors(expression: str, problem: str) -> None:
    with pytest.raises(cel.SelectorError) as caught:
        cel.evaluate(expression, WHOLE)
    assert problem in str(caught.value)
    assert caught.value.expression == expression


def test_a_class_selects_by_every_selector() -> None:
    snap = snapshot(
        [device_class("big-gpus", GPU_CLASS, f"{CAP}.memory.compareTo(quantity('40Gi')) >= 0")]
    )
    (info,) = snap.device_classes
    assert cel.selected_devices(info, [WHOLE, PARTITION]) == (WHOLE,)


def test_a_class_without_selectors_selects_every_device() -> None:
    (info,) = snapshot([device_class("anything")]).device_classes
    assert cel.selected_devices(info, [WHOLE, PARTITION]) == (WHOLE, PARTITION)


def test_an_error_on_any_device_fails_the_class() -> None:
    (info,) = snapshot([device_class("profiles", f"{ATTR}.profile == '1g.10gb'")]).device_classes
    with pytest.raises(cel.SelectorError):
        cel.selected_devices(info, [PARTITION, WHOLE])


def test_results_are_memoised_per_class_generation_and_device() -> None:
    expression = f"{ATTR}.productName == '{A100}' && true"
    (first,) = snapshot([device_class("memo", expression, generation=1)]).device_classes
    (second,) = snapshot([device_class("memo", expression, generation=2)]).device_classes
    before = cel._memo.cache_info()
    assert cel.selects(first, WHOLE)
    assert cel.selects(first, WHOLE)
    assert cel.selects(second, WHOLE)
    after = cel._memo.cache_info()
    assert after.hits - before.hits == 1  # the repeat; a new generation is a new entry
    assert after.misses - before.misses == 2


def test_a_tuple_of_devices_is_judged_once_per_class(monkeypatch) -> None:
    """A plan asks for a class's devices once per class and once per other order's
    demand, all from one snapshot's tuple: the devices are judged the first time only."""
    (info,) = snapshot([device_class("whole", GPU_CLASS)]).device_classes
    judged: list[str] = []
    real = cel.selects
    monkeypatch.setattr(cel, "selects", lambda i, d: judged.append(d.name) or real(i, d))
    devices = (WHOLE, PARTITION)
    assert cel.selected_devices(info, devices) == (WHOLE,)
    assert cel.selected_devices(info, devices) == (WHOLE,)
    assert judged == [WHOLE.name, PARTITION.name]
    # Another tuple (a new snapshot's) is judged anew; a list may change, so never kept.
    assert cel.selected_devices(info, (PARTITION, WHOLE)) == (WHOLE,)
    assert cel.selected_devices(info, [WHOLE, PARTITION]) == (WHOLE,)
    assert cel.selected_devices(info, [WHOLE, PARTITION]) == (WHOLE,)
    assert len(judged) == 2 + 2 + 4


def test_a_class_that_errs_errs_again_from_the_kept_selection() -> None:
    (info,) = snapshot([device_class("profiles", f"{ATTR}.profile == '1g.10gb'")]).device_classes
    devices = (PARTITION, WHOLE)
    for _ in range(2):
        with pytest.raises(cel.SelectorError):
            cel.selected_devices(info, devices)


_TEN = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"


@pytest.mark.parametrize(
    "selector",
    [
        f"{_TEN}.all(a, {_TEN}.all(b, {_TEN}.all(c, {_TEN}.all(d, a + b + c + d >= 0))))",
        # An error an `||` would absorb is still the selector's answer: it ran out.
        f"true || {_TEN}.all(a, {_TEN}.all(b, {_TEN}.all(c, a + b + c >= 0)))",
    ],
    ids=["nested", "absorbed"],
)
def test_a_selector_past_the_step_budget_fails_its_class_and_says_so(selector: str) -> None:
    """cel-python runs comprehensions step by step (half a millisecond a step): one
    DeviceClass nesting four `.all()` over ten items took 5 s a device, and every plan
    waited. Past the budget the selector fails, with one clear message."""
    device, _ = _devices()
    with pytest.raises(cel.SelectorError) as failed:
        cel.evaluate(selector, device)
    assert str(failed.value).endswith(f"exceeds the evaluation budget of {cel.STEP_BUDGET} steps")
    assert str(failed.value).count("budget") == 1


def test_a_comprehension_within_the_budget_is_judged() -> None:
    device, _ = _devices()
    assert cel.evaluate(f"{_TEN}.all(a, {_TEN}.exists(b, a + b == 9))", device)
