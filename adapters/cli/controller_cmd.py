"""`ai-inference controller` — the main job: watch orders and drive them to their phase.

In a cluster it uses the in-cluster config; elsewhere `--kubeconfig`. The event log is a
SQLite file by default or a PostgreSQL URL. Settings come from the ModuleConfig
`ai-inference` when present, else from `--settings FILE` (YAML shaped as the
ModuleConfig's `spec.settings`), else the defaults — with the platform's ModuleConfig
`global` filling publicDomainTemplate, ingressClass and https where those leave them
unset (docs/workload.md, "Module settings"); the setting flags
(`--public-domain-template`, `--https-mode`, `--ingress-class`, `--hub-endpoint`,
`--probe-interval`, `--probe-timeout`) apply on top of whichever is used. Everything is
checked against deploy/openapi/config-values.yaml. The hub endpoint reaches both the
resolver and the workloads (HF_ENDPOINT); tests and the demo point it at a stand-in hub.

Exit status: 0 after SIGTERM or Ctrl-C (the Lease is released first, so a standby leads
within seconds); 1 when leadership was lost or could not be used (caches that did not
sync, an unreachable log at take-over, a newer leader in the log) and when the log cannot
be opened at start; 2 for bad settings.

`AI_INFERENCE_FAULT` is a test hook (adapters/faults.py): unset, it does nothing.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from adapters.cli import options, waiting
from adapters.logs import LEVELS

if TYPE_CHECKING:
    from kubernetes import client

    from adapters.faults import CrashAfter
    from adapters.kubernetes.controller import Controller
    from adapters.kubernetes.health import HealthServer
    from adapters.kubernetes.settings import Source
    from adapters.metrics import MetricsServer


# The heavy imports (the Kubernetes client, the controller) happen when the command
# runs, so `ai-inference history` and `--help` start quickly.

__all__ = ["HPA_API_VERSION_CHOICES", "api_client_for", "register", "setting_overrides"]

# rendering.HPA_API_VERSIONS, spelled out: importing it would load the controller for
# `--help` (a test holds the two equal).
HPA_API_VERSION_CHOICES = ("auto", "autoscaling/v2", "autoscaling/v2beta2")


def register(subparsers: Any) -> None:
    sub = subparsers.add_parser(
        "controller",
        help="run the controller (the main job)",
        epilog="Environment: POD_NAMESPACE, the namespace of the Lease and of "
        "CustomCertificate Secrets (default d8-ai-inference); PGPASSWORD, the PostgreSQL "
        "password (never in --store); AI_INFERENCE_STORE, --store's default.",
    )
    sub.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster config)")
    options.add_store(sub)
    settings = sub.add_argument_group(
        "settings",
        "Without a ModuleConfig ai-inference (a plain cluster) settings come from --settings; "
        "a ModuleConfig, when present, replaces the file. The flags below apply on top of "
        "either. Schema: deploy/openapi/config-values.yaml; see docs/workload.md.",
    )
    settings.add_argument(
        "--settings", metavar="FILE", help="YAML file shaped as the ModuleConfig's spec.settings"
    )
    settings.add_argument("--public-domain-template", help="host template with one %%s")
    settings.add_argument("--ingress-class", help="IngressClass of External endpoints")
    settings.add_argument(
        "--https-mode",
        choices=("Disabled", "CertManager", "CustomCertificate", "OnlyInURI"),
        help="TLS of External endpoints",
    )
    settings.add_argument(
        "--hub-endpoint",
        help="HuggingFace hub endpoint, for the resolver and the workloads "
        "(settings' default https://huggingface.co)",
    )
    settings.add_argument(
        "--probe-interval", type=int, help="seconds between probes (settings' default 10)"
    )
    settings.add_argument(
        "--probe-timeout",
        type=int,
        help="seconds a probe may take (settings' default 3, or the interval when shorter)",
    )
    sub.add_argument(
        "--probe-target",
        choices=("service", "simulator"),
        default="service",
        help="how probes find an order's endpoint: its Service, or the simulator's pod "
        "annotation (default %(default)s)",
    )
    sub.add_argument(
        "--workers",
        type=options.positive_int,
        default=4,  # Controller's DEFAULT_WORKERS; that module is too heavy for --help
        help="orders reconciled at once (default 4)",
    )
    sub.add_argument(
        "--sync-timeout",
        type=float,
        default=60.0,
        help="seconds a new leader waits for its caches; then it releases the Lease and "
        "exits 1 (default %(default)s)",
    )
    sub.add_argument(
        "--health-port", type=int, default=8081, help="/healthz and /readyz (0: off; default 8081)"
    )
    sub.add_argument(
        "--metrics-port", type=int, default=8080, help="Prometheus /metrics (0: off; default 8080)"
    )
    sub.add_argument(
        "--log-level",
        choices=LEVELS,
        default="info",
        help="least severe level logged (JSON lines on stderr; default %(default)s)",
    )
    sub.add_argument(
        "--hpa-api-version",
        choices=HPA_API_VERSION_CHOICES,
        default="auto",
        help="the HorizontalPodAutoscaler API to write (default auto: the newest the "
        "server serves, v2beta2 before Kubernetes 1.23)",
    )
    sub.set_defaults(run=_run)


def api_client_for(kubeconfig: str | None) -> client.ApiClient:
    from adapters.kubernetes import credentials

    return credentials.from_kubeconfig(kubeconfig) if kubeconfig else credentials.in_cluster()


def setting_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The setting flags given, in the settings' own shape."""
    out: dict[str, Any] = {}
    if args.public_domain_template is not None:
        out["publicDomainTemplate"] = args.public_domain_template
    if args.ingress_class is not None:
        out["ingressClass"] = args.ingress_class
    if args.https_mode is not None:
        out["https"] = {"mode": args.https_mode}
    if args.hub_endpoint is not None:
        out["huggingFace"] = {"endpoint": args.hub_endpoint}
    probe = {
        key: value
        for key, value in (
            ("intervalSeconds", args.probe_interval),
            ("timeoutSeconds", args.probe_timeout),
        )
        if value is not None
    }
    if probe:
        out["probe"] = probe
    return out


def _terminate(*_: object) -> None:
    raise KeyboardInterrupt


def _run(args: argparse.Namespace) -> int:
    import store
    from adapters import faults, logs
    from adapters.kubernetes.controller import Controller, LeadershipLost
    from adapters.probes.targets import AnnotatedPodTarget, ServiceTarget, TargetResolver

    logs.configure(args.log_level)
    targets: TargetResolver = (
        AnnotatedPodTarget() if args.probe_target == "simulator" else ServiceTarget()
    )
    try:
        source, fault, api = _inputs(args)
        _check_lease_access(api)
    except _Refused as exc:
        sys.stderr.write(f"ai-inference controller: {exc}\n")
        return 2
    try:
        log_store = store.open_log(args.store)
    except store.StoreError as exc:
        # Unreachable, or a schema it cannot migrate: nothing can be done without the log.
        # Exit 1 with the reason (Kubernetes restarts the pod with backoff; a start after
        # the log's return works). The driver's message names host and port, never the
        # password.
        sys.stderr.write(f"ai-inference controller: cannot open the event log: {exc}\n")
        api.close()
        return 1
    with log_store:
        controller = Controller(
            api,
            log_store,
            settings=source,
            targets=targets,
            workers=args.workers,
            sync_timeout=args.sync_timeout,
            hpa_api_version=None if args.hpa_api_version == "auto" else args.hpa_api_version,
        )
        if fault is not None:
            faults.install(fault, controller.writer, log_store)
        signal.signal(signal.SIGTERM, _terminate)
        served = _serve_metrics(args.metrics_port) if args.metrics_port else None
        health = _serve_health(args.health_port, controller) if args.health_port else None
        sys.stdout.write("controller campaigning for the Lease\n")
        sys.stdout.flush()
        lost = False
        try:
            controller.start(wait=None)  # a standby waits here for the Lease
            sys.stdout.write(f"controller leading, epoch {controller.epoch}\n")
            sys.stdout.flush()
            waiting.until_set(controller.lost)  # lost: exit, Kubernetes restarts us
            lost = True
        except LeadershipLost:
            lost = True  # the reason is printed below
        except KeyboardInterrupt:
            pass  # SIGTERM: stop() below releases the Lease, which is not losing it
        finally:
            _exit_if_stuck(1 if lost else 0)
            controller.stop()
            if health is not None:
                health.stop()
            if served is not None:
                served.stop()
    if lost:
        sys.stderr.write(f"controller stopped leading: {controller.failure}\n")
        return 1
    return 0


class _Refused(Exception):
    """A flag or the environment gives what the controller cannot start with."""


def _inputs(args: argparse.Namespace) -> tuple[Source, CrashAfter | None, client.ApiClient]:
    """The settings, the crash tests' fault hook and the API client, each checked before
    anything is opened: a typo is refused with its reason, and the log not created."""
    import store
    from adapters import faults
    from adapters.kubernetes import credentials, settings

    try:
        overrides = setting_overrides(args)
        source = (
            settings.Source.from_file(args.settings, overrides)
            if args.settings
            else settings.Source(None, overrides)
        )
        source.resolve(None)
        fault = faults.from_environment()  # a test hook; None unless the crash tests set it
        try:
            store.normalise_url(args.store)
        except ValueError as exc:  # no database we ship a driver for: usage, not outage
            raise _Refused(f"--store: {exc}") from None
        return source, fault, api_client_for(args.kubeconfig)
    except (settings.SettingsError, faults.FaultSpecError, credentials.CredentialsError) as exc:
        raise _Refused(str(exc)) from None


def _check_lease_access(api: client.ApiClient, *, patience: float = 60.0) -> None:
    """Refuse credentials the API server turns away from the Lease, the first thing a
    controller reads: else it stood by for ever, ready and alive, one 403 every two
    seconds in its log, and no order was ever served. An API server that does not answer
    is not refused: the Lease is tried again until it does. Nor is one still starting:
    for its first seconds it turns every request away until its RBAC is loaded, so a
    refusal counts once it says it is ready (or after `patience` seconds)."""
    from adapters.kubernetes import errors, rest
    from adapters.kubernetes.controller import LEASE_NAME, own_namespace

    namespace = own_namespace()
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{LEASE_NAME}"
    deadline = time.monotonic() + patience
    while True:
        try:
            rest.call(api, "GET", path, timeout=(5.0, 10.0))
            return
        except (errors.APIForbiddenError, errors.APIUnauthorizedError) as exc:
            if _server_ready(api) or time.monotonic() > deadline:
                raise _Refused(
                    f"the API server refuses these credentials the Lease {namespace}/"
                    f"{LEASE_NAME} ({exc}); the controller's ServiceAccount needs "
                    "deploy/rbac/controller.yaml"
                ) from None
            time.sleep(1.0)
        except errors.APIError:
            return  # absent (made when first led), or unreachable: the elector retries


def _server_ready(api: client.ApiClient) -> bool:
    from adapters.kubernetes import errors, rest

    try:
        with errors.translating():
            rest.send(api, "GET", "/readyz", timeout=(5.0, 10.0)).read()
    except errors.APIError:
        return False
    return True


def _exit_if_stuck(code: int) -> None:
    """Exit with `code` anyway if stopping takes longer than it ever should: a process
    that lost its Lease must not linger (seen once under load: no exit in 120 s), and one
    told to stop must not wait for Kubernetes' SIGKILL."""

    def stuck() -> None:
        sys.stderr.write(f"controller: stopping took over {_STOP_BOUND:.0f}s; exiting\n")
        sys.stderr.flush()
        os._exit(code)

    timer = threading.Timer(_STOP_BOUND, stuck)
    timer.daemon = True
    timer.start()


_STOP_BOUND = 30.0  # seconds: workers (10 s), the Lease's release and the caches (5 s)


def _serve_health(port: int, controller: Controller) -> HealthServer:
    from adapters.kubernetes.health import HealthServer

    # Ready from here on, leading or standing by; not once leadership is lost (the
    # process is exiting).
    health = HealthServer(
        lambda: not controller.lost.is_set(),
        alive=controller.alive,
        leading=controller.still_leading,
        port=port,
    )
    health.start()
    return health


def _serve_metrics(port: int) -> MetricsServer | None:
    """/metrics on `port`, or None (logged) when the port is taken: a controller without
    metrics still serves orders, and another process on this machine may hold 8080."""
    import logging

    from adapters import metrics

    try:
        return metrics.serve(port)
    except OSError as exc:
        logging.getLogger(__name__).error("cannot serve /metrics on port %d: %s", port, exc)
        return None
