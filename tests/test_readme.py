from pathlib import Path

from misa.config import settings

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_readme_documents_every_setting_and_both_commands():
    for key, default, _, _ in settings():
        assert f"`{key}` | `{default}`" in README or (not default and f"`{key}` | (none)" in README), key
    assert "make run" in README and "make test" in README
