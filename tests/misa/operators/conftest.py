"""Fixtures shared by the operator tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture
def side(tmp_path) -> Path:
    """A NEXMark Q13 side table of ten rows: key k, value "vk"."""
    path = tmp_path / "side.jsonl"
    path.write_text("".join(json.dumps({"key": k, "value": f"v{k}"}) + "\n" for k in range(10)))
    return path
