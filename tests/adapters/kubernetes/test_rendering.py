"""render_workload: tables of what each policy, plan and model make, checked as dicts.

The objects are also applied to the real API server in test_rendering_cluster.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from workload_samples import DOMAIN, FACTS, HF_REF, ORDER, PLAN, RECIPE, SETTINGS, policy

from adapters.kubernetes import rendering
from adapters.kubernetes.controller import runtime_proxy_env
from adapters.kubernetes.rendering import (
    CLAIM_TEMPLATE_ANNOTATION,
    OrderRef,
    RenderError,
    render_workload,
)
from adapters.kubernetes.settings import Settings, Source
from fsm.placement import cel, sizing
from fsm.placement.capacity import Device
from fsm.placement.recipes import EnvVar, parse_recipe
from fsm.policy import classless_policy
from fsm.quantity import GIB, MIB, gib_rounded, parse_quantity
from fsm.values import (
    Authentication,
    CatalogKind,
    EffectivePolicy,
    ExposureType,
    HttpsMode,
    HttpsPolicy,
    ModelRef,
    ModelSource,
    PlacementMode,
    Plan,
    SharingMode,
    UpdateStrategy,
)


def render(
    pol: EffectivePolicy | None = None,
    plan: Plan = PLAN,
    ref: ModelRef = HF_REF,
    settings: Settings = SETTINGS,
    **kwargs: Any,
) -> dict[str, dict[str, Any]]:
    objects = render_workload(
        ORDER, plan, RECIPE, pol or policy(), ref, settings=settings, facts=FACTS, **kwargs
    )
    by_kind = {o["kind"]: o for o in objects}
    assert len(by_kind) == len(objects), "one object per kind"
    return by_kind


def container(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (runtime,) = objects["Deployment"]["spec"]["template"]["spec"]["containers"]
    return runtime


def env(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(objects)["env"]}


def flag(args: list[str], name: str) -> str | None:
    values = [a.split("=", 1)[1] for a in args if a.split("=", 1)[0] == name]
    assert len(values) <= 1, f"{name} given twice: {args}"
    return values[0] if values else None


def test_the_runtime_downloads_through_the_proxy_the_controller_was_given() -> None:
    """A cluster whose way out is a proxy: the runtime gets the controller's proxy
    variables, but a recipe that names its own keeps it, and none is added unasked."""
    proxy = (
        ("HTTPS_PROXY", "http://proxy.internal:3128"),
        ("NO_PROXY", ".cluster.local"),
        ("https_proxy", "http://proxy.internal:3128"),
    )
    assert env(render(proxy_env=proxy))["HTTPS_PROXY"] == "http://proxy.internal:3128"
    assert env(render(proxy_env=proxy))["NO_PROXY"] == ".cluster.local"
    assert not {"HTTPS_PROXY", "NO_PROXY"} & set(env(render()))
    own = RECIPE.model_copy(
        update={"env": (*RECIPE.env, EnvVar(name="HTTPS_PROXY", value="http://mirror:8080"))}
    )
    objects = render_workload(
        ORDER, PLAN, own, policy(), HF_REF, settings=SETTINGS, facts=FACTS, proxy_env=proxy
    )
    by_kind = {o["kind"]: o for o in objects}
    names = [e["name"] for e in container(by_kind)["env"]]
    assert names.count("HTTPS_PROXY") == 1
    assert env(by_kind)["HTTPS_PROXY"] == "http://mirror:8080"
    # Nor in the other case: Python's clients and curl prefer the lowercase one.
    assert "https_proxy" not in names


def test_an_env_entry_without_a_value_is_rendered_as_the_server_keeps_it() -> None:
    """A recipe's `env: [{name: FLAG}]` (the CRD does not require a value): the API
    server stores an empty value as none at all, so `{name, value: ""}` was never found
    live, and every pass applied the Deployment again (test_rendering_cluster.py
    applies one and compares what the server kept)."""
    flagged = RECIPE.model_copy(update={"env": (*RECIPE.env, EnvVar(name="VLLM_EMPTY_FLAG"))})
    objects = render_workload(
        ORDER, PLAN, flagged, policy(), HF_REF, settings=SETTINGS, facts=FACTS
    )
    by_kind = {o["kind"]: o for o in objects}
    (entry,) = [e for e in container(by_kind)["env"] if e["name"] == "VLLM_EMPTY_FLAG"]
    assert entry == {"name": "VLLM_EMPTY_FLAG"}
    assert {"name": "VLLM_NO_USAGE_STATS", "value": "1"} in container(by_kind)["env"]


@pytest.mark.parametrize(
    ("environ", "given"),
    [
        ({"HTTPS_PROXY": "http://proxy:3128"}, (("HTTPS_PROXY", "http://proxy:3128"),)),
        (
            {"https_proxy": "http://egress:S3cr3t@proxy:3128", "NO_PROXY": "a@b"},
            (("NO_PROXY", "a@b"),),
        ),
        ({"HTTP_PROXY": "user@proxy:3128"}, ()),
        ({}, ()),
    ],
    ids=["plain", "credentials", "user-only-no-scheme", "none"],
)
def test_the_runtimes_get_the_controllers_proxy_but_never_its_credentials(
    environ: dict[str, str], given: tuple[tuple[str, str], ...]
) -> None:
    """The cluster's proxy settings may carry the egress password in the URL: rendered
    into a tenant's Deployment, whoever reads Deployments there would read it."""
    assert runtime_proxy_env(environ) == given


# --- which objects -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pol", "kinds"),
    [
        (policy(), ["ResourceClaimTemplate", "Service", "Deployment", "Ingress"]),
        (policy(ExposureType.CLUSTER_LOCAL), ["ResourceClaimTemplate", "Service", "Deployment"]),
        (
            policy(max_replicas=4),
            [
                "ResourceClaimTemplate",
                "Service",
                "Deployment",
                "HorizontalPodAutoscaler",
                "Ingress",
            ],
        ),
        (
            policy(ExposureType.CLUSTER_LOCAL, min_replicas=2, max_replicas=2),
            ["ResourceClaimTemplate", "Service", "Deployment"],
        ),
    ],
    ids=["external", "cluster-local", "external-autoscaled", "fixed-two-replicas"],
)
def test_objects_in_apply_order(pol: EffectivePolicy, kinds: list[str]) -> None:
    assert list(render(pol)) == kinds


@pytest.mark.parametrize(
    "pol",
    [policy(max_replicas=3), policy(ExposureType.CLUSTER_LOCAL, Authentication.NONE)],
    ids=["everything", "least"],
)
def test_every_object_is_named_labelled_and_owned_by_the_order(pol: EffectivePolicy) -> None:
    for obj in render(pol).values():
        meta = obj["metadata"]
        assert (meta["name"], meta["namespace"]) == ("support-llm", "support"), obj["kind"]
        assert meta["labels"] == {
            "ai.deckhouse.io/inference-service-uid": ORDER.uid,
            "app.kubernetes.io/name": "inference-service",
            "app.kubernetes.io/instance": "support-llm",
            "app.kubernetes.io/managed-by": "ai-inference",
        }, obj["kind"]
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "ai.deckhouse.io/v1alpha1",
                "kind": "InferenceService",
                "name": "support-llm",
                "uid": ORDER.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ], obj["kind"]


REPO = Path(__file__).resolve().parents[3]

_RENDER_IN_A_PROCESS = """
import json
from workload_samples import FACTS, HF_REF, ORDER, PLAN, RECIPE, SETTINGS, policy
from adapters.kubernetes.rendering import render_workload
objects = render_workload(ORDER, PLAN, RECIPE, policy(max_replicas=2), HF_REF,
                          settings=SETTINGS, facts=FACTS)
print(json.dumps(objects))
"""


@pytest.mark.parametrize("seed", ["0", "4242"])
def test_rendering_is_the_same_in_every_process(seed: str) -> None:
    """Byte for byte, objects and keys in the same order, whatever the hash seed: a
    restarted controller (another seed) compares what it renders with what the last one
    applied, and a difference would be drift to repair on every order."""
    here = json.dumps(
        render_workload(
            ORDER, PLAN, RECIPE, policy(max_replicas=2), HF_REF, settings=SETTINGS, facts=FACTS
        )
    )
    there = subprocess.run(
        [sys.executable, "-c", _RENDER_IN_A_PROCESS],
        env={
            **os.environ,
            "PYTHONHASHSEED": seed,
            "PYTHONPATH": os.pathsep.join([str(REPO), str(Path(__file__).parent)]),
        },
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert there == here


def test_long_names_keep_labels_and_hosts_within_63_characters() -> None:
    order = OrderRef(name="a" * 60, namespace="team-" + "b" * 40, uid=ORDER.uid)
    objects = render_workload(order, PLAN, RECIPE, policy(), HF_REF, settings=SETTINGS, facts=FACTS)
    ingress = next(o for o in objects if o["kind"] == "Ingress")
    host = ingress["spec"]["rules"][0]["host"]
    label, _, domain = host.partition(".")
    assert len(label) <= 63 and domain == "example.com"
    assert rendering.endpoint_url(order, policy(), SETTINGS) == f"https://{host}"
    assert all(len(o["metadata"]["labels"]["app.kubernetes.io/instance"]) <= 63 for o in objects)


# --- exposure ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("https", "settings", "scheme", "tls_secret", "issuer"),
    [
        (None, SETTINGS, "https", "support-llm-tls", "letsencrypt"),
        (HttpsPolicy(mode=HttpsMode.CERT_MANAGER, cluster_issuer_name="selfsigned"), SETTINGS,
         "https", "support-llm-tls", "selfsigned"),
        (HttpsPolicy(mode=HttpsMode.CERT_MANAGER),
         Settings(https={"certManager": {"clusterIssuerName": "letsencrypt-staging"}},
                  publicDomainTemplate=DOMAIN),
         "https", "support-llm-tls", "letsencrypt-staging"),
        (HttpsPolicy(mode=HttpsMode.CUSTOM_CERTIFICATE),
         Settings(https={"mode": "CustomCertificate", "customCertificate": {"secretName": "wild"}},
                  publicDomainTemplate=DOMAIN),
         "https", "support-llm-certificate", None),
        (HttpsPolicy.model_validate({"mode": "CustomCertificate",
                                     "customCertificate": {"secretName": "own"}}), SETTINGS,
         "https", "support-llm-certificate", None),
        (HttpsPolicy(mode=HttpsMode.ONLY_IN_URI), SETTINGS, "https", None, None),
        (HttpsPolicy(mode=HttpsMode.DISABLED), SETTINGS, "http", None, None),
        (None, Settings(https={"mode": "Disabled"}, publicDomainTemplate=DOMAIN), "http", None,
         None),
    ],
    ids=["default-cert-manager", "class-issuer", "settings-issuer", "custom-from-settings",
         "custom-from-class", "only-in-uri", "disabled", "settings-disabled"],
)  # fmt: skip
def test_https_modes(
    https: HttpsPolicy | None,
    settings: Settings,
    scheme: str,
    tls_secret: str | None,
    issuer: str | None,
) -> None:
    pol = policy(https=https)
    ingress = render(pol, settings=settings)["Ingress"]
    host = "support-llm-support.example.com"
    assert ingress["spec"]["ingressClassName"] == "nginx"
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == host
    assert rule["http"]["paths"][0]["backend"] == {
        "service": {"name": "support-llm", "port": {"name": "http"}}
    }
    expected_tls = [{"hosts": [host], "secretName": tls_secret}] if tls_secret else None
    assert ingress["spec"].get("tls") == expected_tls
    assert ingress["metadata"]["annotations"].get("cert-manager.io/cluster-issuer") == issuer
    assert rendering.endpoint_url(ORDER, pol, settings) == f"{scheme}://{host}"


# Settings whose https block is the platform's global one (Source.resolve under a global
# block that sets CustomCertificate).
PLATFORM_CUSTOM = Source().resolve(
    None,
    {
        "publicDomainTemplate": DOMAIN,
        "https": {
            "mode": "CustomCertificate",
            "customCertificate": {"secretName": "platform-wild"},
        },
    },
)


def test_the_platforms_own_certificate_is_served_by_default_never_copied() -> None:
    """The global block's CustomCertificate is the platform's own (the wildcard of its
    sites, Dex's among them): copied next to the order, the namespace's editors read its
    key. The Ingress asks for TLS on its host with no Secret: the ingress controller's
    default certificate serves it. A class naming a certificate of its own still gets it."""
    host = "support-llm-support.example.com"
    for https in (None, HttpsPolicy(mode=HttpsMode.CUSTOM_CERTIFICATE)):
        ingress = render(policy(https=https), settings=PLATFORM_CUSTOM)["Ingress"]
        assert ingress["spec"]["tls"] == [{"hosts": [host]}]
        assert rendering.endpoint_url(ORDER, policy(https=https), PLATFORM_CUSTOM) == (
            f"https://{host}"
        )
    own = HttpsPolicy.model_validate(
        {"mode": "CustomCertificate", "customCertificate": {"secretName": "own"}}
    )
    ingress = render(policy(https=own), settings=PLATFORM_CUSTOM)["Ingress"]
    assert ingress["spec"]["tls"] == [{"hosts": [host], "secretName": "support-llm-certificate"}]


@pytest.mark.parametrize(
    ("https", "settings", "source"),
    [
        (None, SETTINGS, None),
        (HttpsPolicy(mode=HttpsMode.ONLY_IN_URI), SETTINGS, None),
        (HttpsPolicy(mode=HttpsMode.CUSTOM_CERTIFICATE),
         Settings(https={"mode": "CustomCertificate", "customCertificate": {"secretName": "wild"}},
                  publicDomainTemplate=DOMAIN), (None, "wild")),
        # The platform's global block names the platform's own certificate: never copied.
        (HttpsPolicy(mode=HttpsMode.CUSTOM_CERTIFICATE), PLATFORM_CUSTOM, None),
        (None, PLATFORM_CUSTOM, None),
        # The class's own name wins over the settings', and is the controller's.
        (HttpsPolicy.model_validate({"mode": "CustomCertificate",
                                     "customCertificate": {"secretName": "own"}}),
         Settings(https={"mode": "CustomCertificate", "customCertificate": {"secretName": "wild"}},
                  publicDomainTemplate=DOMAIN), (None, "own")),
        (HttpsPolicy.model_validate({"mode": "CustomCertificate",
                                     "customCertificate": {"secretName": "own"}}),
         PLATFORM_CUSTOM, (None, "own")),
        # No Ingress (no host template): nothing to copy for.
        (HttpsPolicy.model_validate({"mode": "CustomCertificate",
                                     "customCertificate": {"secretName": "own"}}), Settings(),
         None),
    ],
    ids=["cert-manager", "only-in-uri", "custom-from-settings", "custom-from-the-platform",
         "custom-from-the-platform-classless", "custom-from-class",
         "custom-from-class-over-the-platform", "no-host"],
)  # fmt: skip
def test_the_certificate_to_copy_is_the_custom_one_an_ingress_names(
    https: HttpsPolicy | None, settings: Settings, source: tuple[str | None, str] | None
) -> None:
    assert rendering.certificate_source(ORDER, policy(https=https), settings) == source
    cluster_local = policy(ExposureType.CLUSTER_LOCAL, https=https)
    assert rendering.certificate_source(ORDER, cluster_local, settings) is None


def test_without_a_host_template_an_external_order_has_no_ingress() -> None:
    """Neither the module nor the platform names a domain: no Ingress, and the URL is
    the Service's, which is all there is to reach."""
    settings = Settings()
    objects = render(policy(), settings=settings)
    assert "Ingress" not in objects and "Service" in objects
    assert rendering.public_host(ORDER, settings) is None
    assert (
        rendering.endpoint_url(ORDER, policy(), settings)
        == "http://support-llm.support.svc.cluster.local"
    )


def test_custom_certificate_without_a_secret_is_refused() -> None:
    with pytest.raises(RenderError, match="CustomCertificate"):
        render(policy(https=HttpsPolicy(mode=HttpsMode.CUSTOM_CERTIFICATE)))


def test_settings_choose_ingress_class_and_domain() -> None:
    settings = Settings(ingressClass="public", publicDomainTemplate="%s.apps.corp.internal")
    ingress = render(settings=settings)["Ingress"]
    assert ingress["spec"]["ingressClassName"] == "public"
    assert ingress["spec"]["rules"][0]["host"] == "support-llm-support.apps.corp.internal"


def test_cluster_local_url_is_the_service_dns_name() -> None:
    pol = policy(ExposureType.CLUSTER_LOCAL, Authentication.NONE)
    assert (
        rendering.endpoint_url(ORDER, pol, SETTINGS)
        == "http://support-llm.support.svc.cluster.local"
    )


def test_classless_policy_is_external_token_cert_manager() -> None:
    objects = render(classless_policy())
    assert "Ingress" in objects and "VLLM_API_KEY" in env(objects)
    assert rendering.endpoint_url(ORDER, classless_policy(), SETTINGS).startswith("https://")


def test_service_targets_the_runtime_port_by_name() -> None:
    objects = render()
    assert objects["Service"]["spec"] == {
        "type": "ClusterIP",
        "selector": {"ai.deckhouse.io/inference-service-uid": ORDER.uid},
        "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
    }
    assert container(objects)["ports"] == [
        {"name": "http", "containerPort": 8000, "protocol": "TCP"}
    ]
    pod_labels = objects["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert objects["Service"]["spec"]["selector"].items() <= pod_labels.items()


# --- tokens and secrets --------------------------------------------------------------


@pytest.mark.parametrize(
    ("auth", "secret", "expected"),
    [
        (Authentication.TOKEN, None, "support-llm-auth"),
        (Authentication.TOKEN, "custom-auth", "custom-auth"),
        (Authentication.NONE, None, None),
    ],
    ids=["token-default-secret", "token-named-secret", "no-token"],
)
def test_api_key_from_the_order_token_secret(
    auth: Authentication, secret: str | None, expected: str | None
) -> None:
    variables = env(render(policy(auth=auth), auth_secret=secret))
    if expected is None:
        assert "VLLM_API_KEY" not in variables
    else:
        assert variables["VLLM_API_KEY"] == {"secretKeyRef": {"name": expected, "key": "token"}}


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        (HF_REF, None),
        (HF_REF.model_copy(update={"auth_secret_name": "hf-token"}),
         {"secretKeyRef": {"name": "hf-token", "key": "token"}}),
        (HF_REF.model_copy(update={"auth_secret_name": "hf", "auth_secret_key": "hf_key"}),
         {"secretKeyRef": {"name": "hf", "key": "hf_key"}}),
    ],
    ids=["public-model", "gated-default-key", "gated-explicit-key"],
)  # fmt: skip
def test_hf_token_from_the_users_secret(ref: ModelRef, expected: dict[str, Any] | None) -> None:
    variables = env(render(ref=ref))
    assert variables.get("HF_TOKEN") == expected  # the recipe's own HF_TOKEN never wins
    assert variables["HF_ENDPOINT"] == "http://127.0.0.1:9"
    assert variables["VLLM_NO_USAGE_STATS"] == "1"


# --- the model -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "annotation"),
    [
        (ModelRef(src=ModelSource.AI_MODELS, name="qwen-7b", kind=CatalogKind.MODEL,
                  namespace="support"), "ai.deckhouse.io/model"),
        (ModelRef(src=ModelSource.AI_MODELS, name="qwen-7b", kind=CatalogKind.CLUSTER_MODEL),
         "ai.deckhouse.io/clustermodel"),
    ],
    ids=["Model", "ClusterModel"],
)  # fmt: skip
def test_catalog_models_come_through_the_annotation(ref: ModelRef, annotation: str) -> None:
    objects = render(ref=ref)
    template = objects["Deployment"]["spec"]["template"]
    annotations = dict(template["metadata"]["annotations"])
    annotations.pop(CLAIM_TEMPLATE_ANNOTATION)
    assert annotations == {annotation: "qwen-7b"}
    args = container(objects)["args"]
    assert flag(args, "--model") == "/data/modelcache/models/qwen-7b"
    assert flag(args, "--served-model-name") == "qwen-7b"
    assert "HF_TOKEN" not in env(objects) and "HF_ENDPOINT" not in env(objects)
    mounts = {m["mountPath"] for m in container(objects)["volumeMounts"]}
    assert not any(p.startswith("/data/modelcache") for p in mounts), "the catalog's path"


def test_hugging_face_model_args() -> None:
    args = container(render())["args"]
    assert flag(args, "--model") == "Qwen/Qwen2.5-7B-Instruct-AWQ"
    assert flag(args, "--served-model-name") == "Qwen/Qwen2.5-7B-Instruct-AWQ"
    assert flag(args, "--tensor-parallel-size") == "1"
    assert flag(args, "--port") == "8000"
    assert flag(args, "--gpu-memory-utilization") == "0.9"
    assert flag(args, "--max-model-len") == "8192"
    assert "--enable-auto-tool-choice" in args and flag(args, "--tool-call-parser") == "hermes"


LLAMA_CPP = parse_recipe(
    yaml.safe_load((REPO / "deploy/recipes/llamacpp-nvidia-gguf.yaml").read_text())
)


@pytest.mark.parametrize(
    "spelled",
    [["--model={modelPath}"], ["-m={modelPath}"], ["--model", "{modelPath}"]],
    ids=["long", "short", "two-words"],
)
def test_llama_cpp_is_given_a_hub_repository_as_one_and_its_own_key(spelled: list[str]) -> None:
    """llama.cpp's --model is a file on disk: a GGUF order from the hub, rendered as the
    recipe spells it, asked it to open a file named after the repository. It is given
    --hf-repo (it downloads with HF_TOKEN from the env), and its key as LLAMA_API_KEY."""
    recipe = LLAMA_CPP.model_copy(update={"args": (*spelled, "--alias={servedModelName}")})
    plan = PLAN.model_copy(update={"recipe": recipe.name})
    objects = rendering.render_workload(
        ORDER, plan, recipe, policy(), HF_REF, settings=SETTINGS, facts=FACTS
    )
    by_kind = {o["kind"]: o for o in objects}
    args = container(by_kind)["args"]
    assert not any(a.split("=")[0] in ("--model", "-m") for a in args), args
    assert "--hf-repo Qwen/Qwen2.5-7B-Instruct-AWQ" in " ".join(args).replace("=", " ")
    assert "LLAMA_API_KEY" in env(by_kind) and "VLLM_API_KEY" not in env(by_kind)


@pytest.mark.parametrize(
    ("weights_file", "recipe_args", "given"),
    [
        ("q4.gguf", (), "q4.gguf"),
        ("m-Q5_K_M-00001-of-00002.gguf", (), "m-Q5_K_M-00001-of-00002.gguf"),
        (None, (), None),  # facts from before they named it: llama.cpp chooses
        ("q4.gguf", ("--hf-file=own.gguf",), "own.gguf"),  # the recipe's choice wins
        ("q4.gguf", ("-hf", "{modelPath}"), "q4.gguf"),  # the recipe spells the repo itself
        ("q4.gguf", ("--hf-repo={modelPath}",), "q4.gguf"),
        ("q4.gguf", ("-hfr={modelPath}:Q8_0",), None),  # a tag names the file
    ],
    ids=["one-file", "split", "unnamed", "recipe-names-one", "short-repo", "long-repo", "tag"],
)
def test_llama_cpp_opens_the_variant_the_plan_was_sized_for(
    weights_file: str | None, recipe_args: tuple[str, ...], given: str | None
) -> None:
    """A GGUF repository holds every quantization: the plan's memory and volume are for
    the variant the facts name, and llama.cpp, left to choose, may fetch another."""
    spells_repo = any(a.partition("=")[0] in ("-hf", "--hf-repo", "-hfr") for a in recipe_args)
    model = () if spells_repo else ("--model={modelPath}",)
    recipe = LLAMA_CPP.model_copy(update={"args": (*model, *recipe_args)})
    plan = PLAN.model_copy(update={"recipe": recipe.name})
    facts = FACTS.model_copy(update={"weights_file": weights_file})
    objects = rendering.render_workload(
        ORDER, plan, recipe, policy(), HF_REF, settings=SETTINGS, facts=facts
    )
    args = container({o["kind"]: o for o in objects})["args"]
    files = [a.partition("=")[2] for a in args if a.partition("=")[0] == "--hf-file"]
    assert files == ([given] if given else [])


def test_a_runtime_that_takes_no_key_is_never_rendered_under_token() -> None:
    keyless = RECIPE.model_copy(update={"runtime": "text-embeddings-inference"})
    with pytest.raises(RenderError, match="cannot be given the API key"):
        rendering.render_workload(
            ORDER, PLAN, keyless, policy(), HF_REF, settings=SETTINGS, facts=FACTS
        )


# --- devices, resources, scaling -----------------------------------------------------

SHARED = PLAN.model_copy(
    update={"device_class": "nvidia-t4-mps-physical", "sharing_mode": SharingMode.SHARED,
            "share_percent": 50, "cpu": "2"}
)  # fmt: skip
PARTITION = PLAN.model_copy(
    update={"device_class": "mig.nvidia.com", "placement_mode": PlacementMode.PARTITION,
            "accelerator_product_name": "NVIDIA A100 80GB PCIe", "accelerator_memory_gib": 10,
            "devices": ("gpu.nvidia.com/node1/gpu-1-mig-1g10gb-19-0",)}
)  # fmt: skip
MULTI = PLAN.model_copy(
    update={"accelerator_count": 2, "devices": ("gpu.nvidia.com/n/gpu-0", "gpu.nvidia.com/n/gpu-1")}
)


def request_of(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    devices = objects["ResourceClaimTemplate"]["spec"]["spec"]["devices"]
    (request,) = devices["requests"]
    assert request["name"] == "gpu"
    return dict(request["exactly"])


@pytest.mark.parametrize(
    ("plan", "device_class", "count", "shared"),
    [
        (PLAN, "gpu.nvidia.com", 1, False),
        (SHARED, "nvidia-t4-mps-physical", 1, True),
        (PARTITION, "mig.nvidia.com", 1, False),
        (MULTI, "gpu.nvidia.com", 2, False),
    ],
    ids=["dedicated", "shared-50", "partition", "two-devices"],
)
def test_claim_template(plan: Plan, device_class: str, count: int, shared: bool) -> None:
    objects = render(plan=plan)
    exactly = request_of(objects)
    assert exactly["deviceClassName"] == device_class
    assert (exactly["allocationMode"], exactly["count"]) == ("ExactCount", count)
    memory, product = (selector["cel"]["expression"] for selector in exactly["selectors"])
    assert memory.startswith("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('")
    # The product the plan counted on, so the scheduler's first fit cannot take another.
    assert product == (
        f"device.attributes['gpu.nvidia.com'].productName == \"{plan.accelerator_product_name}\""
    )
    devices = objects["ResourceClaimTemplate"]["spec"]["spec"]["devices"]
    assert ("capacity" in exactly) is shared
    if shared:
        assert devices["config"] == [
            {
                "requests": ["gpu"],
                "opaque": {
                    "driver": "gpu.nvidia.com",
                    "parameters": {
                        "apiVersion": "resource.nvidia.com/v1beta1",
                        "kind": "GpuConfig",
                        "sharing": {
                            "strategy": "MPS",
                            "mpsConfig": {"defaultActiveThreadPercentage": 50},
                        },
                    },
                },
            }
        ]
    else:
        assert "config" not in devices
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "support-llm"}]
    assert container(objects)["resources"]["claims"] == [{"name": "gpu"}]
    assert flag(container(objects)["args"], "--tensor-parallel-size") == str(count)
    claim_labels = objects["ResourceClaimTemplate"]["spec"]["metadata"]["labels"]
    assert claim_labels["ai.deckhouse.io/inference-service-uid"] == ORDER.uid


def test_shared_runtime_uses_only_its_share_of_memory() -> None:
    args = container(render(plan=SHARED))["args"]
    assert flag(args, "--gpu-memory-utilization") == "0.45"


def _device(memory: Fraction) -> Device:
    return Device(
        driver="gpu.nvidia.com",
        pool="node1",
        name="gpu-0",
        node="node1",
        attributes=(("gpu.nvidia.com/type", "gpu"),),
        capacity=(("gpu.nvidia.com/memory", memory),),
    )


@given(
    billions=st.integers(min_value=1, max_value=80),
    device_mib=st.integers(min_value=4 * 1024, max_value=96 * 1024),
    count=st.integers(min_value=1, max_value=4),
    share=st.sampled_from([None, 25, 50, 100]),
)
def test_selector_admits_every_device_the_planner_judged_big_enough(
    billions: int, device_mib: int, count: int, share: int | None
) -> None:
    facts = FACTS.model_copy(update={"parameter_count": billions * 10**9})
    memory = Fraction(device_mib * MIB)
    per_consumer = memory * (share or 100) / 100
    plan = PLAN.model_copy(
        update={
            "accelerator_memory_gib": gib_rounded(memory),  # as the planner reports it
            "accelerator_count": count,
            "sharing_mode": SharingMode.SHARED if share else SharingMode.DEDICATED,
            "share_percent": share,
        }
    )
    objects = render_workload(ORDER, plan, RECIPE, policy(), HF_REF, settings=SETTINGS, facts=facts)
    exactly = next(o for o in objects if o["kind"] == "ResourceClaimTemplate")["spec"]["spec"][
        "devices"
    ]["requests"][0]["exactly"]
    admitted = cel.evaluate(exactly["selectors"][0]["cel"]["expression"], _device(memory))
    if sizing.fits(facts, count=count, device_memory=per_consumer):
        assert admitted, "the planner's device is refused by the claim"
        if share:
            # Consumed capacity never exceeds the share, and falls short of it by less than
            # the share of a GiB (the plan's whole GiB) and a MiB: as many claims as the
            # planner counted fit, and more do not (test_rendering_shares.py counts them).
            consumed = parse_quantity(exactly["capacity"]["requests"]["memory"])
            assert per_consumer - GIB * share / 100 - MIB < consumed <= per_consumer


def test_only_a_shared_claim_keeps_to_the_plans_memory() -> None:
    # A Shared claim consumes its share of a device of the plan's size, so it is kept to
    # devices of that size (test_rendering_shares.py); a Dedicated whole-device claim
    # asks only the planner's fit test, as it always did (the same template: its pods do
    # not roll), a partition's keeps to its profile's size (below).
    memory = "device.capacity['gpu.nvidia.com'].memory"
    dedicated = request_of(render())["selectors"][0]["cel"]["expression"]
    assert dedicated == f"{memory}.compareTo(quantity('8246Mi')) >= 0"
    shared = request_of(render(plan=SHARED.model_copy(update={"accelerator_memory_gib": 24})))
    assert shared["selectors"][0]["cel"]["expression"] == (
        f"{memory}.compareTo(quantity('24064Mi')) >= 0 && "
        f"{memory}.compareTo(quantity('25088Mi')) < 0"
    )
    assert shared["capacity"] == {"requests": {"memory": "12032Mi"}}  # half of 23.5Gi


def test_a_partition_claim_keeps_to_the_profile_the_planner_counted() -> None:
    """Every MIG profile of a GPU carries the GPU's product name: a claim planned on a
    1g.10gb with a memory floor alone could be given a 3g.40gb partition, which another
    order's plan counted on, and that order never got one."""
    expression = request_of(render(plan=PARTITION))["selectors"][0]["cel"]["expression"]
    assert cel.evaluate(expression, _device(Fraction(9856 * MIB)))  # a 1g.10gb
    assert not cel.evaluate(expression, _device(Fraction(40192 * MIB)))  # a 3g.40gb


def test_selector_refuses_a_device_too_small() -> None:
    expression = request_of(render())["selectors"][0]["cel"]["expression"]
    assert cel.evaluate(expression, _device(Fraction(15 * GIB)))
    assert not cel.evaluate(expression, _device(Fraction(4 * GIB)))


@pytest.mark.parametrize(
    ("pol", "replicas", "hpa_bounds"),
    [
        (policy(), 1, None),
        (policy(min_replicas=2, max_replicas=2), 2, None),
        (policy(min_replicas=1, max_replicas=4), None, (1, 4)),
    ],
    ids=["one", "fixed-two", "one-to-four"],
)
def test_replicas_and_hpa(
    pol: EffectivePolicy, replicas: int | None, hpa_bounds: tuple[int, int] | None
) -> None:
    objects = render(pol)
    assert objects["Deployment"]["spec"].get("replicas") == replicas  # the HPA owns it if any
    hpa = objects.get("HorizontalPodAutoscaler")
    if hpa_bounds is None:
        assert hpa is None
        return
    assert hpa is not None
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == hpa_bounds
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "support-llm",
    }


def test_hpa_api_version_for_old_servers() -> None:
    objects = render(policy(max_replicas=3), hpa_api_version="autoscaling/v2beta2")
    assert objects["HorizontalPodAutoscaler"]["apiVersion"] == "autoscaling/v2beta2"
    with pytest.raises(RenderError, match="HPA API"):
        render(policy(max_replicas=3), hpa_api_version="autoscaling/v1")


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        (UpdateStrategy.ROLLING_UPDATE,
         {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}),
        (UpdateStrategy.RECREATE, {"type": "Recreate"}),
    ],
    ids=["rolling-no-surge", "recreate"],
)  # fmt: skip
def test_update_strategy(strategy: UpdateStrategy, expected: dict[str, Any]) -> None:
    assert render(policy(strategy=strategy))["Deployment"]["spec"]["strategy"] == expected


@pytest.mark.parametrize("priority", [None, "inference-normal"], ids=["none", "named"])
def test_priority_class_from_constraints(priority: str | None) -> None:
    pod = render(policy(priority=priority))["Deployment"]["spec"]["template"]["spec"]
    assert pod.get("priorityClassName") == priority


def test_resources_and_volumes_follow_the_plan() -> None:
    objects = render(plan=MULTI)
    runtime = container(objects)
    assert runtime["resources"]["requests"] == {"cpu": "4", "memory": "12Gi"}
    assert runtime["resources"]["limits"] == {"memory": "12Gi"}
    volumes = {v["name"]: v for v in objects["Deployment"]["spec"]["template"]["spec"]["volumes"]}
    assert volumes["model-cache"] == {"name": "model-cache", "emptyDir": {"sizeLimit": "9Gi"}}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"  # tensor parallel over two
    assert runtime["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}


def test_plan_and_recipe_must_agree() -> None:
    with pytest.raises(RenderError, match="recipe"):
        render(plan=PLAN.model_copy(update={"recipe": "other"}))
