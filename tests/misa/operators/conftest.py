"""Fixtures shared by the operator tests."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from misa.runtime.batch_cache import new_view
from misa.runtime.commit import CommitController
from misa.state.store import StateStore


@pytest.fixture
def side(tmp_path) -> Path:
    """A NEXMark Q13 side table of ten rows: key k, value "vk"."""
    path = tmp_path / "side.jsonl"
    path.write_text("".join(json.dumps({"key": k, "value": f"v{k}"}) + "\n" for k in range(10)))
    return path


class Runner:
    """An operator over a real state store, read through the job's view (its memory tier, if it has one), each batch
    committed in sync mode as the job does."""

    def __init__(self, config, root: Path, operator, version: int | None = None):
        self.store = StateStore(config, root / "state", f"file://{root / 'dfs'}")
        self.view = new_view(self.store, config, operator)
        self.controller = CommitController(self.store, "sync")
        self.operator = operator
        if version is not None:  # a restart: the state and the metadata of a committed version
            operator.restore(self.store.load(version).metadata)
        self.version = self.store.version

    def batch(self, deltas: pa.Table):
        self.version += 1
        result = self.operator.apply(deltas, self.view)
        self.controller.commit(self.view.freeze(self.version), self.operator.metadata())
        return result

    def keys(self, prefix: bytes = b"") -> list[bytes]:
        return [k for k, _ in self.view.scan(prefix, prefix + b"\xff" * 16)]

    def close(self) -> None:
        self.controller.drain()
        self.controller.close()
        self.view.close()
        self.store.close()


@pytest.fixture
def run(config, tmp_path):
    """Start a runner (``run(operator)``, or ``run(operator, version)`` to restart); all are closed at the end."""
    runners: list[Runner] = []

    def start(operator, version: int | None = None) -> Runner:
        if runners:
            runners[-1].close()
        runners.append(Runner(config, tmp_path, operator, version))
        return runners[-1]

    yield start
    runners[-1].close()
