"""The README is a user guide that stays true: every setting, both commands, and every path and link it names."""

import re
from pathlib import Path

from misa.config_keys import settings

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = {path: path.read_text() for path in (ROOT / "docs").glob("*.md")}
PACKAGES = (
    "misa/",
    "checkpoint/",
    "common/",
    "prefetch/",
    "services/",
    "jobs/",
    "verify/",
    "bench/",
    "tests/",
    "conf/",
    "docs/",
)


def test_readme_documents_every_setting_and_both_commands():
    for key, default, _, _ in settings():
        assert f"`{key}` | `{default}`" in README or (not default and f"`{key}` | (none)" in README), key
    assert "make run" in README and "make test" in README


def test_every_repository_path_the_guide_names_exists():
    """Paths in backticks (`misa/job.py`, `jobs/gen/`) in the README and docs/ name real files."""
    for name, text in [("README.md", README), *((p.name, t) for p, t in DOCS.items())]:
        named = {p for p in re.findall(r"`([\w./-]+)`", text) if p.startswith(PACKAGES)}
        missing = sorted(p for p in named if not (ROOT / p).exists())
        assert not missing, f"{name} names paths that do not exist: {missing}"


def test_every_docs_link_exists():
    for name, text in [("README.md", README), *((p.name, t) for p, t in DOCS.items())]:
        links = re.findall(r"\]\(((?:docs/)?[\w-]+\.md)(?:#[\w-]*)?\)", text)
        base = ROOT if name == "README.md" else ROOT / "docs"
        missing = sorted(link for link in links if not (base / link).exists())
        assert not missing, f"{name} links to missing files: {missing}"
    assert "docs/benchmarks.md" in README
