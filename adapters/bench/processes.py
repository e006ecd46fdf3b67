"""The bench's child processes (simulator, controller): their output lines and their CPU."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from adapters.bench.measuring import cpu_seconds, status_bytes

__all__ = ["Process"]


@dataclass
class Process:
    """A child process of the bench (simulator, controller): its lines and its CPU."""

    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[str] = field(init=False)
    lines: list[tuple[float, str]] = field(default_factory=list)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _reader: threading.Thread = field(init=False)

    def start(self) -> Process:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with self.log_path.open("a", encoding="utf-8") as log_file:  # the child keeps its own
            self.popen = subprocess.Popen(
                self.argv, stdout=subprocess.PIPE, stderr=log_file, text=True, env=environment
            )
        self._reader = threading.Thread(target=self._read, name=f"{self.name}-out", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.popen.stdout is not None
        with self.popen.stdout as stream:
            for line in stream:
                with self._cond:
                    self.lines.append((time.monotonic(), line.rstrip("\n")))
                    self._cond.notify_all()

    def wait_line(self, prefix: str, timeout: float) -> tuple[float, str]:
        """When the process printed a line starting with `prefix`, and the line."""

        def found() -> tuple[float, str] | None:
            return next(((t, s) for t, s in self.lines if s.startswith(prefix)), None)

        with self._cond:
            if not self._cond.wait_for(lambda: found() is not None or not self.alive, timeout):
                raise TimeoutError(f"{self.name}: no line {prefix!r} within {timeout}s")
            hit = found()
        if hit is None:
            raise RuntimeError(f"{self.name} exited; see {self.log_path}")
        return hit

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def peak_rss(self) -> int:
        return status_bytes(self.pid, "VmHWM")

    def rss(self) -> int:
        return status_bytes(self.pid, "VmRSS")

    def stop(self, timeout: float = 30) -> None:
        if self.alive:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        self._reader.join(10)  # the output is read to its end, and its pipe closed
