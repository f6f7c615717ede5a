"""The packages depend downward only (docs/layout.md): none imports a package at its own level or above it."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEVELS = {"common": 0, "checkpoint": 1, "prefetch": 1, "misa": 2, "services": 3, "jobs": 4, "verify": 5, "bench": 6}


def imported_packages(path: Path) -> set[str]:
    """The project's packages a module imports, at its top or inside a function."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return {name.split(".")[0] for name in names} & LEVELS.keys()


def test_every_package_has_a_level():
    assert {init.parent.name for init in ROOT.glob("*/__init__.py")} == LEVELS.keys()


def test_every_package_imports_only_the_packages_below_it():
    upward = [
        f"{path.relative_to(ROOT)} imports {other}"
        for package, level in LEVELS.items()
        for path in sorted((ROOT / package).rglob("*.py"))
        for other in sorted(imported_packages(path) - {package})
        if LEVELS[other] >= level
    ]
    assert not upward, "\n".join(upward)
