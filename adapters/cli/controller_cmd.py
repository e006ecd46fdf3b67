"""`ai-inference controller` — the main job: watch orders and drive them to their phase.

In a cluster it uses the in-cluster config; elsewhere `--kubeconfig`. The event log is a
SQLite file by default or a PostgreSQL URL. Settings come from the ModuleConfig
`ai-inference` when present, else the defaults; `--hub-endpoint` overrides the
HuggingFace endpoint (tests and the demo point it at the stand-in hub on 127.0.0.1).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubernetes import client

# The heavy imports (the Kubernetes client, the controller) happen when the command
# runs, so `ai-inference history` and `--help` start quickly.

__all__ = ["api_client_for", "register"]


def register(subparsers: Any) -> None:
    sub = subparsers.add_parser("controller", help="run the controller (the main job)")
    sub.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster config)")
    sub.add_argument(
        "--store",
        default="sqlite:///ai-inference.sqlite",
        help="event log: a SQLite URL/path or postgresql+psycopg://... (default %(default)s)",
    )
    sub.add_argument("--hub-endpoint", help="HuggingFace hub endpoint (overrides the settings)")
    sub.add_argument(
        "--probe-target",
        choices=("service", "simulator"),
        default="service",
        help="how probes find an order's endpoint: its Service, or the simulator's pod annotation",
    )
    sub.add_argument("--workers", type=int, default=2)
    sub.add_argument("--health-port", type=int, default=8081, help="/healthz and /readyz (0: off)")
    sub.add_argument("--hpa-api-version", default="autoscaling/v2")
    sub.set_defaults(run=_run)


def api_client_for(kubeconfig: str | None) -> client.ApiClient:
    from kubernetes import client, config

    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    config.load_incluster_config()
    return client.ApiClient()


def _store_url(value: str) -> str:
    return value if "://" in value else f"sqlite:///{value}"


def _terminate(*_: object) -> None:
    raise KeyboardInterrupt


def _run(args: argparse.Namespace) -> int:
    import store
    from adapters.kubernetes.controller import Controller
    from adapters.kubernetes.health import HealthServer
    from adapters.probes.targets import AnnotatedPodTarget, ServiceTarget, TargetResolver

    logging.basicConfig(
        level=logging.INFO,
        format='{"time":"%(asctime)s","level":"%(levelname)s","logger":"%(name)s","msg":"%(message)s"}',
    )
    # Per-request and per-transition chatter from libraries would drown the decisions.
    for noisy in ("transitions", "httpx", "httpx2", "alembic", "huggingface_hub"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    targets: TargetResolver = (
        AnnotatedPodTarget() if args.probe_target == "simulator" else ServiceTarget()
    )
    with store.open_log(_store_url(args.store)) as log_store:
        controller = Controller(
            api_client_for(args.kubeconfig),
            log_store,
            hub_endpoint=args.hub_endpoint,
            targets=targets,
            workers=args.workers,
            hpa_api_version=args.hpa_api_version,
        )
        signal.signal(signal.SIGTERM, _terminate)
        health = None
        if args.health_port:
            # Ready from here on, leading or standing by; not once leadership is lost
            # (the process is exiting).
            health = HealthServer(
                lambda: not controller.lost.is_set(),
                leading=lambda: controller.leading.is_set() and not controller.lost.is_set(),
                port=args.health_port,
            )
            health.start()
        lost = False
        try:
            controller.start(wait=None)  # a standby waits here for the Lease
            sys.stdout.write(f"controller leading, epoch {controller.epoch}\n")
            sys.stdout.flush()
            controller.lost.wait()  # leadership lost: exit, Kubernetes restarts us as standby
            lost = True
        except KeyboardInterrupt:
            pass  # SIGTERM: stopping releases the Lease, which is not losing it
        finally:
            controller.stop()
            if health is not None:
                health.stop()
    return 1 if lost else 0
