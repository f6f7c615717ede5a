"""Idempotent Parquet output per batch id on any location: a replayed batch replaces its own output
whole (see :mod:`misa.io.batch_output`), so a reader never sees a batch twice or half-replaced."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from misa.io.batch_output import BatchFolders

PART = "part-00000.parquet"


class ParquetBatchSink:
    """Writes each batch's rows to ``ROOT/batch_id=N/`` as one Parquet file, replacing earlier attempts."""

    def __init__(self, root: str | Path, sort_by: Sequence[tuple[str, str]] = ()):
        self.folders = BatchFolders(root)
        self.sort_by = list(sort_by)

    def __call__(self, batch_id: int, table: pa.Table) -> None:
        if self.sort_by and table.num_columns:  # none: a batch without data and without rows
            table = table.sort_by(self.sort_by)
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        self.folders.commit(batch_id, {PART: buffer.getvalue()})


def read_batches(root: str | Path) -> list[tuple[int, pa.Table]]:
    """Every committed batch's output, in batch id order."""
    folders = BatchFolders(root)
    return [
        (batch_id, pa.concat_tables([_parquet(folders.read(p)) for p in paths]))
        for batch_id, paths in folders.committed()
    ]


def _parquet(data: bytes) -> pa.Table:
    """A Parquet file's table, read wholly on this thread, so that no Arrow thread holds ``data`` once this returns.

    ``pq.read_table`` scans through Arrow's dataset layer, which runs its callbacks on Arrow's CPU pool even with
    ``use_threads=False``: a pool thread could drop the last reference to ``data`` after ``read_batches`` returned,
    ask for the GIL to release it while the interpreter finalized, and be ended by Python inside a ``noexcept``
    destructor, so a script that read the output aborted at exit (``terminate called without an active exception``).
    """
    with pq.ParquetFile(pa.BufferReader(data)) as file:
        return file.read(use_threads=False)


def final_results(root: str | Path, key_columns: Sequence[str]) -> dict[tuple, dict]:
    """The last value written for each key across batches (the result of an update-mode query)."""
    results: dict[tuple, dict] = {}
    for _, table in read_batches(root):
        for row in table.to_pylist():
            results[tuple(row[c] for c in key_columns)] = row
    return results
