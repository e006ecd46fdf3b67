"""A pass whose append meets another writer forgets the stream that writer moved.

Not always the pass's own: a take appends to its victim's stream from the taker's pass
(Reconciler._take). The pass forgot the taker only, so the victim's state kept in memory
stayed behind its stream, and every later append to it from that state conflicted again.
Against the session's API server, the controller not started; the log on SQLite, the
take's append played by hand.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import store
from adapters.kubernetes import queueing
from adapters.kubernetes.controller import Controller
from fsm import events as ev
from fsm.values import ModelRef, ModelSource
from tests.store.store_samples import at

pytestmark = pytest.mark.cluster

TAKER = store.StreamKey("7f0c1d2e-0000-4000-8000-0000000000c1", "support", "taker")
VICTIM = store.StreamKey("7f0c1d2e-0000-4000-8000-0000000000c2", "support", "victim")


def _spec(key: store.StreamKey, generation: int) -> ev.SpecObserved:
    return ev.SpecObserved(
        observed_at=at(generation),
        generation=generation,
        model_ref=ModelRef(src=ModelSource.HUGGING_FACE, name="Qwen/Qwen2.5-0.5B"),
        name=key.name,
        namespace=key.namespace,
    )


@pytest.fixture
def controller(cluster: Any, tmp_path: Path) -> Iterator[Controller]:
    log = store.open_log(f"sqlite:///{tmp_path / 'log.sqlite'}")
    made = Controller(cluster.api_client("controller"), log, leader_election=False)
    try:
        yield made
    finally:
        made.stop()
        log.close()


def test_a_conflict_on_the_victims_stream_has_that_stream_read_again(
    controller: Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, reconciler = controller._log, controller.reconciler
    for key in (TAKER, VICTIM):
        log.append(key, [_spec(key, 1)], 0, 1, at(1))
    assert reconciler.state_of(VICTIM.uid).version == 1  # kept in memory from now on
    log.append(VICTIM, [_spec(VICTIM, 2)], 1, 1, at(2))  # the victim's own pass, meanwhile

    def taking(_uid: str) -> queueing.Outcome:
        # The taker's pass records the take in the victim's stream, after the victim's
        # state as this process holds it.
        held = reconciler.state_of(VICTIM.uid)
        log.append(VICTIM, [_spec(VICTIM, 3)], held.version, 1, at(3))
        return queueing.Done()

    monkeypatch.setattr(reconciler, "reconcile", taking)
    outcome = controller._pass_once(TAKER.uid)
    assert isinstance(outcome, queueing.Retry)
    assert isinstance(outcome.error, store.StreamConflict) and outcome.error.uid == VICTIM.uid

    # The victim is read again, and its own pass is due to arm what forgetting dropped.
    assert reconciler.state_of(VICTIM.uid).version == 2
    assert controller.queue.get(block=False) == VICTIM.uid
    # So the taker's retry records the take, rather than conflicting again.
    assert taking(TAKER.uid) == queueing.Done()
    assert [r.version for r in log.read(VICTIM.uid)] == [1, 2, 3]
