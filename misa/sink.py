"""Idempotent Parquet output per batch id: a replayed batch overwrites its own output."""
from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Sequence

import pyarrow as pa
import pyarrow.parquet as pq


class ParquetBatchSink:
    """Writes each batch's rows to ``ROOT/batch_id=N/part-00000.parquet``, replacing earlier attempts."""

    def __init__(self, root: str | Path, sort_by: Sequence[tuple[str, str]] = ()):
        self.root = Path(str(root).removeprefix("file://"))
        self.sort_by = list(sort_by)

    def __call__(self, batch_id: int, table: pa.Table) -> None:
        if self.sort_by:
            table = table.sort_by(self.sort_by)
        self.root.mkdir(parents=True, exist_ok=True)
        staging = self.root / f"_staging-{batch_id}-{uuid.uuid4().hex}"
        staging.mkdir()
        pq.write_table(table, staging / "part-00000.parquet")
        final = self.root / f"batch_id={batch_id}"
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)


def read_batches(root: str | Path) -> list[tuple[int, pa.Table]]:
    """Every batch's output, in batch id order."""
    root = Path(str(root).removeprefix("file://"))
    batches = []
    for folder in root.glob("batch_id=*"):
        batches.append((int(folder.name.split("=")[1]), pq.read_table(folder / "part-00000.parquet")))
    return sorted(batches, key=lambda b: b[0])


def final_results(root: str | Path, key_columns: Sequence[str]) -> dict[tuple, dict]:
    """The last value written for each key across batches (the result of an update-mode query)."""
    results: dict[tuple, dict] = {}
    for _, table in read_batches(root):
        for row in table.to_pylist():
            results[tuple(row[c] for c in key_columns)] = row
    return results
