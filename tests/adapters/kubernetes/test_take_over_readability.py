"""A standby that takes over checks again that it can read every event in the log.

It checked when it opened the log, maybe long before it leads: an older release standing
by while a newer one led would take over, then fail every pass over a stream holding an
event type the newer release wrote, and fold the others past what it cannot read. It
gives up instead, as for any take-over failure of the log, with the message `open_log`
gives. Against the session's API server; the log on SQLite.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import store
from adapters.kubernetes.controller import Controller, LeadershipLost
from tests.store.store_samples import append_as_a_newer_release

pytestmark = pytest.mark.cluster

NEWER = store.StreamKey("7f0c1d2e-0000-4000-8000-0000000000d1", "support", "newer-llm")


def test_a_standby_gives_up_a_log_a_newer_release_wrote_while_it_stood_by(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'log.sqlite'}"
    with store.open_log(url) as log:  # readable when the standby opens it
        standby = Controller(
            cluster.api_client("controller"), log, leader_election=False, sync_timeout=20
        )
        try:
            with store.open_log(url) as newer:  # a newer release leads meanwhile
                append_as_a_newer_release(newer, NEWER, monkeypatch)
            with pytest.raises(store.UnreadableLog) as refused:
                store.open_log(url)
            with pytest.raises(LeadershipLost) as lost:
                standby.start(wait=30)
            assert str(lost.value) == f"take-over failed: UnreadableLog: {refused.value}"
            assert not standby.alive() and not standby.still_leading()
            # It never led: no order passed over, nothing appended past the newer release.
            assert not standby.leading.is_set()
            assert [(s.uid, s.version) for s in log.streams()] == [(NEWER.uid, 2)]
        finally:
            standby.stop()
