"""The generated reference pages say what the code does: docs/configuration.md (every spark.misa.* key) and
docs/cli.md (the misa command) are what `make docs` writes from the code now."""

import difflib

import pytest

from misa.config_docs import configuration_markdown
from misa.config_keys import settings
from misa.docs_gen import COMMAND, PAGES, ROOT, main, stale_pages


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_page_is_what_the_code_generates(page):
    path = ROOT / page
    written = path.read_text() if path.exists() else ""
    generated = PAGES[page]()
    if written != generated:
        diff = difflib.unified_diff(written.splitlines(), generated.splitlines(), page, "generated", lineterm="", n=0)
        shown = "\n".join(list(diff)[:30])
        pytest.fail(f"{page} differs from what the code generates: run `{COMMAND}`\n{shown}")


def test_the_configuration_page_lists_every_key_once_with_its_default():
    rows = [line for line in configuration_markdown().splitlines() if line.startswith("| `spark.misa.")]
    keys = [key for key, *_ in settings()]
    assert [row.split("`")[1] for row in rows] == keys
    assert "| `spark.misa.state.shards` | integer | `4` | >= 1 | " in configuration_markdown()
    assert "| `spark.misa.state.dir` | text | (none) | any text | " in configuration_markdown()
    assert "| `spark.misa.commit.mode` | choice | `misa` | one of sync, async-ckpt, misa, nocommit | " in (
        configuration_markdown()
    )


def test_check_names_the_stale_pages_and_the_command(tmp_path, monkeypatch, capsys):
    assert stale_pages(tmp_path) == list(PAGES)  # none written there
    monkeypatch.setattr("misa.docs_gen.ROOT", tmp_path)
    assert main(["--check"]) == 1
    assert f"docs/cli.md is out of date: run `{COMMAND}`" in capsys.readouterr().err
    (tmp_path / "docs").mkdir()
    assert main([]) == 0 and main(["--check"]) == 0
    assert (tmp_path / "docs" / "configuration.md").read_text() == configuration_markdown()
