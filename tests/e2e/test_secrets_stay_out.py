"""No Secret value reaches the event log, the status or the controller's logs.

A token is fed through every path that touches one — the user's HF Secret for a gated
model (resolution, workload env), the order's own `{order}-auth` token (creation, the
runtime's API key, every probe) — and then the stored bytes of the log (database file
and WAL), every decoded payload, the status and every log record are scanned for it.
"""

from __future__ import annotations

import base64
import logging
from pathlib import Path

import pytest
from kubernetes import client

from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.cluster

HF_TOKEN = "hf_standin_alice_0123456789abcdefghijkl"  # granted the gated model in the hub fixture


def test_tokens_never_reach_the_log_status_or_logs(platform, alice, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    core = client.CoreV1Api(platform.api("alice"))
    core.create_namespaced_secret(
        "support",
        {"metadata": {"name": "hf-token-scan"}, "stringData": {"hf": HF_TOKEN}},
    )
    try:
        alice.create(
            "support",
            "scan-llama",
            {
                "inferenceServiceClassName": "default-llm",
                "model": {
                    "src": "HuggingFace",
                    "ref": {"name": "meta-llama/Llama-3.1-8B"},
                    "authSecretRef": {"name": "hf-token-scan", "key": "hf"},
                },
            },
        )
        obj = alice.wait_phase("support", "scan-llama", "Ready", timeout=120)
        auth = core.read_namespaced_secret(obj["status"]["authSecretName"], "support")
        order_token = base64.b64decode(auth.data["token"]).decode()
        # A few more probes with the token, so every path has run more than once.
        uid = obj["metadata"]["uid"]
        first = platform.log.stream(uid).version
        platform.controller.queue.add(uid)
        wait_for(lambda: len(platform.controller.queue) == 0, timeout=10)

        secrets = [HF_TOKEN.encode(), order_token.encode()]
        database = Path(platform.store_url.removeprefix("sqlite:///"))
        stored = b"".join(p.read_bytes() for p in database.parent.glob(database.name + "*"))
        assert b"meta-llama/Llama-3.1-8B" in stored and platform.log.stream(uid).version >= first
        for secret in secrets:
            assert secret not in stored, "a token reached the event log's bytes"
        payloads = repr([r.event for r in platform.log.read(uid)]).encode()
        assert b"meta-llama/Llama-3.1-8B" in payloads  # the facts are there, the token is not
        for secret in secrets:
            assert secret not in payloads
            assert secret.decode() not in repr(obj["status"])
        logged = "\n".join(r.getMessage() for r in caplog.records)
        assert logged, "the controller logged nothing to scan"
        for secret in secrets:
            assert secret.decode() not in logged, "a token reached the logs"
        # The workload does get the HF token — by reference, never by value.
        deployment = client.AppsV1Api(platform.api("admin")).read_namespaced_deployment(
            "scan-llama", "support"
        )
        env = {e.name: e for c in deployment.spec.template.spec.containers for e in (c.env or [])}
        ref = env["HF_TOKEN"].value_from.secret_key_ref
        assert (ref.name, ref.key) == ("hf-token-scan", "hf") and env["HF_TOKEN"].value is None
    finally:
        alice.delete("support", "scan-llama")
        core.delete_namespaced_secret("hf-token-scan", "support")
