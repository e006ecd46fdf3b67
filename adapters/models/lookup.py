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

__all__ = ["TRANSIENT_REASONS", "ModelFound", "ModelLookup", "ModelUnavailable"]

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
