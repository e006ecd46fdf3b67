"""The CLI starts without its machinery, and completes in a real bash.

`--help` and the parser of every command must not import the store, the core, the
Kubernetes client or the simulator: each command imports what it runs (the start-up was
3.7 s when they all did). Checked by the modules loaded, in a fresh interpreter.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

import store
from adapters.cli.controller_cmd import HPA_API_VERSION_CHOICES, _check_lease_access, _Refused
from adapters.cli.main import build_parser, main
from adapters.kubernetes.controller import DEFAULT_WORKERS, LEASE_NAMESPACE, Controller
from adapters.kubernetes.rendering import HPA_API_VERSIONS
from adapters.kubernetes.settings import HuggingFaceSettings, ProbeSettings
from tests.store.store_samples import append_as_a_newer_release
from tests.support.root_logging import kept_root_logging

ROOT = Path(__file__).resolve().parents[3]
HEAVY = (
    "sqlalchemy",
    "alembic",
    "kubernetes",
    "store",
    "fsm",
    "yaml",
    "pydantic",
    "httpx",
    "celpy",
    "prometheus_client",
    "adapters.simulator",
    "adapters.kubernetes",
)
EXTRA = ("sqlalchemy.dialects.postgresql",)
# A kubeconfig that loads and names a server nothing listens on (port 1 of loopback).
UNREACHABLE_KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
    "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
    "current-context": "x",
}  # what a SQLite reader need not load either

PROBE = """
import json, sys
from adapters.cli.main import main
wanted = json.loads(sys.stdin.readline())
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stderr.write("HEAVY=" + json.dumps(sorted(w for w in wanted if w in sys.modules)) + "\\n")
"""


def _loaded(*argv: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        input=json.dumps([*HEAVY, *EXTRA]) + "\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    line = next(x for x in done.stderr.splitlines() if x.startswith("HEAVY="))
    return list(json.loads(line.removeprefix("HEAVY=")))


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--version"],
        ["history", "--help"],
        ["list", "--help"],
        ["verify", "--help"],
        ["controller", "--help"],
        ["simulate", "--help"],
        ["cluster", "up", "--help"],
    ],
)
def test_help_imports_none_of_the_machinery(argv: list[str]) -> None:
    assert _loaded(*argv) == []


def test_a_history_lookup_imports_neither_kubernetes_nor_alembic(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite"
    store.open_log(f"sqlite:///{path}").close()  # a migrated, empty log
    loaded = _loaded("history", "support/x", "--store", str(path))
    assert "store" in loaded and "sqlalchemy" in loaded  # it did read the log
    assert "alembic" not in loaded, "a reader checks the revision without Alembic"
    assert "sqlalchemy.dialects.postgresql" not in loaded, "a SQLite reader needs no PostgreSQL"
    assert not {"kubernetes", "adapters.simulator", "httpx", "celpy"} & set(loaded)


# -- completion --------------------------------------------------------------------------------

BASH = shutil.which("bash")


def _complete(script: Path, *words: str) -> list[str]:
    """COMPREPLY for the command line `words` (the last one is being typed)."""
    array = " ".join(f"'{w}'" for w in words)
    command = (
        f"source {script}; COMP_WORDS=({array}); COMP_CWORD={len(words) - 1}; "
        '_ai_inference; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(
        [BASH or "bash", "--norc", "--noprofile", "-c", command],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        cwd=script.parent,
    )
    return [line for line in done.stdout.splitlines() if line]


@pytest.mark.skipif(BASH is None, reason="no bash on this machine")
def test_bash_completion_completes_commands_options_and_choices(tmp_path, capsys) -> None:
    assert main(["completion", "bash"]) == 0
    script = tmp_path / "ai-inference.bash"
    script.write_text(capsys.readouterr().out)
    (tmp_path / "events.sqlite").write_text("")

    assert _complete(script, "ai-inference", "hi") == ["history"]
    assert set(_complete(script, "ai-inference", "")) >= {
        "list",
        "history",
        "status",
        "why",
        "verify",
        "migrate",
        "controller",
        "completion",
    }
    assert _complete(script, "ai-inference", "cluster", "") == ["up", "down", "status"]
    assert set(_complete(script, "ai-inference", "history", "--")) >= {"--store", "--output"}
    assert _complete(script, "ai-inference", "list", "-o", "") == ["table", "json", "yaml"]
    assert _complete(script, "ai-inference", "list", "--phase", "P") == ["Pending"]
    assert _complete(script, "ai-inference", "verify", "--store", "ev") == ["events.sqlite"]
    assert "--log-level" in _complete(script, "ai-inference", "controller", "--log")


def test_the_hpa_api_choices_are_the_ones_rendered() -> None:
    assert ("auto", *HPA_API_VERSIONS) == HPA_API_VERSION_CHOICES
    assert build_parser().parse_args(["controller"]).hpa_api_version == "auto"


def test_the_help_states_the_settings_defaults_the_controller_uses(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The setting flags have no default of their own (they override the settings), so
    their help spells out the settings': they must be the settings' own."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["controller", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    probe = ProbeSettings()
    assert f"between probes (settings' default {probe.interval_seconds})" in text
    assert f"may take (settings' default {probe.timeout_seconds}," in text
    assert f"(settings' default {HuggingFaceSettings().endpoint})" in text
    assert f"(default {LEASE_NAMESPACE})" in text


@pytest.mark.parametrize("command", [["controller"], ["bench"]])
def test_the_workers_default_is_the_controllers(command: list[str]) -> None:
    """The parsers spell the default out (the controller's module is too heavy for
    --help): they must say what the controller does."""
    args = build_parser().parse_args(command)
    assert args.workers == DEFAULT_WORKERS
    assert inspect.signature(Controller).parameters["workers"].default == DEFAULT_WORKERS


def test_a_kubeconfig_that_cannot_be_used_is_refused_before_the_log_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 with the reason, as for any flag the controller cannot start with; the
    event log is opened after it, so a typo leaves no new log file behind."""
    log = tmp_path / "log.sqlite"
    absent = tmp_path / "absent.kubeconfig"
    ports = ["--health-port", "0", "--metrics-port", "0"]
    with kept_root_logging():  # both commands set the root logger up, as processes do
        controller = ["controller", f"--kubeconfig={absent}", f"--store=sqlite:///{log}"]
        assert main([*controller, *ports]) == 2
        assert f"cannot load the kubeconfig {absent}: no such file" in capsys.readouterr().err
        assert not log.exists()
        assert main(["simulate", f"--kubeconfig={absent}", "--no-hub"]) == 2
    assert f"simulate: cannot load the kubeconfig {absent}" in capsys.readouterr().err


@pytest.mark.cluster
def test_credentials_the_api_server_turns_away_are_refused_before_the_log_is_made(
    cluster: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A namespace user's credentials, not the controller's ServiceAccount: exit 2 with
    the reason. It stood by instead, ready and alive, with a 403 every two seconds."""
    log = tmp_path / "log.sqlite"
    ports = ["--health-port", "0", "--metrics-port", "0"]
    argv = ["controller", f"--kubeconfig={cluster.kubeconfig('alice')}"]
    with kept_root_logging():
        assert main([*argv, f"--store=sqlite:///{log}", *ports]) == 2
    err = capsys.readouterr().err
    assert "refuses these credentials the Lease d8-ai-inference/ai-inference-controller" in err
    assert "deploy/rbac/controller.yaml" in err
    assert not log.exists()


def test_a_log_a_newer_release_wrote_stops_the_controller_with_what_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rollback: exit 1, as for a log that cannot be opened (Kubernetes restarts the pod
    with backoff), and the reason names what this release cannot read."""
    url = f"sqlite:///{tmp_path / 'log.sqlite'}"
    with store.open_log(url) as log:
        append_as_a_newer_release(log, store.StreamKey("uid-1", "ns", "name"), monkeypatch)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(UNREACHABLE_KUBECONFIG), encoding="utf-8")
    ports = ["--health-port", "0", "--metrics-port", "0"]
    with kept_root_logging():
        argv = ["controller", f"--kubeconfig={kubeconfig}", f"--store={url}", *ports]
        assert main(argv) == 1
    assert (
        "cannot open the event log: the event log holds events this release cannot read: "
        "TestThingAdded v1 (a type this release does not know), TestThingHappened v2"
    ) in capsys.readouterr().err


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mysql://root@127.0.0.1/x", "--store: unsupported database 'mysql'"),
        ("://x", "--store: not a database URL (Could not parse"),
        ("postgresql://a:secret@h:5432x/ai", "--store: not a database URL (invalid literal"),
    ],
    ids=["mysql", "unparseable", "port-not-a-number"],
)
def test_a_store_no_shipped_driver_serves_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str, says: str
) -> None:
    # Exit 2, a usage error, never 1: Kubernetes would restart the pod as for an outage.
    ports = ["--health-port", "0", "--metrics-port", "0"]
    with kept_root_logging():
        argv = ["controller", f"--store={url}", *ports]
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and "secret" not in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ["controller", "--workers", "0"],
        ["bench", "--workers", "-2"],
        ["bench", "-n", "0"],
        ["bench", "-n", "many"],
    ],
)
def test_a_count_below_one_is_a_usage_error(argv: list[str], capsys) -> None:
    """0 workers led and reconciled nothing, silently; 0 orders measured nothing."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "must be at least 1" in err or "not a whole number" in err


class _WarmingServer(ThreadingHTTPServer):
    """An API server's first seconds: every request turned away (403) until its RBAC
    is loaded, /readyz failing meanwhile; then the Lease is simply absent (404)."""

    def __init__(self, warm_after: float, *, lease_status_when_warm: int = 404) -> None:
        super().__init__(("127.0.0.1", 0), _WarmingHandler)
        self.warm_at = time.monotonic() + warm_after
        self.lease_status_when_warm = lease_status_when_warm
        self.lease_asks = 0
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()

    def api(self) -> client.ApiClient:
        configuration = client.Configuration()
        configuration.host = f"http://127.0.0.1:{self.server_address[1]}"
        return client.ApiClient(configuration)


class _WarmingHandler(BaseHTTPRequestHandler):
    server: _WarmingServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        warm = time.monotonic() >= self.server.warm_at
        if self.path.startswith("/readyz"):
            status = 200 if warm else 500
        else:
            self.server.lease_asks += 1
            status = self.server.lease_status_when_warm if warm else 403
        body = json.dumps({"kind": "Status", "code": status, "message": "m"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_an_api_server_still_starting_is_waited_for_not_blamed_on_rbac() -> None:
    """For its first seconds a kube-apiserver turns every request away with 403, its
    RBAC not loaded: the controller started then exited 2 blaming its RBAC."""
    server = _WarmingServer(warm_after=2.0)
    try:
        with server.api() as api:
            _check_lease_access(api, patience=30.0)  # returns: the Lease is absent
        assert server.lease_asks >= 2
    finally:
        server.close()
    ready_but_refused = _WarmingServer(warm_after=0.0, lease_status_when_warm=403)
    try:
        with ready_but_refused.api() as api, pytest.raises(_Refused, match="the Lease"):
            _check_lease_access(api, patience=30.0)
        assert ready_but_refused.lease_asks == 1  # ready: refused at once
    finally:
        ready_but_refused.close()
