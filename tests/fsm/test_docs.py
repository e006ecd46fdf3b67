"""The generated pages are committed as generated, and say what the code says."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsm import machine
from fsm.docs import PAGES, reasons_markdown, state_machine_markdown
from fsm.reasons import CATALOGUE, CLASS_CONDITION_CATALOGUE

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("relative", PAGES, ids=str)
def test_the_committed_page_is_what_the_code_generates(relative: str) -> None:
    committed = (ROOT / relative).read_text(encoding="utf-8")
    assert committed == PAGES[relative](), f"{relative} is stale: run scripts/gen_docs.py"


def test_the_reasons_page_documents_every_reason_once_per_catalogue() -> None:
    page = reasons_markdown()
    names = [str(r) for r in CATALOGUE] + [str(r) for r in CLASS_CONDITION_CATALOGUE]
    for name in names:
        # A class reason may share its name with an order reason (PriorityClassNotFound).
        assert page.count(f"| `{name}` |") == names.count(name), name


def test_the_diagram_draws_every_transition_and_every_state() -> None:
    page = state_machine_markdown()
    for edge in machine.edges():
        assert f"    {edge.source} --> {edge.dest} : {edge.guard or edge.trigger}" in page
    for leaf in machine.Leaf:
        assert f"| `{leaf.value}` |" in page
