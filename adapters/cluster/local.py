"""A real local control plane: etcd, kube-apiserver and kube-controller-manager on 127.0.0.1.

Beside them, a small admission webhook (admission.py) refuses what a 1.34 API server
refuses of the DRA kinds and their 1.20 stand-in CRDs cannot: an update of a claim's or
a claim template's spec.

What `ai-inference cluster up/down` and the test suite's `cluster` fixture run. The
binaries are built once from Debian's Kubernetes source (scripts/build-kubernetes.sh)
and cached; every cluster gets free ports, its own data folder, its own PKI and tokens.
The processes are started in their own session so they outlive the command that started
them; `down` stops exactly the PIDs recorded in the folder's state file.

The fault tests break a running control plane on purpose: `kill` one of its processes
(SIGKILL, as a crash would) and `start_again` it with the command line recorded at `up`
(same ports, same data folder), so clients reconnect to the same address.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from adapters.cluster import admission, identities, pki
from adapters.resources import resource_dir

__all__ = [
    "CONTROLLERS",
    "ClusterError",
    "ClusterState",
    "binaries_dir",
    "down",
    "ensure_binaries",
    "kill",
    "start_again",
    "status",
    "up",
]

# kube-controller-manager's controllers we need: Deployments make ReplicaSets and Pods,
# the garbage collector deletes owned objects, namespaces get their ServiceAccounts.
CONTROLLERS = (
    "garbagecollector",
    "namespace",
    "deployment",
    "replicaset",
    "serviceaccount",
    "serviceaccount-token",
)
STATE_FILE = "cluster.json"


class ClusterError(RuntimeError):
    """The local control plane could not be started or stopped; the message says why."""


@dataclass
class ClusterState:
    folder: str
    server: str
    etcd_url: str
    pids: dict[str, int] = field(default_factory=dict)
    kubeconfigs: dict[str, str] = field(default_factory=dict)
    # The command line each process was started with, for `start_again`.
    argv: dict[str, list[str]] = field(default_factory=dict)

    def kubeconfig(self, identity: str) -> Path:
        return Path(self.kubeconfigs[identity])


def binaries_dir() -> Path:
    cache = os.environ.get("AI_INFERENCE_CACHE", str(Path.home() / ".cache" / "ai-inference"))
    return Path(cache) / "bin"


def ensure_binaries() -> Path:
    """Build (first time, ~12-15 min) or reuse the cached binaries; install etcd."""
    bindir = binaries_dir()
    have = all((bindir / b).is_file() for b in ("kube-apiserver", "kube-controller-manager"))
    if not have or shutil.which("etcd") is None:
        script = resource_dir("scripts") / "build-kubernetes.sh"
        subprocess.run(["bash", str(script)], check=True)
    return bindir


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spawn(name: str, argv: list[str], logs: Path) -> int:
    """Start `argv` detached (reparented to init) and return its PID.

    A short-lived shell backgrounds the process and exits, so the daemon is not our child:
    it outlives this command, and no Popen object is left to warn about it.
    """
    launcher = subprocess.run(
        ["sh", "-c", '"$@" >>"$LOG" 2>&1 </dev/null & echo $!', "sh", *argv],
        env={**os.environ, "LOG": str(logs / f"{name}.log")},
        capture_output=True,
        text=True,
        check=True,
        start_new_session=True,
    )
    return int(launcher.stdout.strip())


def _start(state: ClusterState, name: str, argv: list[str], logs: Path) -> None:
    state.argv[name] = argv
    state.pids[name] = _spawn(name, argv, logs)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); it is not running.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_ready(
    url: str, token: str, *, ca: Path, pids: dict[str, int], logs: Path, timeout: float
) -> None:
    context = ssl.create_default_context(cafile=str(ca))
    # Only ever our own https://127.0.0.1 URL.
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})  # noqa: S310
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        for name, pid in pids.items():
            if not _alive(pid):
                tail = (logs / f"{name}.log").read_text(errors="replace")[-2000:]
                raise ClusterError(f"{name} exited during start-up; last log lines:\n{tail}")
        try:
            with urllib.request.urlopen(request, context=context, timeout=2) as answer:  # noqa: S310
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        time.sleep(0.3)
    raise ClusterError(f"API server not ready after {timeout:.0f}s ({last})")


def _load(folder: Path) -> ClusterState | None:
    path = folder / STATE_FILE
    if not path.exists():
        return None
    try:
        return ClusterState(**json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, TypeError) as exc:
        raise ClusterError(
            f"{path} cannot be read ({exc}): stop the processes whose command line names "
            f"{folder}, then remove it"
        ) from exc


def status(folder: Path) -> ClusterState | None:
    """The running cluster recorded in `folder`, or None when none runs there."""
    state = _load(folder)
    if state is None or not state.pids or not all(_alive(p) for p in state.pids.values()):
        return None
    return state


AUDIT_LOG = "logs/audit.log"
# What the fault tests count: every write the controller's ServiceAccount sends, one JSON
# line per answered request (Leases apart: renewals are not the controller's work).
_AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted", "Panic"],
    "rules": [
        {"level": "None", "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}]},
        {
            "level": "Metadata",
            "users": [identities.CONTROLLER_SA],
            "verbs": ["create", "update", "patch", "delete", "deletecollection"],
        },
        {"level": "None"},
    ],
}


def up(folder: Path, *, timeout: float = 90, audit: bool = False) -> ClusterState:
    """Start the control plane in `folder` (reuse it when already running there).

    `audit`: the API server logs every write of the controller's identity to
    `folder/AUDIT_LOG` (JSON lines; the fault tests count them per object).
    """
    folder = folder.resolve()
    running = status(folder)
    if running is not None:
        return running
    if _load(folder) is not None:
        down(folder)  # a half-dead previous run: clean it before starting anew
    elif _holds_files(folder):
        # `down` removes the folder whole, so only a new or empty one becomes a plane's.
        raise ClusterError(
            f"{folder} holds files but no control plane ({STATE_FILE} is missing): "
            "choose a new or empty folder"
        )
    bindir = ensure_binaries()
    folder.mkdir(parents=True, exist_ok=True)
    etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
    etcd_url = f"http://127.0.0.1:{etcd_port}"
    server = f"https://127.0.0.1:{api_port}"
    state = ClusterState(folder=str(folder), server=server, etcd_url=etcd_url)
    _write_state(folder, state)  # first: it marks the folder as one `down` may remove
    logs = folder / "logs"
    logs.mkdir(exist_ok=True)
    certs = pki.make_pki(folder / "pki")
    tokens = identities.write_token_file(folder / "tokens.csv")

    _start(
        state,
        "etcd",
        [
            "etcd",
            "--name",
            "local",
            "--data-dir",
            str(folder / "etcd"),
            "--listen-client-urls",
            etcd_url,
            "--advertise-client-urls",
            etcd_url,
            "--listen-peer-urls",
            f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{peer_port}",
            "--initial-cluster",
            f"local=http://127.0.0.1:{peer_port}",
            # The data is throw-away; fsync makes start-up and every write slow.
            "--unsafe-no-fsync",
            "--log-level",
            "warn",
        ],
        logs,
    )
    _write_state(folder, state)
    _start(
        state,
        "kube-apiserver",
        [
            str(bindir / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={api_port}",
            "--insecure-port=0",
            f"--tls-cert-file={certs.serving_cert}",
            f"--tls-private-key-file={certs.serving_key}",
            f"--cert-dir={folder / 'apiserver-certs'}",
            f"--token-auth-file={folder / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={certs.sa_pub}",
            f"--service-account-signing-key-file={certs.sa_key}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--allow-privileged=false",
            "--v=1",
            *_audit_flags(folder, audit),
        ],
        logs,
    )
    _write_state(folder, state)
    for ident in identities.IDENTITIES:
        path = folder / f"{ident.name}.kubeconfig"
        identities.write_kubeconfig(
            path, server=server, ca_cert=certs.ca_cert, user=ident.user, token=tokens[ident.name]
        )
        state.kubeconfigs[ident.name] = str(path)
    _write_state(folder, state)
    _wait_ready(
        f"{server}/readyz",
        tokens["admin"],
        ca=certs.ca_cert,
        pids=state.pids,
        logs=logs,
        timeout=timeout,
    )

    _start_admission(state, certs, logs, token=tokens["admin"], timeout=timeout)
    _start(
        state,
        "kube-controller-manager",
        [
            str(bindir / "kube-controller-manager"),
            f"--kubeconfig={state.kubeconfigs['admin']}",
            f"--controllers={','.join(CONTROLLERS)}",
            f"--service-account-private-key-file={certs.sa_key}",
            f"--root-ca-file={certs.ca_cert}",
            "--leader-elect=false",
            "--port=0",
            "--secure-port=0",
            "--use-service-account-credentials=false",
            # Its controllers write at the client's rate: at the default 20 a second, the
            # garbage collector took over 5 minutes to clear 500 deleted orders (about
            # 2,500 Deployments, ReplicaSets, pods and claims) and Deployments of a burst
            # waited their turn for pods. A real cluster's is raised the same way.
            "--kube-api-qps=100",
            "--kube-api-burst=200",
            "--v=1",
            # What the garbage collector decided, object by object, and when it re-read
            # discovery: the log a test that waits on it reports when it waited in vain.
            "--vmodule=garbagecollector=2",
        ],
        logs,
    )
    _write_state(folder, state)
    return state


def _start_admission(
    state: ClusterState, certs: pki.Pki, logs: Path, *, token: str, timeout: float
) -> None:
    """Serve what 1.34 validates of the DRA kinds and a 1.20 CRD cannot (admission.py),
    and register it with the API server once it answers."""
    port = free_port()
    _start(
        state,
        "admission",
        [
            sys.executable,
            "-m",
            "adapters.cluster.admission",
            f"--port={port}",
            f"--cert={certs.serving_cert}",
            f"--key={certs.serving_key}",
        ],
        logs,
    )
    _write_state(Path(state.folder), state)
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if not _alive(state.pids["admission"]) or time.monotonic() > deadline:
                tail = (logs / "admission.log").read_text(errors="replace")[-2000:]
                raise ClusterError(f"the admission server did not start:\n{tail}") from None
            time.sleep(0.1)
    ca_bundle = base64.b64encode(certs.ca_cert.read_bytes()).decode()
    body = json.dumps(admission.webhook_configuration(port, ca_bundle)).encode()
    request = urllib.request.Request(  # noqa: S310 (our own https://127.0.0.1 URL)
        f"{state.server}/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    context = ssl.create_default_context(cafile=str(certs.ca_cert))
    with urllib.request.urlopen(request, context=context, timeout=10):  # noqa: S310
        pass


def kill(state: ClusterState, name: str) -> None:
    """SIGKILL one process of the plane (a crash: no clean shutdown); wait until it is gone."""
    pid = state.pids[name]
    if not _alive(pid) or not _is_ours(pid, Path(state.folder)):
        raise ClusterError(f"{name} (pid {pid}) is not running")
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _alive(pid):
        if time.monotonic() > deadline:
            raise ClusterError(f"{name} (pid {pid}) survived SIGKILL for 10s")
        time.sleep(0.05)


def start_again(state: ClusterState, name: str, *, timeout: float = 90) -> None:
    """Start `name` again with its recorded command line (same ports, same data); for etcd
    and the API server, return once the API server answers /readyz again.

    The port can be taken for a while when the server starts again: sockets of the killed
    process linger, and a client reconnecting to a loopback port may be given that very
    port as its source and connect to itself. Seen here under load: a start that fails
    to bind is tried again, within `timeout`.
    """
    folder = Path(state.folder)
    if _alive(state.pids[name]):
        raise ClusterError(f"{name} is still running")
    logs = folder / "logs"
    deadline = time.monotonic() + timeout
    while True:
        size = _log_size(logs / f"{name}.log")
        _start(state, name, state.argv[name], logs)
        _write_state(folder, state)
        if name not in ("etcd", "kube-apiserver"):
            return
        try:
            _wait_ready(
                f"{state.server}/readyz",
                identities.read_tokens(folder / "tokens.csv")["admin"],
                ca=pki.Pki(folder / "pki").ca_cert,
                pids={n: state.pids[n] for n in ("etcd", "kube-apiserver")},
                logs=logs,
                timeout=max(1.0, deadline - time.monotonic()),
            )
            return
        except ClusterError:
            said = (logs / f"{name}.log").read_bytes()[size:]
            if b"address already in use" not in said or time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _log_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _audit_flags(folder: Path, audit: bool) -> list[str]:
    if not audit:
        return []
    policy = folder / "audit-policy.json"
    policy.write_text(json.dumps(_AUDIT_POLICY), encoding="utf-8")
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={folder / AUDIT_LOG}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",
        "--audit-log-maxsize=0",
    ]


def _write_state(folder: Path, state: ClusterState) -> None:
    # Whole or not at all: a file cut short by a crash would leave a folder that neither
    # `up` nor `down` could read.
    path = folder / STATE_FILE
    partial = path.with_name(f".{STATE_FILE}.partial")
    partial.write_text(json.dumps(asdict(state), indent=2), encoding="utf-8")
    partial.replace(path)


def _holds_files(folder: Path) -> bool:
    """Anything in `folder`: without the plane's state file, files that are not ours."""
    return folder.exists() and any(folder.iterdir())


def _is_ours(pid: int, folder: Path) -> bool:
    """Only stop a PID whose command line still names this cluster's folder or etcd."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return str(folder) in cmdline


def down(folder: Path, *, keep_data: bool = False, timeout: float = 15) -> list[str]:
    """Stop the processes recorded in `folder` and remove it; returns what was stopped.

    Only a folder `up` made (its state file says so) is removed: `--dir` is whatever the
    user typed, and a folder that holds files but no control plane is left as it is
    (`ClusterError`). One that does not exist has nothing to stop.
    """
    folder = folder.resolve()
    state = _load(folder)
    if state is None and _holds_files(folder):
        inner = sorted(p.parent for p in folder.glob(f"*/{STATE_FILE}"))
        hint = f"; the control plane's folder is {inner[0]}" if inner else ""  # the bench's
        raise ClusterError(
            f"{folder} holds no control plane ({STATE_FILE} is missing): "
            f"nothing was stopped or removed{hint}"
        )
    stopped: list[str] = []
    if state is not None:
        order = ["kube-controller-manager", "admission", "kube-apiserver", "etcd"]
        for name in order:
            pid = state.pids.get(name)
            if pid is None or not _alive(pid) or not _is_ours(pid, folder):
                continue
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
            stopped.append(name)
    if not keep_data and folder.exists():
        shutil.rmtree(folder)
    return stopped
