"""The front door stays small and true: the README's size and order, and every link and path in it and in docs/."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
PACKAGES = ("misa/", "checkpoint/", "common/", "prefetch/", "jobs/", "bench/", "verify/", "services/", "tests/")
PACKAGES += ("conf/", "docs/")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    heads = re.findall(r"^#+ (.+)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_the_readme_is_short_and_in_the_promised_order():
    text = README.read_text()
    assert len(text.encode()) <= 15_000, f"README.md is {len(text.encode())} bytes: at most 15,000"
    order = ["![", "## Two commands", "## Quick start", "## Results", "## Where next"]
    places = [text.find(mark) for mark in order]
    assert -1 not in places and places == sorted(places), dict(zip(order, places))
    assert "make run" in text and "make test" in text
    table = text.split("## Results")[1].split("## ")[0]
    assert len(re.findall(r"^\| (?!---|workload)", table, re.M)) <= 8, "the results table has at most 8 rows"


def test_every_relative_link_resolves_to_a_file_and_anchor():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+://|mailto:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_repository_path_the_docs_name_exists():
    """Paths in backticks (`misa/job.py`, `jobs/gen/`) in the README and docs/ name real files."""
    for page in PAGES:
        named = {p for p in re.findall(r"`([\w./-]+)`", page.read_text()) if p.startswith(PACKAGES)}
        missing = sorted(p for p in named if not (ROOT / p).exists())
        assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"


def test_the_benchmark_pages_are_one_per_benchmark_within_72_kb():
    pages = sorted((ROOT / "docs" / "benchmarks").glob("*.md"))
    # 11 pages of about 6 KB: a page holds its current table, not its history (git keeps that)
    assert sum(len(p.read_bytes()) for p in pages) <= 72_000, "docs/benchmarks/ holds the current results only"
    index = (ROOT / "docs" / "benchmarks" / "README.md").read_text()
    assert all(f"]({p.name})" in index for p in pages if p.name != "README.md"), "the index links every page"
    assert not (ROOT / "docs" / "benchmarks.md").exists(), "the one long page was split into docs/benchmarks/"
