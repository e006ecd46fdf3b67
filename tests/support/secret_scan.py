"""Find any piece of a secret in a haystack: every 8-byte window of every token.

A whole-token search misses a token that was escaped (`\\n` for a newline), cut short
(`str(error)[:120]`), split across lines or re-encoded: a window of 8 bytes survives all
of those. Base64, as a Secret carries its values, is searched for too.
`SecretScan(tokens).leaks(haystack)` returns the windows found.

Cost: one set lookup per 4 haystack bytes. An 8-byte window at any position contains a
4-byte block aligned to a multiple of 4, so the scan looks up only aligned blocks in the
set of the tokens' 4-byte pieces, and checks the 8-byte windows around a block that hits.
"""

from __future__ import annotations

import base64
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
        return [token, *_base64(token)]
    forms = {
        token.encode(),
        json.dumps(token).encode(),  # JSON: \n, \r, \u20ac
        repr(token).encode(),  # a repr in a message or a log line
        repr(token.encode()).encode(),  # b'…' as httpx's header error quotes it
        token.encode("unicode_escape"),
        *_base64(token.encode()),
    }
    return sorted(forms)


def _base64(data: bytes) -> list[bytes]:
    """`data` as a Secret's `data` holds it (base64), inside whatever it was encoded with:
    at each of the three offsets its first byte can have, and in both alphabets, the
    characters only its own bytes decide (not the first and last groups, which share
    bits with their neighbours)."""
    forms = []
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + data)
        inner = encoded[4 if offset else 0 : -4]
        forms += [inner, inner.replace(b"+", b"-").replace(b"/", b"_")]
    return forms


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
