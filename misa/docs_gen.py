"""Write the generated reference pages: ``python -m misa.docs_gen`` (``make docs``) regenerates them from the code;
``--check`` writes nothing and exits 1 naming each page that differs from what the code generates.

* ``docs/configuration.md``: every ``spark.misa.*`` key, from :mod:`misa.config_keys`;
* ``docs/cli.md``: the ``misa`` command and every sub-command, from its parsers (:mod:`misa.cli.reference`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

from misa.cli.reference import cli_markdown
from misa.config_docs import configuration_markdown

ROOT = Path(__file__).resolve().parents[1]
COMMAND = "make docs"  # or: python -m misa.docs_gen
PAGES: dict[str, Callable[[], str]] = {"docs/configuration.md": configuration_markdown, "docs/cli.md": cli_markdown}


def stale_pages(root: Path | None = None) -> list[str]:
    """The generated pages under ``root`` (default: this checkout) whose text differs from what the code generates."""
    return [page for page, render in PAGES.items() if not _same((root or ROOT) / page, render())]


def _same(path: Path, text: str) -> bool:
    return path.exists() and path.read_text() == text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m misa.docs_gen", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a page is out of date")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_pages()
        for page in stale:
            print(f"{page} is out of date: run `{COMMAND}`", file=sys.stderr)
        return 1 if stale else 0
    for page, render in PAGES.items():
        (ROOT / page).write_text(render())
        print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
