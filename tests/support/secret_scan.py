"""Find any piece of a secret in a haystack: every 8-byte window of every token.

A whole-token search misses a token that was escaped (`\\n` for a newline), cut short
(`str(error)[:120]`), split across lines or re-encoded: a window of 8 bytes survives all
of those. `SecretScan(tokens).leaks(haystack)` returns the windows found.

Cost: one set lookup per 4 haystack bytes. An 8-byte window at any position contains a
4-byte block aligned to a multiple of 4, so the scan looks up only aligned blocks in the
set of the tokens' 4-byte pieces, and checks the 8-byte windows around a block that hits.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable

from adapters.logs import JsonFormatter

__all__ = ["WINDOW", "SecretScan", "log_text"]

WINDOW = 8
_BLOCK = WINDOW // 2


def _pieces(data: bytes, size: int) -> set[bytes]:
    return {data[i : i + size] for i in range(len(data) - size + 1)}


def _encodings(token: str | bytes) -> list[bytes]:
    """The token's bytes as stored and as the places it could leak to would write them."""
    if isinstance(token, bytes):
        return [token]
    forms = {
        token.encode(),
        json.dumps(token).encode(),  # JSON: \n, \r, \u20ac
        repr(token).encode(),  # a repr in a message or a log line
        repr(token.encode()).encode(),  # b'…' as httpx's header error quotes it
        token.encode("unicode_escape"),
    }
    return sorted(forms)


class SecretScan:
    def __init__(self, tokens: Iterable[str | bytes]) -> None:
        self.windows: set[bytes] = set()
        for token in tokens:
            for form in _encodings(token):
                self.windows |= _pieces(form, WINDOW)
        self._blocks = {w[i : i + _BLOCK] for w in self.windows for i in range(_BLOCK + 1)}

    def leaks(self, haystack: str | bytes) -> set[bytes]:
        data = haystack.encode("utf-8", "surrogatepass") if isinstance(haystack, str) else haystack
        found: set[bytes] = set()
        blocks, windows = self._blocks, self.windows
        for q in range(0, len(data) - _BLOCK + 1, _BLOCK):
            if data[q : q + _BLOCK] not in blocks:
                continue
            for p in range(max(0, q + _BLOCK - WINDOW), q + 1):
                window = data[p : p + WINDOW]
                if len(window) == WINDOW and window in windows:
                    found.add(window)
        return found


def log_text(records: Iterable[logging.LogRecord]) -> str:
    """The records as the controller writes them (JSON lines, with any traceback)."""
    formatter = JsonFormatter()
    return "\n".join(formatter.format(r) for r in records)
