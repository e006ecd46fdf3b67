"""The public host label of an order: unique per (namespace, name), readable when it can be.

rendering.py fills `publicDomainTemplate`'s `%s` with the label made here. The plain
label `<order>-<namespace>` (`support-llm-support`) is ambiguous on its own: `support-llm`
in `support` and `support` in `llm-support` both concatenate to it, and two tenants must
never share a host (one would serve the other's traffic and certificate).

The rule, which makes a collision impossible short of a hash collision:

- Plain `<order>-<namespace>` when the namespace has no `-` and the label fits its room
  (63 characters, one DNS label, less the template's own text there: below). The
  namespace is then what follows the last `-`, so the label names one pair; and because
  an object name never ends in `-`, that last `-` is a single one.
- Otherwise `<prefix>--<digest>`: the plain concatenation cut to leave room, a double
  `-`, and 10 base32 characters of SHA-256 over `namespace/name` (`/` is in neither
  name, so the hashed text names one pair). A plain label never has `--` before its last
  segment, so a hashed label never equals a plain one; two hashed labels are equal only
  if their 50-bit digests are.

The room: `%s` need not be a whole label. The platform's schema admits
`%s-kube.example.com` and `ai-%s.example.com`, whose text around `%s` shares its DNS
label, so `%s` gets 63 less that text (`room`), and Settings.public_host makes the label
for that room. The rule above holds for every room of at least `SHORTEST_ROOM`, which
settings.py requires of a template.
"""

from __future__ import annotations

import base64
import hashlib

__all__ = ["DIGEST_LENGTH", "HOST_LIMIT", "LABEL_LIMIT", "SHORTEST_ROOM", "host_label", "room"]

LABEL_LIMIT = 63  # one DNS label
HOST_LIMIT = 253  # a whole DNS name
DIGEST_LENGTH = 10  # base32 characters: 50 bits
SHORTEST_ROOM = len("a--") + DIGEST_LENGTH  # a hashed label with a one-character prefix


def _digest(name: str, namespace: str) -> str:
    raw = hashlib.sha256(f"{namespace}/{name}".encode()).digest()
    return base64.b32encode(raw).decode("ascii").lower()[:DIGEST_LENGTH]


def host_label(name: str, namespace: str, limit: int = LABEL_LIMIT) -> str:
    """The label `%s` stands for in the order's public host, in at most `limit` characters."""
    plain = f"{name}-{namespace}"
    if "-" not in namespace and len(plain) <= limit:
        return plain
    prefix = plain[: limit - len("--") - DIGEST_LENGTH].rstrip("-.")
    return f"{prefix}--{_digest(name, namespace)}"


def room(template: str) -> int:
    """How long `%s` may be in `template`: 63 less the text beside it in its DNS label."""
    (label,) = [part for part in template.split(".") if "%s" in part]
    return LABEL_LIMIT - (len(label) - len("%s"))
