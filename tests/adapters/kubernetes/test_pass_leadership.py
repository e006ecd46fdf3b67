"""A pass that may not write: dropped when leadership is gone, looked at again when the
renewal is only late.

`still_leading()` also says no while the last renewal is older than the renew deadline
(checked at each pass, so a stalled renewal loop cannot let an old leader write). When
the renewal then succeeds, this process leads on, and a pass it dropped meanwhile waited
for the orders' resync (300 s): a wake-up lost. Against the session's API server, the
controller not started; its leadership is set by hand.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import store
from adapters.kubernetes import queueing
from adapters.kubernetes.controller import LATE_RENEWAL_RETRY, Controller

pytestmark = pytest.mark.cluster


@pytest.fixture
def controller(cluster: Any, tmp_path: Path) -> Iterator[Controller]:
    log = store.open_log(f"sqlite:///{tmp_path / 'log.sqlite'}")
    made = Controller(cluster.api_client("controller"), log, identity="late")
    try:
        yield made
    finally:
        log.close()


def _late(controller: Controller, late: bool) -> None:
    elector: Any = controller._elector
    elector.holds_lease = lambda: not late


def test_a_pass_in_a_late_renewal_is_looked_at_again(controller: Controller) -> None:
    controller.leading.set()
    _late(controller, True)
    assert not controller.still_leading()
    assert controller._pass("uid-1") == queueing.RequeueAfter(LATE_RENEWAL_RETRY)
    assert controller._class_pass("a-class") == queueing.RequeueAfter(LATE_RENEWAL_RETRY)


def test_a_pass_after_leadership_is_gone_is_dropped(controller: Controller) -> None:
    controller.leading.set()
    _late(controller, True)
    controller.lost.set()
    assert controller._pass("uid-1") == queueing.Done()
    assert controller._class_pass("a-class") == queueing.Done()
    controller.lost.clear()
    controller.leading.clear()  # never led, or stopping
    assert controller._pass("uid-1") == queueing.Done()
