"""A PostgreSQL server of the test's own, to stop and start: the shared one on :5432 is
never stopped. Start-up is quick (initdb ~1 s, start or stop ~0.2 s), so an outage is
a real stop: open connections are terminated and new ones refused until it is back.

The binaries refuse to run as root; the data folder belongs to `postgres` and every
command runs as that user (`runuser`).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg

__all__ = ["PrivatePostgres"]

BIN = Path(os.environ.get("AI_INFERENCE_PG_BIN", "/usr/local/bin"))
USER = "postgres"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivatePostgres:
    """initdb in a fresh folder, then `start()`/`stop()` at will; `remove()` at the end."""

    def __init__(self) -> None:
        # Not under pytest's tmp_path: its folders are private to root.
        self.folder = Path(tempfile.mkdtemp(prefix="ai-inference-pg-", dir="/tmp"))
        shutil.chown(self.folder, USER, USER)
        self.data = self.folder / "data"
        self.port = _free_port()
        self.url = f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/postgres"
        self._as_postgres(
            str(BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", USER, "--no-sync"
        )

    def _as_postgres(self, *argv: str) -> None:
        done = subprocess.run(
            ["runuser", "-u", USER, "--", *argv],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr}")

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c max_connections=100"
        )
        self._as_postgres(
            str(BIN / "pg_ctl"), "-D", str(self.data), "-o", options,
            "-l", str(self.folder / "server.log"), "-w", "start",
        )  # fmt: skip

    def stop(self) -> None:
        """Stop now: sessions are terminated (fast mode), new connections refused."""
        self._as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def set_read_only(self, database: str, read_only: bool) -> None:
        """`database` refuses writes (or takes them again) from its next sessions, as a
        fail-over's old primary does; its sessions now are cut, so none keeps the old."""
        setting = (
            "SET default_transaction_read_only = on"
            if read_only
            else "RESET default_transaction_read_only"
        )
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=USER, dbname="postgres", autocommit=True
        ) as admin:
            admin.execute(f'ALTER DATABASE "{database}" {setting}')
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (database,),
            )

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def remove(self) -> None:
        if self.running():
            self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)
