"""The `ai-inference` command: one entry point, one module per group of subcommands.

Each command module exposes `register(subparsers)`, adding its parsers with
`set_defaults(run=callable)`; `run(args) -> int` is the exit code. Adding a command is
adding a module to `COMMAND_MODULES`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

COMMAND_MODULES: tuple[str, ...] = (
    "adapters.cli.cluster_cmd",
    "adapters.cli.audit_cmd",
    "adapters.cli.bench_cmd",
    "adapters.cli.controller_cmd",
    "adapters.cli.demo_cmd",
    "adapters.cli.simulate_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ai-inference",
        description="LLM inference orders for Kubernetes, with a replayable history.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
