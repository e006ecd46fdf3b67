"""The core's commands, carried out: one `match`, every write through the one Writer.

`Actor.act(order, state, command)` returns the observation the command produced (for
the pass to record) or None. Applying the workload is level-based: what the plan renders
is compared with the cached live objects; missing or drifted objects are (re-)applied,
objects the order owns that nothing renders any more are deleted (converging.py). The
copy of a CustomCertificate Secret is kept equal by delete and create, never a patch
(certificates.py). The status is written only when it differs from the live one, with
the order's UID as a precondition.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from adapters.kubernetes import certificates, converging, errors, kinds, taken_records, tokens
from adapters.kubernetes.background import Background
from adapters.kubernetes.converged import Converged
from adapters.kubernetes.observing import old_pods_gone, secret_value
from adapters.kubernetes.rendering import (
    AUTH_SECRET_KEY,
    AUTH_SECRET_UID_ANNOTATION,
    RenderError,
    certificate_source,
    render_workload,
)
from adapters.kubernetes.rest import Resource
from adapters.kubernetes.settings import Settings
from adapters.kubernetes.watching import Obj
from adapters.kubernetes.world import ClusterCache
from adapters.kubernetes.writing import Writer
from adapters.probes.http import Prober
from adapters.probes.targets import TargetResolver
from fsm import effects
from fsm import observations as ob
from fsm.decide import STALE_FACTS_NOTE, probe_is_news
from fsm.explain import who_can_act
from fsm.identity import OrderRef, auth_secret_name, tls_secret_name
from fsm.placement.arbitration import TAKEN_ANNOTATION, Taking
from fsm.placement.recipes import Recipe
from fsm.reasons import ROLLOUT_STEPS, ConditionStatus, ConditionType, Reason, Who
from fsm.state import Condition, OrderState, serving_basis

__all__ = ["AUTH_SECRET_CONFLICT_RECHECK", "Acted", "Actor"]

log = logging.getLogger(__name__)

# Seconds until an order whose token's name is taken by a Secret not its own looks again
# (fsm/reasons.py says 30 s to the user).
AUTH_SECRET_CONFLICT_RECHECK = 30.0
# Seconds until a refused release of a dropped plan's Deployment is tried again.
RELEASE_RETRY = 5.0
# The field manager that holds a Deployment's replica count between our last apply that
# set it and the HPA's first scale (Actor._hand_replicas_over).
REPLICAS_HANDOVER = "ai-inference-handover-to-hpa"

_RESOURCES = {
    "ResourceClaimTemplate": kinds.RESOURCE_CLAIM_TEMPLATES,
    "Service": kinds.SERVICES,
    "Deployment": kinds.DEPLOYMENTS,
    "Ingress": kinds.INGRESSES,
    "Secret": kinds.SECRETS,
}


@dataclass(frozen=True, slots=True)
class _RenderInputs:
    """All a render of the order's workload depends on: what `Converged` compares to tell
    that a repair pass would find what the last one found (the order is its note's key)."""

    command: effects.ApplyWorkload
    settings: Settings
    recipe: Recipe | None
    token_uid: str | None


@dataclass
class Acted:
    """What carrying out a command left for the pass: an observation to record, and
    when to look again."""

    observation: ob.Observation | None = None
    requeue: list[float] = field(default_factory=list)


class _SurplusKept(errors.APIError):
    """A key removed from a map that must be exactly ours is put back at once."""


class Actor:
    def __init__(
        self,
        *,
        world: ClusterCache,
        writer: Writer,
        targets: TargetResolver,
        settings: Callable[[], Settings],
        hpa_api_version: str,
        recipe: Callable[[str], Recipe | None],
        unusable_recipe: Callable[[str], str | None],
        background: Background,
        rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None,
        namespace: str,
        prober: Prober,
        proxy_env: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self._world = world
        # The controller's: where CustomCertificate Secrets are, but the platform's global one.
        self._namespace = namespace
        self._writer = writer
        self._targets = targets
        self._settings = settings
        self._hpa_api_version = hpa_api_version
        self._proxy_env = proxy_env
        self._recipe = recipe
        self._unusable_recipe = unusable_recipe
        self._background = background
        self._prober = prober  # keeps a connection per endpoint between probes
        self._rewrite = rewrite
        self.repairs = 0  # objects re-applied or pruned because the live world drifted
        self.converged = Converged()  # the workloads last found as rendered, live

    def act(
        self, order: OrderRef, state: OrderState, command: effects.Command, now: datetime
    ) -> Acted:
        match command:
            case effects.EnsureAuthSecret():
                return self._token(order, state, now)
            case effects.ApplyWorkload():
                return Acted(self._workload(order, state, command, now))
            case effects.ReleaseWorkload():
                return self._release(order)
            case effects.ScheduleProbe():
                return self._probe(order, state, command.after_seconds, now)
            case effects.Recheck():
                return Acted(requeue=[command.after_seconds])
            case effects.PublishStatus() | effects.RequestPlan():
                raise TypeError(f"{type(command).__name__} is the pass's own (log and lock)")
        raise TypeError(f"unknown command {type(command).__name__}")

    # -- the token ---------------------------------------------------------------------

    def _token_secret(self, order: OrderRef, name: str) -> Obj | None:
        """The order's token Secret: the cache's copy, else a live read (made a moment ago
        and not back through the watch yet)."""
        live = self._world.token_secrets.get_by_name(order.namespace, name, copy_=False)
        return live if live is not None else self._writer.get(kinds.SECRETS, order.namespace, name)

    def _token(self, order: OrderRef, state: OrderState, now: datetime) -> Acted:
        name = auth_secret_name(order.name)
        cached = self._world.token_secrets.get_by_name(order.namespace, name, copy_=False)
        # Another order's UID on it (relabelled): made again with its labels, as when
        # they are removed (tokens.py).
        if cached is None or not tokens.in_place(cached, order):
            if state.auth_secret_name is not None:
                # Made before and gone now: perhaps by the garbage collector, for an order
                # the API server has deleted and the cache still holds (its watch
                # reconnecting). Made again unread, each new Secret would be collected and
                # its deletion wake the order again: a storm of creates, seen here at 65 a
                # second after an API server restart, until the order's deletion arrived.
                try:
                    if self._order_gone(order):
                        return Acted()  # its deletion is on its way through the watch
                except errors.APIError as exc:
                    return Acted(ob.ApplyFailed(at=now, message=str(exc)[:500]))
            # Created without a live read first: for a new order that read was a 404 each
            # time. One that exists (the cache behind) answers the create with a conflict,
            # and `ensure_auth_secret` reads it then. Waited for in the cache, as every
            # child is: the render that follows reads its uid there, not from the server.
            try:
                secret = tokens.ensure_auth_secret(self._writer, order)
            except tokens.AuthSecretConflict as exc:
                # The order's to say (its author can rename or delete that Secret), not a
                # pass error retried in the log only. Its going away wakes nothing (it
                # is not ours, so not watched): look again later.
                reason = Reason.AUTH_SECRET_CONFLICT
                failed = ob.ApplyFailed(at=now, message=str(exc)[:500], reason=reason)
                return Acted(failed, requeue=[AUTH_SECRET_CONFLICT_RECHECK])
            except tokens.TokenError as exc:
                # Refused as a child's apply is (a quota on Secrets, a namespace being
                # deleted, RBAC): said on the order and tried again on the apply backoff.
                return Acted(ob.ApplyFailed(at=now, message=str(exc)[:500]))
            self._read_own_write(secret)
            name = str(secret["metadata"]["name"])
        return Acted(ob.AuthSecretSeen(at=now, name=name))

    def _token_uid(self, order: OrderRef, name: str | None) -> str | None:
        live = self._token_secret(order, name) if name is not None else None
        return str(live["metadata"]["uid"]) if live is not None else None

    # -- the workload ------------------------------------------------------------------

    def _render_inputs(self, order: OrderRef, command: effects.ApplyWorkload) -> _RenderInputs:
        recipe = self._recipe(command.plan.recipe)
        token_uid = self._token_uid(order, command.auth_secret_name)
        return _RenderInputs(command, self._settings(), recipe, token_uid)

    def _render(self, order: OrderRef, inputs: _RenderInputs) -> list[dict[str, Any]]:
        command = inputs.command
        if inputs.recipe is None:
            raise RenderError(self._recipe_unusable(command.plan.recipe))
        docs = render_workload(
            # Stamped with the generation its content comes from, not the live order's:
            # a repair between an edit and its replan renders the plan in force from what
            # it was applied with, and the new generation alone made every child differ,
            # re-applied with the old plan and then again with the new one.
            replace(order, generation=command.generation),
            command.plan,
            inputs.recipe,
            command.policy,
            command.model_ref,
            settings=inputs.settings,
            facts=command.facts,
            auth_secret=command.auth_secret_name,
            auth_secret_uid=inputs.token_uid,
            hpa_api_version=self._hpa_api_version,
            proxy_env=self._proxy_env,
        )
        # Stamped before the arbiter's replicas are taken out (_keep_priority_replicas):
        # a take is not a change of what the order should run.
        return [converging.stamped(self._rewrite(doc) if self._rewrite else doc) for doc in docs]

    def _recipe_unusable(self, name: str) -> str:
        """Why the plan's recipe cannot be rendered: no other recipe took over from it
        (another that can is recorded by the pass as `RecipeReplaced`)."""
        why = self._unusable_recipe(name) or f"launch recipe {name!r} is not read yet"
        return f"{why}; the workload runs on as last applied"

    def _certificate(
        self, order: OrderRef, source: tuple[str | None, str] | None
    ) -> dict[str, Any] | None:
        """The copy of the CustomCertificate Secret `source` (the one the order's Ingress
        names, if any; its namespace None: the controller's)."""
        if source is None:
            return None
        namespace, name = source[0] or self._namespace, source[1]
        secret = self._world.secrets.get_by_name(namespace, name)
        return certificates.copy_of(order, secret, namespace=namespace, name=name)

    def _live(self, order: OrderRef) -> dict[converging.Key, Obj]:
        # Read only (compared, never changed): no copy of every child on every pass.
        children = self._world.children_of(order.uid, order.namespace, copy_=False)
        return {converging.key_of(obj): obj for obj in children}

    def _workload(
        self, order: OrderRef, state: OrderState, command: effects.ApplyWorkload, now: datetime
    ) -> ob.Observation | None:
        live = self._live(order)
        inputs = self._render_inputs(order, command)
        try:
            source = certificate_source(order, command.policy, inputs.settings)
        except RenderError as exc:  # CustomCertificate naming no Secret
            return ob.ApplyFailed(at=now, message=str(exc)[:500])
        # An Ingress naming a CustomCertificate copies a Secret the inputs do not show:
        # such a workload is never taken as converged from a note (converged.py).
        noted = source is None
        if command.repair and noted and self.converged.holds(order.uid, inputs, live):
            return None  # rendered from the same inputs, compared with the same parts: as before
        try:
            docs = self._render(order, inputs)
            certificate = self._certificate(order, source)
        except certificates.CertificateSecretMissing as exc:
            reason = Reason.CERTIFICATE_SECRET_MISSING
            return ob.ApplyFailed(at=now, message=str(exc)[:500], reason=reason)
        except RenderError as exc:
            return ob.ApplyFailed(at=now, message=str(exc)[:500])
        _keep_priority_replicas(docs, live)
        # Only what differs from the live objects is sent, a new plan's workload too: after
        # a crash between the applies and their record in the log, the restart applies
        # what is missing and rewrites nothing that is already as the plan renders it.
        # The pods a Service must select: not those that ended (an evicted pod kept from
        # before a mesh webhook would make its key look like one that selects nothing).
        pod_labels = [
            (pod.get("metadata") or {}).get("labels") or {}
            for pod in self._world.pods_of(order.uid, order.namespace)
            if (pod.get("status") or {}).get("phase") not in ("Failed", "Succeeded")
        ]
        changed = converging.drifted(docs, live, pod_labels)
        wanted = list(docs)
        copied = False
        try:
            creates = any(converging.key_of(doc) not in live for doc in changed) or (
                certificate is not None and converging.key_of(certificate) not in live
            )
            if creates and self._order_gone(order):
                return None  # its deletion is on its way through the watch, and closes it
            if certificate is not None:  # the copy before the Ingress that names it
                wanted.append(certificate)
                copied = self._keep_certificate(order, certificate, live)
            kept_back = self._apply_changed(order, changed, live, pod_labels, command.repair)
            if command.auth_secret_name:
                wanted.append({"kind": "Secret", "metadata": {"name": command.auth_secret_name}})
            strays = self._prune_strays(order, wanted, live)
            if kept_back is not None:
                raise kept_back
        except errors.APIError as exc:
            return ob.ApplyFailed(at=now, message=str(exc)[:500])
        # Not noted as converged while a selector holds a key we let be for the pods that
        # carry it: the note does not see pods, and new ones may not carry it.
        let_be = any(
            converging.surplus(current, doc)
            for doc in docs
            if (current := live.get(converging.key_of(doc))) is not None
        )
        if command.repair and noted and not changed and not strays and not let_be:
            self.converged.found(order.uid, inputs, docs, live)
        if command.repair:
            repaired = [converging.key_of(d) for d in changed]
            if copied and certificate is not None:
                self.repairs += 1
                repaired.append(converging.key_of(certificate))
            if repaired:  # keys only, never an object: one may hold a private key
                log.info("%s: repaired %s", order.key, repaired)
            return None
        return ob.ApplySucceeded(at=now, plan=command.plan)

    def _release(self, order: OrderRef) -> Acted:
        """Delete the Deployment of a plan the order no longer holds (effects.dropped_plan):
        its pods go, and the devices they waited for stay with the planner's count."""
        live = self._world.deployments.get_by_name(order.namespace, order.name, copy_=False)
        if live is None or not converging.owned_by(live, order.uid):
            return Acted()
        try:
            self._writer.delete(
                kinds.DEPLOYMENTS, order.namespace, order.name, live["metadata"]["uid"]
            )
        except errors.APIError as exc:
            log.warning("%s: releasing the workload of a dropped plan: %s", order.key, exc)
            return Acted(requeue=[RELEASE_RETRY])
        log.info("%s: released the workload of a plan whose device class was tried", order.key)
        return Acted()

    def _apply_changed(
        self,
        order: OrderRef,
        changed: Sequence[Mapping[str, Any]],
        live: dict[converging.Key, Obj],
        pod_labels: Sequence[Mapping[str, Any]],
        repair: bool,
    ) -> _SurplusKept | None:
        """Apply each drifted object; a selector key put back at once is said after the
        rest is applied (a Deployment after the Service may bring pods that carry it)."""
        kept_back = None
        for doc in changed:
            try:
                self._apply(order, doc, live.get(converging.key_of(doc)), pod_labels)
            except _SurplusKept as exc:
                kept_back = exc
                continue
            if repair:
                self.repairs += 1  # counted once done: a refused repair repairs nothing
        return kept_back

    def _prune_strays(
        self, order: OrderRef, wanted: list[Any], live: dict[converging.Key, Obj]
    ) -> list[Mapping[str, Any]]:
        """Delete what the order owns and nothing renders any more; also its own children
        whose owner references were removed (an Ingress after a switch to ClusterLocal
        stayed public, and outlived the order)."""
        strays = converging.strays(wanted, live.values(), order.uid)
        disowned = converging.uncontrolled_strays(wanted, live.values())
        strays += [obj for obj in disowned if self._disowned(order, obj)]
        for stray in strays:
            self._prune(order, stray)
        return strays

    def _order_gone(self, order: OrderRef) -> bool:
        """A live read of the order before a child is created for it. The cache can be
        behind, most of all while watches reconnect after an API server restart; a child
        created for an order deleted a moment before is left to the garbage collector,
        which, when it has not seen that owner either, may hold it for minutes (a
        "virtual" owner re-checked with an exponential back-off)."""
        live = self._writer.get(kinds.INFERENCE_SERVICES, order.namespace, order.name)
        return live is None or (live.get("metadata") or {}).get("uid") != order.uid

    def _keep_certificate(
        self, order: OrderRef, certificate: dict[str, Any], live: dict[converging.Key, Obj]
    ) -> bool:
        current = live.get(converging.key_of(certificate))
        return certificates.keep_equal(
            self._writer,
            order,
            certificate,
            current,
            read_back=self._read_own_write,
            disowned=lambda obj: self._disowned(order, obj),
        )

    def _apply(
        self,
        order: OrderRef,
        doc: Mapping[str, Any],
        live: Obj | None,
        pod_labels: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        if live is not None and not converging.owned_by(live, order.uid):
            # Labelled as the order's, not owned by it: ours with its owner references
            # removed (applied again: that puts them back), or a user's object made from
            # a saved copy of ours (`kubectl replace --force`, owner references stripped).
            # An apply would take the second over, and it would be deleted with the order.
            if not self._disowned(order, live):
                raise _name_taken(order, live)
            log.info("%s: %s %s had lost its owner reference", order.key, *converging.key_of(live))
        self._hand_replicas_over(order, doc, live)
        try:
            if live is None:
                live = self._unclaimed(order, doc)
            written = self._writer.apply(doc)
            self._read_own_write(self._without_surplus(order, doc, written, pod_labels))
        except errors.APIInvalidError:
            if live is None and doc.get("kind") not in _MERGED_INTO:
                # A Deployment's or a claim template's namesake is refused whole (its
                # selector, its spec are immutable): say whose it is, not the API's
                # "field is immutable". Read only now: the usual create needs no read.
                _, name = converging.key_of(doc)
                found = self._writer.get(self._resource(doc), order.namespace, name)
                if found is not None and not converging.owned_by(found, order.uid):
                    raise _name_taken(order, found) from None
            if live is None or not converging.owned_by(live, order.uid):
                raise
            # A manifest the API refuses on its own (a recipe's env name with "=") fails
            # the same made anew: deleting first would take down what runs, for nothing.
            refused = self._writer.refused(doc)
            if refused is not None:
                raise refused from None
            # An edit apply cannot undo (a Service retyped to ExternalName keeps the
            # user's externalName, a claim template's spec is immutable): the object is
            # ours, so it is made anew; not for an order already gone (`_order_gone`).
            if self._order_gone(order):
                return
            meta = live["metadata"]
            self._writer.delete(self._resource(live), order.namespace, meta["name"], meta["uid"])
            self._read_own_write(self._writer.apply(doc))

    def _disowned(self, order: OrderRef, live: Mapping[str, Any]) -> bool:
        """Whether `live`, labelled as the order's child and controlled by nothing, is
        our own object whose owner references someone removed (converging.disowned, on
        one live read: the cache drops managedFields). Left so, it was never repaired,
        and outlived its order, GPU pods and all."""
        if converging.controlled(live):
            return False  # someone else's controller: not ours to take
        _, name = converging.key_of(live)
        fresh = self._writer.get(self._resource(live), order.namespace, name)
        return (
            fresh is not None
            and (fresh.get("metadata") or {}).get("uid") == live["metadata"].get("uid")
            and converging.disowned(fresh, order.uid, self._writer.field_manager)
        )

    def _without_surplus(
        self,
        order: OrderRef,
        doc: Mapping[str, Any],
        written: Obj,
        pod_labels: Sequence[Mapping[str, Any]],
    ) -> Obj:
        """`written` (the apply's answer) less the keys someone else added to a map that
        must be exactly ours (a Service's selector: one key more and it selects none of
        the order's pods). The forced apply leaves them, as they are another manager's
        fields; a merge patch, conditional on the version just applied, removes them. A
        write in between (409) is a change that wakes the order: its pass looks again. A
        key put back as it is removed (a mutating webhook) is said on the order and tried
        again on the apply's backoff, not patched away in every pass."""
        extra = converging.surplus(written, doc, pod_labels)
        if extra is None:
            return written
        meta = written["metadata"]
        body = {**extra, "metadata": {"resourceVersion": meta["resourceVersion"]}}
        try:
            patched = self._writer.patch(self._resource(doc), order.namespace, meta["name"], body)
        except errors.APIConflictError:
            return written
        kind, name = converging.key_of(doc)
        kept = converging.surplus(patched, doc, pod_labels)
        if kept is not None:
            raise _SurplusKept(
                f"{kind} {order.namespace}/{name}: {kept} is put back as soon as it is "
                "removed (a mutating admission webhook?), and the order's pods do not carry "
                "it: the Service selects none of them"
            )
        log.info("%s: removed %s from %s %s", order.key, extra, kind, name)
        return patched

    def _unclaimed(self, order: OrderRef, doc: Mapping[str, Any]) -> Obj | None:
        """The live object of `doc`'s name, missing from the cache: None when there is
        none; NameTaken when it is not the order's. The cache holds only the order's
        labelled objects, so one of that name it does not show may be someone else's (a
        user's own Service, a deleted namesake's child the garbage collector has not
        reached). Server-side apply merges into maps and keyed lists field by field, so
        a forced apply, or even an unforced one, would take it over: our selector added
        to theirs, our owner reference on it, deleted with the order. Read first, for
        the kinds that merge so; a Deployment's selector and a claim template's spec are
        immutable, so the API refuses those whole (422) and nothing is taken."""
        if doc.get("kind") not in _MERGED_INTO:
            return None
        _, name = converging.key_of(doc)
        found = self._writer.get(self._resource(doc), order.namespace, name)
        if found is None or converging.owned_by(found, order.uid):
            return found
        raise _name_taken(order, found)

    def _hand_replicas_over(
        self, order: OrderRef, doc: Mapping[str, Any], live: Obj | None
    ) -> None:
        """Before the first apply of a Deployment that stops setting its replicas (an HPA
        now owns the count): an apply that leaves out a field only its applier owned
        removes it, and the count falls to the default of 1, killing running replicas
        until the HPA scales back (if it ever wrote one). So the count is first applied
        as it is under REPLICAS_HANDOVER, which keeps it owned; the HPA takes it over
        when it scales. Kubernetes' server-side apply documents this hand-over."""
        if doc.get("kind") != "Deployment" or "replicas" in (doc.get("spec") or {}):
            return
        if live is None or (live.get("spec") or {}).get("replicas") is None:
            return
        # The cache drops managedFields (watching.py): one read, before this rare apply.
        fresh = self._writer.get(kinds.DEPLOYMENTS, order.namespace, order.name)
        if fresh is None or not _replicas_applied_by(fresh, self._writer.field_manager):
            return
        meta = fresh["metadata"]
        self._writer.apply(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "spec": {"replicas": fresh["spec"]["replicas"]},
            },
            field_manager=REPLICAS_HANDOVER,
        )

    def _resource(self, obj: Mapping[str, Any]) -> Resource:
        """The API resource of one of an order's objects (an HPA's version is discovered)."""
        kind = str(obj.get("kind"))
        return _RESOURCES.get(kind) or self._writer.resource_for(str(obj.get("apiVersion")), kind)

    def _read_own_write(self, written: Obj) -> None:
        """Wait (bounded) for the watch to bring back what was just written, so the next
        pass compares with it and does not apply the same object again."""
        kind = str(written.get("kind"))
        meta = written.get("metadata") or {}
        for informer in self._world.owned_kinds:
            if informer.resource.kind == kind:
                informer.wait_for_rv(str(meta.get("uid")), str(meta.get("resourceVersion")), 5.0)

    def _prune(self, order: OrderRef, stray: Mapping[str, Any]) -> None:
        kind, name = converging.key_of(stray)
        self.repairs += 1
        uid = str(stray["metadata"]["uid"])
        if kind == "Ingress":
            # Before the Ingress: nothing but the Ingress being there makes a pass look for
            # this Secret, so a failure (or a crash) after the Ingress went orphaned it, a
            # private key with it. A failure here leaves the Ingress, pruned again next pass.
            self._prune_tls_secret(order, stray)
        self._writer.delete(self._resource(stray), order.namespace, name, uid)
        log.info("%s: pruned %s %s", order.key, kind, name)
        if kind == "Ingress":
            self._prune_tls_secret(order, stray)  # cert-manager may have issued it again

    def _prune_tls_secret(self, order: OrderRef, ingress: Mapping[str, Any]) -> None:
        """cert-manager's Secret for the order's Ingress goes with it — only if cert-manager
        made it for that Ingress: it names the Certificate after the Secret, and the
        certificate is for the Ingress's host, or was issued after the Ingress was made
        (for a host the Ingress had before the domain changed). A Secret of that name the
        tenant had before, for a certificate of its own (cert-manager names a Certificate
        after its Secret too), was deleted with the order's Ingress."""
        name = tls_secret_name(order.name)
        secret = self._writer.get(kinds.SECRETS, order.namespace, name)
        meta = (secret or {}).get("metadata") or {}
        annotations = meta.get("annotations") or {}
        if secret is None or annotations.get("cert-manager.io/certificate-name") != name:
            return
        names = {n.strip() for n in str(annotations.get(_CERT_ALT_NAMES) or "").split(",")}
        made = str((ingress.get("metadata") or {}).get("creationTimestamp") or "")
        # RFC 3339 in UTC, to the second, as the API server writes them: ordered as text.
        issued_after = bool(made) and str(meta.get("creationTimestamp") or "") >= made
        if names & _ingress_hosts(ingress) or issued_after:
            self._writer.delete(kinds.SECRETS, order.namespace, name, meta["uid"])

    def scale(
        self, order: OrderRef, replicas: int, record: Taking | None, resource_version: str
    ) -> Obj:
        """Scale an order's Deployment for priority, with the record of what is taken, in
        one patch conditional on the version the decision read (409: decide again)."""
        body: dict[str, Any] = {
            "metadata": {
                "resourceVersion": resource_version or None,
                "annotations": {
                    # Takers by UID: the victim's tenant reads this (taken_records.py).
                    TAKEN_ANNOTATION: taken_records.text(record, self._world.orders)
                    if record
                    else None
                },
            },
            "spec": {"replicas": replicas},
        }
        written = self._writer.patch(kinds.DEPLOYMENTS, order.namespace, order.name, body)
        log.info("%s: scaled to %d for priority (%s)", order.key, replicas, record and record.by)
        return written

    # -- probing -----------------------------------------------------------------------

    def _probe(self, order: OrderRef, state: OrderState, after: float, now: datetime) -> Acted:
        """Probe off the worker, every `after` seconds on the background's timer: an
        answer that changes nothing is dropped there, news wakes the order and is
        recorded here (its time is this pass's, as every observation's)."""
        key = ("probe", order.uid)
        done, answer = self._background.take(key)
        if done:  # the next round arms the probe again with the state this answer made
            return Acted(replace(answer, at=now), requeue=[after])
        target = self._probe_target(order, state)
        if target is None:
            self._background.cancel(key)
            if _no_replica_left(state):
                return _no_replica_answers(order, state, after, now)
            return Acted(requeue=[after])
        url, token = target
        timeout = float(self._settings().probe.timeout_seconds)
        probe = _Probe(self._prober, url, token, timeout, state=state, at=now)
        self._background.repeat(
            key,
            probe.call,
            every=after,
            first_after=_first_probe_in(order.uid, state, after, now),
            news=probe.news,
            announced=state.probe_ok is None,  # a first answer is always news
            tenant=order.namespace,
        )
        done, result = self._background.take(key)  # at once when run inline (tests)
        return Acted(replace(result, at=now), requeue=[after]) if done else Acted()

    def stop_probing(self, order: OrderRef) -> None:
        """The core asks for no probe now (not serving, deleted): stop the timer."""
        self._background.cancel(("probe", order.uid))

    def _probe_target(self, order: OrderRef, state: OrderState) -> tuple[str, str | None] | None:
        """The URL and token to probe with, or None while there is nothing to probe."""
        token = None
        serving = serving_basis(state).policy  # the runtime's, not a newer spec's
        needs_token = serving is not None and serving.exposure.needs_token
        if needs_token and state.auth_secret_name:
            secret = self._world.token_secrets.get_by_name(
                order.namespace, state.auth_secret_name, copy_=False
            )
            if secret is None or not self._rolled_out(order, secret):
                return None  # the runtime has not the current token yet
            token = secret_value(secret, AUTH_SECRET_KEY)
        if not self._service_is_ours(order):
            return None  # never follow a retyped Service elsewhere
        url = self._targets.resolve(order, self._world.pods_of(order.uid, order.namespace))
        if url is None:
            return None  # no Ready pod yet: its change wakes us
        return url, token

    def _rolled_out(self, order: OrderRef, secret: Obj) -> bool:
        """The Deployment's pods carry the token Secret's current UID (rotation done)."""
        deployment = self._world.deployments.get_by_name(order.namespace, order.name, copy_=False)
        if deployment is None:
            return False
        template = ((deployment.get("spec") or {}).get("template") or {}).get("metadata") or {}
        marked = (template.get("annotations") or {}).get(AUTH_SECRET_UID_ANNOTATION)
        return marked == secret["metadata"]["uid"] and old_pods_gone(deployment)

    def _service_is_ours(self, order: OrderRef) -> bool:
        service = self._world.services.get_by_name(order.namespace, order.name, copy_=False)
        return service is not None and (service.get("spec") or {}).get("type") == "ClusterIP"

    # -- what the order and the people reading it see ----------------------------------

    def publish(self, order: OrderRef, state: OrderState, status: dict[str, Any]) -> bool:
        """Write the status if the live one differs; True when the live one is `status`
        now (written, or found so)."""
        current = self._world.orders.get(order.uid, copy_=False)
        if current is None:
            return False
        try:
            # None when nothing differs: the live status is this one already.
            self._writer.write_status(
                kinds.INFERENCE_SERVICES,
                order.namespace,
                order.name,
                status,
                current=current.get("status") or {},
                uid=order.uid,
                basis=current,
            )
        except errors.APINotFoundError:
            return False  # deleted: not this order's status any more
        except errors.APIInvalidError as exc:
            # Recreated under the name (the uid precondition), or a status the schema
            # refuses: the second is a bug of ours, and must not pass unseen.
            log.warning("status of %s not written: %s", order.key, exc)
            return False
        return True

    def tell(self, order: OrderRef, previous: OrderState, state: OrderState) -> None:
        """A Kubernetes Event per judged condition change, so `kubectl describe` tells
        the story; the log, not these Events, is the record (they expire). The steps
        every rollout passes (`ROLLOUT_STEPS`) are left to the conditions."""
        old = {c.type: (c.status, c.reason, c.message) for c in previous.conditions}
        involved = {
            "apiVersion": "ai.deckhouse.io/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": order.name, "namespace": order.namespace, "uid": order.uid},
        }
        for cond in state.conditions:
            before = old.get(cond.type)
            if cond.status is ConditionStatus.UNKNOWN or cond.reason in ROLLOUT_STEPS:
                continue
            if before == (cond.status, cond.reason, cond.message):
                continue
            if (
                before is not None
                and before[:2] == (cond.status, cond.reason)
                and not (_stale_note(cond.message) or _stale_note(before[2]))
                and _same_actor(previous, state, cond)
            ):
                # Same verdict, new wording: not news (except facts kept stale, or a held
                # plan whose failed recalculation now needs someone else).
                continue
            # A True condition may still ask someone to act (RolledOut: the runtime is down).
            warn = cond.status is ConditionStatus.FALSE or who_can_act(state, cond) in _ACTORS
            kind: Literal["Normal", "Warning"] = (
                "Warning" if warn or _stale_note(cond.message) else "Normal"
            )
            try:
                self._writer.event(
                    involved,
                    str(cond.reason),
                    f"{cond.type}={cond.status}: {cond.message}"[:1000],
                    event_type=kind,
                )
            except errors.APIError as exc:
                log.warning("could not record an Event for %s: %s", order.key, exc)


_ACTORS = frozenset({Who.USER, Who.ADMIN})


def _same_actor(previous: OrderState, state: OrderState, cond: Condition) -> bool:
    """Is the one who can act on `cond` the same as before it was reworded?"""
    before = previous.condition(cond.type)
    return before is not None and who_can_act(previous, before) == who_can_act(state, cond)


def _stale_note(message: str) -> bool:
    return STALE_FACTS_NOTE in message


# The kinds whose foreign namesake an apply would merge into (Actor._unclaimed).
_MERGED_INTO = frozenset({"Service", "Ingress", "HorizontalPodAutoscaler"})


def _name_taken(order: OrderRef, found: Obj) -> NameTaken:
    """The order's reason for an object of its child's name that is not its own."""
    kind, name = converging.key_of(found)
    if (found.get("metadata") or {}).get("deletionTimestamp"):
        # A deleted namesake's child on its way out: nothing for anyone to do.
        return NameTaken(f"{kind} {order.namespace}/{name} is being deleted; waiting")
    return NameTaken(
        f"{kind} {order.namespace}/{name} exists and is not this order's: it is never "
        "adopted, changed or deleted; rename or delete it, and the order goes on"
    )


class NameTaken(errors.APIError):
    """An object of a child's name exists that the order does not own."""


def _replicas_applied_by(obj: Obj, manager: str) -> bool:
    """Whether `manager`'s server-side applies own the object's `spec.replicas`."""
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") != manager or entry.get("operation") != "Apply":
            continue
        spec = (entry.get("fieldsV1") or {}).get("f:spec") or {}
        if "f:replicas" in spec:
            return True
    return False


def _keep_priority_replicas(docs: list[dict[str, Any]], live: dict[converging.Key, Obj]) -> None:
    """While replicas are taken by priority (arbiter.py), the arbiter owns the count."""
    for doc in docs:
        if doc.get("kind") != "Deployment":
            continue
        current = live.get(converging.key_of(doc))
        annotations = ((current or {}).get("metadata") or {}).get("annotations") or {}
        if annotations.get(TAKEN_ANNOTATION):
            doc.get("spec", {}).pop("replicas", None)


@dataclass(frozen=True, slots=True)
class _Probe:
    """One order's repeated probe and how its answer is judged: what the background's
    timer holds for each serving order between passes (one small object rather than two
    closures over six cells: with the timer's entry, 720 -> 390 bytes an order)."""

    prober: Prober
    url: str
    token: str | None
    timeout: float
    state: OrderState  # the state the arming pass saw: news is judged against it
    at: datetime  # that pass's time: an answer's, until a pass records it

    def call(self) -> ob.ProbeResult:
        answer = self.prober.probe(self.url, self.token, timeout=self.timeout)
        return ob.ProbeResult(
            at=self.at, ok=answer.ok, status_code=answer.status_code, error=answer.error
        )

    def news(self, result: ob.ProbeResult) -> bool:
        return probe_is_news(self.state, result)


# What a probe of the Service answers when no replica is left to route to, recorded as
# such where there is no address to send it to (the simulator's pod target).
NO_REPLICA_ANSWERS = "no replica is available to answer"


def _no_replica_left(state: OrderState) -> bool:
    """A rolled-out workload lost every replica after Ready (`RolledOut`): the probe is
    asked for, and nothing can answer it."""
    cond = state.condition(ConditionType.WORKLOAD_READY)
    return cond is not None and cond.reason is Reason.ROLLED_OUT


def _no_replica_answers(order: OrderRef, state: OrderState, after: float, now: datetime) -> Acted:
    """The failed probe of a service with no replica, at the probe's own pace: passes
    woken by the pods' churn must not count the streak up faster than probes would."""
    last = state.last_probe_at
    wait = 0.0 if last is None else after - (now - last).total_seconds()
    if wait > 0:
        return Acted(requeue=[wait])
    return Acted(ob.ProbeResult(at=now, ok=False, error=NO_REPLICA_ANSWERS), requeue=[after])


def _first_probe_in(uid: str, state: OrderState, after: float, now: datetime) -> float:
    """Seconds until an order's probe, armed anew, first runs.

    Never probed: at once. Probed within the interval (by this pass, say): when the
    interval ends. Otherwise a failing order at once, and a serving one at a point of
    the interval fixed by its UID: after a restart every Ready order is armed at once,
    and their probes would all start together."""
    last = state.last_probe_at
    if state.probe_ok is None or last is None:
        return 0.0
    elapsed = (now - last).total_seconds()
    if 0 <= elapsed < after:
        return after - elapsed
    return after * (zlib.crc32(uid.encode()) / 2**32) if state.probe_ok else 0.0


_CERT_ALT_NAMES = "cert-manager.io/alt-names"  # the certificate's DNS names, on its Secret


def _ingress_hosts(ingress: Mapping[str, Any]) -> set[str]:
    spec = ingress.get("spec") or {}
    hosts = {str(rule.get("host")) for rule in spec.get("rules") or [] if rule.get("host")}
    return hosts | {str(h) for tls in spec.get("tls") or [] for h in tls.get("hosts") or []}
