"""A test hook: the controller kills itself right after its n-th write of one kind (Sieve).

Set `AI_INFERENCE_FAULT=crash-after:<boundary>:<n>` in the environment of `ai-inference
controller` and the process SIGKILLs itself (no clean-up, no Lease release: a crash)
just after the n-th write of that boundary returned — what a node losing power between
two writes of one pass leaves behind. The fault tests (tests/faults/) restart it without
the variable and compare the end state with a clean run's (docs/faults.md, "Crashes").
`stop-after:<boundary>:<n>` SIGSTOPs it there instead — a leader frozen mid-pass (a long
GC pause, a stalled VM) that a test resumes with SIGCONT after another took over.

The variable is read once, at start. Unset — always, outside those tests — nothing is
installed: the writer and the log pay one `is None` check per write.

Boundaries, as the one Writer and the log name them:

- `append`: an append to the event log committed; `append-<Event>`: one that holds an
  event of that type (`append-ReplicasReclaimed`: a reclaim's record in the taker's
  stream, `append-CapacityTaken`: in the victim's) — a boundary a test can aim at whatever
  else the process appended before;
- `apply-<Kind>`: a server-side apply of a child (`apply-Deployment`, `apply-Service`,
  `apply-ResourceClaimTemplate`, `apply-Ingress`, `apply-HorizontalPodAutoscaler`);
- `create-<Kind>`: a create (`create-Secret`: the order's token);
- `patch-<Kind>`: a merge patch (`patch-Deployment`: a reclaim or give-back scale);
- `delete-<Kind>`: a delete (pruning);
- `status`: a status write; `event`: a Kubernetes Event recorded or bumped.
"""

from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from adapters.kubernetes.writing import Writer
    from store import EventLog

__all__ = ["ENV", "CrashAfter", "FaultSpecError", "from_environment", "install"]

ENV = "AI_INFERENCE_FAULT"
_SPEC = re.compile(
    r"(?P<action>crash|stop)-after:"
    r"(?P<boundary>append(?:-[A-Za-z]+)?|status|event|(?:apply|create|patch|delete)-[A-Za-z]+)"
    r":(?P<n>[1-9][0-9]*)"
)


class FaultSpecError(ValueError):
    """The variable is set but does not say `crash-after:<boundary>:<n>`."""


_SIGNALS = {"crash": signal.SIGKILL, "stop": signal.SIGSTOP}


class CrashAfter:
    """Signals this process (`kill` in tests) right after the `n`-th write of `boundary`,
    counted across threads: SIGKILL (a crash) or SIGSTOP (a freeze)."""

    def __init__(
        self,
        boundary: str,
        n: int,
        *,
        signum: signal.Signals = signal.SIGKILL,
        kill: Callable[[], None] | None = None,
    ) -> None:
        self.boundary, self.n, self.signum = boundary, n, signum
        self.seen = 0
        # Sent to the thread at the boundary, not to the process: a process-directed
        # SIGSTOP may be taken by another thread, and this one runs on for a moment: long
        # enough, after an append, to build an Event and pass the fence's check, so that
        # the write went out after the resume (tests/adapters/kubernetes/test_plain_cluster).
        self._kill = kill or (lambda: signal.pthread_kill(threading.get_ident(), signum))
        self._lock = threading.Lock()

    def __call__(self, boundary: str) -> None:
        if boundary != self.boundary:
            return
        with self._lock:
            self.seen += 1
            hit = self.seen == self.n
        if hit:
            # Straight to the file descriptor: a logging handler may buffer, and SIGKILL
            # leaves nothing unflushed behind.
            os.write(2, f"fault hook: {self.signum.name} after {boundary} #{self.n}\n".encode())
            self._kill()

    def after_append(
        self, events: Sequence[Any], _seconds: float, error: BaseException | None
    ) -> None:
        """The event log's append observer: only a committed append counts, as `append`
        and as `append-<Event>` once for each type of event it holds."""
        if error is None:
            self("append")
            for name in dict.fromkeys(type(event).__name__ for event in events):
                self(f"append-{name}")


def from_environment(env: Mapping[str, str] = os.environ) -> CrashAfter | None:
    """The hook the environment asks for, or None when `AI_INFERENCE_FAULT` is unset."""
    spec = env.get(ENV)
    if not spec:
        return None
    match = _SPEC.fullmatch(spec.strip())
    if match is None:
        raise FaultSpecError(
            f"{ENV}={spec!r}: expected crash-after:<boundary>:<n> (or stop-after:…), boundary "
            "one of append, append-<Event>, "
            "status, event, apply-<Kind>, create-<Kind>, patch-<Kind>, delete-<Kind>"
        )
    return CrashAfter(match["boundary"], int(match["n"]), signum=_SIGNALS[match["action"]])


def install(hook: CrashAfter, writer: Writer, log_store: EventLog) -> None:
    """Count the writer's writes and the log's committed appends."""
    writer.after_write = hook
    log_store.observe_appends(hook.after_append)
