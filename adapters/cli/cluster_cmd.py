"""`ai-inference cluster up|down|status` — a real local control plane, as `kind` gives one.

Used by people trying the project and by the demo; tests use the same code through
their session fixture.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_DIR", "register"]

DEFAULT_DIR = Path(os.environ.get("AI_INFERENCE_CLUSTER_DIR", ".ai-inference/cluster"))


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "cluster", help="run a local kube-apiserver, etcd and controller-manager"
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, run, help_text in (
        ("up", _up, "build or reuse the binaries, start the control plane, install the CRDs"),
        ("down", _down, "stop the processes started by `up` in DIR and remove their state"),
        ("status", _status, "say whether a control plane runs in DIR"),
    ):
        sub = verbs.add_parser(verb, help=help_text)
        sub.add_argument(
            "--dir", type=Path, default=DEFAULT_DIR, help=f"state folder (default {DEFAULT_DIR})"
        )
        sub.set_defaults(run=run)


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")


# The cluster modules (YAML, PKI, the Kubernetes client) are imported by the verb that
# runs: building the parser must stay cheap for every other command.


def _up(args: argparse.Namespace) -> int:
    from adapters.cluster import bootstrap, identities, local

    try:
        state = local.up(args.dir)
        count = bootstrap.bootstrap(state.kubeconfig("admin"))
    except local.ClusterError as exc:
        sys.stderr.write(f"cluster up failed: {exc}\n")
        return 1
    _say(f"control plane up at {state.server} (state in {state.folder}); {count} objects installed")
    for ident in identities.IDENTITIES:
        _say(f"  {ident.name:<10} {state.kubeconfig(ident.name)}  ({ident.about})")
    _say(f"\n  export KUBECONFIG={state.kubeconfig('admin')}\n  kubectl get crds")
    return 0


def _down(args: argparse.Namespace) -> int:
    from adapters.cluster import local

    existed = args.dir.exists()
    try:
        stopped = local.down(args.dir)
    except local.ClusterError as exc:
        sys.stderr.write(f"cluster down refused: {exc}\n")
        return 1
    removed = f"removed {args.dir}" if existed else f"{args.dir} does not exist"
    _say(f"stopped: {', '.join(stopped) or 'nothing was running'}; {removed}")
    return 0


def _status(args: argparse.Namespace) -> int:
    from adapters.cluster import local

    try:
        state = local.status(args.dir)
    except local.ClusterError as exc:
        sys.stderr.write(f"cluster status: {exc}\n")
        return 1
    if state is None:
        _say(f"no control plane runs in {args.dir}")
        return 1
    _say(f"up at {state.server}: " + ", ".join(f"{n} (pid {p})" for n, p in state.pids.items()))
    return 0
