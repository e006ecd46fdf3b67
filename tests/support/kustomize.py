"""`kubectl kustomize` of a folder, as the install tests read deploy/ and install/."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import KUBECTL

__all__ = ["kustomize"]


def kustomize(folder: Path) -> list[dict[str, Any]]:
    """The documents `kubectl kustomize folder` renders; the test fails with its stderr."""
    result = subprocess.run(
        [KUBECTL, "kustomize", str(folder)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]
