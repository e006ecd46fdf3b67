"""The kubelet stand-in: pods bound to simulated nodes run as OpenAI-compatible stubs.

For every pod the scheduler bound to a node the simulator publishes, it does what a
kubelet with a vLLM container would show: resolve each container's environment
(`value`, `valueFrom.secretKeyRef`/`configMapKeyRef`/`fieldRef`, `envFrom`; a missing
Secret or key leaves the container Waiting with `CreateContainerConfigError`, as a real
kubelet does), start a `Stub` whose API key is the resolved `VLLM_API_KEY` (or
`--api-key`) and whose model names come from `--served-model-name` (else `--model`),
publish its address in the annotation `simulator.ai-inference.deckhouse.io/endpoint`,
and report the pod Running with IP 127.0.0.1. Readiness follows the container's
`readinessProbe` when it is an `httpGet`: judged in-process against the stub (the same
routing an HTTP request takes, without the socket), at most a second apart while its
thresholds are being met, then not again until the stub changes — its answer is a pure
function of the stub's state, so a settled probe costs nothing; without a probe the pod
is Ready once running.

The kubelet is event-driven: the `Simulator` calls `sync(uid)` when a pod (or the
Deployment owning it, or its node) changes, and `probe(uid)` when a probe is due. The
failure knob `simulator.ai-inference.deckhouse.io/fail` ("500", "timeout", "crash") is
read from the pod, else from the Deployment that owns it, so tests flip it through the
API. A container whose image is of the registry `unpullable.invalid/` never starts: the
pod waits in ImagePullBackOff (a recipe's registry out of reach); one whose env sets
`SIMULATOR_EXIT_REASON` exits as it starts, and waits in CrashLoopBackOff. Pods being
deleted are stopped and removed (a kubelet confirms deletion by deleting with grace 0);
pods bound to nodes that no longer exist are removed, as the pod garbage collector does.
"""

from __future__ import annotations

import base64
import logging
import re
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from adapters.simulator.capacity import MANAGED_LABEL
from adapters.simulator.kube import JSON, Kube, KubeError, path
from adapters.simulator.stub import Stub
from adapters.simulator.world import DEPLOYMENTS, NODES, PODS, REPLICA_SETS, Store, key
from fsm.placement.recipes import API_KEY_ENV

__all__ = [
    "API_KEY_ENVS",
    "ENDPOINT_ANNOTATION",
    "EXIT_ENV",
    "FAIL_ANNOTATION",
    "UNPULLABLE_REGISTRY",
    "EnvError",
    "Kubelet",
    "resolve_env",
    "served_model_names",
]

log = logging.getLogger(__name__)

ENDPOINT_ANNOTATION = "simulator.ai-inference.deckhouse.io/endpoint"
FAIL_ANNOTATION = "simulator.ai-inference.deckhouse.io/fail"
# Images of this registry cannot be pulled (`.invalid` never resolves): the pod waits in
# ImagePullBackOff, as on a cluster that cannot reach a recipe's registry.
UNPULLABLE_REGISTRY = "unpullable.invalid/"
# A container with this env var set never stays up: it exits as it starts with the value
# as its reason (OOMKilled, Error), and waits in CrashLoopBackOff between restarts.
EXIT_ENV = "SIMULATOR_EXIT_REASON"
# Where each runtime reads its API key (the controller's table): a llama.cpp stub that
# looked for vLLM's answered everyone, so a wrong name could fail no test.
API_KEY_ENVS = tuple(API_KEY_ENV.values())
_TERMINAL = ("Succeeded", "Failed")
_PROBE_PERIOD_CAP = 1.0  # seconds: probes run faster than declared, tests stay quick


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EnvError(Exception):
    """A container's environment cannot be built (CreateContainerConfigError)."""


SecretReader = Callable[[str, str], Mapping[str, str] | None]


def resolve_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    secrets: SecretReader,
    config_maps: SecretReader,
) -> dict[str, str]:
    """The container's environment as a kubelet builds it; EnvError names what is missing.

    `secrets(namespace, name)` / `config_maps(...)` return decoded data, None if absent.
    """
    namespace = str(pod["metadata"].get("namespace", ""))
    env: dict[str, str] = {}
    for source in container.get("envFrom") or ():
        prefix = str(source.get("prefix") or "")
        for kind, reader, label in (
            ("secretRef", secrets, "secret"),
            ("configMapRef", config_maps, "configmap"),
        ):
            ref = source.get(kind)
            if not ref:
                continue
            data = reader(namespace, str(ref.get("name", "")))
            if data is None:
                if ref.get("optional"):
                    continue
                raise EnvError(f'{label} "{ref.get("name")}" not found')
            env.update({prefix + k: v for k, v in data.items()})
    for item in container.get("env") or ():
        name = str(item.get("name", ""))
        if "valueFrom" not in item:
            env[name] = expand(str(item.get("value", "")), env)
            continue
        value = _value_from(pod, namespace, item["valueFrom"], secrets, config_maps)
        if value is not None:
            env[name] = value
    return env


def _value_from(
    pod: Mapping[str, Any],
    namespace: str,
    source: Mapping[str, Any],
    secrets: SecretReader,
    config_maps: SecretReader,
) -> str | None:
    for kind, reader, label, title in (
        ("secretKeyRef", secrets, "secret", "Secret"),
        ("configMapKeyRef", config_maps, "configmap", "ConfigMap"),
    ):
        ref = source.get(kind)
        if not ref:
            continue
        name, wanted = str(ref.get("name", "")), str(ref.get("key", ""))
        data = reader(namespace, name)
        if data is None:
            if ref.get("optional"):
                return None
            raise EnvError(f'{label} "{name}" not found')
        if wanted not in data:
            if ref.get("optional"):
                return None
            raise EnvError(f"couldn't find key {wanted} in {title} {namespace}/{name}")
        return data[wanted]
    field_ref = source.get("fieldRef")
    if field_ref:
        fields = {
            "metadata.name": pod["metadata"].get("name"),
            "metadata.namespace": namespace,
            "metadata.uid": pod["metadata"].get("uid"),
            "spec.nodeName": (pod.get("spec") or {}).get("nodeName"),
            "spec.serviceAccountName": (pod.get("spec") or {}).get("serviceAccountName"),
            "status.podIP": "127.0.0.1",
            "status.hostIP": "127.0.0.1",
        }
        return str(fields.get(str(field_ref.get("fieldPath")), "") or "")
    return None  # resourceFieldRef and the like: not simulated, left unset


_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: known names replaced, `$$` escapes a dollar."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _REFERENCE.sub(one, text)


def _flag(words: Sequence[str], flag: str) -> list[str]:
    """Values of `--flag v1 v2` (until the next option) or `--flag=v`."""
    values: list[str] = []
    for index, word in enumerate(words):
        if word.startswith(flag + "="):
            values.append(word.split("=", 1)[1])
        elif word == flag:
            for value in words[index + 1 :]:
                if value.startswith("-"):
                    break
                values.append(value)
    return values


def served_model_names(words: Sequence[str]) -> list[str]:
    """What the runtime serves: vLLM's `--served-model-name` or llama.cpp's `--alias`, else
    `--model` or llama.cpp's `--hf-repo`, else `serve <model>`."""
    names = _flag(words, "--served-model-name") or _flag(words, "--alias")
    if names:
        return names
    model = _flag(words, "--model") or _flag(words, "--hf-repo")
    if model:
        return model[:1]
    if "serve" in words:
        rest = words[words.index("serve") + 1 :]
        if rest and not rest[0].startswith("-"):
            return [rest[0]]
    return []


@dataclass
class _Prober:
    """A container's httpGet readiness probe, judged in-process against its stub.

    The answer is a pure function of the stub's state (its failure knob, its key), so
    once the thresholds are met and the outcome agrees with `ready` the prober is
    settled: probing again would say the same. It runs again when the stub changes."""

    stub: Stub
    probe: Mapping[str, Any]
    ready: bool = False
    ok: int = 0
    bad: int = 0
    probes: int = 0

    @property
    def period(self) -> float:
        return min(float(self.probe.get("periodSeconds") or 10), _PROBE_PERIOD_CAP)

    def run(self) -> bool:
        """One probe; True when settled (nothing will change until the stub does)."""
        get = self.probe.get("httpGet") or {}
        headers = {str(h["name"]): str(h["value"]) for h in get.get("httpHeaders") or ()}
        need_ok = int(self.probe.get("successThreshold") or 1)
        need_bad = int(self.probe.get("failureThreshold") or 3)
        self.probes += 1
        passed = self.stub.probe(str(get.get("path") or "/"), headers)
        self.ok, self.bad = (self.ok + 1, 0) if passed else (0, self.bad + 1)
        if self.ok >= need_ok:
            self.ready = True
        elif self.bad >= need_bad:
            self.ready = False
        return passed == self.ready and (self.ok >= need_ok or self.bad >= need_bad)


@dataclass
class _Running:
    stub: Stub
    started: str
    label: tuple[str, str]  # the pod's namespace and name
    prober: _Prober | None = None
    reported_ready: bool | None = None

    @property
    def ready(self) -> bool:
        return self.prober.ready if self.prober is not None else True

    def stop(self) -> None:
        self.stub.close()


Requeue = Callable[[str, float], None]


def probe_key(uid: str) -> str:
    return f"probe/{uid}"


class Kubelet:
    """Runs the pods it is told about (`sync`), one at a time, from the store."""

    def __init__(
        self,
        kube: Kube,
        store: Store,
        *,
        requeue: Requeue,
        host: str = "127.0.0.1",
        hang_seconds: float = 30.0,
        namespaces: Collection[str] | None = None,
        retry_seconds: float = 1.0,
    ) -> None:
        """`requeue(key, seconds)`: run `sync`/`probe` of that key again later (a missing
        Secret is looked for again every `retry_seconds`; probes run at their period)."""
        self.kube = kube
        self.store = store
        self.namespaces = frozenset(namespaces) if namespaces is not None else None
        self.host = host
        self.hang_seconds = hang_seconds
        self.retry_seconds = retry_seconds
        self._requeue = requeue
        self._running: dict[str, _Running] = {}  # pod uid -> its stub
        self._by_name: dict[tuple[str, str], str] = {}  # (namespace, name) -> uid
        self._lock = threading.Lock()
        self.probes = 0  # readiness probes judged (tests and benchmarks count them)

    def stub(self, namespace: str, name: str) -> Stub | None:
        """The stub serving a pod now (tests read its requests)."""
        with self._lock:
            uid = self._by_name.get((namespace, name))
            run = self._running.get(uid) if uid is not None else None
            return run.stub if run is not None else None

    @property
    def running(self) -> int:
        with self._lock:
            return len(self._running)

    def running_uids(self) -> list[str]:
        with self._lock:
            return list(self._running)

    def stop_all(self) -> None:
        with self._lock:
            runs, self._running = list(self._running.values()), {}
            self._by_name.clear()
        for run in runs:
            run.stop()

    def mine(self, pod: Mapping[str, Any]) -> bool:
        return self.namespaces is None or key(pod)[0] in self.namespaces

    def sync(self, uid: str) -> bool:
        """Make the pod's stub and status what the pod asks; True when it wrote."""
        pod = self.store.get(PODS, uid)
        if pod is None:
            self._forget(uid)
            return False
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name or not self.mine(pod):
            return False
        node = self.store.get_by_name(NODES, "", str(node_name))
        if node is None or pod["metadata"].get("deletionTimestamp"):
            self._forget(uid)
            return self._remove(pod)
        managed = (node["metadata"].get("labels") or {}).get(MANAGED_LABEL) == "true"
        if not managed or (pod.get("status") or {}).get("phase") in _TERMINAL:
            self._forget(uid)
            return False
        return self._sync(pod, uid)

    def probe(self, uid: str) -> bool:
        """One readiness probe of a running pod; reports a change; True when it wrote."""
        with self._lock:
            run = self._running.get(uid)
        if run is None or run.prober is None:
            return False
        self.probes += 1
        if not run.prober.run():
            self._requeue(probe_key(uid), run.prober.period)
        pod = self.store.get(PODS, uid)
        if pod is not None and run.ready != run.reported_ready:
            self._report(pod, run)
            return True
        return False

    # --- one pod --------------------------------------------------------------------

    def _forget(self, uid: str) -> None:
        with self._lock:
            run = self._running.pop(uid, None)
            if run is not None and self._by_name.get(run.label) == uid:
                del self._by_name[run.label]
        if run is not None:
            run.stop()

    def _remove(self, pod: JSON) -> bool:
        namespace, name = key(pod)
        url = path("v1", "pods", name, namespace=namespace)
        return self.kube.delete(url, grace_seconds=0, uid=str(pod["metadata"]["uid"]))

    def _sync(self, pod: JSON, uid: str) -> bool:
        with self._lock:
            run = self._running.get(uid)
        if run is None:
            return self._start(pod, uid)
        failure = _failure(pod, self.store)
        if failure != run.stub.failure:
            run.stub.failure = failure
            if run.prober is not None:  # the stub changed: its probe may say otherwise
                self._requeue(probe_key(uid), 0.0)
        if run.ready != run.reported_ready:
            self._report(pod, run)
            return True
        return False

    def _start(self, pod: JSON, uid: str) -> bool:
        namespace, name = key(pod)
        containers = list((pod.get("spec") or {}).get("containers") or ())
        stuck = _never_starts(pod, containers)
        if stuck is not None:  # retried on the kubelet's back-off, as a real one does
            self._requeue(f"pod/{uid}", self.retry_seconds)
            return self._waiting(
                pod,
                containers,
                stuck.message,
                reason=stuck.reason,
                restarts=stuck.restarts,
                last_exit=stuck.last_exit,
            )
        try:
            envs = [resolve_env(pod, c, self._secret, self._config_map) for c in containers]
        except EnvError as err:
            self._requeue(f"pod/{uid}", self.retry_seconds)  # until the Secret exists
            return self._waiting(pod, containers, str(err))
        index = next(
            (i for i, env in enumerate(envs) if any(name in env for name in API_KEY_ENVS)), 0
        )
        container, env = (containers[index], envs[index]) if containers else ({}, {})
        words = [
            expand(w, env)
            for w in [*(container.get("command") or ()), *(container.get("args") or ())]
        ]
        api_key = next((env[n] for n in API_KEY_ENVS if env.get(n)), None) or next(
            iter(_flag(words, "--api-key")), None
        )
        stub = Stub(
            served_names=served_model_names(words),
            api_key=api_key or None,
            host=self.host,
            hang_seconds=self.hang_seconds,
            label=f"{namespace}/{name}",
        )
        stub.failure = _failure(pod, self.store)
        probe = container.get("readinessProbe") or {}
        prober = _Prober(stub, probe) if probe.get("httpGet") else None
        run = _Running(stub, _now(), (namespace, name), prober)
        try:
            pod = self.kube.strategic_patch(
                path("v1", "pods", name, namespace=namespace),
                {"metadata": {"annotations": {ENDPOINT_ANNOTATION: stub.url}}},
            )
        except KubeError:
            stub.close()
            raise
        self.store.wrote(PODS, pod)
        with self._lock:
            self._running[uid] = run
            self._by_name[(namespace, name)] = uid
        if prober is not None:
            self.probes += 1
            if not prober.run():
                self._requeue(probe_key(uid), prober.period)
        self._report(pod, run)
        log.info("started %s/%s at %s", namespace, name, stub.url)
        return True

    def _report(self, pod: JSON, run: _Running) -> None:
        namespace, name = key(pod)
        ready = run.ready
        spec = pod.get("spec") or {}
        statuses = [
            {
                "name": c["name"],
                "ready": ready,
                "started": True,
                "restartCount": 0,
                "image": c.get("image", ""),
                "imageID": f"simulator://{c.get('image', '')}",
                "containerID": f"simulator://{pod['metadata']['uid']}/{c['name']}",
                "state": {"running": {"startedAt": run.started}},
            }
            for c in spec.get("containers") or ()
        ]
        status: dict[str, Any] = {
            "phase": "Running",
            "conditions": _conditions(ready, run.started),
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": run.started,
            "containerStatuses": statuses,
        }
        if spec.get("initContainers"):
            status["initContainerStatuses"] = [
                {
                    "name": c["name"],
                    "ready": True,
                    "restartCount": 0,
                    "image": c.get("image", ""),
                    "imageID": f"simulator://{c.get('image', '')}",
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": run.started,
                            "finishedAt": run.started,
                        }
                    },
                }
                for c in spec["initContainers"]
            ]
        written = self.kube.strategic_patch(
            path("v1", "pods", name, namespace=namespace, subresource="status"), {"status": status}
        )
        self.store.wrote(PODS, written)
        run.reported_ready = ready

    def _waiting(
        self,
        pod: JSON,
        containers: Sequence[Mapping[str, Any]],
        message: str,
        *,
        reason: str = "CreateContainerConfigError",
        restarts: int = 0,
        last_exit: str | None = None,
    ) -> bool:
        for status in _statuses(pod):
            waiting = (status.get("state") or {}).get("waiting") or {}
            if waiting.get("message") == message:
                return False
        namespace, name = key(pod)
        now = _now()
        last = {"terminated": {"exitCode": 137, "reason": last_exit}} if last_exit else {}
        status = {
            "phase": "Running" if restarts else "Pending",
            "conditions": _conditions(False, now),
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": now,
            "containerStatuses": [
                {
                    "name": c["name"],
                    "ready": False,
                    "started": False,
                    "restartCount": restarts,
                    "image": c.get("image", ""),
                    "imageID": "",
                    "state": {"waiting": {"reason": reason, "message": message}},
                    "lastState": last,
                }
                for c in containers
            ],
        }
        written = self.kube.strategic_patch(
            path("v1", "pods", name, namespace=namespace, subresource="status"), {"status": status}
        )
        self.store.wrote(PODS, written)
        log.info("%s/%s cannot start: %s", namespace, name, message)
        return True

    def _secret(self, namespace: str, name: str) -> dict[str, str] | None:
        secret = self.kube.get(path("v1", "secrets", name, namespace=namespace))
        if secret is None:
            return None
        data = {
            k: base64.b64decode(v).decode(errors="replace")
            for k, v in (secret.get("data") or {}).items()
        }
        data.update(secret.get("stringData") or {})
        return data

    def _config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        config_map = self.kube.get(path("v1", "configmaps", name, namespace=namespace))
        return None if config_map is None else dict(config_map.get("data") or {})


def _conditions(ready: bool, now: str) -> list[dict[str, Any]]:
    flag = "True" if ready else "False"
    return [
        {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": now},
        {"type": "Ready", "status": flag, "lastProbeTime": None, "lastTransitionTime": now},
        {
            "type": "ContainersReady",
            "status": flag,
            "lastProbeTime": None,
            "lastTransitionTime": now,
        },
        {
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": now,
        },
    ]


class _Stuck(NamedTuple):
    """Why a pod's container does not start, as its status will say it."""

    reason: str
    message: str
    restarts: int = 0
    last_exit: str | None = None


def _never_starts(pod: Mapping[str, Any], containers: Sequence[Mapping[str, Any]]) -> _Stuck | None:
    """A container whose image cannot be pulled (a registry out of reach, as from an
    air-gapped cluster), or one that exits as it starts (a model that does not fit its
    memory), restarted on a growing back-off, each restart a new status."""
    for container in containers:
        image = str(container.get("image", ""))
        if image.startswith(UNPULLABLE_REGISTRY):
            return _Stuck("ImagePullBackOff", f'Back-off pulling image "{image}"')
    for container in containers:
        for entry in container.get("env") or ():
            if entry.get("name") != EXIT_ENV:
                continue
            restarts = 1 + max((int(s.get("restartCount") or 0) for s in _statuses(pod)), default=0)
            back_off = min(10 * 2 ** (restarts - 1), 300)
            said = (
                f"back-off {back_off}s restarting failed container={container.get('name', '')} "
                f"pod={pod['metadata']['name']}"
            )
            return _Stuck("CrashLoopBackOff", said, restarts, str(entry.get("value") or "Error"))
    return None


def _statuses(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((pod.get("status") or {}).get("containerStatuses") or ())


def _failure(pod: Mapping[str, Any], store: Store) -> str | None:
    """The fail knob: the pod's annotation, else its Deployment's (pod -> ReplicaSet ->
    Deployment by owner UIDs, read from the store)."""
    annotations = pod["metadata"].get("annotations") or {}
    if FAIL_ANNOTATION in annotations:
        return str(annotations[FAIL_ANNOTATION]) or None
    for ref in pod["metadata"].get("ownerReferences") or ():
        if ref.get("kind") != "ReplicaSet" or not ref.get("uid"):
            continue
        replica_set = store.get(REPLICA_SETS, str(ref["uid"]))
        for parent in ((replica_set or {}).get("metadata") or {}).get("ownerReferences") or ():
            if parent.get("kind") == "Deployment" and parent.get("controller"):
                deployment = store.get(DEPLOYMENTS, str(parent.get("uid")))
                knob = ((deployment or {}).get("metadata") or {}).get("annotations") or {}
                return knob.get(FAIL_ANNOTATION) or None
    return None
