"""A standby that takes over checks again that it can read every event in the log.

It checked when it opened the log, maybe long before it leads: an older release standing
by while a newer one led would take over, then fail every pass over a stream holding an
event type the newer release wrote, and fold the others past what it cannot read. It
gives up instead, as for any take-over failure of the log, with the message `open_log`
gives. It also closes the streams of orders deleted while no leader watched. Against
the session's API server; the log on SQLite.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import store
from adapters.kubernetes.controller import Controller, LeadershipLost
from fsm.events import OrderDeleted, SpecObserved
from fsm.values import ModelRef, ModelSource
from tests.store.store_samples import T0, append_as_a_newer_release
from tests.support.polling import eventually

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


def test_an_order_deleted_while_no_leader_watched_is_closed_at_take_over(
    cluster: Any, tmp_path: Path
) -> None:
    """No DELETED event ever reaches a process that never saw the order: the new leader
    finds its stream live in the log and gone from the API, and closes it."""
    url = f"sqlite:///{tmp_path / 'log.sqlite'}"
    gone = store.StreamKey("7f0c1d2e-0000-4000-8000-0000000000d2", "support", "gone-llm")
    with store.open_log(url) as log:
        epoch = log.claim_epoch(1)  # an earlier leader recorded the order, then went
        spec = SpecObserved(
            observed_at=T0,
            generation=1,
            model_ref=ModelRef(src=ModelSource.HUGGING_FACE, name="Qwen/Qwen2.5-0.5B"),
            name=gone.name,
            namespace=gone.namespace,
        )
        log.append(gone, [spec], 0, epoch, T0)
        leader = Controller(
            cluster.api_client("controller"), log, leader_election=False, sync_timeout=20
        )
        try:
            leader.start(wait=30)
            eventually(
                lambda: getattr(log.stream(gone.uid), "deleted_at", None),
                timeout=30,
                what="the stream closed",
            )
            events = [r.event for r in log.read(gone.uid)]
            assert [type(e) for e in events] == [SpecObserved, OrderDeleted]
        finally:
            leader.stop()
