"""What the controller keeps in memory per order, measured with tracemalloc, no cluster.

Issue 11 asks for at most 50 KB of controller RSS per order at 1,000 orders. The bench
(docs/performance.md) measures the whole process's peak RSS; this says where it goes.
It builds the controller's own `ClusterCache` (informers never started, as the pass's
fakes do) and feeds it N orders' objects one watch event at a time — each parsed from
JSON anew, as the watch parses each event — kind by kind, and reports the bytes each
cache holds per order once fed, and the transient peak of feeding it. The objects are one
Ready order's, as the local API server, controller manager and simulator left them
(tests/adapters/kubernetes/fixtures/live_order.json, `--capture` remakes it), each
copied under a new name, new UIDs and RVs of its own per order. Then what else is kept
per order: the folded state as the reconciler keeps it (parts shared), the Writer's
memory of the statuses it wrote; and the transient peak of a start's LIST of N
Deployments.

    PYTHONPATH=. .venv/bin/python benchmarks/memory.py -n 1000
    PYTHONPATH=. .venv/bin/python benchmarks/memory.py --capture /tmp/capture  # a cluster

It prints a table (bytes per order by structure) and, with `--json`, one JSON line.
Python's heap is not RSS: the allocator keeps arenas, the interpreter and libraries are
a base, and peaks stay in the high-water mark; but what grows with N is here.
"""

from __future__ import annotations

import argparse
import base64
import copy
import gc
import json
import re
import sys
import time
import tracemalloc
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from adapters.cluster import bootstrap, local  # noqa: E402
from adapters.kubernetes import compacting, kinds, rest, sharing, watching, writing  # noqa: E402
from adapters.kubernetes.rest import Resource, call  # noqa: E402
from adapters.kubernetes.watching import Informer  # noqa: E402
from adapters.kubernetes.world import ClusterCache  # noqa: E402
from adapters.platform import LocalPlatform  # noqa: E402
from fsm import decide  # noqa: E402
from fsm.fold import evolve  # noqa: E402
from fsm.state import OrderState  # noqa: E402
from tests.support import strategies as s  # noqa: E402

FIXTURE = ROOT / "tests" / "adapters" / "kubernetes" / "fixtures" / "live_order.json"
_SECOND = timedelta(seconds=1)
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_RV = re.compile(r'"resourceVersion": "[0-9]+"')

Obj = dict[str, Any]


def load_fixture(path: Path = FIXTURE) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def cache() -> ClusterCache:
    """The controller's cache, its informers never started (no API client needed)."""
    world = ClusterCache(None)  # type: ignore[arg-type]
    world.secrets.read = lambda _namespace, _name: None
    return world


def informer_for(world: ClusterCache, obj: Obj) -> Informer:
    labelled = bool((obj["metadata"].get("labels") or {}).get(_UID_LABEL))
    kind = obj["kind"]
    if kind == "Secret":
        return world.token_secrets if labelled else world.secrets._own
    return {
        "InferenceService": world.orders,
        "Deployment": world.deployments,
        "Pod": world.pods,
        "Service": world.services,
        "ResourceClaimTemplate": world.claim_templates,
        "Ingress": world.ingresses,
        "HorizontalPodAutoscaler": world.autoscalers,
        "ResourceClaim": world.resource_claims,
    }[kind]


_UID_LABEL = "ai.deckhouse.io/inference-service-uid"


class Copies:
    """One order's objects as JSON texts, copied for order i under new names and UIDs."""

    def __init__(self, fixture: dict[str, Any]) -> None:
        self.name = str(fixture["order"]["metadata"]["name"])
        texts = [json.dumps(obj) for obj in fixture["objects"]]
        self.uids = sorted({u for text in texts for u in _UID.findall(text)})
        self.texts = texts

    def text(self, index: int, i: int) -> str:
        text = self.texts[index]
        for n, uid in enumerate(self.uids):
            text = text.replace(uid, str(uuid.UUID(int=(i << 16) + n + 1)))
        # Each object its own RV, as the server gives one per write (shared RVs would make
        # every object's metadata a part the cache holds once).
        text = _RV.sub(f'"resourceVersion": "{1000 + i * len(self.texts) + index}"', text)
        # Names: the order's, and the children's (which start with it).
        return text.replace(f'"{self.name}', f'"o{i:05d}-{self.name}')

    def objects(self, i: int) -> list[Obj]:
        return [json.loads(self.text(k, i)) for k in range(len(self.texts))]


def _heap() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def measure_caches(fixture: dict[str, Any], n: int) -> tuple[list[tuple[str, int, int]], float]:
    """Rows of (kind, bytes held per order, transient peak above the held while feeding),
    and the parts the compacting table holds per order once every kind is fed."""
    copies = Copies(fixture)
    world = cache()
    parts = len(compacting._SHARED)
    rows = []
    for index, obj in enumerate(fixture["objects"]):
        informer = informer_for(world, obj)
        before = _heap()
        tracemalloc.reset_peak()
        for i in range(n):
            informer._apply("ADDED", json.loads(copies.text(index, i)))
        peak = tracemalloc.get_traced_memory()[1]
        held = _heap() - before
        rows.append((f"{obj['kind']} ({informer.name})", held // n, max(0, peak - before - held)))
    table_parts = (len(compacting._SHARED) - parts) / n
    world_size = _heap()
    del world
    rows.append(("(all caches freed)", -(world_size - _heap()) // n, 0))
    return rows, table_parts


def measure(label: str, n: int, make: Callable[[int], Any]) -> tuple[str, int, int]:
    """Bytes per order of keeping `make(i)` for every i, and the peak above that."""
    before = _heap()
    tracemalloc.reset_peak()
    kept = [make(i) for i in range(n)]
    peak = tracemalloc.get_traced_memory()[1]
    held = _heap() - before
    del kept
    return label, held // n, max(0, peak - before - held)


def list_all(fixture: dict[str, Any], n: int) -> tuple[str, int, int]:
    """A start (or a re-list) with N Deployments: the informer's own LIST, paged as the
    server pages it, answered from memory; its transient peak beside what it keeps."""
    copies = Copies(fixture)
    index = next(k for k, o in enumerate(fixture["objects"]) if o["kind"] == "Deployment")
    texts = [copies.text(index, i) for i in range(n)]
    page_size = watching._PAGE

    def answer(_api: Any, _method: str, _path: str, **kwargs: Any) -> Obj:
        query = dict(kwargs.get("query") or ())
        start = int(query.get("continue") or 0)
        end = start + page_size
        more = {"continue": str(end)} if end < n else {}
        body = '{"metadata":' + json.dumps({"resourceVersion": "1", **more})
        body += ',"items":[' + ",".join(texts[start:end]) + "]}"
        return dict(json.loads(body.encode()))

    world = cache()
    real, rest.call = rest.call, answer
    try:
        before = _heap()
        tracemalloc.reset_peak()
        world.deployments._relist()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        rest.call = real
    held = _heap() - before
    return "LIST of N Deployments (a start)", held // n, max(0, peak - before - held)


def statuses(fixture: dict[str, Any], n: int) -> tuple[str, int, int]:
    """What the Writer remembers of the statuses it wrote, one per order."""
    order = fixture["order"]
    writer = writing.Writer(None)  # type: ignore[arg-type]  # `call` answers below

    def answer(_api: Any, _method: str, _path: str, **_kwargs: Any) -> Obj:
        return dict(json.loads(json.dumps(order)))

    real, writing.call = writing.call, answer
    try:
        before = _heap()
        tracemalloc.reset_peak()
        for i in range(n):
            writer.write_status(kinds.INFERENCE_SERVICES, "ns", f"o{i}", order["status"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        writing.call = real
    held = _heap() - before
    return "Writer's memory of written statuses", held // n, max(0, peak - before - held)


def states() -> Callable[[int], Any]:
    """A Ready order's folded state: its life as tests/support/strategies tells it."""
    observations = [
        s.spec(0),
        s.klass(1),
        s.model(2),
        s.planned(3),
        s.applied(4),
        s.workload(5),
        s.probe(6),
    ]

    def fold(i: int) -> Any:
        state = OrderState()
        for obs in copy.deepcopy(observations):
            for event in decide.decide(state, obs):
                # Each order's own times, as orders are made and planned apart.
                moved = event.model_copy(update={"observed_at": event.observed_at + i * _SECOND})
                state = evolve(state, moved)
        return sharing.shared_parts(state)  # as the reconciler keeps it

    return fold


def report(rows: list[tuple[str, int, int]], n: int) -> None:
    width = max(len(r[0]) for r in rows)
    _say(f"{'bytes per order, N=' + str(n):<{width}}  {'held':>9}  {'peak above':>10}")
    for label, held, peak in rows:
        _say(f"{label:<{width}}  {held:>9,}  {peak // n:>10,}")


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")


def capture(folder: Path, out: Path) -> None:
    """One order to Ready on a local control plane; every object of it, as served."""
    state = local.up(folder / "cluster")
    bootstrap.bootstrap(state.kubeconfig("admin"))
    platform = LocalPlatform(state, f"sqlite:///{folder}/log.db")
    try:
        platform.start()
        admin = platform.api("admin")
        orders = Resource("ai.deckhouse.io", "v1alpha1", "inferenceservices", "InferenceService")
        namespace, name = "support", "support-llm"
        body = {
            "apiVersion": orders.api_version,
            "kind": orders.kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "inferenceServiceClassName": "default-llm",
                "model": {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-32B-Instruct-AWQ"}},
            },
        }
        call(admin, "POST", orders.collection_path(namespace), body=body)
        deadline = time.monotonic() + 300
        while True:
            order = call(admin, "GET", orders.object_path(namespace, name))
            if (order.get("status") or {}).get("phase") == "Ready":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} not Ready: {order.get('status')}")
            time.sleep(1)
        time.sleep(5)  # the last status and Events settle
        order = call(admin, "GET", orders.object_path(namespace, name))
        uid = order["metadata"]["uid"]
        kinds = [
            Resource("apps", "v1", "deployments", "Deployment"),
            Resource("", "v1", "pods", "Pod"),
            Resource("", "v1", "services", "Service"),
            Resource("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate"),
            Resource(
                "autoscaling", "v2beta2", "horizontalpodautoscalers", "HorizontalPodAutoscaler"
            ),
            Resource("networking.k8s.io", "v1", "ingresses", "Ingress"),
            Resource("", "v1", "secrets", "Secret"),
            Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim"),
        ]
        objects: list[Obj] = [order]
        for kind in kinds:
            page = call(admin, "GET", kind.collection_path(namespace))
            for item in page.get("items") or ():
                if uid in json.dumps(item):
                    item.setdefault("apiVersion", kind.api_version)
                    item.setdefault("kind", kind.kind)
                    objects.append(item)
        for obj in objects:  # a throwaway cluster's token, still: never in the repository
            if obj["kind"] == "Secret":
                obj["data"] = {
                    k: base64.b64encode(b"0" * len(base64.b64decode(v))).decode()
                    for k, v in (obj.get("data") or {}).items()
                }
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"order": order, "objects": objects}, indent=1) + "\n")
        _say(f"captured {len(objects)} objects to {out}")
    finally:
        platform.stop()
        local.down(folder / "cluster")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--orders", type=int, default=1000)
    parser.add_argument("--fixture", type=Path, default=FIXTURE)
    parser.add_argument("--json", action="store_true", help="one JSON line, not a table")
    parser.add_argument("--capture", type=Path, metavar="DIR", help="remake the fixture")
    args = parser.parse_args(argv)
    if args.capture:
        capture(args.capture, args.fixture)
        return 0
    fixture = load_fixture(args.fixture)
    n = args.orders
    tracemalloc.start(1)
    rows, table_parts = measure_caches(fixture, n)
    rows.append(measure("folded state (Ready)", n, states()))
    rows.append(statuses(fixture, n))
    rows.append(list_all(fixture, n))
    if args.json:
        per_order = {label: {"held": held, "peak": peak // n} for label, held, peak in rows}
        table = round(table_parts, 2)
        _say(json.dumps({"orders": n, "per_order": per_order, "table_parts_per_order": table}))
    else:
        report(rows, n)
        _say(f"parts in the compacting table per order: {table_parts:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
