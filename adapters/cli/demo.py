"""The body of `ai-inference demo` (registered by demo_cmd.py): the whole product here.

Brings up the local control plane, installs the module (deploy/) and starts the stand-in
hub, the simulator and the controller; applies the seed's examples; shows the orders
reaching their phases with `kubectl get`; calls one endpoint with its token as the seed's
curl does; and prints that order's history from the event log. `--keep` leaves it all
running (printing `ready`) until interrupted, with the kubeconfigs in DIR.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client

from adapters.cli import waiting
from adapters.cluster import bootstrap, local
from adapters.kubernetes.manifests import Applier, load_documents
from adapters.platform import LocalPlatform
from adapters.probes.targets import SIMULATOR_ENDPOINT_ANNOTATION
from adapters.resources import resource_dir

__all__ = ["DEMO_EXAMPLES", "run"]

# Every example but the catalog-off ModuleConfig, which would switch the catalog order off.
DEMO_EXAMPLES = (
    "priority-classes.yaml",
    "moduleconfig-minimal.yaml",
    "class-llm-internal.yaml",
    "class-llm-chat-external.yaml",
    "class-llm-strict.yaml",
    "class-embeddings-only.yaml",
    "order-minimal.yaml",
    "order-classless.yaml",
    "order-gated-hf.yaml",
    "order-catalog.yaml",
)
SETTLED = {"Ready", "Degraded", "Failed"}
# What a Deckhouse cluster already has: the platform's global domain. The examples'
# ModuleConfig sets none of its own, so External orders are published under this one.
PLATFORM_GLOBALS = {
    "apiVersion": "deckhouse.io/v1alpha1",
    "kind": "ModuleConfig",
    "metadata": {"name": "global"},
    "spec": {"version": 2, "settings": {"modules": {"publicDomainTemplate": "%s.example.com"}}},
}


def _say(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _kubectl(state: local.ClusterState, identity: str, *args: str) -> str:
    result = subprocess.run(
        ["kubectl", f"--kubeconfig={state.kubeconfig(identity)}", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return (result.stdout + result.stderr).rstrip()


def _examples(state: local.ClusterState, *, hf_token: str) -> None:
    docs = load_documents(resource_dir("examples") / name for name in DEMO_EXAMPLES)
    for doc in docs:
        # The seed's placeholder, filled with a token the stand-in hub grants.
        data = doc.get("stringData") or {}
        for key, value in list(data.items()):
            if value == "<HUGGING_FACE_TOKEN>":
                data[key] = hf_token
    namespaced = [d for d in docs if d["metadata"].get("namespace") == "support"]
    cluster_wide = [PLATFORM_GLOBALS, *(d for d in docs if d not in namespaced)]
    Applier(bootstrap.api_client(state.kubeconfig("admin"))).apply_all(cluster_wide)
    # The namespace user applies her own orders and Secret, under her RBAC.
    Applier(bootstrap.api_client(state.kubeconfig("alice"))).apply_all(namespaced)


def _granted_token(platform: LocalPlatform, repo: str) -> str:
    """A token of an account the stand-in hub grants `repo` to (its fixture's accounts)."""
    fixture = platform.hub.fixture
    granted = fixture.models[repo].granted
    return next(token for token, account in fixture.tokens.items() if account in granted)


def _orders(api: client.ApiClient) -> list[dict[str, Any]]:
    listed = client.CustomObjectsApi(api).list_cluster_custom_object(
        "ai.deckhouse.io", "v1alpha1", "inferenceservices"
    )
    return list(listed.get("items", []))


def _wait(api: client.ApiClient, timeout: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    orders = _orders(api)
    while time.monotonic() < deadline:
        orders = _orders(api)
        if orders and all((o.get("status") or {}).get("phase") in SETTLED for o in orders):
            break
        time.sleep(1)
    return orders


def _call_endpoint(platform: LocalPlatform, order: dict[str, Any]) -> None:
    status = order.get("status") or {}
    meta = order["metadata"]
    core = client.CoreV1Api(platform.api("alice"))
    secret = core.read_namespaced_secret(status["authSecretName"], meta["namespace"])
    token = base64.b64decode(secret.data["token"]).decode()
    pods = client.CoreV1Api(platform.api("admin")).list_namespaced_pod(
        meta["namespace"], label_selector=f"ai.deckhouse.io/inference-service-uid={meta['uid']}"
    )
    stub = next(
        (
            p.metadata.annotations[SIMULATOR_ENDPOINT_ANNOTATION]
            for p in pods.items
            if SIMULATOR_ENDPOINT_ANNOTATION in (p.metadata.annotations or {})
        ),
        None,
    )
    _say(f"$ curl -sS {status['endpoint']['url']}/v1/models -H 'Authorization: Bearer $TOKEN'")
    if stub is None:
        _say("  (no serving pod to call)")
        return
    _say(f"  # {status['endpoint']['url']} has no DNS here; the simulator serves it at {stub}")
    answer = httpx.get(f"{stub}/v1/models", headers={"Authorization": f"Bearer {token}"}, timeout=5)
    _say(f"  {answer.status_code} {answer.text[:300]}")
    refused = httpx.get(f"{stub}/v1/models", timeout=5)
    _say(f"  without the token: {refused.status_code}")


class _Terminated(KeyboardInterrupt):
    """SIGTERM (a service manager, `timeout`, a CI runner): stop like Ctrl-C does."""


def _terminate(*_: object) -> None:
    # Once: a second signal during the clean-up must not cut the clean-up short.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise _Terminated


def run(args: argparse.Namespace) -> int:
    """The demo; whatever ends it — done, Ctrl-C, SIGTERM, an error — stops what it started:
    the controller, the simulator, the hub and the etcd/kube-apiserver/controller-manager
    processes (which run detached, so nothing else would stop them)."""
    previous = signal.signal(signal.SIGTERM, _terminate)
    started: list[LocalPlatform] = []
    try:
        return _run(args, started)
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            for platform in started:
                platform.stop()
        finally:
            # Refused only for a folder `up` refused too: left as it was, said already.
            with contextlib.suppress(local.ClusterError):
                local.down(args.dir)
            signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace, started: list[LocalPlatform]) -> int:
    began = time.monotonic()
    _say("== bringing up the local control plane (first run builds Kubernetes, ~15 min)")
    try:
        state = local.up(args.dir)
        bootstrap.bootstrap(state.kubeconfig("admin"))
    except local.ClusterError as exc:
        sys.stderr.write(f"demo: {exc}\n")
        return 1
    platform = LocalPlatform(state, f"sqlite:///{Path(state.folder) / 'events.sqlite'}")
    _say("== installing the module and starting the hub, the simulator and the controller")
    started.append(platform)
    platform.start()
    if not args.no_examples:
        _say("== applying the seed's examples (orders and their Secret as alice)")
        _examples(state, hf_token=_granted_token(platform, "meta-llama/Llama-3.1-8B"))
        orders = _wait(platform.api("admin"), args.timeout)
        _say(_kubectl(state, "admin", "get", "inferenceservices", "-A"))
        _say()
        _say(
            _kubectl(
                state,
                "admin",
                "get",
                "inferenceservice",
                "support-llm",
                "-n",
                "support",
                "-o",
                'jsonpath={range .status.conditions[*]}{.type}={.status} {.reason}{"\\n"}{end}',
            )
        )
        ready = [
            o
            for o in orders
            if o["metadata"]["name"] == "support-llm"
            and (o.get("status") or {}).get("phase") == "Ready"
        ]
        if ready:
            _call_endpoint(platform, ready[0])
        _say("\n$ ai-inference history support/support-llm")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "adapters.cli.main",
                "history",
                "support/support-llm",
                "--store",
                platform.store_url,
            ],
            check=False,
        )
    _say(f"\n== done in {time.monotonic() - began:.0f}s; kubeconfigs in {state.folder}")
    if args.keep:
        _say(f"   export KUBECONFIG={state.kubeconfig('admin')}")
        _say("ready")
        waiting.until_set()
    return 0
