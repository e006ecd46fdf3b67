"""How the stand-ins read pods: claims (field or annotation), env as a kubelet builds it,
and the model names a vLLM command line serves."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapters.simulator import kubelet, podclaims

SECRETS = {("support", "support-llm-auth"): {"token": "t0k3n"}, ("support", "hf"): {"hf": "hf_x"}}
CONFIG_MAPS = {("support", "settings"): {"MAX_LEN": "8192"}}


def secrets(namespace: str, name: str) -> dict[str, str] | None:
    return SECRETS.get((namespace, name))


def config_maps(namespace: str, name: str) -> dict[str, str] | None:
    return CONFIG_MAPS.get((namespace, name))


POD = {"metadata": {"name": "p", "namespace": "support", "uid": "u-1"}, "spec": {"nodeName": "n"}}


def env(*items: dict[str, Any], env_from: list[Any] | None = None) -> dict[str, str]:
    container = {"name": "c", "env": list(items), "envFrom": env_from or []}
    return kubelet.resolve_env(POD, container, secrets, config_maps)


def secret_ref(name: str, key: str, **extra: Any) -> dict[str, Any]:
    return {"valueFrom": {"secretKeyRef": {"name": name, "key": key, **extra}}}


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        pytest.param([{"name": "A", "value": "1"}], {"A": "1"}, id="plain-value"),
        pytest.param(
            [{"name": "VLLM_API_KEY", **secret_ref("support-llm-auth", "token")}],
            {"VLLM_API_KEY": "t0k3n"},
            id="secret-key-ref",
        ),
        pytest.param(
            [{"name": "HF_TOKEN", **secret_ref("missing", "token", optional=True)}],
            {},
            id="optional-missing-secret-is-unset",
        ),
        pytest.param(
            [
                {
                    "name": "LEN",
                    "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "MAX_LEN"}},
                },
                {"name": "ARG", "value": "--max-model-len=$(LEN) $$(LEN)"},
            ],
            {"LEN": "8192", "ARG": "--max-model-len=8192 $(LEN)"},
            id="config-map-and-expansion",
        ),
        pytest.param(
            [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            {"POD": "p"},
            id="field-ref",
        ),
    ],
)
def test_env_is_resolved_like_a_kubelet(
    items: list[dict[str, Any]], expected: dict[str, str]
) -> None:
    assert env(*items) == expected


def test_env_from_a_secret_with_prefix() -> None:
    assert env(env_from=[{"secretRef": {"name": "hf"}, "prefix": "X_"}]) == {"X_hf": "hf_x"}


@pytest.mark.parametrize(
    ("item", "message"),
    [
        pytest.param(secret_ref("nope", "token"), 'secret "nope" not found', id="missing-secret"),
        pytest.param(
            secret_ref("hf", "token"),
            "couldn't find key token in Secret support/hf",
            id="missing-key",
        ),
    ],
)
def test_missing_secret_is_a_config_error(item: dict[str, Any], message: str) -> None:
    with pytest.raises(kubelet.EnvError, match=message):
        env({"name": "HF_TOKEN", **item})


@pytest.mark.parametrize(
    ("words", "names"),
    [
        pytest.param(
            ["--model", "Qwen/Qwen2.5-7B", "--served-model-name", "support-llm"],
            ["support-llm"],
            id="served-name-wins",
        ),
        pytest.param(["--served-model-name=a", "--port", "8000"], ["a"], id="equals-form"),
        pytest.param(
            ["--served-model-name", "a", "b", "--port", "8000"], ["a", "b"], id="several-names"
        ),
        pytest.param(
            ["--model=/data/modelcache/models/m", "--port=8000"],
            ["/data/modelcache/models/m"],
            id="model-only",
        ),
        pytest.param(
            ["vllm", "serve", "Qwen/Qwen2.5-7B", "--port", "8000"],
            ["Qwen/Qwen2.5-7B"],
            id="serve-positional",
        ),
        pytest.param(["--port", "8000"], [], id="nothing-named"),
        pytest.param(
            ["--hf-repo=org/m-GGUF", "--alias=org/m-GGUF", "--port=8000"],
            ["org/m-GGUF"],
            id="llama-cpp-alias",
        ),
        pytest.param(["--hf-repo", "org/m-GGUF"], ["org/m-GGUF"], id="llama-cpp-hub-repo"),
    ],
)
def test_served_model_names(words: list[str], names: list[str]) -> None:
    assert kubelet.served_model_names(words) == names


CLAIMS = [{"name": "gpu", "resourceClaimTemplateName": "support-llm"}]


def test_claims_are_read_from_the_spec_first() -> None:
    pod = {"metadata": {}, "spec": {"resourceClaims": CLAIMS}}
    assert podclaims.pod_claims(pod) == (podclaims.PodClaim("gpu", template="support-llm"),)


def test_an_old_server_carries_the_claims_in_an_annotation() -> None:
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "support-llm"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {
                    "resourceClaims": CLAIMS,
                    "containers": [
                        {
                            "name": "vllm",
                            "resources": {"claims": [{"name": "gpu"}], "limits": {"cpu": "4"}},
                        }
                    ],
                },
            }
        },
    }
    folded = podclaims.for_old_server(deployment)
    template = folded["spec"]["template"]
    assert "resourceClaims" not in template["spec"]
    assert template["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "4"}}
    assert json.loads(template["metadata"]["annotations"][podclaims.CLAIMS_ANNOTATION]) == CLAIMS
    # The pods the template makes read the same claims back.
    pod = {"metadata": template["metadata"], "spec": template["spec"]}
    assert podclaims.pod_claims(pod) == (podclaims.PodClaim("gpu", template="support-llm"),)
    # And the original is untouched: the rewrite copies what it changes.
    original = deployment["spec"]["template"]
    assert original["spec"]["resourceClaims"] == CLAIMS
    assert original["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu"}]
    assert original["metadata"] == {"labels": {"app": "x"}}


def test_a_manifest_without_claims_is_unchanged() -> None:
    pod = {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    assert podclaims.for_old_server(pod) == pod


@pytest.mark.parametrize(
    ("annotation", "problem"),
    [
        pytest.param("{nope", "not JSON", id="not-json"),
        pytest.param('{"name": "gpu"}', "not a list", id="not-a-list"),
        pytest.param('[{"name": "gpu"}]', "exactly one of", id="neither-template-nor-claim"),
        pytest.param('[{"resourceClaimName": "x"}]', "has no name", id="no-name"),
    ],
)
def test_malformed_claims_annotation_is_refused(annotation: str, problem: str) -> None:
    pod = {"metadata": {"annotations": {podclaims.CLAIMS_ANNOTATION: annotation}}, "spec": {}}
    with pytest.raises(podclaims.PodClaimsError, match=problem):
        podclaims.pod_claims(pod)


def test_claim_statuses_fall_back_to_the_annotation() -> None:
    statuses = [{"name": "gpu", "resourceClaimName": "p-gpu-abcde"}]
    pod = {
        "metadata": {"annotations": {podclaims.CLAIM_STATUSES_ANNOTATION: json.dumps(statuses)}},
        "status": {},
    }
    assert podclaims.claim_statuses(pod) == {"gpu": "p-gpu-abcde"}
    assert podclaims.claim_statuses(
        {"metadata": {}, "status": {"resourceClaimStatuses": statuses}}
    ) == {"gpu": "p-gpu-abcde"}
