"""The module's docs folder: the pages Deckhouse modules ship, each with a Russian twin.

A twin that drifts (a section added in one language only, an example missing) is caught by
comparing the structure of the two: the same headings at the same levels, the same code
blocks in the same languages. Links between pages and into the project must lead to files
that exist, and a twin must be Russian, not a copy of the English page.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.deploy.conftest import REPO

DOCS = REPO / "deploy" / "docs"
PAGES = ("README", "CONFIGURATION", "CR", "FAQ", "EXAMPLES", "USER_GUIDE", "ADMIN_GUIDE")
ENGLISH = sorted(p for p in DOCS.glob("*.md") if not p.name.endswith(".ru.md"))

_FENCE = re.compile(r"^```(\S*)")
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
_CYRILLIC = re.compile(r"[\u0400-\u04ff]")  # the Cyrillic block
_LATIN = re.compile(r"[a-z]", re.IGNORECASE)


def structure(path: Path) -> tuple[list[str], list[str], str]:
    """The page's heading levels, its code blocks' languages, and its prose."""
    headings: list[str] = []
    blocks: list[str] = []
    prose: list[str] = []
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        fence = _FENCE.match(line)
        if fence:
            if not fenced:
                blocks.append(fence.group(1))
            fenced = not fenced
        elif fenced:
            continue
        elif line.startswith("#"):
            headings.append(line.split(" ", 1)[0])
            prose.append(line)
        else:
            prose.append(line)
    assert not fenced, f"{path.name}: a code block is not closed"
    return headings, blocks, "\n".join(prose)


def twin(page: Path) -> Path:
    return page.with_name(page.name.removesuffix(".md") + ".ru.md")


def test_the_pages_deckhouse_modules_ship() -> None:
    assert {p.stem for p in ENGLISH} == set(PAGES)


@pytest.mark.parametrize("page", ENGLISH, ids=lambda p: p.stem)
def test_every_page_has_a_russian_twin_of_the_same_shape(page: Path) -> None:
    russian = twin(page)
    assert russian.is_file(), f"{russian.name} is missing"
    headings, blocks, _ = structure(page)
    ru_headings, ru_blocks, ru_prose = structure(russian)
    assert headings, f"{page.name} has no heading"
    assert ru_headings == headings
    assert ru_blocks == blocks
    # Russian prose, not the English page copied: most letters outside code are Cyrillic.
    cyrillic, latin = len(_CYRILLIC.findall(ru_prose)), len(_LATIN.findall(ru_prose))
    assert cyrillic > latin, f"{russian.name}: {cyrillic} Cyrillic letters, {latin} Latin"


def test_no_russian_page_without_an_english_one() -> None:
    for russian in DOCS.glob("*.ru.md"):
        assert russian.with_name(russian.name.removesuffix(".ru.md") + ".md").is_file()


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_links_lead_to_files_that_exist(page: Path) -> None:
    for target in _LINK.findall(page.read_text(encoding="utf-8")):
        if "://" in target:
            continue
        assert (page.parent / target).exists(), f"{page.name}: {target}"
