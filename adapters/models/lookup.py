"""The answer a model source gives: the model's facts, or why there are none.

Both sources (the HuggingFace hub resolver and the ai-models catalog reader) return a
`ModelLookup`, so the controller turns either into a ModelResolved observation the same
way. A failure carries a ModelResolved reason from the catalogue and a message written
for the namespace user; no message ever contains a token.
"""

from __future__ import annotations

from dataclasses import dataclass

from fsm.reasons import CATALOGUE, ConditionStatus, ConditionType, Reason
from fsm.values import ModelFacts

__all__ = ["TRANSIENT_REASONS", "ModelFound", "ModelLookup", "ModelUnavailable", "short_name"]

# Longer than any architecture, dtype or digest a source reports.
NAME_LIMIT = 128

# Failures that resolve by themselves: the controller retries with backoff.
TRANSIENT_REASONS = frozenset({Reason.MODEL_SOURCE_UNREACHABLE, Reason.MODEL_NOT_READY})


@dataclass(frozen=True, slots=True)
class ModelFound:
    facts: ModelFacts

    @property
    def ok(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class ModelUnavailable:
    reason: Reason
    message: str

    def __post_init__(self) -> None:
        info = CATALOGUE[self.reason]
        if (
            info.condition is not ConditionType.MODEL_RESOLVED
            or info.status is not ConditionStatus.FALSE
        ):
            raise ValueError(f"{self.reason} is not a ModelResolved failure reason")

    @property
    def ok(self) -> bool:
        return False

    @property
    def transient(self) -> bool:
        return self.reason in TRANSIENT_REASONS


ModelLookup = ModelFound | ModelUnavailable


def short_name(value: object) -> str | None:
    """A name a source reports (an architecture, a dtype, a digest), if it is one: a
    string of at most NAME_LIMIT characters. Anything else is not recorded: the facts go
    into the order's event log and stay in the controller's memory, and a public repo's
    config.json whose `architectures[0]` held 3.5 MB made a 6 MB event an order (every
    edit another; 80 such orders past the controller's memory limit)."""
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value if 0 < len(value) <= NAME_LIMIT else None
