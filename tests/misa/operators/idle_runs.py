"""An operator over a real state store (two shards), each batch followed by the batch Spark runs without data and
both committed (sync), for the tests that compare a columnar operator with the per-key code it replaced: the columnar
run reads through the memory tier as a job's view does (``memory_tier``), the per-key run through RocksDB."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from misa.config import MisaConfig
from misa.operators.base import OperatorResult
from misa.runtime.batch_cache import new_view
from misa.runtime.commit import CommitController
from misa.state.store import StateStore
from misa.state.view import StateView


def row_reprs(rows: list[dict[str, Any]]) -> list[str]:
    """Output rows as sorted reprs: NaN, -0.0 and nulls compared as written, order ignored."""
    return sorted(repr(sorted(r.items())) for r in rows)


class IdleBatchRun:
    """``operator`` over a store under ``root``; :meth:`step` runs a batch and the batch without data. With
    ``memory_tier`` the view is the job's (the operator's memory tier, if it has one), else reads go to RocksDB."""

    def __init__(self, root: Path, operator: Any, memory_tier: bool = True):
        config = MisaConfig.from_mapping({"spark.misa.state.shards": "2"})
        self.store = StateStore(config, root / "state", f"file://{root / 'dfs'}")
        self.view = new_view(self.store, config, operator) if memory_tier else StateView(self.store)
        self.commits = CommitController(self.store, "sync")
        self.operator = operator
        self.version = self.store.version
        self.memory_reads = 0  # state reads the memory tier answered

    def step(self, deltas: pa.Table) -> tuple[OperatorResult, OperatorResult]:
        """The batch's result and that of the batch without data after it, both committed."""
        data, idle = self.operator.apply(deltas, self.view), self.operator.no_data_batch(self.view)
        if self.view.memory is not None:
            self.memory_reads += self.view.memory.take_stats()["memory_reads"]
        for _ in range(2):
            self.version += 1
            self.commits.commit(self.view.freeze(self.version), self.operator.metadata())
        return data, idle

    def close(self) -> None:
        self.commits.close()
        self.store.close()
