"""The crash hook (adapters/faults.py): what the variable says, when the kill comes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import store
from adapters import faults
from store import StreamKey
from tests.store.store_samples import T0, ThingHappened, ThingRemoved


def test_unset_installs_nothing() -> None:
    assert faults.from_environment({}) is None
    assert faults.from_environment({faults.ENV: ""}) is None


@pytest.mark.parametrize(
    "spec", ["crash-after:status", "crash-after:status:0", "crash:status:1", "crash-after:x:1"]
)
def test_a_spec_that_says_nothing_clear_is_refused(spec: str) -> None:
    with pytest.raises(faults.FaultSpecError, match="crash-after:<boundary>:<n>"):
        faults.from_environment({faults.ENV: spec})


def test_the_kill_comes_right_after_the_nth_write_of_its_boundary_only() -> None:
    kills: list[int] = []
    hook = faults.from_environment({faults.ENV: "crash-after:apply-Deployment:3"})
    assert hook is not None and (hook.boundary, hook.n) == ("apply-Deployment", 3)
    hook._kill = lambda: kills.append(hook.seen)  # observe, not die
    for boundary in ["apply-Service", "apply-Deployment", "status", "apply-Deployment"]:
        hook(boundary)
    assert kills == []
    hook("apply-Deployment")
    assert kills == [3]
    hook("apply-Deployment")
    assert kills == [3]  # once


def test_stop_after_freezes_instead() -> None:
    hook = faults.from_environment({faults.ENV: "stop-after:append:2"})
    assert hook is not None and hook.signum is signal.SIGSTOP and hook.n == 2


def test_only_committed_appends_count(tmp_path: Path) -> None:
    kills: list[str] = []
    hook = faults.CrashAfter("append", 2, kill=lambda: kills.append("x"))
    log = store.open_log(f"sqlite:///{tmp_path}/log.sqlite")
    log.observe_appends(hook.after_append)
    now = T0
    key = StreamKey("uid-1", "support", "a")
    event = ThingHappened(observed_at=now, name="a", size=1)
    try:
        log.append(key, [event], expected_version=0, epoch=1, recorded_at=now)
        with pytest.raises(store.StreamConflict):  # refused: not a write that landed
            log.append(key, [event], expected_version=0, epoch=1, recorded_at=now)
        assert kills == []
        log.append(key, [event], expected_version=1, epoch=1, recorded_at=now)
        assert kills == ["x"]
    finally:
        log.close()


def test_an_append_of_one_event_type_is_a_boundary_of_its_own(tmp_path: Path) -> None:
    """`append-<Event>` aims at the append that records one decision (a reclaim's), however
    many other appends came first; an append holding it twice counts once."""
    kills: list[int] = []
    hook = faults.from_environment({faults.ENV: "crash-after:append-ThingRemoved:2"})
    assert hook is not None and (hook.boundary, hook.n) == ("append-ThingRemoved", 2)
    hook._kill = lambda: kills.append(hook.seen)
    log = store.open_log(f"sqlite:///{tmp_path}/log.sqlite")
    log.observe_appends(hook.after_append)
    key = StreamKey("uid-1", "support", "a")
    happened = ThingHappened(observed_at=T0, name="a", size=1)
    removed = ThingRemoved(observed_at=T0, name="a")
    try:
        version = 0
        for events in ([happened], [removed, removed], [happened, happened]):
            version = log.append(key, events, expected_version=version, epoch=1, recorded_at=T0)
        assert kills == []  # one append held ThingRemoved (twice): counted once
        with pytest.raises(store.StreamConflict):  # refused: not a write that landed
            log.append(key, [removed], expected_version=0, epoch=1, recorded_at=T0)
        assert kills == []
        log.append(key, [happened, removed], expected_version=version, epoch=1, recorded_at=T0)
        assert kills == [2]
    finally:
        log.close()


def test_the_default_kill_is_a_sigkill_of_the_process_itself() -> None:
    code = (
        "from adapters import faults\n"
        "hook = faults.CrashAfter('status', 1)\n"
        "hook('status')\n"
        "print('survived')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == -9
    assert "survived" not in done.stdout
    assert "fault hook: SIGKILL after status #1" in done.stderr


def test_the_controller_refuses_a_bad_spec_before_it_starts() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "adapters.cli.main", "controller", "--store=sqlite:///:memory:"],
        check=False,
        env={**os.environ, faults.ENV: "crash-after:status:-1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "AI_INFERENCE_FAULT" in done.stderr
