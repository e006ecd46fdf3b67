"""Where the project's manifests live, in a checkout and in an installed wheel.

In a checkout (and an editable install) the folders sit at the repository root; a wheel
carries them under `adapters/_bundled/` (see pyproject's force-include).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["resource_dir"]

_PACKAGE = Path(__file__).resolve().parent
_BUNDLED_NAMES = {"tests/crds": "standin-crds"}


def resource_dir(name: str) -> Path:
    """`crds`, `deploy`, `examples`, `migrations`, `scripts` or `tests/crds`."""
    checkout = _PACKAGE.parent / name
    if checkout.is_dir():
        return checkout
    bundled = _PACKAGE / "_bundled" / _BUNDLED_NAMES.get(name, name)
    if bundled.is_dir():
        return bundled
    raise FileNotFoundError(f"no {name}/ folder next to the package nor bundled in it")
