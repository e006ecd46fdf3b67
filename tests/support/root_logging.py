"""The root logger as the test found it, after code that configures it as a process does.

`logs.configure` (the controller's start) and `logging.basicConfig` (the simulator's)
replace the root logger's handlers, pytest's own among them, with one on the stderr of
the moment. Left so, the next tests' records went to a capture stream already closed
("--- Logging error ---" from the in-process simulators' threads).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from adapters.logs import NOISY_LOGGERS

__all__ = ["kept_root_logging"]


@contextlib.contextmanager
def kept_root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    noisy = {name: logging.getLogger(name).level for name in NOISY_LOGGERS}
    try:
        yield
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
                handler.close()
        for handler in handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(level)
        for name, noisy_level in noisy.items():
            logging.getLogger(name).setLevel(noisy_level)
