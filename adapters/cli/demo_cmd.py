"""`ai-inference demo` — registered here, run from adapters/cli/demo.py.

The demo's body imports the whole product; it is loaded only when the command runs.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_DIR", "register"]

DEFAULT_DIR = Path(os.environ.get("AI_INFERENCE_DEMO_DIR", ".ai-inference/demo"))


def register(subparsers: Any) -> None:
    sub = subparsers.add_parser("demo", help="run the whole product locally and show it working")
    sub.add_argument(
        "--dir", type=Path, default=DEFAULT_DIR, help=f"state folder (default {DEFAULT_DIR})"
    )
    sub.add_argument("--no-examples", action="store_true", help="do not apply the seed's examples")
    sub.add_argument("--keep", action="store_true", help="stay up until interrupted; print 'ready'")
    sub.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the orders")
    sub.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from adapters.cli import demo

    return demo.run(args)
