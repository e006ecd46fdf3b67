"""`ai-inference controller` as a child process of a test, its output collected with times.

The leadership tests (test_plain_cluster.py) and the crash tests (tests/faults/) run the
real command, as Kubernetes would, against a control plane of their own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

import adapters
from adapters.kubernetes.controller import LEASE_NAME, LEASE_NAMESPACE

__all__ = ["REPO", "ControllerProcess", "lease_holder"]

REPO = Path(adapters.__file__).resolve().parent.parent


class ControllerProcess:
    """`ai-inference controller` as a process, its stdout lines collected with times."""

    def __init__(
        self,
        kubeconfig: Path,
        store_url: str,
        *extra: str,
        env: Mapping[str, str] | None = None,
    ) -> None:
        environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "adapters.cli.main", "controller",
                f"--kubeconfig={kubeconfig}",
                f"--store={store_url}", "--health-port=0", "--metrics-port=0",
                "--hpa-api-version=autoscaling/v2beta2", *extra,
            ],
            env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.lines: list[tuple[float, str]] = []
        self._errors: list[str] = []
        # Both pipes drained as the process writes: a full pipe would block its logging.
        self._readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_errors, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def stderr(self) -> str:
        return "".join(self._errors)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line))

    def _read_errors(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._errors.append(line)

    def stacks(self, settle: float = 1.0) -> str:
        """Where each of the running controller's threads is now (its SIGUSR1 dump): what
        a failure message shows of a pass that never ended."""
        if self.proc.poll() is not None:
            return "(not running)"
        before = len(self._errors)
        self.proc.send_signal(signal.SIGUSR1)
        time.sleep(settle)  # the dump arrives through the stderr reader
        return "".join(self._errors[before:])

    def said_at(self, text: str) -> float | None:
        return next((t for t, line in self.lines if text in line), None)

    def leading_at(self) -> float | None:
        return self.said_at("controller leading")

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        for reader in self._readers:
            reader.join(10)
        return code

    def kill(self) -> None:
        """Make sure it is gone and its pipes are closed."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for reader in self._readers:
            reader.join(10)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (a clean stop: the Lease released), then the exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.wait(timeout)
        finally:
            self.kill()


def lease_holder(admin: ApiClient) -> str | None:
    """The controller's Lease's holder now ('' when released), None when there is none."""
    leases = client.CoordinationV1Api(admin)
    try:
        lease = leases.read_namespaced_lease(LEASE_NAME, LEASE_NAMESPACE)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return lease.spec.holder_identity or ""
