"""Where to probe an order: a pluggable resolver from the order (and its pods) to a URL.

In a real cluster the controller probes the order's Service by its cluster DNS name,
the way another workload in the cluster would call it (`ServiceTarget`). The local
simulator has no cluster network: its stub runtimes listen on 127.0.0.1 and the
simulator writes each one's address on the pod as an annotation (`AnnotatedPodTarget`).
The controller is given one resolver at start-up and never knows which.

Pods are given as plain dicts (the API's JSON, as a cache or `to_dict`-free read holds
them), so the resolvers are pure and need no client.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from adapters.kubernetes.rendering import UID_LABEL, OrderRef

__all__ = [
    "SIMULATOR_ENDPOINT_ANNOTATION",
    "AnnotatedPodTarget",
    "ServiceTarget",
    "TargetResolver",
    "ready_pods",
]

SIMULATOR_ENDPOINT_ANNOTATION = "simulator.ai-inference.deckhouse.io/endpoint"

Pod = Mapping[str, Any]


class TargetResolver(Protocol):
    def resolve(self, order: OrderRef, pods: Sequence[Pod]) -> str | None:
        """The base URL to probe (no path), or None: nothing to probe yet."""
        ...


def _is_ready(pod: Pod) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False  # terminating: it may still say Ready, but it is on its way out
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def ready_pods(order: OrderRef, pods: Sequence[Pod]) -> list[Pod]:
    """The order's Ready pods (by the UID label, not by name), sorted by name."""
    own = [
        p
        for p in pods
        if ((p.get("metadata") or {}).get("labels") or {}).get(UID_LABEL) == order.uid
        and (p.get("metadata") or {}).get("namespace", order.namespace) == order.namespace
    ]
    return sorted(
        (p for p in own if _is_ready(p)), key=lambda p: str(p["metadata"].get("name", ""))
    )


@dataclass(frozen=True, slots=True)
class ServiceTarget:
    """`http://<order>.<namespace>.svc:80`: the ClusterIP Service rendering.py makes."""

    port: int = 80

    def resolve(self, order: OrderRef, pods: Sequence[Pod]) -> str | None:
        return f"http://{order.name}.{order.namespace}.svc:{self.port}"


@dataclass(frozen=True, slots=True)
class AnnotatedPodTarget:
    """The simulator's: the endpoint annotation of the first Ready pod of the order."""

    annotation: str = SIMULATOR_ENDPOINT_ANNOTATION

    def resolve(self, order: OrderRef, pods: Sequence[Pod]) -> str | None:
        for pod in ready_pods(order, pods):
            value = str((pod["metadata"].get("annotations") or {}).get(self.annotation, ""))
            if value.startswith(("http://", "https://")):
                return value.rstrip("/")
        return None
