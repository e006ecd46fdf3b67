"""No Secret value reaches the event log, the status, an Event or the controller's logs.

A token is fed through every path that touches one — the user's HF Secret for a gated
model (resolution, workload env), the order's own `{order}-auth` token (creation, the
runtime's API key, every probe) — and then the stored bytes of the log (database file
and WAL), every decoded payload, the statuses, the namespace's Events and every log record
are scanned for every 8-byte piece of it (tests/support/secret_scan.py): a token escaped,
cut short or quoted inside an error's text is found too. Tokens that cannot be sent in an
HTTP header (a newline, a carriage return, non-latin-1 text, a PEM block) take the path
where httpx's error quotes the header.
"""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path

import pytest
from kubernetes import client

from tests.e2e.conftest import forced_passes
from tests.support.secret_scan import SecretScan, log_text

pytestmark = pytest.mark.cluster

HF_TOKEN = "hf_standin_alice_0123456789abcdefghijkl"  # granted the gated model in the hub fixture
GATED = "meta-llama/Llama-3.1-8B"
# Tokens httpx cannot put in a header; each differs from the others in its first 8 bytes.
UNSENDABLE = {
    "newline": "hf_nlQ7vR2kW9xZ4mB8\ncT5yH3jL6pF1",
    "carriage-return": "hf_crA1sD4fG7hJ0kL3\rzX6cV9bN2mQ5",
    "crlf-injection": "hf_injP8oI5uY2tR9eW6\r\nX-Stolen: qA3sD6fG9hJ",
    "non-latin-1": "hf_utfM4nB7vC0xZ3aS6€дзж🦙lK9jH2gF5",
    "latin-1": "hf_latE1rT4yU7iO0pA3éñüß6sD9fG2hJ",
    "pem": (
        "-----BEGIN OPENSSH PRIVATE KEY-----\n"
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
        "QyNTUxOQAAACDk7sX0vJq3H6nT9wR2mY8pL5cF1aZ0eU4iO7bG3dK6hAAAAJgQ2kT1ENpE\n"
        "-----END OPENSSH PRIVATE KEY-----\n"
    ),
}


def _haystacks(platform, core, uids: list[str], caplog) -> dict[str, bytes]:
    """Everywhere a token must not be: the log's bytes and payloads, statuses, Events,
    the controller's log records as it writes them."""
    database = Path(platform.store_url.removeprefix("sqlite:///"))
    stored = b"".join(p.read_bytes() for p in database.parent.glob(database.name + "*"))
    payloads = repr([r.event for uid in uids for r in platform.log.read(uid)])
    custom = client.CustomObjectsApi(platform.api("admin"))
    orders = custom.list_namespaced_custom_object(
        "ai.deckhouse.io", "v1alpha1", "support", "inferenceservices"
    )
    statuses = repr([o.get("status") for o in orders["items"]])
    events = repr([(e.reason, e.message) for e in _events(platform)])
    return {
        "event log bytes": stored,
        "decoded payloads": payloads.encode(),
        "statuses": statuses.encode(),
        "events": events.encode(),
        "logs": log_text(caplog.records).encode(),
    }


def _events(platform) -> list:
    listed = client.CoreV1Api(platform.api("admin")).list_namespaced_event("support")
    return listed.items


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
        forced_passes(platform, uid, passes=2)

        scan = SecretScan([HF_TOKEN, order_token])
        haystacks = _haystacks(platform, core, [uid], caplog)
        assert b"meta-llama/Llama-3.1-8B" in haystacks["event log bytes"]
        assert b"meta-llama/Llama-3.1-8B" in haystacks["decoded payloads"]  # facts, no token
        assert b"scan-llama" in haystacks["statuses"] and b"scan-llama" in haystacks["logs"]
        assert haystacks["events"] != b"[]", "no Event to scan"
        for where, haystack in haystacks.items():
            assert not scan.leaks(haystack), f"a piece of a token reached the {where}"
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


def test_tokens_that_cannot_be_a_header_never_reach_anything(platform, alice, caplog) -> None:
    """Each unsendable token ends in AuthSecretInvalid, and no 8-byte piece of any of them
    is in a status, an Event, the event log or a log record (before the fix httpx's
    "Illegal header value b'Bearer hf_…\\n…'" was the order's ModelResolved message)."""
    caplog.set_level(logging.DEBUG)
    core = client.CoreV1Api(platform.api("alice"))
    names = {case: f"unsendable-{case}" for case in UNSENDABLE}
    uids = []
    try:
        for case, token in UNSENDABLE.items():
            core.create_namespaced_secret(
                "support", {"metadata": {"name": names[case]}, "stringData": {"hf": token}}
            )
            created = alice.create(
                "support",
                names[case],
                {
                    "inferenceServiceClassName": "default-llm",
                    "model": {
                        "src": "HuggingFace",
                        "ref": {"name": GATED},
                        "authSecretRef": {"name": names[case], "key": "hf"},
                    },
                },
            )
            uids.append(created["metadata"]["uid"])
        for case in UNSENDABLE:
            obj = alice.wait_phase("support", names[case], "Pending", reason="AuthSecretInvalid")
            model = next(c for c in obj["status"]["conditions"] if c["type"] == "ModelResolved")
            assert "cannot be sent to the hub as a token" in model["message"], model
        scan = SecretScan(UNSENDABLE.values())
        for where, haystack in _haystacks(platform, core, uids, caplog).items():
            leaked = scan.leaks(haystack)
            assert not leaked, f"pieces of a token reached the {where}: {sorted(leaked)[:3]}"
    finally:
        for name in names.values():
            alice.delete("support", name)
            core.delete_namespaced_secret(name, "support")


@pytest.mark.parametrize("offset", [0, 1, 2])
def test_the_scan_finds_a_token_as_a_secret_carries_it(offset: int) -> None:
    """A Secret logged or stored whole holds its values in base64: a scan that looked
    only for the token's own bytes passed a log that held the user's HF token."""
    scan = SecretScan([HF_TOKEN])
    held = base64.b64encode(b"k" * offset + HF_TOKEN.encode() + b"!")
    secret = json.dumps({"data": {"hf": held.decode()}})
    assert scan.leaks(secret) and scan.leaks(held.replace(b"+", b"-").replace(b"/", b"_"))
    assert not scan.leaks(json.dumps({"data": {"hf": base64.b64encode(b"other").decode()}}))
