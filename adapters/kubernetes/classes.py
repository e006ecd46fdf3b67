"""The InferenceServiceClass's own status: a `Ready` condition an administrator reads.

The verdict is `fsm.policy.validate_class`; this module only renders it as a
metav1.Condition (lastTransitionTime moves only when the status does) and writes it
through the status subresource when it differs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from adapters.kubernetes import errors, kinds
from adapters.kubernetes.watching import Obj
from adapters.kubernetes.world import ClusterCache
from adapters.kubernetes.writing import Writer
from fsm import policy
from fsm.reasons import ClassReason, ConditionStatus
from fsm.status import clipped, rfc3339
from fsm.values import ClassSpec

__all__ = ["class_status", "reconcile_class"]

log = logging.getLogger(__name__)


def class_status(
    obj: Obj, *, priority_classes: list[str], device_classes: list[str], now: datetime
) -> dict[str, Any]:
    generation = int((obj.get("metadata") or {}).get("generation", 1))
    try:
        validity = policy.validate_class(
            ClassSpec.model_validate(obj.get("spec") or {}),
            priority_classes=priority_classes,
            device_classes=device_classes,
        )
        status, reason, message = validity.status, validity.reason, validity.message
    except ValueError as exc:
        status, reason = ConditionStatus.FALSE, ClassReason.INVALID_SPEC
        message = f"the spec cannot be read: {exc}"
    old = next(
        (c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"),
        None,
    )
    since = (
        old["lastTransitionTime"]
        if old is not None and old.get("status") == str(status) and old.get("lastTransitionTime")
        else rfc3339(now)
    )
    return {
        "observedGeneration": generation,
        "conditions": [
            {
                "type": "Ready",
                "status": str(status),
                "reason": str(reason),
                "message": clipped(message),
                "lastTransitionTime": since,
                "observedGeneration": generation,
            }
        ],
    }


def reconcile_class(
    name: str, world: ClusterCache, writer: Writer, clock: Callable[[], datetime]
) -> bool:
    """Write the class's status if it differs from the live one; True when written. The
    class's UID is the precondition: a class recreated under the name is judged anew."""
    obj = world.classes.get_by_name(None, name)
    if obj is None:
        return False
    status = class_status(
        obj,
        priority_classes=world.priority_classes.names(),
        device_classes=world.device_classes.names(),
        now=clock(),
    )
    try:
        written = writer.write_status(
            kinds.INFERENCE_SERVICE_CLASSES,
            None,
            name,
            status,
            current=obj.get("status") or {},
            uid=str((obj.get("metadata") or {}).get("uid")),
        )
    except errors.APINotFoundError:
        return False  # gone
    except errors.APIInvalidError as exc:
        # Another class of that name now (the uid precondition), or a status the schema
        # refuses: the second is a bug of ours, and must not pass unseen.
        log.warning("status of InferenceServiceClass %s not written: %s", name, exc)
        return False
    return written is not None
