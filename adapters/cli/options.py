"""Options every command spells the same way: `--store`, `-o/--output`, exit codes.

A path and a URL are both accepted wherever the event log is named (`--store
/var/lib/ai-inference/events.sqlite` is `sqlite:////var/lib/...`), because an
administrator copies the value from the controller's arguments into an audit command.
Nothing here imports the store or SQLAlchemy: `--help` must stay fast.
"""

from __future__ import annotations

import argparse
import os

__all__ = [
    "DEFAULT_STORE",
    "EXIT_DIVERGED",
    "EXIT_OK",
    "EXIT_UNREADABLE",
    "EXIT_USAGE",
    "OUTPUTS",
    "add_output",
    "add_store",
    "positive_int",
    "store_url",
]

# Exit codes of the read commands (argparse itself exits with 2 on a usage error).
EXIT_OK = 0
EXIT_DIVERGED = 1  # verify found a divergence; history/status/why: no such order or point
EXIT_USAGE = 2
EXIT_UNREADABLE = 3  # the log cannot be opened or read, or its schema is not this release's

OUTPUTS = ("table", "json", "yaml")

DEFAULT_STORE = os.environ.get("AI_INFERENCE_STORE", "ai-inference.sqlite")


def store_url(value: str) -> str:
    """A database URL as given, or a SQLite file path turned into its URL."""
    if "://" in value:
        return value
    if not value:
        raise argparse.ArgumentTypeError("empty event log path")
    return f"sqlite:///{value}"


def positive_int(value: str) -> int:
    """A count that must be at least 1 (workers, orders): 0 would run, and do nothing."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {number}")
    return number


def add_store(parser: argparse.ArgumentParser, *, default: str = DEFAULT_STORE) -> None:
    parser.add_argument(
        "--store",
        type=store_url,
        default=store_url(default),
        metavar="PATH|URL",
        help="event log: a SQLite file path, sqlite:///PATH or postgresql+psycopg://... "
        f"(default {default}; AI_INFERENCE_STORE sets it)",
    )


def add_output(parser: argparse.ArgumentParser, *, default: str = "table") -> None:
    parser.add_argument(
        "-o", "--output", choices=OUTPUTS, default=default, help=f"format (default {default})"
    )
