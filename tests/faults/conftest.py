"""The crash tests' control plane (audited), simulator and hub: one for the package."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults import bed as crash_bed


@pytest.fixture(scope="package")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[crash_bed.Bed]:
    folder = tmp_path_factory.mktemp("crashes")
    yield from crash_bed.up(folder / "cluster", f"sqlite:///{folder / 'log.sqlite'}")
