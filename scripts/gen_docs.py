"""Write the generated documentation pages (docs/reasons.md, docs/state-machine.md).

Run after changing the reason catalogue or the order machine:

    .venv/bin/python scripts/gen_docs.py          # rewrite the pages
    .venv/bin/python scripts/gen_docs.py --check  # exit 1 if a page is out of date

tests/fsm/test_docs.py fails while a committed page differs from the generated text.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fsm.docs import PAGES

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale pages")
    args = parser.parse_args(argv)
    stale = []
    for relative, render in PAGES.items():
        path = ROOT / relative
        text = render()
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(relative)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for relative in stale:
        sys.stderr.write(f"{'stale' if args.check else 'wrote'}: {relative}\n")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
