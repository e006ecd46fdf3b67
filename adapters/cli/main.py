"""The `ai-inference` command: one entry point, one module per group of subcommands.

Each command module exposes `register(subparsers)`, adding its parsers with
`set_defaults(run=callable)`; `run(args) -> int` is the exit code. Adding a command is
adding a module to `COMMAND_MODULES`. Building the parser imports every command module,
so they import only the standard library at the top and their machinery when they run:
`--help` and the audit commands start fast (tests/adapters/cli/test_startup_and_completion.py).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import importlib
import io
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

COMMAND_MODULES: tuple[str, ...] = (
    "adapters.cli.cluster_cmd",
    "adapters.cli.audit_cmd",
    "adapters.cli.completion_cmd",
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
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


class _Version(argparse.Action):
    """`--version`, read from the installed package's metadata only when asked."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_args: object, **_kwargs: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 - when asked

        try:
            number = version("ai-inference")
        except PackageNotFoundError:
            number = "unknown (not installed)"
        parser.exit(0, f"ai-inference {number}\n")


def _attach_time_ago(argv: Sequence[str]) -> list[str]:
    """`--at -2h` as `--at=-2h`: argparse takes a value starting with `-` for an option."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] == "--at" and arg.startswith("-") and arg[1:2].isdigit():
            out[-1] = f"--at={arg}"
        else:
            out.append(arg)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    # SIGUSR1 prints every thread's stack to stderr: where a process that will not stop is.
    # (Not when stderr is no file, as when a test calls main() with its output captured.)
    with contextlib.suppress(io.UnsupportedOperation, AttributeError, ValueError):
        faulthandler.register(signal.SIGUSR1, file=sys.stderr.fileno(), all_threads=True)
    given = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(_attach_time_ago(given))
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`| head`, a pager quit): not a divergence (exit 1) but
        # what a shell says of a pipe's writer, and no traceback. Python's own advice:
        # point stdout at /dev/null, or flushing it at exit raises again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
