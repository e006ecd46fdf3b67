"""A named Secret's change is told once, whoever finds it: the refresh or a pass's read.

No server: the reads and the clock are the test's (NamedSecrets' seams)."""

from __future__ import annotations

from typing import Any

from adapters.kubernetes.secret_lookup import NamedSecrets


class _NoneOfOurs:
    """The token Secrets' informer, holding none."""

    def get_by_name(self, _namespace: str | None, _name: str) -> None:
        return None

    def add_handler(self, _handler: Any) -> None:
        pass


def _secret(rv: str) -> dict[str, Any]:
    return {"metadata": {"name": "hf", "namespace": "support", "resourceVersion": rv}}


def test_a_change_a_pass_reads_first_wakes_the_others_too() -> None:
    """Orders A and B name Secret `hf`, missing. It is created; A's pass reads it past
    the cache's ttl before the refresh does. The refresh then finds the copy A's read
    left and nothing new: B, named too, was woken only by the resync, minutes later."""
    now = [0.0]
    stored: list[dict[str, Any] | None] = [None]
    secrets = NamedSecrets(
        api=None,  # type: ignore[arg-type]  # reads go through `read`
        own=_NoneOfOurs(),  # type: ignore[arg-type]
        named=lambda: ["support/hf"],
        ttl=60.0,
        clock=lambda: now[0],
    )
    secrets.read = lambda _ns, _name: stored[0]
    told: list[tuple[str, str]] = []
    secrets.add_handler(lambda event, obj: told.append((event, obj["metadata"]["name"])))

    assert secrets.get_by_name("support", "hf") is None  # the first read is no news
    stored[0] = _secret("5")
    now[0] = 61.0  # past the ttl: a pass reads it anew
    assert secrets.get_by_name("support", "hf") == _secret("5")
    assert told == [("ADDED", "hf")]
    assert secrets.refresh_once() == 0  # nothing new since: told once, not twice
    assert told == [("ADDED", "hf")]
    stored[0] = None  # deleted, found by the refresh
    assert secrets.refresh_once() == 1
    assert told == [("ADDED", "hf"), ("DELETED", "hf")]
