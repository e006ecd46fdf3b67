"""A command's main thread waits in slices, so a SIGTERM that lands on another thread
still runs its handler (adapters/cli/waiting.py). The main thread here blocks SIGTERM, as
if the kernel had picked one of the watch threads, which is what the demo ran into."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

CHILD = textwrap.dedent(
    """
    import signal, sys, threading, time
    from adapters.cli import waiting

    def stop(*_):
        raise SystemExit(0)

    def main_is_waiting():
        frame = sys._current_frames()[threading.main_thread().ident]
        return frame.f_code.co_filename == threading.__file__ and frame.f_code.co_name == "wait"

    signal.signal(signal.SIGTERM, stop)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    def other():  # the thread the kernel hands the signal to
        # The signal may land only once the main thread waits: were it still running
        # Python code, it would run the handler at once, and the case would prove nothing.
        # Its frame in a wait may still be a few instructions short of blocking; a pause
        # that gives up the GIL lets it get there.
        while not main_is_waiting():
            time.sleep(0.01)
        time.sleep(0.2)
        still = main_is_waiting()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        print("ready" if still else "the main thread stopped waiting", flush=True)
        threading.Event().wait()
    threading.Thread(target=other, daemon=True).start()
    WAIT
    """
)


@pytest.mark.parametrize(
    ("wait", "stops"),
    [("waiting.until_set()", True), ("threading.Event().wait()", False)],
    ids=["in-slices", "for-good"],
)
def test_a_sigterm_on_another_thread_still_stops_the_command(wait: str, stops: bool) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.replace("WAIT", wait)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        child.terminate()
        try:
            code: int | None = child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        assert (code == 0) is stops  # for good: the handler never runs, as in the demo
    finally:
        child.kill()
        child.wait(5)
        if child.stdout is not None:
            child.stdout.close()
