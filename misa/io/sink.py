"""Idempotent Parquet output per batch id on any location: a replayed batch replaces its own output
whole (see :mod:`misa.io.batch_output`), so a reader never sees a batch twice or half-replaced."""

from __future__ import annotations

import io
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from misa.io.batch_output import BatchFolders, attempt_name
from misa.io.spread import SpreadRows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

PART = "part-00000.parquet"


class ParquetBatchSink:
    """Writes each batch's rows to ``ROOT/batch_id=N/`` as one Parquet file, replacing earlier attempts."""

    def __init__(self, root: str | Path, sort_by: Sequence[tuple[str, str]] = ()):
        self.folders = BatchFolders(root)
        self.sort_by = list(sort_by)

    def __call__(self, batch_id: int, table: pa.Table) -> None:
        self.folders.commit(batch_id, {PART: _parquet_bytes(table, self.sort_by)})

    def write_frame(self, batch_id: int, frame: DataFrame) -> None:
        """Write the batch's rows given as a DataFrame (the state on the executors): Spark's tasks write the Parquet
        files, one per partition (one in all, sorted, with ``sort_by``), and the driver only commits their names."""
        from pyspark.sql.pandas.types import to_arrow_schema

        attempt, folder = self.folders.new_attempt(batch_id), self.folders.folder_url(batch_id)
        write = partial(_write_parts, folder, attempt, tuple(self.sort_by))
        parts = frame.coalesce(1) if self.sort_by else frame
        names = [row.name for row in parts.mapInArrow(write, "name string").collect()]
        self._point(batch_id, PartFile(folder, attempt), names, lambda: to_arrow_schema(frame.schema, timezone="UTC"))

    def write_spread(self, batch_id: int, rows: SpreadRows) -> bool:
        """Write the batch's rows where the state hosts hold them: each host writes its rows as one file (with
        ``sort_by``, the first host all rows as one sorted file), and the driver only commits their names."""
        attempt, folder = self.folders.new_attempt(batch_id), self.folders.folder_url(batch_id)
        groups = [range(rows.hosts)] if self.sort_by else [[host] for host in range(rows.hosts)]
        names = rows.write_where_they_are(groups, PartFile(folder, attempt, tuple(self.sort_by)))
        self._point(batch_id, PartFile(folder, attempt), names, lambda: rows.schema)
        return True

    def _point(self, batch_id: int, files: PartFile, names: list[str], schema: Callable[[], pa.Schema | None]) -> None:
        """Commit the attempt's files (``names``, written by ``files``) as the batch's output; no file (no rows):
        one of the columns of ``schema``."""
        if not names:
            columns = schema()
            names = [files(0, columns.empty_table() if columns is not None else pa.table({}))]
        self.folders.point(batch_id, files.attempt, sorted(names))


def _parquet_bytes(table: pa.Table, sort_by: Sequence[tuple[str, str]]) -> bytes:
    """``table`` (sorted by ``sort_by``) as a Parquet file."""
    if sort_by and table.num_columns:  # none: a batch without data and without rows
        table = table.sort_by(list(sort_by))
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


@dataclass(frozen=True)
class PartFile:
    """Writes a part of a batch's rows as its Parquet file (sorted by ``sort_by``) of ``attempt`` in
    ``folder_url``; returns the file's name."""

    folder_url: str
    attempt: str
    sort_by: tuple = ()

    def __call__(self, part: int, table: pa.Table) -> str:
        name = attempt_name(f"part-{part:05d}.parquet", self.attempt)
        fs, folder = fsspec.core.url_to_fs(self.folder_url)
        fs.pipe_file(f"{folder.rstrip('/')}/{name}", _parquet_bytes(table, self.sort_by))
        return name


def _write_parts(
    folder_url: str, attempt: str, sort_by: tuple, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """A Spark task's part of :meth:`ParquetBatchSink.write_frame`: its rows as one file; yields the file's name."""
    from pyspark import TaskContext

    parts = list(batches)
    if not parts:  # an empty partition writes no file
        return
    table = pa.Table.from_batches(parts)
    name = PartFile(folder_url, attempt, sort_by)(TaskContext.get().partitionId(), table)
    yield pa.RecordBatch.from_pydict({"name": [name]})


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
