"""The scheduler stand-in: DRA claims for pending pods, device allocation, binding.

It does what the 1.34 kube-scheduler (with its DynamicResources plugin) and the
resourceclaim controller do for the pods this project creates:

- for each `resourceClaimTemplateName` of a pending pod, create the claim
  (`<pod>-<claim>-xxxxx`, owned by the pod as controller, annotated with the pod's claim
  name) and record it in the pod's `status.resourceClaimStatuses`;
- allocate devices on one node for all of the pod's claims (`allocation`), add the
  finalizer `resource.kubernetes.io/delete-protection`, write `status.allocation`
  (results, config, nodeSelector) and `status.reservedFor`, then bind the pod;
- otherwise leave the pod Pending with `PodScheduled=False`, reason `Unschedulable` and
  the scheduler's message ("0/2 nodes are available: 2 cannot allocate all claims.").

Pods wait in priority order (higher `spec.priority` first, then the oldest). It never
preempts: a device held by a lower-priority pod stays held (DRA.md) — freeing capacity
by priority is the controller's job. When pods go, their generated claims are deleted
and their devices freed; stale reservations are dropped.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from adapters.simulator import allocation, podclaims
from adapters.simulator.kube import JSON, Conflict, Kube, KubeError, NotFound, path
from adapters.simulator.world import World, is_ready_node, key
from fsm.quantity import QuantityError, parse_quantity

__all__ = ["FINALIZER", "SCHEDULER_NAME", "Scheduler"]

log = logging.getLogger(__name__)

FINALIZER = "resource.kubernetes.io/delete-protection"
SCHEDULER_NAME = "default-scheduler"
_RESOURCE = "resource.k8s.io/v1"
_NOT_HELPFUL = "Preemption is not helpful for scheduling"
_TERMINAL = ("Succeeded", "Failed")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _claim_url(namespace: str, name: str, subresource: str | None = None) -> str:
    return path(_RESOURCE, "resourceclaims", name, namespace=namespace, subresource=subresource)


class _Unschedulable(Exception):
    def __init__(self, message: str, reason: str = "Unschedulable") -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


class Scheduler:
    def __init__(
        self,
        kube: Kube,
        *,
        scheduler_name: str = SCHEDULER_NAME,
        namespaces: Collection[str] | None = None,
    ) -> None:
        """`namespaces`: act only on pods and claims there (None: everywhere); what
        other claims hold still counts as taken."""
        self.kube = kube
        self.scheduler_name = scheduler_name
        self.namespaces = frozenset(namespaces) if namespaces is not None else None
        self._last_fingerprint: tuple[str, ...] | None = None

    def run_pass(self, world: World) -> bool:
        """One pass; True when it wrote something (the world changed under it)."""
        wrote = self._clean_up(world)
        if world.fingerprint == self._last_fingerprint and not wrote:
            return False
        self._last_fingerprint = world.fingerprint
        inventory = allocation.Inventory.from_objects(world.slices, world.device_classes)
        claims = world.claims_by_key()
        usage = allocation.Usage.from_claims(c for c in world.claims if _allocated(c))
        for pod in sorted(self._pending(world), key=_queue_order):
            try:
                wrote |= self._schedule(pod, world, inventory, claims, usage)
            except _Unschedulable as why:
                wrote |= self._mark_unschedulable(pod, why.reason, why.message)
            except KubeError as err:  # raced with someone; the next pass sees the news
                log.info("scheduling %s/%s: %s", *key(pod), err)
        return wrote

    def _pending(self, world: World) -> list[JSON]:
        return [
            pod
            for pod in world.pods
            if not pod.get("spec", {}).get("nodeName")
            and not pod["metadata"].get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase", "Pending") not in _TERMINAL
            and pod.get("spec", {}).get("schedulerName", SCHEDULER_NAME) == self.scheduler_name
            and self._mine(pod)
        ]

    def _mine(self, obj: Mapping[str, Any]) -> bool:
        return self.namespaces is None or key(obj)[0] in self.namespaces

    # --- one pod --------------------------------------------------------------------

    def _schedule(
        self,
        pod: JSON,
        world: World,
        inventory: allocation.Inventory,
        claims: dict[tuple[str, str], JSON],
        usage: allocation.Usage,
    ) -> bool:
        namespace, name = key(pod)
        try:
            entries = podclaims.pod_claims(pod)
        except podclaims.PodClaimsError as err:
            raise _Unschedulable(str(err)) from err
        resolved = [self._claim_for(pod, entry, claims) for entry in entries]
        self._record_statuses(pod, entries, resolved)
        nodes = sorted(
            (n for n in world.nodes if is_ready_node(n)), key=lambda n: n["metadata"]["name"]
        )
        if not nodes:
            raise _Unschedulable("no nodes available to schedule pods")
        failures: Counter[str] = Counter()
        for node in nodes:
            node_name = node["metadata"]["name"]
            why = _node_misfit(pod, node, world)
            if why is None:
                why = _held_elsewhere(resolved, node_name)
            if why is not None:
                failures[why] += 1
                continue
            trial = usage.copy()
            results: dict[tuple[str, str], list[dict[str, Any]]] = {}
            for claim in resolved:
                if _allocated(claim):
                    continue
                try:
                    found = allocation.allocate_claim(
                        "/".join(key(claim)), claim.get("spec") or {}, node_name, inventory, trial
                    )
                except allocation.AllocationError as err:
                    raise _Unschedulable(
                        f'running Filter plugin "DynamicResources": {err}', "SchedulerError"
                    ) from err
                if found is None:
                    break
                results[key(claim)] = found
            else:
                self._commit(
                    pod, node_name, resolved, results=results, inventory=inventory, claims=claims
                )
                usage.exclusive, usage.consumed = trial.exclusive, trial.consumed
                log.info("bound %s/%s to %s", namespace, name, node_name)
                return True
            failures[allocation.CANNOT_ALLOCATE] += 1
        raise _Unschedulable(_fit_error(len(nodes), failures))

    def _claim_for(
        self, pod: JSON, entry: podclaims.PodClaim, claims: dict[tuple[str, str], JSON]
    ) -> JSON:
        namespace, pod_name = key(pod)
        if entry.claim is not None:
            claim = claims.get((namespace, entry.claim))
            if claim is None:
                raise _Unschedulable(
                    f'pod "{namespace}/{pod_name}": resourceclaim "{entry.claim}" not found'
                )
        else:
            claim = self._generated(pod, entry, claims)
        if claim["metadata"].get("deletionTimestamp"):
            raise _Unschedulable(f'resourceclaim "{claim["metadata"]["name"]}" is being deleted')
        return claim

    def _generated(
        self, pod: JSON, entry: podclaims.PodClaim, claims: dict[tuple[str, str], JSON]
    ) -> JSON:
        namespace, pod_name = key(pod)
        uid = pod["metadata"]["uid"]
        for claim in claims.values():
            meta = claim["metadata"]
            if (
                meta.get("namespace") == namespace
                and _controller_uid(claim) == uid
                and (meta.get("annotations") or {}).get(podclaims.POD_CLAIM_NAME_ANNOTATION)
                == entry.name
            ):
                return claim
        template = self.kube.get(
            path(_RESOURCE, "resourceclaimtemplates", str(entry.template), namespace=namespace)
        )
        if template is None:
            raise _Unschedulable(
                f'pod "{namespace}/{pod_name}": resourceclaimtemplate "{entry.template}" not found'
            )
        inner = (template.get("spec") or {}).get("metadata") or {}
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "generateName": f"{pod_name}-{entry.name}-",
                "namespace": namespace,
                "labels": dict(inner.get("labels") or {}),
                "annotations": {
                    **(inner.get("annotations") or {}),
                    podclaims.POD_CLAIM_NAME_ANNOTATION: entry.name,
                },
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": pod_name,
                        "uid": uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": (template.get("spec") or {}).get("spec") or {},
        }
        created = self.kube.create(path(_RESOURCE, "resourceclaims", namespace=namespace), body)
        claims[key(created)] = created
        return created

    def _record_statuses(
        self, pod: JSON, entries: Sequence[podclaims.PodClaim], resolved: Sequence[JSON]
    ) -> None:
        statuses = [
            {"name": entry.name, "resourceClaimName": claim["metadata"]["name"]}
            for entry, claim in zip(entries, resolved, strict=True)
            if entry.template is not None
        ]
        if not statuses or podclaims.claim_statuses(pod) == {
            s["name"]: s["resourceClaimName"] for s in statuses
        }:
            return
        namespace, name = key(pod)
        url = path("v1", "pods", name, namespace=namespace)
        # The 1.20 server drops the status field; the annotation carries it there.
        text = json.dumps(statuses, separators=(",", ":"))
        self.kube.strategic_patch(
            url, {"metadata": {"annotations": {podclaims.CLAIM_STATUSES_ANNOTATION: text}}}
        )
        self.kube.strategic_patch(url + "/status", {"status": {"resourceClaimStatuses": statuses}})

    def _commit(
        self,
        pod: JSON,
        node_name: str,
        resolved: Sequence[JSON],
        *,
        results: Mapping[tuple[str, str], list[dict[str, Any]]],
        inventory: allocation.Inventory,
        claims: dict[tuple[str, str], JSON],
    ) -> None:
        namespace, name = key(pod)
        reservation = {"resource": "pods", "name": name, "uid": pod["metadata"]["uid"]}
        for original in resolved:
            claim = original
            claim_ns, claim_name = key(claim)
            reserved = list((claim.get("status") or {}).get("reservedFor") or ())
            if any(r.get("uid") == reservation["uid"] for r in reserved):
                continue
            finalizers = list(claim["metadata"].get("finalizers") or ())
            if FINALIZER not in finalizers:
                claim = self.kube.merge_patch(
                    _claim_url(claim_ns, claim_name),
                    {
                        "metadata": {
                            "finalizers": [*finalizers, FINALIZER],
                            "resourceVersion": claim["metadata"]["resourceVersion"],
                        }
                    },
                )
            status: dict[str, Any] = {"reservedFor": [*reserved, reservation]}
            if key(claim) in results:
                status["allocation"] = _allocation(claim, results[key(claim)], node_name, inventory)
            claims[key(claim)] = self.kube.merge_patch(
                _claim_url(claim_ns, claim_name, "status"),
                {
                    "metadata": {"resourceVersion": claim["metadata"]["resourceVersion"]},
                    "status": status,
                },
            )
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": pod["metadata"]["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        self.kube.create(
            path("v1", "pods", name, namespace=namespace, subresource="binding"), binding
        )

    def _mark_unschedulable(self, pod: JSON, reason: str, message: str) -> bool:
        for condition in (pod.get("status") or {}).get("conditions") or ():
            if condition.get("type") == "PodScheduled" and (
                condition.get("status"),
                condition.get("reason"),
                condition.get("message"),
            ) == ("False", reason, message):
                return False
        namespace, name = key(pod)
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": _now(),
        }
        try:
            self.kube.strategic_patch(
                path("v1", "pods", name, namespace=namespace, subresource="status"),
                {"status": {"conditions": [condition], "phase": "Pending"}},
            )
        except NotFound:
            return False
        log.info("%s/%s unschedulable: %s", namespace, name, message)
        return True

    # --- claims whose pods are gone ---------------------------------------------------

    def _clean_up(self, world: World) -> bool:
        live = {
            str(p["metadata"]["uid"])
            for p in world.pods
            if (p.get("status") or {}).get("phase") not in _TERMINAL
        }
        wrote = False
        for claim in world.claims:
            if not self._mine(claim):
                continue
            try:
                wrote |= self._clean_claim(claim, live)
            except (Conflict, NotFound):
                wrote = True  # changed under us: look again next pass
        return wrote

    def _clean_claim(self, claim: JSON, live: set[str]) -> bool:
        namespace, name = key(claim)
        meta = claim["metadata"]
        reserved = list((claim.get("status") or {}).get("reservedFor") or ())
        kept = [r for r in reserved if r.get("resource") != "pods" or r.get("uid") in live]
        owner = _controller_uid(claim)
        generated = owner is not None and podclaims.POD_CLAIM_NAME_ANNOTATION in (
            meta.get("annotations") or {}
        )
        orphaned = generated and owner not in live
        if kept != reserved:
            status: dict[str, Any] = {"reservedFor": kept or None}
            if not kept and not generated:
                status["allocation"] = None  # a shared claim nobody uses any more
            claim = self.kube.merge_patch(
                _claim_url(namespace, name, "status"),
                {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": status},
            )
            meta = claim["metadata"]
        if orphaned and not meta.get("deletionTimestamp"):
            self.kube.delete(_claim_url(namespace, name))
            claim = self.kube.get(_claim_url(namespace, name)) or {"metadata": {}}
            meta = claim["metadata"]
        if (
            (orphaned or meta.get("deletionTimestamp"))
            and not kept
            and FINALIZER in (meta.get("finalizers") or ())
        ):
            self.kube.merge_patch(
                _claim_url(namespace, name),
                {
                    "metadata": {
                        "finalizers": [f for f in meta["finalizers"] if f != FINALIZER] or None,
                        "resourceVersion": meta["resourceVersion"],
                    }
                },
            )
            log.info("released claim %s/%s", namespace, name)
            return True
        return kept != reserved or orphaned


# --- helpers ----------------------------------------------------------------------


def _allocated(claim: Mapping[str, Any]) -> bool:
    return bool((claim.get("status") or {}).get("allocation"))


def _controller_uid(obj: Mapping[str, Any]) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller") and ref.get("kind") == "Pod":
            return str(ref.get("uid"))
    return None


def _queue_order(pod: Mapping[str, Any]) -> tuple[int, str, str]:
    priority = int((pod.get("spec") or {}).get("priority") or 0)
    meta = pod["metadata"]
    return (-priority, str(meta.get("creationTimestamp", "")), str(meta.get("name", "")))


def _allocation(
    claim: Mapping[str, Any],
    results: list[dict[str, Any]],
    node_name: str,
    inventory: allocation.Inventory,
) -> dict[str, Any]:
    devices = (claim.get("spec") or {}).get("devices") or {}
    config: list[dict[str, Any]] = []
    # The allocator copies the classes' config first, then the claim's own.
    for request in devices.get("requests") or ():
        body = request.get("exactly") or {}
        class_name = body.get("deviceClassName")
        if class_name:
            config += [
                {"source": "FromClass", "requests": [request["name"]], **item}
                for item in inventory.class_config.get(str(class_name), ())
            ]
    config += [{"source": "FromClaim", **item} for item in devices.get("config") or ()]
    return {
        "devices": {"results": results, **({"config": config} if config else {})},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
            ]
        },
        "allocationTimestamp": _now(),
    }


def _held_elsewhere(claims: Sequence[JSON], node_name: str) -> str | None:
    for claim in claims:
        if not _allocated(claim):
            continue
        selector = claim["status"]["allocation"].get("nodeSelector") or {}
        for term in selector.get("nodeSelectorTerms") or ():
            for field in term.get("matchFields") or ():
                if field.get("key") == "metadata.name" and node_name not in field.get("values", ()):
                    return "node(s) did not match the allocated devices of a claim"
    return None


def _requests(pod: Mapping[str, Any]) -> dict[str, Fraction]:
    spec = pod.get("spec") or {}
    total: dict[str, Fraction] = {}
    for container in spec.get("containers") or ():
        for name, amount in ((container.get("resources") or {}).get("requests") or {}).items():
            try:
                total[name] = total.get(name, Fraction(0)) + parse_quantity(str(amount))
            except QuantityError:
                continue
    for container in spec.get("initContainers") or ():
        for name, amount in ((container.get("resources") or {}).get("requests") or {}).items():
            try:
                total[name] = max(total.get(name, Fraction(0)), parse_quantity(str(amount)))
            except QuantityError:
                continue
    return total


def _node_misfit(pod: Mapping[str, Any], node: Mapping[str, Any], world: World) -> str | None:
    if (node.get("spec") or {}).get("unschedulable"):
        return "node(s) were unschedulable"
    labels = node["metadata"].get("labels") or {}
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return "node(s) didn't match Pod's node affinity/selector"
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    node_name = node["metadata"]["name"]
    on_node = [
        p
        for p in world.pods
        if (p.get("spec") or {}).get("nodeName") == node_name
        and (p.get("status") or {}).get("phase") not in _TERMINAL
    ]
    if "pods" in allocatable and len(on_node) + 1 > int(allocatable["pods"]):
        return "Too many pods"
    used: dict[str, Fraction] = {}
    for other in on_node:
        for name, amount in _requests(other).items():
            used[name] = used.get(name, Fraction(0)) + amount
    for name, amount in sorted(_requests(pod).items()):
        if name not in allocatable:
            continue
        if used.get(name, Fraction(0)) + amount > parse_quantity(str(allocatable[name])):
            return f"Insufficient {name}"
    return None


def _fit_error(total: int, failures: Counter[str]) -> str:
    histogram = sorted(f"{count} {why}" for why, count in failures.items())
    message = f"0/{total} nodes are available: {', '.join(histogram)}."
    if all(not why.startswith("Insufficient") and why != "Too many pods" for why in failures):
        message += f" preemption: 0/{total} nodes are available: {total} {_NOT_HELPFUL}."
    return message
