"""What an order's workload looks like: pure functions from a plan to manifests.

The controller's ApplyWorkload command names a plan, a recipe, the policy and the model;
this module turns them into the objects it server-side applies in the order's namespace
(SPEC §3 step 4): a ResourceClaimTemplate (the devices, DRA.md), the runtime Deployment,
a ClusterIP Service, an HPA when the class lets replicas grow, and for External exposure
(when the settings name a host template) an Ingress with TLS per the https mode
(DECKHOUSE.md). The copy of a CustomCertificate Secret the Ingress names is made by
certificates.py, from the source Secret this module never sees. No API calls, no clock, no
randomness: the same inputs give the same manifests, so re-applying is a no-op and the
tests compare dicts. docs/workload.md explains every choice made here.

Every object is named after the order, labelled with its UID and owned by it
(`controller: true`), so deleting the order lets the garbage collector delete them.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Collection
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from adapters.kubernetes.settings import Settings
from fsm import identity
from fsm.identity import OrderRef
from fsm.placement import sizing
from fsm.placement.recipes import API_KEY_ENV, Recipe, render_args
from fsm.quantity import GIB, MIB
from fsm.values import (
    CatalogKind,
    EffectivePolicy,
    ExposureType,
    HttpsMode,
    ModelFacts,
    ModelRef,
    ModelSource,
    PlacementMode,
    Plan,
    SharingMode,
    UpdateStrategy,
)

__all__ = [
    "AUTH_SECRET_KEY",
    "AUTH_SECRET_UID_ANNOTATION",
    "CATALOG_MODELS_DIR",
    "CLAIM_NAME",
    "DEFAULT_DRIVER",
    "HPA_API_VERSIONS",
    "ORDER_API_VERSION",
    "ORDER_KIND",
    "UID_LABEL",
    "Https",
    "OrderRef",
    "RenderError",
    "auth_secret_name",
    "certificate_source",
    "effective_https",
    "endpoint_url",
    "hpa_api_version_for",
    "labels",
    "owner_reference",
    "public_host",
    "render_workload",
]

ORDER_API_VERSION = "ai.deckhouse.io/v1alpha1"
ORDER_KIND = "InferenceService"
UID_LABEL = "ai.deckhouse.io/inference-service-uid"
MANAGED_BY = "ai-inference"
CLAIM_NAME = "gpu"  # the request in the template, the claim in the pod: one name
AUTH_SECRET_KEY = "token"
# On the pod template: the UID of the token Secret the pods read. A Secret deleted to
# rotate the token comes back with a new UID, so the pods roll and load the new key.
AUTH_SECRET_UID_ANNOTATION = "ai.deckhouse.io/auth-secret-uid"
# On the pod template: a digest of the ResourceClaimTemplate's spec. A pod's claim is made
# from the template once, when the pod is; a plan that changes only the claim (another
# device class, product or share, the same runtime) must still roll the pods, or those
# waiting keep asking for the devices the old plan named.
CLAIM_TEMPLATE_ANNOTATION = "ai.deckhouse.io/claim-template"
DEFAULT_DRIVER = "gpu.nvidia.com"
CATALOG_MODELS_DIR = "/data/modelcache/models"  # where the ai-models catalog mounts models
CACHE_DIR = "/var/cache/ai-inference"  # our own volume; never /data/modelcache (the catalog's)
HPA_API_VERSIONS = ("autoscaling/v2", "autoscaling/v2beta2")
HPA_CPU_UTILIZATION = 80
HPA_SCALE_DOWN_WINDOW_SECONDS = 600  # a GPU replica takes minutes to load: do not flap
STREAMING_TIMEOUT_SECONDS = "3600"  # a long generation streams for minutes through nginx
_CATALOG_ANNOTATION = {
    CatalogKind.MODEL: "ai.deckhouse.io/model",
    CatalogKind.CLUSTER_MODEL: "ai.deckhouse.io/clustermodel",
}
# Flags vLLM needs whatever the recipe spells out; a recipe that names them wins.
_VLLM_FLAGS = (
    "--model={modelPath}",
    "--served-model-name={servedModelName}",
    "--tensor-parallel-size={tensorParallelSize}",
    "--port={port}",
    "--gpu-memory-utilization={gpuMemoryUtilization}",
)
# Names only the controller sets: a credential or an endpoint is policy, not a recipe's.
_RESERVED_ENV = frozenset({"HF_TOKEN", "HF_HOME", "HF_ENDPOINT", *API_KEY_ENV.values()})
# A cluster whose way out is a proxy: the runtime downloads the weights through the one
# the controller was given (Deckhouse sets it on its modules' pods from the cluster's
# proxy settings), unless the recipe names its own.
PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")

Manifest = dict[str, Any]


class RenderError(ValueError):
    """The inputs cannot make a workload (e.g. CustomCertificate with no Secret named)."""


@dataclass(frozen=True, slots=True)
class Https:
    """The https mode in force for an order: the class's block, else the settings'."""

    mode: HttpsMode
    cluster_issuer_name: str | None = None
    # CustomCertificate: the source Secret, in `secret_namespace` (None: the controller's
    # namespace); the Ingress names the order's copy of it (identity.custom_tls_secret_name).
    # None with CustomCertificate: the platform's global certificate, which is never
    # copied; the Ingress names no Secret and the ingress controller's default one serves.
    secret_name: str | None = None
    secret_namespace: str | None = None

    @property
    def scheme(self) -> str:
        # OnlyInURI serves HTTP behind an external TLS terminator: the URL still says https.
        return "http" if self.mode is HttpsMode.DISABLED else "https"


# --- identity ---------------------------------------------------------------------------


def auth_secret_name(order: OrderRef) -> str:
    return identity.auth_secret_name(order.name)


def _dns_label(text: str, limit: int = 63) -> str:
    """`text` if it fits a DNS label / label value, else a prefix and a stable hash."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[: limit - 9].rstrip('-.')}-{digest}"


def _digest(spec: Any) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def labels(order: OrderRef) -> dict[str, str]:
    return {
        UID_LABEL: order.uid,
        "app.kubernetes.io/name": "inference-service",
        "app.kubernetes.io/instance": _dns_label(order.name),
        "app.kubernetes.io/managed-by": MANAGED_BY,
    }


def owner_reference(order: OrderRef) -> dict[str, Any]:
    return {
        "apiVersion": ORDER_API_VERSION,
        "kind": ORDER_KIND,
        "name": order.name,
        "uid": order.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(order: OrderRef, name: str | None = None, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name or order.name,
        "namespace": order.namespace,
        "labels": labels(order),
        "annotations": {"ai.deckhouse.io/order-generation": str(order.generation)},
        "ownerReferences": [owner_reference(order)],
    }
    meta["annotations"].update(extra.pop("annotations", {}))
    meta.update(extra)
    return meta


# --- exposure ---------------------------------------------------------------------------


def effective_https(policy: EffectivePolicy, settings: Settings) -> Https:
    """The class's https block replaces the module's; fields it leaves out fall back.

    A class must name its issuer and its Secret (`validate_class`): only classless mode's
    block and the plan in force of a class that named no Secret before that was refused
    (its workload renders as it was applied) fall back. Raises RenderError when nothing
    names the Secret."""
    block = policy.exposure.https
    mode = block.mode if block is not None else settings.https.mode
    issuer = (block.cluster_issuer_name if block else None) or (
        settings.https.cert_manager.cluster_issuer_name
    )
    named = block.custom_certificate_secret_name if block else None
    # A class names a Secret of the controller's namespace; the settings', theirs.
    custom, custom_namespace = (
        (named, None)
        if named
        else (
            settings.https.custom_certificate.secret_name,
            settings.https.custom_certificate.secret_namespace,
        )
    )
    if mode is HttpsMode.CERT_MANAGER:
        return Https(mode, cluster_issuer_name=issuer)
    if mode is HttpsMode.CUSTOM_CERTIFICATE:
        if not named and settings.https.custom_certificate.platform_wide:
            # The platform's own certificate: its key stays out of tenants' namespaces.
            return Https(mode)
        if not custom:
            raise RenderError("https mode CustomCertificate names no Secret (class nor settings)")
        return Https(mode, secret_name=custom, secret_namespace=custom_namespace)
    return Https(mode)


def public_host(order: OrderRef, settings: Settings) -> str | None:
    """`publicDomainTemplate % "<order>-<namespace>"`, unique per order (hosts.py); None
    when neither the module nor the platform names a host template."""
    return settings.public_host(order.name, order.namespace)


def _exposed(order: OrderRef, policy: EffectivePolicy, settings: Settings) -> str | None:
    """The Ingress host, when the order gets an Ingress (External and a host template)."""
    if policy.exposure.type is not ExposureType.EXTERNAL:
        return None
    return public_host(order, settings)


def endpoint_url(order: OrderRef, policy: EffectivePolicy, settings: Settings) -> str:
    """`status.endpoint.url`: the Ingress host for External, the Service's DNS name else
    (also for External without a host template: there is no Ingress to reach)."""
    host = _exposed(order, policy, settings)
    if host is not None:
        return f"{effective_https(policy, settings).scheme}://{host}"
    return f"http://{order.name}.{order.namespace}.svc.cluster.local"


def certificate_source(
    order: OrderRef, policy: EffectivePolicy, settings: Settings
) -> tuple[str | None, str] | None:
    """The CustomCertificate Secret the order's Ingress needs a copy of, if it does: its
    namespace (None: the controller's) and name."""
    if _exposed(order, policy, settings) is None:
        return None
    https = effective_https(policy, settings)
    if https.mode is not HttpsMode.CUSTOM_CERTIFICATE or https.secret_name is None:
        return None
    return https.secret_namespace, https.secret_name


# --- devices ----------------------------------------------------------------------------


def _driver(plan: Plan) -> str:
    return plan.devices[0].split("/", 1)[0] if plan.devices else DEFAULT_DRIVER


def _quantity(amount: Fraction) -> str:
    """Bytes rounded up to a whole MiB (whole GiB written as Gi): never below the need."""
    return _mib(max(1, math.ceil(amount / MIB)))


def _quantity_down(amount: Fraction) -> str:
    """Bytes rounded down to a whole MiB (at least 1): never above what is there."""
    return _mib(max(1, math.floor(amount / MIB)))


def _mib(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def _share(plan: Plan) -> Fraction:
    if plan.sharing_mode is SharingMode.SHARED and plan.share_percent:
        return Fraction(plan.share_percent, 100)
    return Fraction(1)


def _need_per_device(plan: Plan, facts: ModelFacts) -> Fraction:
    # The planner's fit test: need <= count * memory * share * U; solved for one device's
    # part of the need, so the claim asks no more than the planner judged sufficient.
    need = sizing.memory_need(facts, plan.accelerator_count)
    return need / (plan.accelerator_count * sizing.GPU_MEMORY_UTILIZATION)


def _plan_memory(plan: Plan) -> tuple[Fraction, Fraction] | None:
    """The memory a device of the plan has: [G - 1/2, G + 1/2) GiB, as the planner rounds
    it (`gib_rounded`) into `acceleratorMemoryGiB` = G; None for a plan that names none."""
    if plan.accelerator_memory_gib < 1:
        return None
    gib = Fraction(plan.accelerator_memory_gib)
    return (gib - Fraction(1, 2)) * GIB, (gib + Fraction(1, 2)) * GIB


def _device_memory(plan: Plan, facts: ModelFacts) -> tuple[Fraction, Fraction | None]:
    """The least (and for a Shared or a partition plan, the bound of) memory of a device
    the claim may get.

    The least is the planner's fit test solved for one device, rounded up to a whole MiB.
    A Shared claim consumes its share of that least (`_consumed`), so it also keeps to the
    plan's rounded size: a device of G GiB has at least G - 1/2 of them, and none of
    another size is one the planner counted for this plan.
    """
    least = Fraction(math.ceil(_need_per_device(plan, facts) / _share(plan) / MIB) * MIB)
    # A partition too: every MIG profile of a GPU carries its product's name, and a claim
    # planned on a 1g.10gb with a floor alone was given the 3g.40gb another order's plan
    # counted on, which then never got one.
    bounded = plan.sharing_mode is SharingMode.SHARED or (
        plan.placement_mode is PlacementMode.PARTITION
    )
    bounds = _plan_memory(plan) if bounded else None
    if bounds is None:
        return least, None
    return max(least, bounds[0]), bounds[1]


def _consumed(plan: Plan, least: Fraction) -> Fraction:
    """A Shared claim's consumable capacity: its share of the least memory its device has.

    The planner counts `sharePercent` units of 100 per device, so claims whose shares add
    up to at most 100 must fit (each takes at most its share of the device: share x least,
    rounded down) and more must not. The device's exact memory is not in the plan, only
    G GiB rounded, so `least` may be below it by up to a GiB: more claims than counted
    then fit when (units + share) x least <= memory (docs/workload.md, "Shared claims").
    """
    return _share(plan) * least


def _claim_template(order: OrderRef, plan: Plan, facts: ModelFacts) -> Manifest:
    driver = _driver(plan)
    least, below = _device_memory(plan, facts)
    memory = f"device.capacity['{driver}'].memory"
    expression = f"{memory}.compareTo(quantity('{_quantity(least)}')) >= 0"
    if below is not None:
        expression += f" && {memory}.compareTo(quantity('{_quantity(below)}')) < 0"
    selectors = [expression]
    if plan.accelerator_product_name:
        # The product the plan counted on: the scheduler takes the first device that fits
        # a claim, and without it an order planned on a T4 was handed an A100 that another
        # order's plan held, which then never got its devices.
        product = json.dumps(plan.accelerator_product_name)  # a CEL string literal
        selectors.append(f"device.attributes['{driver}'].productName == {product}")
    exactly: dict[str, Any] = {
        "deviceClassName": plan.device_class,
        "allocationMode": "ExactCount",
        "count": plan.accelerator_count,
        "selectors": [{"cel": {"expression": expression}} for expression in selectors],
    }
    devices: dict[str, Any] = {"requests": [{"name": CLAIM_NAME, "exactly": exactly}]}
    if plan.sharing_mode is SharingMode.SHARED:
        # Consumable capacity: the claim takes its share of the device's memory, which is
        # what lets as many claims be allocated one device as the planner counted (DRA.md).
        exactly["capacity"] = {"requests": {"memory": _quantity_down(_consumed(plan, least))}}
        sharing: dict[str, Any] = {"strategy": "MPS"}
        if plan.share_percent:
            sharing["mpsConfig"] = {"defaultActiveThreadPercentage": plan.share_percent}
        devices["config"] = [
            {
                "requests": [CLAIM_NAME],
                "opaque": {
                    "driver": driver,
                    "parameters": {
                        "apiVersion": "resource.nvidia.com/v1beta1",
                        "kind": "GpuConfig",
                        "sharing": sharing,
                    },
                },
            }
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": _metadata(order),
        # The generated claims carry the order's labels: whoever counts held devices can
        # tell whose a claim is without reading its owner pod.
        "spec": {"metadata": {"labels": labels(order)}, "spec": {"devices": devices}},
    }


# --- the runtime ------------------------------------------------------------------------


def _model_path(model_ref: ModelRef) -> str:
    if model_ref.src is ModelSource.AI_MODELS:
        return f"{CATALOG_MODELS_DIR}/{model_ref.name}"
    return model_ref.name  # the runtime downloads it from the hub by repo id


def _args(recipe: Recipe, plan: Plan, model_ref: ModelRef, facts: ModelFacts) -> list[str]:
    utilization = format(float(sizing.GPU_MEMORY_UTILIZATION * _share(plan)), ".4g")
    model_path = _model_path(model_ref)
    args = list(
        render_args(
            recipe,
            model_path=model_path,
            served_model_name=model_ref.name,
            tensor_parallel_size=plan.accelerator_count,
            gpu_memory_utilization=utilization,
        )
    )
    if recipe.runtime.lower() == "vllm":
        present = {arg.split("=", 1)[0] for arg in args}
        filled = {
            "modelPath": model_path,
            "servedModelName": model_ref.name,
            "tensorParallelSize": str(plan.accelerator_count),
            "port": str(recipe.port),
            "gpuMemoryUtilization": utilization,
        }
        args += [
            flag.format_map(filled) for flag in _VLLM_FLAGS if flag.split("=")[0] not in present
        ]
    if recipe.runtime.lower() == "llama.cpp" and model_ref.src is ModelSource.HUGGING_FACE:
        args = _hub_repo_for_llama_cpp(args, facts.weights_file)
    return args


_HF_FILE_FLAGS = ("--hf-file", "-hff")  # a recipe's own choice of file wins


def _hub_repo_for_llama_cpp(args: list[str], weights_file: str | None) -> list[str]:
    """llama.cpp's `--model` (`-m`) is a file on disk; a repository on the hub is
    `--hf-repo`, which it downloads (with HF_TOKEN from the env). Rendered as the recipe
    spells it, a GGUF order from the hub asked llama.cpp to open a file named after its
    repository and never loaded. The file is the variant the plan was sized for
    (`--hf-file`, its first part: llama.cpp fetches the others): left to llama.cpp, a
    repository without Q4_K_M had it fetch a file of its own choosing, larger than the
    memory and the volume planned for it, perhaps."""
    named = any(arg.partition("=")[0] in _HF_FILE_FLAGS for arg in args)
    out: list[str] = []
    pending_value = False
    for arg in args:
        flag, eq, value = arg.partition("=")
        if pending_value:
            out.append(arg)
            pending_value = False
        elif flag in ("--model", "-m") and eq:
            out.append(f"--hf-repo={value}")
        elif arg in ("--model", "-m"):
            out.append("--hf-repo")
            pending_value = True
        else:
            out.append(arg)
    repo = _flag_value(out, _HF_REPO_FLAGS)
    # A repository with a `:quant` tag names its file already (llama.cpp picks by tag).
    if weights_file and not named and repo is not None and ":" not in repo:
        out.append(f"--hf-file={weights_file}")
    return out


_HF_REPO_FLAGS = ("--hf-repo", "-hf", "-hfr")


def _flag_value(args: list[str], flags: tuple[str, ...]) -> str | None:
    """The value of the first of `flags` in `args` (`--flag=value` or `--flag value`)."""
    for index, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in flags:
            if eq:
                return value
            return args[index + 1] if index + 1 < len(args) else None
    return None


def _plain_env(name: str, value: str) -> dict[str, Any]:
    """An env entry as the API server stores it: an empty value is no `value` at all
    (`omitempty`), so one rendered as `""` was never found live and every pass applied
    the Deployment again."""
    return {"name": name, "value": value} if value else {"name": name}


def _secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _env(
    recipe: Recipe,
    policy: EffectivePolicy,
    model_ref: ModelRef,
    settings: Settings,
    token_secret: str,
    *,
    proxy_env: tuple[tuple[str, str], ...] = (),
) -> list[dict[str, Any]]:
    ours: list[dict[str, Any]] = []
    if model_ref.src is ModelSource.HUGGING_FACE:
        ours += [
            {"name": "HF_HOME", "value": f"{CACHE_DIR}/huggingface"},
            {"name": "HF_ENDPOINT", "value": settings.hugging_face.endpoint},
        ]
        if model_ref.auth_secret_name:
            # The runtime downloads the model itself: it is the model loader (SPEC §3.4).
            ours.append(
                _secret_env("HF_TOKEN", model_ref.auth_secret_name, model_ref.auth_secret_key)
            )
    if policy.exposure.needs_token:
        # The planner picks no runtime without a key under Token (recipes.choose_recipe),
        # and the pass replaces one under a plan (an admin's edit of its runtime): never
        # rendered to answer anyone while the order says a token is needed.
        if recipe.api_key_env is None:
            raise RenderError(f"{recipe.keyless}; the workload runs on as last applied")
        ours.append(_secret_env(recipe.api_key_env, token_secret, AUTH_SECRET_KEY))
    taken = _RESERVED_ENV | {e["name"] for e in ours}
    theirs = [_plain_env(e.name, e.value) for e in recipe.env if e.name not in taken]
    # Either case: Python's clients and curl prefer the lowercase one, so a recipe's
    # HTTPS_PROXY beside the controller's https_proxy would lose to it.
    named = {n.upper() for n in taken | {e.name for e in recipe.env}}
    proxy = [_plain_env(k, v) for k, v in proxy_env if k.upper() not in named]
    return theirs + ours + proxy


def _strategy(policy: EffectivePolicy) -> dict[str, Any]:
    if policy.update_strategy is UpdateStrategy.RECREATE:
        return {"type": "Recreate"}
    # No surge: a new pod would need a device the old one still holds.
    return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


def _deployment(
    order: OrderRef,
    plan: Plan,
    recipe: Recipe,
    *,
    policy: EffectivePolicy,
    model_ref: ModelRef,
    facts: ModelFacts,
    settings: Settings,
    token_secret: str,
    token_secret_uid: str | None,
    autoscaled: bool,
    claim_template: Manifest,
    proxy_env: tuple[tuple[str, str], ...] = (),
) -> Manifest:
    # The devices asked for, not the claims' labels: the same plan gives the same digest for
    # every order (and every run of the crash tests, which compare them).
    devices = claim_template["spec"]["spec"]
    template_annotations = {CLAIM_TEMPLATE_ANNOTATION: _digest(devices)}
    if token_secret_uid is not None:
        template_annotations[AUTH_SECRET_UID_ANNOTATION] = token_secret_uid
    if model_ref.src is ModelSource.AI_MODELS and model_ref.kind is not None:
        template_annotations[_CATALOG_ANNOTATION[model_ref.kind]] = model_ref.name
    mounts = [{"name": "model-cache", "mountPath": CACHE_DIR}]
    volumes: list[dict[str, Any]] = [
        {"name": "model-cache", "emptyDir": {"sizeLimit": plan.model_volume}}
    ]
    if plan.accelerator_count > 1:
        # Tensor parallelism talks through shared memory (NCCL); the default 64Mi is too small.
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})  # noqa: S108 (a mount)
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}})
    container = {
        "name": "runtime",
        "image": recipe.image,
        "args": _args(recipe, plan, model_ref, facts),
        "env": _env(recipe, policy, model_ref, settings, token_secret, proxy_env=proxy_env),
        "ports": [{"name": "http", "containerPort": recipe.port, "protocol": "TCP"}],
        "resources": {
            "requests": {"cpu": plan.cpu, "memory": plan.memory},
            "limits": {"memory": plan.memory},
            "claims": [{"name": CLAIM_NAME}],
        },
        # /health answers without the API key; the controller's own probe checks /v1/models
        # with the token. No liveness probe: loading a large model takes minutes.
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": 10,
            "timeoutSeconds": 3,
            "failureThreshold": 3,
        },
        "volumeMounts": mounts,
    }
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "resourceClaims": [{"name": CLAIM_NAME, "resourceClaimTemplateName": order.name}],
        "volumes": volumes,
        # Service links would inject e.g. VLLM_PORT for a Service named "vllm": vLLM reads it.
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
    }
    if policy.constraints.priority_class_name:
        pod_spec["priorityClassName"] = policy.constraints.priority_class_name
    spec: dict[str, Any] = {
        "revisionHistoryLimit": 2,
        "selector": {"matchLabels": {UID_LABEL: order.uid}},
        "strategy": _strategy(policy),
        "template": {
            "metadata": {"labels": labels(order), "annotations": template_annotations},
            "spec": pod_spec,
        },
    }
    if not autoscaled:
        spec["replicas"] = policy.constraints.min_replicas  # with an HPA, the HPA owns it
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(order, annotations={"ai.deckhouse.io/recipe": recipe.name}),
        "spec": spec,
    }


def _service(order: OrderRef) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(order),
        "spec": {
            "type": "ClusterIP",
            "selector": {UID_LABEL: order.uid},
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def _hpa(order: OrderRef, policy: EffectivePolicy, api_version: str) -> Manifest:
    bounds = policy.constraints
    return {
        "apiVersion": api_version,
        "kind": "HorizontalPodAutoscaler",
        "metadata": _metadata(order),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": order.name},
            "minReplicas": bounds.min_replicas,
            "maxReplicas": bounds.max_replicas,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {
                            "type": "Utilization",
                            "averageUtilization": HPA_CPU_UTILIZATION,
                        },
                    },
                }
            ],
            "behavior": {
                "scaleDown": {"stabilizationWindowSeconds": HPA_SCALE_DOWN_WINDOW_SECONDS}
            },
        },
    }


def _ingress(order: OrderRef, policy: EffectivePolicy, settings: Settings, host: str) -> Manifest:
    https = effective_https(policy, settings)
    annotations = {
        "nginx.ingress.kubernetes.io/proxy-read-timeout": STREAMING_TIMEOUT_SECONDS,
        "nginx.ingress.kubernetes.io/proxy-send-timeout": STREAMING_TIMEOUT_SECONDS,
        "nginx.ingress.kubernetes.io/proxy-buffering": "off",  # tokens stream as they come
    }
    spec: dict[str, Any] = {
        "ingressClassName": settings.ingress_class,
        "rules": [
            {
                "host": host,
                "http": {
                    "paths": [
                        {
                            "path": "/",
                            "pathType": "Prefix",
                            "backend": {"service": {"name": order.name, "port": {"name": "http"}}},
                        }
                    ]
                },
            }
        ],
    }
    if https.mode is HttpsMode.CERT_MANAGER:
        annotations["cert-manager.io/cluster-issuer"] = https.cluster_issuer_name or ""
        spec["tls"] = [{"hosts": [host], "secretName": identity.tls_secret_name(order.name)}]
    elif https.mode is HttpsMode.CUSTOM_CERTIFICATE and https.secret_name is None:
        # The platform's global certificate is not copied: TLS for the host, on the ingress
        # controller's default certificate (Deckhouse: IngressNginxController's
        # defaultSSLCertificate, which a platform with a wildcard sets to it).
        spec["tls"] = [{"hosts": [host]}]
    elif https.mode is HttpsMode.CUSTOM_CERTIFICATE:
        # The copy in the order's namespace: an Ingress reads TLS Secrets of its own only.
        spec["tls"] = [{"hosts": [host], "secretName": identity.custom_tls_secret_name(order.name)}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": _metadata(order, annotations=annotations),
        "spec": spec,
    }


def hpa_api_version_for(served: Collection[str]) -> str:
    """The HPA API to render for a server serving `served` group/versions (discovery)."""
    for version in HPA_API_VERSIONS:
        if version in served:
            return version
    raise RenderError(f"the server serves none of {', '.join(HPA_API_VERSIONS)}")


def render_workload(
    order: OrderRef,
    plan: Plan,
    recipe: Recipe,
    policy: EffectivePolicy,
    model_ref: ModelRef,
    *,
    settings: Settings,
    facts: ModelFacts,
    auth_secret: str | None = None,
    auth_secret_uid: str | None = None,
    hpa_api_version: str = "autoscaling/v2",
    proxy_env: tuple[tuple[str, str], ...] = (),
) -> list[Manifest]:
    """Every object of the order's workload, in the order to apply them.

    `auth_secret` names the token Secret when the policy requires a token (default
    `{order}-auth`); `hpa_api_version` is `autoscaling/v2beta2` for servers before 1.23;
    `proxy_env` (`PROXY_ENV` names and values) is given to the runtime.
    """
    if hpa_api_version not in HPA_API_VERSIONS:
        raise RenderError(f"HPA API {hpa_api_version!r}; known: {', '.join(HPA_API_VERSIONS)}")
    if plan.recipe != recipe.name:
        raise RenderError(f"the plan names recipe {plan.recipe!r}, given {recipe.name!r}")
    bounds = policy.constraints
    autoscaled = bounds.max_replicas > bounds.min_replicas
    token_secret = auth_secret or auth_secret_name(order)
    claim_template = _claim_template(order, plan, facts)
    objects = [
        claim_template,
        _service(order),
        _deployment(
            order,
            plan,
            recipe,
            policy=policy,
            model_ref=model_ref,
            facts=facts,
            settings=settings,
            token_secret=token_secret,
            token_secret_uid=auth_secret_uid if auth_secret else None,
            autoscaled=autoscaled,
            claim_template=claim_template,
            proxy_env=proxy_env,
        ),
    ]
    if autoscaled:
        objects.append(_hpa(order, policy, hpa_api_version))
    host = _exposed(order, policy, settings)
    if host is not None:
        objects.append(_ingress(order, policy, settings, host))
    return objects
