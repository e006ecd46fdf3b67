"""`ai-inference demo --keep` stopped by SIGTERM stops everything it started.

What a service manager, `timeout` or a CI runner sends is SIGTERM, not Ctrl-C; the control
plane's processes run detached (they outlive a crashed command on purpose), so only the
demo's own clean-up can stop them. Run for real: the demo in a child process, its
control plane on loopback, the PIDs it recorded checked after it exits.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from adapters.cli.main import main
from adapters.cluster import local

ROOT = Path(__file__).resolve().parents[3]


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.cluster
@pytest.mark.timeout(540)
def test_sigterm_stops_the_control_plane_and_the_demo(tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "adapters.cli.main",
            "demo",
            "--keep",
            "--no-examples",
            "--dir",
            str(folder),
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    pids: dict[str, int] = {}
    try:
        said = []
        assert demo.stdout is not None
        for line in demo.stdout:
            said.append(line)
            if line.strip() == "ready":
                break
        assert said and said[-1].strip() == "ready", "".join(said)
        pids = json.loads((folder / local.STATE_FILE).read_text())["pids"]
        assert set(pids) == {"admission", "etcd", "kube-apiserver", "kube-controller-manager"}
        assert all(_running(pid) for pid in pids.values())

        # Read on while it stops: a demo blocked writing to a full pipe would not stop.
        drain = threading.Thread(target=lambda: said.extend(demo.stdout or ()), daemon=True)
        drain.start()
        demo.send_signal(signal.SIGTERM)
        # Stopping is quick on an idle machine (seconds); the bound is for a loaded one.
        try:
            code = demo.wait(timeout=240)
        except subprocess.TimeoutExpired:
            demo.send_signal(signal.SIGUSR1)  # every thread's stack, to see where it hangs
            time.sleep(2)
            raise AssertionError("the demo did not stop:\n" + "".join(said)[-8000:]) from None
        assert code == 0, "".join(said)[-3000:]
        deadline = time.monotonic() + 10
        while any(_running(p) for p in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = {name: pid for name, pid in pids.items() if _running(pid)}
        assert left == {}, f"still running after the demo exited: {left}"
        assert not folder.exists(), "the demo's state folder is removed"
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait(10)
        if demo.stdout is not None:
            demo.stdout.close()
        local.down(folder)  # whatever the outcome, leave nothing running


def test_a_folder_of_the_users_own_is_refused_and_left_as_it_was(tmp_path: Path, capsys) -> None:
    """`demo --dir` on a folder holding files of its own: a clear error and exit 1, not a
    control plane started among those files (and removed with them at the end)."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("mine")
    assert main(["demo", "--dir", str(notes)]) == 1
    assert "choose a new or empty folder" in capsys.readouterr().err
    assert [p.name for p in notes.iterdir()] == ["todo.txt"]
