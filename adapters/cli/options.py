"""Options every command spells the same way: `--store`, `-o/--output`, exit codes.

A path and a URL are both accepted wherever the event log is named (`--store
/var/lib/ai-inference/events.sqlite` is `sqlite:////var/lib/...`), because an
administrator copies the value from the controller's arguments into an audit command.
Nothing here imports the store or SQLAlchemy: `--help` must stay fast.
"""

from __future__ import annotations

import argparse
import os
import re

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
    "redacted",
    "store_url",
]

# Exit codes of the read commands (argparse itself exits with 2 on a usage error).
EXIT_OK = 0
EXIT_DIVERGED = 1  # verify found a divergence; history/status/why: no such order or point
EXIT_USAGE = 2
EXIT_UNREADABLE = 3  # the log cannot be opened or read, or its schema is not this release's

OUTPUTS = ("table", "json", "yaml")

# The log when neither --store nor AI_INFERENCE_STORE names one. The variable is read when
# the parser is built; set but empty counts as unset (`AI_INFERENCE_STORE= ai-inference`).
DEFAULT_STORE = "ai-inference.sqlite"

# What a database URL may hold that must never be printed: the password of its user part,
# and libpq's `password` and `sslpassword` parameters in the query. A password typed
# unencoded may hold any separator: SQLAlchemy reads it to the first `@` (so a `?` or a
# `#` is in it), a person may mean it to a later one; everything to the last `@` is
# hidden, the host too where a query holds an `@`.
_URL_PASSWORD = re.compile(r"^([\w+]+://[^:/]*):.*@", re.DOTALL)
_QUERY_SECRET = re.compile(r"([?&](?:password|sslpassword)=)[^&#]*", re.IGNORECASE)


def store_url(value: str) -> str:
    """A database URL as given, or a SQLite file path turned into its URL."""
    if "://" in value:
        return value
    if not value:
        raise argparse.ArgumentTypeError("empty event log path")
    return f"sqlite:///{value}"


def redacted(value: str) -> str:
    """`value` (a path or a database URL, maybe malformed) with its secrets as `***`.

    Plain text matching, not a URL parser: it is for printing, and must not fail on the
    malformed URL it is asked to quote in an error."""
    return _QUERY_SECRET.sub(r"\1***", _URL_PASSWORD.sub(r"\1:***@", value))


# The largest count any option takes: a stream version is a 32-bit INTEGER on PostgreSQL,
# and a larger one would reach the database and be blamed on it.
_MAX_COUNT = 2**31 - 1


def positive_int(value: str) -> int:
    """A count that must be at least 1 (workers, orders): 0 would run, and do nothing."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {number}")
    if number > _MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most {_MAX_COUNT}, not {value}")
    return number


def add_store(parser: argparse.ArgumentParser, *, default: str | None = None) -> None:
    default = default or os.environ.get("AI_INFERENCE_STORE") or DEFAULT_STORE
    parser.add_argument(
        "--store",
        type=store_url,
        default=store_url(default),
        metavar="PATH|URL",
        help="event log: a SQLite file path, sqlite:///PATH or postgresql+psycopg://... "
        f"(default {redacted(default)}; AI_INFERENCE_STORE sets it)",
    )


def add_output(parser: argparse.ArgumentParser, *, default: str = "table") -> None:
    parser.add_argument(
        "-o", "--output", choices=OUTPUTS, default=default, help=f"format (default {default})"
    )
