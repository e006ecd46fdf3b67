"""DeviceClass selectors: Kubernetes' CEL for devices, evaluated with cel-python.

A DeviceClass says which devices it offers by CEL expressions over `device`
(`device.driver`, `device.attributes['domain'].name`, `device.capacity['domain'].name`).
The planner must know which devices each class selects, so it evaluates the selectors
the way the scheduler does: Kubernetes' library functions (`quantity()`, `compareTo`,
`isGreaterThan`, `isLessThan`, `semver()`, `major/minor/patch`, ...) are registered here,
an unknown domain reads as an empty map, an unknown key is an error, and a result that is
not a bool is an error. Any error is a `SelectorError` — the class cannot be judged,
which the planner reports as PlacementUndecidable, never as a crash.

Evaluation is slow next to everything else the planner does (about 0.25 ms), so programs
are compiled once per expression, results are memoised per (class name, generation,
selectors, device), and an answer is shared by the devices that agree on what the
selector read (cel_reads.py). Kubernetes' other CEL libraries that selectors use (the
strings extension, lists, sets) live in cel_extensions.py. Known gaps, which leave a
selector that uses them unjudged: `cel.bind`, and the libraries docs/planner.md lists.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import celpy
from celpy import celtypes
from celpy.evaluation import CELEvalError, Evaluator

from fsm.placement import cel_extensions, cel_reads
from fsm.placement.capacity import Device, DeviceClassInfo, Version
from fsm.placement.kept import KeptFor
from fsm.quantity import QuantityError, parse_quantity

__all__ = [
    "Quantity",
    "SelectorError",
    "Semver",
    "evaluate",
    "selected_devices",
    "selects",
]


class SelectorError(Exception):
    """A selector failed to parse or to evaluate; the class cannot be judged."""

    def __init__(self, expression: str, problem: str) -> None:
        super().__init__(f"selector {expression!r}: {problem}")
        self.expression = expression
        self.problem = problem


@dataclass(frozen=True, slots=True, order=True)
class Quantity:
    """Kubernetes' CEL Quantity: comparable only through its methods, as in Kubernetes."""

    value: Fraction


_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)


@dataclass(frozen=True, slots=True)
class Semver:
    """A semantic version, compared by semver precedence (build metadata ignored)."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[int | str, ...] = ()

    @classmethod
    def parse(cls, text: str, *, normalize: bool = False) -> Semver:
        if normalize:
            text = _normalize_semver(text)
        match = _SEMVER.match(text)
        if match is None:
            raise ValueError(f"{text!r} is not a semantic version")
        pre = tuple(
            int(part) if part.isdigit() else part for part in (match[4] or "").split(".") if part
        )
        return cls(int(match[1]), int(match[2]), int(match[3]), pre)

    def key(self) -> tuple[int, int, int, int, tuple[tuple[int, int | str], ...]]:
        # A release sorts above its prereleases; numeric identifiers below alphanumeric.
        pre = tuple((0, p) if isinstance(p, int) else (1, p) for p in self.prerelease)
        return (self.major, self.minor, self.patch, 0 if self.prerelease else 1, pre)


def _normalize_semver(text: str) -> str:
    text = text.removeprefix("v")
    core, sep, rest = text.partition("-") if "-" in text else text.partition("+")
    parts = [str(int(p)) if p.isdigit() else p for p in core.split(".")]
    parts += ["0"] * (3 - len(parts))
    return ".".join(parts) + (sep + rest if sep else "")


def _cmp(a: Any, b: Any) -> int:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return (a.value > b.value) - (a.value < b.value)
    if isinstance(a, Semver) and isinstance(b, Semver):
        return (a.key() > b.key()) - (a.key() < b.key())
    raise TypeError(f"no such overload: compareTo({type(a).__name__}, {type(b).__name__})")


def _quantity(text: Any) -> Quantity:
    try:
        return Quantity(parse_quantity(str(text)))
    except QuantityError as err:
        raise ValueError(str(err)) from err


def _is_quantity(text: Any) -> celtypes.BoolType:
    try:
        parse_quantity(str(text))
    except QuantityError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _is_semver(text: Any, normalize: Any = False) -> celtypes.BoolType:
    try:
        Semver.parse(str(text), normalize=bool(normalize))
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _as_quantity(value: Any) -> Quantity:
    if isinstance(value, Quantity):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return Quantity(Fraction(int(value)))
    raise TypeError(f"no such overload: quantity and {type(value).__name__}")


def _as_integer(q: Quantity) -> celtypes.IntType:
    if q.value.denominator != 1 or abs(q.value) >= 2**63:
        raise ValueError("quantity is not an int64")
    return celtypes.IntType(q.value.numerator)


def _part(name: str) -> Callable[[Semver], celtypes.IntType]:
    def get(version: Semver) -> celtypes.IntType:
        if not isinstance(version, Semver):
            raise TypeError(f"no such overload: {name}({type(version).__name__})")
        return celtypes.IntType(getattr(version, name))

    return get


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": lambda text, normalize=False: Semver.parse(str(text), normalize=bool(normalize)),
    "isSemver": _is_semver,
    "compareTo": lambda a, b: celtypes.IntType(_cmp(a, b)),
    "isGreaterThan": lambda a, b: celtypes.BoolType(_cmp(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_cmp(a, b) < 0),
    "major": _part("major"),
    "minor": _part("minor"),
    "patch": _part("patch"),
    "sign": lambda q: celtypes.IntType((q.value > 0) - (q.value < 0)),
    "isInteger": lambda q: celtypes.BoolType(q.value.denominator == 1),
    "asInteger": _as_integer,
    "asApproximateFloat": lambda q: celtypes.DoubleType(float(q.value)),
    "add": lambda q, other: Quantity(q.value + _as_quantity(other).value),
    "sub": lambda q, other: Quantity(q.value - _as_quantity(other).value),
    **cel_extensions.FUNCTIONS,
}


class _Domains(celtypes.MapType):  # type: ignore[misc]  # celpy's types are untyped to mypy
    """`device.attributes` / `device.capacity`: an unknown domain is an empty map."""

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str) and key not in self:
            return celtypes.MapType()
        return super().__getitem__(key)


# cel-python runs a selector's comprehensions step by step, about half a millisecond a
# step: a DeviceClass nesting `.all()` over list literals took 10^4 steps, 5 s a device,
# and every plan waited for it. Kubernetes bounds a selector's cost; so does this, per
# evaluation, in steps (an expression, or a macro's body once).
STEP_BUDGET = 1000


class _Steps:
    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = STEP_BUDGET


class _BudgetedEvaluator(Evaluator):  # type: ignore[misc]  # celpy is untyped to mypy
    def __init__(self, ast: Any, activation: Any, steps: _Steps) -> None:
        super().__init__(ast, activation)
        self._steps = steps

    def sub_evaluator(self, ast: Any) -> _BudgetedEvaluator:
        return _BudgetedEvaluator(ast, self.activation, self._steps)

    def evaluate(self, context: Any = None) -> Any:
        self._steps.left -= 1
        if self._steps.left < 0:
            raise CELEvalError(_OVER_BUDGET)
        return super().evaluate(context)


class _BudgetedRunner(celpy.InterpretedRunner):  # type: ignore[misc]
    def evaluate(self, context: Any) -> Any:
        steps = _Steps()
        try:
            value = _BudgetedEvaluator(self.ast, self.new_activation(), steps).evaluate(context)
        except CELEvalError:
            if steps.left < 0:  # said once, not as every macro above wrapped it
                raise CELEvalError(_OVER_BUDGET) from None
            raise
        # Past the budget every step fails at once; one failure an `||` absorbed must
        # not pass for the selector's answer.
        if steps.left < 0:
            raise CELEvalError(_OVER_BUDGET)
        return value


_OVER_BUDGET = f"exceeds the evaluation budget of {STEP_BUDGET} steps"


@functools.cache
def _environment() -> celpy.Environment:
    # Building the environment builds CEL's parser (~0.3 s): only when a selector is
    # first judged, not whenever the CLI or a module imports this one.
    return celpy.Environment(runner_class=_BudgetedRunner)


@functools.lru_cache(maxsize=1024)
def _program(expression: str) -> celpy.Runner:
    env = _environment()
    try:
        return env.program(cel_extensions.adapt(env.compile(expression)), functions=FUNCTIONS)
    except Exception as err:  # the parser's own errors vary by grammar rule
        raise SelectorError(expression, f"does not parse: {err}") from err


def _cel_value(value: Any) -> Any:
    if isinstance(value, Version):
        try:
            return Semver.parse(value.text, normalize=True)
        except ValueError:
            return celtypes.StringType(value.text)
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    return celtypes.StringType(value)


def _activation(device: Device) -> dict[str, Any]:
    attributes: dict[str, dict[celtypes.StringType, Any]] = {}
    for qualified, value in device.attributes:
        domain, _, name = qualified.rpartition("/")
        attributes.setdefault(domain, {})[celtypes.StringType(name)] = _cel_value(value)
    capacity: dict[str, dict[celtypes.StringType, Any]] = {}
    for qualified, amount in device.capacity:
        domain, _, name = qualified.rpartition("/")
        capacity.setdefault(domain, {})[celtypes.StringType(name)] = Quantity(amount)
    return {
        "device": celtypes.MapType(
            {
                celtypes.StringType("driver"): celtypes.StringType(device.driver),
                celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(
                    device.allow_multiple_allocations
                ),
                celtypes.StringType("attributes"): _Domains(
                    {celtypes.StringType(k): celtypes.MapType(v) for k, v in attributes.items()}
                ),
                celtypes.StringType("capacity"): _Domains(
                    {celtypes.StringType(k): celtypes.MapType(v) for k, v in capacity.items()}
                ),
            }
        )
    }


def evaluate(expression: str, device: Device) -> bool:
    """One selector against one device; SelectorError when it cannot be judged.

    The answer is shared with every device that agrees on what the selector read
    (cel_reads.py): a class's identical GPUs, each with its own uuid, are one evaluation."""
    program = _program(expression)

    def judged(reading: cel_reads.Reading) -> bool:
        try:
            result = program.evaluate({"device": reading})
        except Exception as err:  # celpy raises CELEvalError; lark/Python errors leak through
            raise SelectorError(expression, f"fails on {device.id}: {_describe(err)}") from err
        if isinstance(result, celpy.CELEvalError):
            raise SelectorError(expression, f"fails on {device.id}: {_describe(result)}")
        if not isinstance(result, celtypes.BoolType):
            raise SelectorError(expression, f"yields {type(result).__name__}, not a bool")
        return bool(result)

    return _ANSWERS.answer(expression, _activation(device)["device"], judged)


_ANSWERS = cel_reads.Answers()


def _describe(err: BaseException) -> str:
    # CELEvalError's args are (message, cause type, cause args): show the cause too.
    args = getattr(err, "args", ())
    if not args:
        return type(err).__name__
    # An undeclared name's message goes on to print the whole activation: cut it there.
    message = str(args[0]).split(" (in activation ", 1)[0]
    if len(args) >= 3 and isinstance(args[2], tuple) and args[2]:
        message += f" ({args[2][0]})"
    return message


@functools.lru_cache(maxsize=65536)
def _memo(
    class_name: str, generation: int, selectors: tuple[str, ...], device: Device
) -> bool | SelectorError:
    del class_name, generation  # part of the key only: a new generation is a new class
    try:
        return all(evaluate(expression, device) for expression in selectors)
    except SelectorError as err:
        return err


def selects(device_class: DeviceClassInfo, device: Device) -> bool:
    """Whether every selector of the class is true for the device (memoised)."""
    outcome = _memo(device_class.name, device_class.generation, device_class.selectors, device)
    if isinstance(outcome, SelectorError):
        raise outcome
    return outcome


def selected_devices(
    device_class: DeviceClassInfo, devices: Sequence[Device]
) -> tuple[Device, ...]:
    """The devices a class offers; a SelectorError on any device fails the whole class,
    as the scheduler fails a claim whose class errs on a device.

    Kept for a snapshot's tuple of devices (`kept.py`): a plan asks once per class and
    once per other order's demand, and hashing each device for `selects`' memo made that
    O(devices) every time."""
    outcome = _SELECTIONS.get(devices, device_class, lambda: _select(device_class, devices))
    if isinstance(outcome, SelectorError):
        raise outcome
    return outcome


def _select(
    device_class: DeviceClassInfo, devices: Sequence[Device]
) -> tuple[Device, ...] | SelectorError:
    try:
        return tuple(device for device in devices if selects(device_class, device))
    except SelectorError as err:
        return err


_SELECTIONS: KeptFor[tuple[Device, ...] | SelectorError] = KeptFor()
