"""The benchmark pages' plots, drawn from the pages' own tables, so that a plot cannot disagree with its table.

A table is plotted when the line before it is ``<!-- plot NAME: y=COLUMN x=COLUMN[,COLUMN] series=COLUMN -->``:
one group of bars per distinct ``x`` value, one bar per ``series`` value, the height the ``y`` column's number.
The picture goes to ``img/NAME.png`` beside the page, and the page links it below the table.
"""

from __future__ import annotations

import argparse
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

PLOT = re.compile(r"<!-- plot (?P<name>[\w-]+): (?P<spec>[^>]*?) -->\n((?:\|.*\|\n)+)")
PAGES = Path(__file__).resolve().parents[1] / "docs" / "benchmarks"


@dataclass(frozen=True)
class PlotSpec:
    """What to draw from one table: the bar height's column, the group columns and the series column."""

    name: str
    y: str
    x: tuple[str, ...]
    series: str

    @classmethod
    def parse(cls, name: str, spec: str) -> PlotSpec:
        fields = dict(part.split("=", 1) for part in spec.split())
        missing = {"y", "x", "series"} - fields.keys()
        if missing:
            raise ValueError(f"plot {name}: missing {', '.join(sorted(missing))} (y=COLUMN x=COLUMN series=COLUMN)")
        return cls(name, fields["y"].replace("_", " "), tuple(c.replace("_", " ") for c in fields["x"].split(",")),
                   fields["series"].replace("_", " "))  # fmt: skip


def table_rows(lines: list[str]) -> list[dict[str, str]]:
    """A Markdown table's rows as dicts by header (the separator row left out)."""
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines if line.strip()]
    header, body = cells[0], [row for row in cells[1:] if not set("".join(row)) <= set("-: ")]
    return [dict(zip(header, row)) for row in body]


def number(text: str) -> float | None:
    """The first number in a cell (``1,234``, ``0.77 s``, ``**2.1**``), or None when it holds none."""
    match = re.search(r"-?\d[\d,]*(?:\.\d+)?", text)
    return float(match.group().replace(",", "")) if match else None


def plot_tables(page: Path) -> list[Path]:
    """Draw every marked table of ``page`` into ``img/`` beside it; the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for match in PLOT.finditer(page.read_text()):
        spec = PlotSpec.parse(match["name"], match["spec"])
        rows = table_rows(match.group(3).splitlines())
        for column in (spec.y, spec.series, *spec.x):
            if rows and column not in rows[0]:
                raise ValueError(f"{page.name}, plot {spec.name}: no column {column!r} in {list(rows[0])}")
        groups = list(dict.fromkeys(" ".join(row[c] for c in spec.x) for row in rows))
        series = list(dict.fromkeys(row[spec.series] for row in rows))
        fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(groups) * max(1, len(series)) / 2 + 2), 3.4))
        width = 0.8 / max(1, len(series))
        for i, name in enumerate(series):
            heights = {" ".join(r[c] for c in spec.x): number(r[spec.y]) for r in rows if r[spec.series] == name}
            xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
            ax.bar(xs, [heights.get(g) or 0.0 for g in groups], width, label=name)
        ax.set_xticks(range(len(groups)), [textwrap.fill(g, 16) for g in groups], fontsize=7)
        ax.set_ylabel(spec.y)
        ax.legend(fontsize=8)
        ax.set_title(f"{page.stem}: {spec.y}", fontsize=9)
        fig.tight_layout()
        out = page.parent / "img" / f"{spec.name}.png"
        out.parent.mkdir(exist_ok=True)
        fig.savefig(out, dpi=90)
        plt.close(fig)
        written.append(out)
    return written


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("plots", help="draw the benchmark pages' plots from their tables (docs/benchmarks/img/)")
    p.add_argument("pages", nargs="*", type=Path, help="benchmark pages (default: every page of docs/benchmarks/)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for page in args.pages or sorted(PAGES.glob("*.md")):
        for path in plot_tables(page):
            print(path)
    return 0
