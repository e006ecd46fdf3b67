"""The controller's image, built by scripts/build-image.sh and run from its own root.

`image` builds the OCI layout once per session through the script (cached under
~/.cache/ai-inference/image, so only a cold machine pays for mmdebstrap); `image_root`
unpacks it with umoci, as a container runtime would, into a bundle whose `config.json`
carries the process the image declares. `ImageProcess` runs that process under `chroot`
in a private mount namespace: the root mounted read-only, a writable data directory on
/var/lib/ai-inference and a tmpfs on /tmp (what deploy/controller.yaml mounts), as the
image's user, with the image's environment and working directory.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 1200  # a cold machine: mmdebstrap, the wheels from PyPI, the root


@dataclass(frozen=True)
class Image:
    layout: Path
    tag: str
    config: dict[str, Any]  # the OCI image configuration, as `skopeo inspect --config` shows

    @property
    def process(self) -> dict[str, Any]:
        return dict(self.config["config"])

    @property
    def ref(self) -> str:
        return f"oci:{self.layout}:{self.tag}"


@dataclass(frozen=True)
class ImageRoot:
    bundle: Path
    runtime: dict[str, Any]  # the OCI runtime spec umoci derived from the image config

    @property
    def rootfs(self) -> Path:
        return self.bundle / "rootfs"


def _need_root() -> None:
    if os.geteuid() != 0:
        raise AssertionError(
            "the image tests build with mmdebstrap and run the image under chroot: run as root"
        )


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    _need_root()
    out = tmp_path_factory.mktemp("image") / "oci"
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "build-image.sh")],
        cwd=REPO,
        env={**os.environ, "AI_INFERENCE_IMAGE_DIR": str(out)},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"build-image.sh failed ({result.returncode}):\n{result.stderr}")
    layout, _, tag = result.stdout.strip().splitlines()[-1].rpartition(":")
    config = json.loads(skopeo("inspect", "--config", f"oci:{layout}:{tag}"))
    return Image(Path(layout), tag, config)


def skopeo(*args: str) -> str:
    return subprocess.run(
        ["skopeo", *args], check=True, capture_output=True, text=True, timeout=120
    ).stdout


@pytest.fixture(scope="session")
def image_root(image: Image, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ImageRoot]:
    bundle = tmp_path_factory.mktemp("bundle") / "controller"
    subprocess.run(
        ["umoci", "unpack", "--image", f"{image.layout}:{image.tag}", str(bundle)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    runtime = json.loads((bundle / "config.json").read_text(encoding="utf-8"))
    yield ImageRoot(bundle, runtime)
    shutil.rmtree(bundle, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# Run inside a private mount namespace: nothing mounted here is seen outside, and it all
# goes when the process exits. `exec` keeps one process, so SIGTERM reaches the controller.
_CONTAINER = r"""
set -eu
root=$1 data=$2 user=$3 cwd=$4
shift 4
mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
mount --bind "$data" "$root/var/lib/ai-inference"
mount -t tmpfs -o mode=1777,size=16m tmpfs "$root/tmp"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
exec chroot --userspec="$user" "$root" /usr/bin/env -i --chdir="$cwd" "$@"
"""


class ImageProcess:
    """The image's entrypoint with `args` (as a Deployment's `args:` replace its cmd),
    its user, environment and working directory."""

    def __init__(
        self, image: Image, root: ImageRoot, data: Path, args: list[str], output: Path
    ) -> None:
        process = image.process
        self.output = output
        self._log = output.open("wb")
        self.popen = subprocess.Popen(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                _CONTAINER,
                "container",
                str(root.rootfs),
                str(data),
                process["User"],
                process.get("WorkingDir") or "/",
                *process["Env"],
                *process["Entrypoint"],
                *args,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def text(self) -> str:
        return self.output.read_text(encoding="utf-8", errors="replace")

    def wait_for_output(self, needle: str, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.text():
                return
            if self.popen.poll() is not None:
                raise AssertionError(
                    f"the image's process exited ({self.popen.returncode}):\n{self.text()}"
                )
            time.sleep(0.25)
        raise AssertionError(f"no {needle!r} within {timeout}s:\n{self.text()}")

    def stop(self, *, timeout: float = 60) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=30)
        self._log.close()
        return int(self.popen.returncode)
