"""The benchmark pages' plots come from the pages' own tables."""

from pathlib import Path

import pytest

from bench.page_plots import PAGES, PLOT, PlotSpec, number, plot_tables, table_rows

PAGE = """# A page

<!-- plot speed: y=batch_p99_(s) x=query series=engine -->
| query | engine | batch p99 (s) |
| --- | --- | ---: |
| CM2 | misa | 0.77 |
| CM2 | Spark's store | 2.38 |
| LR2 | misa | **0.67** |
"""


def test_a_marked_table_becomes_a_picture_beside_its_page(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    assert plot_tables(page) == [tmp_path / "img" / "speed.png"]
    assert (tmp_path / "img" / "speed.png").stat().st_size > 1000


def test_cells_read_as_numbers_and_rows_by_header() -> None:
    rows = table_rows(PAGE.split("-->\n")[1].splitlines())
    assert [r["engine"] for r in rows] == ["misa", "Spark's store", "misa"]
    assert [number(r["batch p99 (s)"]) for r in rows] == [0.77, 2.38, 0.67]
    assert number("at least 121,500") == 121500.0 and number("-") is None


def test_a_spec_naming_a_missing_column_fails_with_its_name(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE.replace("series=engine", "series=mode"))
    with pytest.raises(ValueError, match="no column 'mode'"):
        plot_tables(page)
    with pytest.raises(ValueError, match="missing series"):
        PlotSpec.parse("speed", "y=a x=b")


def test_every_plot_of_the_benchmark_pages_is_drawn_and_linked() -> None:
    for page in sorted(PAGES.glob("*.md")):
        text = page.read_text()
        for match in PLOT.finditer(text):
            assert f"(img/{match['name']}.png)" in text, f"{page.name} does not show its plot {match['name']}"
            assert (page.parent / "img" / f"{match['name']}.png").exists(), f"run: misa bench plots {page}"
