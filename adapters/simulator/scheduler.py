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

It is event-driven: the `Simulator` hands it the pods that became pending (`enqueue`)
and the claims that changed or whose pod went (`clean_claim`); it reads nodes, claims
and what they hold from the `world.Store`. A pod that does not fit waits among the
unschedulable until something that could free capacity happens (a claim, pod, node,
slice or class changes), and not before its backoff (0.25 s doubling to 5 s; its end
also brings back a pod waiting for a template or claim it does not watch), as the real
scheduler's unschedulable queue does.

Pods wait in priority order (higher `spec.priority` first, then the oldest). It never
preempts: a device held by a lower-priority pod stays held (DRA.md) — freeing capacity
by priority is the controller's job. When pods go, their generated claims are deleted
and their devices freed; stale reservations are dropped.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from adapters.simulator import allocation, podclaims
from adapters.simulator.kube import JSON, Kube, KubeError, path
from adapters.simulator.world import CLAIMS, PODS, Store, is_ready_node, key, pod_requests
from fsm.quantity import parse_quantity

__all__ = ["FINALIZER", "SCHEDULER_NAME", "Scheduler"]

log = logging.getLogger(__name__)

FINALIZER = "resource.kubernetes.io/delete-protection"
SCHEDULER_NAME = "default-scheduler"
_RESOURCE = "resource.k8s.io/v1"
_NOT_HELPFUL = "Preemption is not helpful for scheduling"
_TERMINAL = ("Succeeded", "Failed")
_FIRST_BACKOFF = 0.25  # seconds a pod that did not fit waits at least, doubling
_MAX_BACKOFF = 5.0  # ... up to this: a template or claim we do not watch may appear


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
    """Schedules the pods it is told about (`enqueue`) and releases the claims it is told
    about (`clean_claim`); reads the cluster from the store, never by listing."""

    def __init__(
        self,
        kube: Kube,
        store: Store,
        *,
        scheduler_name: str = SCHEDULER_NAME,
        namespaces: Collection[str] | None = None,
        node_seed: int | None = None,
    ) -> None:
        """`namespaces`: act only on pods and claims there (None: everywhere); what
        other claims hold still counts as taken. `node_seed`: None tries the nodes by
        name, as the planner walks them, so each pod lands where its plan placed it; a
        seed tries them in a seeded random order for each pod, as a real scheduler's
        choice among equally scored nodes falls, so pods land where no plan said."""
        self.kube = kube
        self._node_order: random.Random | None = None
        self.choose_nodes(node_seed)
        self.store = store
        self.scheduler_name = scheduler_name
        self.namespaces = frozenset(namespaces) if namespaces is not None else None
        self._active: set[str] = set()  # pods to try at the next run
        # Pods that did not fit: uid -> (failures, not before). Retried when capacity may
        # have been freed, but each not before its backoff, as the real scheduler's
        # unschedulable queue does: a crowd of waiting pods must not be re-judged (and
        # their templates read) on every one of a rollout's claim events.
        self._unschedulable: dict[str, tuple[int, float]] = {}
        self.attempts = 0  # scheduling attempts made (tests and benchmarks count them)

    def choose_nodes(self, seed: int | None) -> None:
        """From now on, try the nodes by name (None) or in an order seeded by `seed`."""
        self._node_order = random.Random(seed) if seed is not None else None  # noqa: S311

    def mine(self, obj: Mapping[str, Any]) -> bool:
        return self.namespaces is None or key(obj)[0] in self.namespaces

    def wants(self, pod: Mapping[str, Any]) -> bool:
        """A pending pod of ours for this scheduler."""
        return (
            self.mine(pod)
            and (pod.get("spec") or {}).get("schedulerName", SCHEDULER_NAME) == self.scheduler_name
            and self.store.is_pending(pod)
        )

    def enqueue(self, uid: str) -> None:
        self._unschedulable.pop(uid, None)
        self._active.add(uid)

    def retry_unschedulable(self, *, force: bool = False) -> bool:
        """Capacity may have been freed: the pods that did not fit and whose backoff has
        passed (all of them, `force`) try again. True if any."""
        now = time.monotonic()
        due = [u for u, (_, after) in self._unschedulable.items() if force or after <= now]
        for uid in due:
            self._active.add(uid)
        return bool(due)

    @property
    def waiting(self) -> int:
        return len(self._unschedulable)

    def next_retry(self) -> float | None:
        """Seconds until the first waiting pod's backoff passes (None: none waits)."""
        if not self._unschedulable:
            return None
        return max(0.0, min(a for _, a in self._unschedulable.values()) - time.monotonic())

    def _failed(self, uid: str) -> None:
        failures = self._unschedulable.get(uid, (0, 0.0))[0] + 1
        backoff = min(_MAX_BACKOFF, _FIRST_BACKOFF * 2 ** (failures - 1))
        self._unschedulable[uid] = (failures, time.monotonic() + backoff)

    def run(self) -> bool:
        """Try every active pod, higher priority first; True when it bound one."""
        pods = []
        for uid in self._active:
            pod = self.store.get(PODS, uid)
            if pod is None:  # gone: it waits for nothing any more
                self._unschedulable.pop(uid, None)
            else:
                pods.append(pod)
        self._active.clear()
        bound = False
        for pod in sorted(pods, key=_queue_order):
            if not self.wants(pod):
                self._unschedulable.pop(str(pod["metadata"]["uid"]), None)
                continue
            self.attempts += 1
            uid = str(pod["metadata"]["uid"])
            try:
                bound |= self._schedule(pod)
                self._unschedulable.pop(uid, None)
            except _Unschedulable as why:
                self._failed(uid)
                self._mark_unschedulable(pod, why.reason, why.message)
            except KubeError as err:  # raced with someone; its event brings it back
                self._failed(uid)
                log.info("scheduling %s/%s: %s", *key(pod), err)
        return bound

    # --- one pod --------------------------------------------------------------------

    def _schedule(self, pod: JSON) -> bool:
        namespace, name = key(pod)
        try:
            entries = podclaims.pod_claims(pod)
        except podclaims.PodClaimsError as err:
            raise _Unschedulable(str(err)) from err
        resolved = [self._claim_for(pod, entry) for entry in entries]
        pod = self._record_statuses(pod, entries, resolved)
        nodes = [n for n in self.store.nodes() if is_ready_node(n)]
        if not nodes:
            raise _Unschedulable("no nodes available to schedule pods")
        if self._node_order is not None:
            self._node_order.shuffle(nodes)
        inventory = self.store.inventory()
        usage = self.store.usage.copy()
        failures: Counter[str] = Counter()
        for node in nodes:
            node_name = node["metadata"]["name"]
            why = _node_misfit(pod, node, self.store)
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
                self._commit(pod, node_name, resolved, results=results, inventory=inventory)
                log.info("bound %s/%s to %s", namespace, name, node_name)
                return True
            failures[allocation.CANNOT_ALLOCATE] += 1
        raise _Unschedulable(_fit_error(len(nodes), failures))

    def _claim_for(self, pod: JSON, entry: podclaims.PodClaim) -> JSON:
        namespace, pod_name = key(pod)
        if entry.claim is not None:
            claim = self.store.get_by_name(CLAIMS, namespace, entry.claim)
            if claim is None:
                raise _Unschedulable(
                    f'pod "{namespace}/{pod_name}": resourceclaim "{entry.claim}" not found'
                )
        else:
            claim = self._generated(pod, entry)
        if claim["metadata"].get("deletionTimestamp"):
            raise _Unschedulable(f'resourceclaim "{claim["metadata"]["name"]}" is being deleted')
        return claim

    def _generated(self, pod: JSON, entry: podclaims.PodClaim) -> JSON:
        namespace, pod_name = key(pod)
        uid = pod["metadata"]["uid"]
        for claim_uid in sorted(self.store.claims_by_pod.get(uid)):
            claim = self.store.get(CLAIMS, claim_uid)
            if (
                claim is not None
                and (claim["metadata"].get("annotations") or {}).get(
                    podclaims.POD_CLAIM_NAME_ANNOTATION
                )
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
        self.store.wrote(CLAIMS, created)
        return created

    def _record_statuses(
        self, pod: JSON, entries: Sequence[podclaims.PodClaim], resolved: Sequence[JSON]
    ) -> JSON:
        statuses = [
            {"name": entry.name, "resourceClaimName": claim["metadata"]["name"]}
            for entry, claim in zip(entries, resolved, strict=True)
            if entry.template is not None
        ]
        if not statuses or podclaims.claim_statuses(pod) == {
            s["name"]: s["resourceClaimName"] for s in statuses
        }:
            return pod
        namespace, name = key(pod)
        url = path("v1", "pods", name, namespace=namespace)
        # The 1.20 server drops the status field; the annotation carries it there.
        text = json.dumps(statuses, separators=(",", ":"))
        self.kube.strategic_patch(
            url, {"metadata": {"annotations": {podclaims.CLAIM_STATUSES_ANNOTATION: text}}}
        )
        written = self.kube.strategic_patch(
            url + "/status", {"status": {"resourceClaimStatuses": statuses}}
        )
        self.store.wrote(PODS, written)
        return written

    def _commit(
        self,
        pod: JSON,
        node_name: str,
        resolved: Sequence[JSON],
        *,
        results: Mapping[tuple[str, str], list[dict[str, Any]]],
        inventory: allocation.Inventory,
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
            written = self.kube.merge_patch(
                _claim_url(claim_ns, claim_name, "status"),
                {
                    "metadata": {"resourceVersion": claim["metadata"]["resourceVersion"]},
                    "status": status,
                },
            )
            self.store.wrote(CLAIMS, written)  # the devices count as held from now on
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": pod["metadata"]["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        self.kube.create(
            path("v1", "pods", name, namespace=namespace, subresource="binding"), binding
        )
        self.store.assume_bound(pod, node_name)

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
            written = self.kube.strategic_patch(
                path("v1", "pods", name, namespace=namespace, subresource="status"),
                {"status": {"conditions": [condition], "phase": "Pending"}},
            )
        except KubeError as err:  # gone or changed: its own event brings it back
            log.info("%s/%s unschedulable, not recorded: %s", namespace, name, err)
            return False
        self.store.wrote(PODS, written)
        log.info("%s/%s unschedulable: %s", namespace, name, message)
        return True

    # --- claims whose pods are gone ---------------------------------------------------

    def clean_claim(self, uid: str) -> bool:
        """Drop the claim's reservations of pods that are gone, deallocate a shared claim
        nobody reserves, delete a generated claim whose pod is gone and release its
        finalizer. True when it wrote something."""
        claim = self.store.get(CLAIMS, uid)
        if claim is None or not self.mine(claim):
            return False
        namespace, name = key(claim)
        meta = claim["metadata"]
        reserved = list((claim.get("status") or {}).get("reservedFor") or ())
        kept = [
            r for r in reserved if r.get("resource") != "pods" or self.store.pod_live(r.get("uid"))
        ]
        owner = _controller_uid(claim)
        generated = owner is not None and podclaims.POD_CLAIM_NAME_ANNOTATION in (
            meta.get("annotations") or {}
        )
        orphaned = generated and owner is not None and not self.store.pod_live(owner)
        if kept != reserved:
            status: dict[str, Any] = {"reservedFor": kept or None}
            if not kept and not generated:
                status["allocation"] = None  # a shared claim nobody uses any more
            claim = self.kube.merge_patch(
                _claim_url(namespace, name, "status"),
                {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": status},
            )
            self.store.wrote(CLAIMS, claim)
            meta = claim["metadata"]
        if orphaned and not meta.get("deletionTimestamp"):
            self.kube.delete(_claim_url(namespace, name))
            claim = self.kube.get(_claim_url(namespace, name)) or {"metadata": {}}
            meta = claim["metadata"]
            if meta.get("uid"):
                self.store.wrote(CLAIMS, claim)
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


def _node_misfit(pod: Mapping[str, Any], node: Mapping[str, Any], store: Store) -> str | None:
    if (node.get("spec") or {}).get("unschedulable"):
        return "node(s) were unschedulable"
    labels = node["metadata"].get("labels") or {}
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return "node(s) didn't match Pod's node affinity/selector"
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    pods, used = store.node_load(node["metadata"]["name"])
    if "pods" in allocatable and pods + 1 > int(allocatable["pods"]):
        return "Too many pods"
    for name, amount in sorted(pod_requests(pod).items()):
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
