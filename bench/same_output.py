"""Whether misa's output equals Spark's over a benchmark's run (issue 61): the check before any ratio.

A speed figure from a run whose output differs from Spark's means nothing (misa once emitted no row of a
self-join and measured at a third of Spark's time). So every benchmark that compares misa with Spark keeps both
engines' output and checks it here; when they differ it reports no ratio, says so plainly
(:meth:`Check.line`; ``misa bench queries --queries self_join`` on the code before issue 61's fix printed
``outputs differ: misa 0 rows, Spark 11,677 rows — no ratio reported``) and exits non-zero (:data:`DIFFER_EXIT`).

The comparison is the project's own, not a second one: :func:`verify.differential.runner.compare` (each batch's rows
as a multiset, floats up to summation order, NaN equal to NaN, Arrow types exactly, but a timestamp's zone by what it
is rather than its name: :func:`in_utc`) and :mod:`verify.output_diff` (whole outputs read from
:class:`~misa.io.sink.ParquetBatchSink` folders). Which of two ways, by what the runs share:

* **the same batches** (both engines read the same input files in each batch: ``availableNow`` with a fixed count
  of files per trigger): :func:`compare_batches`, batch by batch, by Spark's batch id. A batch whose rows are equal
  once sorted passes without its rows turned into Python objects (:func:`equal_sorted`); any other goes through
  ``compare``, which tells floats apart from rows that differ and describes the first rows that do;
* **other batches** (a processing-time trigger cuts the input by the clock, a restart re-plans, Spark's batch
  reference job writes one batch): :func:`compare_settled`, what does not depend on the cut: every row without its
  batch id (append output) or the last row written per key (update output); an append-mode aggregation's windows up
  to the last window both runs closed (``window_end``), since a run's last watermark depends on where it stopped.

:func:`compare_runs` picks between them from the two runs' Spark checkpoints (the files each batch read).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import pyarrow as pa

from misa.io.sink import read_batches
from verify.differential.runner import compare
from verify.output_diff import diff_rows, final_rows, read_output, without_batch_ids

DIFFER_EXIT = 3  # a benchmark's exit status when misa's output differs from Spark's
NO_RATIO = "no ratio reported"


@dataclass(frozen=True)
class Check:
    """misa's output against Spark's over one run: the rows each wrote and, when they differ, where and how."""

    misa_rows: int
    spark_rows: int
    difference: str = ""  # empty: the same output
    how: str = "batch by batch"  # what was compared

    @property
    def empty(self) -> bool:
        """Neither engine wrote a row: nothing was checked."""
        return not self.misa_rows and not self.spark_rows

    @property
    def same(self) -> bool:
        """Equal outputs with rows in them (an empty output checks nothing, so it gives no ratio either)."""
        return not self.difference and not self.empty

    def line(self) -> str:
        """One line: ``outputs equal (...)``, ``outputs empty: ...`` or ``outputs differ: misa N rows, Spark M rows —
        no ratio reported``."""
        counts = f"misa {self.misa_rows:,} rows, Spark {self.spark_rows:,} rows"
        if self.same:
            return f"outputs equal ({self.how}): {counts}"
        if not self.difference:
            return f"outputs empty: neither engine wrote a row, so nothing was checked — {NO_RATIO}"
        return f"outputs differ: {counts} — {NO_RATIO}"

    def report(self) -> str:
        """:meth:`line`, then where they differ (indented) when they do."""
        if not self.difference:
            return self.line()
        return self.line() + "\n" + "\n".join("  " + text for text in self.difference.splitlines())


def compare_batches(misa: Mapping[int, pa.Table], spark: Mapping[int, pa.Table]) -> Check:
    """Two runs over the same batches, batch by batch (a batch an engine ran without rows, or did not run, has
    none); a difference names how many batches differ and describes the first."""
    misa_rows = spark_rows = with_rows = 0
    differing: list[str] = []
    for batch in sorted(set(misa) | set(spark)):
        got, expected = misa.get(batch), spark.get(batch)
        misa_rows += got.num_rows if got is not None else 0
        spark_rows += expected.num_rows if expected is not None else 0
        got, expected = _filled(got, expected), _filled(expected, got)
        if got is None or expected is None:
            continue
        got, expected = in_utc(got), in_utc(expected)
        with_rows += 1
        if equal_sorted(got, expected):
            continue
        mismatch = compare({batch: expected}, {batch: got})
        if mismatch is not None:
            differing.append(str(mismatch))
    if not differing:
        return Check(misa_rows, spark_rows)
    more = f"{len(differing)} of {with_rows} batches with rows differ; the first, " if len(differing) > 1 else ""
    return Check(misa_rows, spark_rows, more + differing[0])


def _filled(table: pa.Table | None, other: pa.Table | None) -> pa.Table | None:
    """``table``, or an empty table of ``other``'s columns where ``table`` has no rows and ``other`` has some
    (None where neither has rows: nothing to compare)."""
    if table is not None and table.num_rows:
        return table
    if other is not None and other.num_rows:
        return other.schema.empty_table()
    return None


UTC_NAMES = frozenset({"UTC", "Etc/UTC", "+00:00", "Z", "GMT", "Etc/GMT", "Etc/UCT", "UCT", "Zulu", "Etc/Zulu"})


def in_utc(table: pa.Table) -> pa.Table:
    """``table`` with its timestamps' zone named ``UTC`` wherever it is another name of UTC (Spark's executors write
    ``Etc/UTC``, its driver's Arrow ``UTC``: the same instants, and the same rows)."""
    schema = pa.schema([field.with_type(_utc_type(field.type)) for field in table.schema])
    return table if schema.equals(table.schema) else table.cast(schema)


def _utc_type(data_type: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(data_type) and data_type.tz in UTC_NAMES:
        return pa.timestamp(data_type.unit, "UTC")
    if pa.types.is_struct(data_type):
        return pa.struct([field.with_type(_utc_type(field.type)) for field in data_type])
    return data_type


def equal_sorted(a: pa.Table, b: pa.Table) -> bool:
    """Whether ``a`` and ``b`` have the same column names and types and the same rows, exactly, in any order
    (False also where that cannot be told without Python: lists, maps, NaN)."""
    if _types(a) != _types(b) or a.num_rows != b.num_rows:
        return False
    flat_a, flat_b = _sortable(a), _sortable(b)
    if flat_a is None or flat_b is None:
        return False
    keys = [(name, "ascending") for name in flat_a.column_names]
    try:
        sorted_a, sorted_b = flat_a.sort_by(keys), flat_b.sort_by(keys)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):  # a type Arrow does not sort
        return False  # not "differ": compare_batches then compares the batch row by row
    return all(x.equals(y) for x, y in zip(sorted_a.columns, sorted_b.columns))  # nullability aside, as compare's


def _types(table: pa.Table) -> list[tuple[str, pa.DataType]]:
    return [(field.name, field.type) for field in table.schema]


def _sortable(table: pa.Table) -> pa.Table | None:
    """``table`` with its structs flattened and its columns named by position (a join's may share names); None when
    a column is of a type Arrow does not sort (lists, maps)."""
    while any(pa.types.is_struct(f.type) for f in table.schema):
        table = table.flatten()
    if any(pa.types.is_nested(f.type) or pa.types.is_dictionary(f.type) for f in table.schema):
        return None
    return table.rename_columns([f"c{i}" for i in range(table.num_columns)])


def compare_folders(misa: str | Path, spark: str | Path) -> Check:
    """:func:`compare_batches` of two :class:`~misa.io.sink.ParquetBatchSink` folders."""
    return compare_batches(dict(read_batches(misa)), dict(read_batches(spark)))


def compare_settled(
    misa: str | Path, spark: str | Path, keys: Sequence[str] | None = None, windows_closed: bool = False
) -> Check:
    """Two :class:`~misa.io.sink.ParquetBatchSink` folders of runs whose batches differ: every row without its batch
    id (``keys`` None: append output) or the last row written per key (update output); with ``windows_closed`` (an
    append-mode aggregation) the rows of windows ending no later than the last window end both runs wrote."""
    if keys is not None:
        got, expected, how = final_rows(misa, keys), final_rows(spark, keys), "the last row per key"
    else:
        got_output, expected_output = read_output(misa), read_output(spark)
        got, expected = without_batch_ids(got_output.rows), without_batch_ids(expected_output.rows)
        how = "rows without batch ids"
        if windows_closed and "window_end" in got_output.columns:
            got, expected = _up_to_common_window(got, expected, got_output.columns.index("window_end") - 1)
            how += ", windows both runs closed"
    diff = diff_rows(got, expected)
    total = sum(got.values()), sum(expected.values())
    return Check(*total, "" if diff.ok else diff.describe(), how)


def _up_to_common_window(got: Counter, expected: Counter, column: int) -> tuple[Counter, Counter]:
    """Both multisets cut at the smaller of their last window ends (a side without rows cuts nothing: its emptiness is
    the difference)."""
    ends = [max(row[column] for row in rows) for rows in (got, expected) if rows]
    if len(ends) < 2:
        return got, expected
    cut = min(ends)
    return tuple(Counter({row: n for row, n in rows.items() if row[column] <= cut}) for rows in (got, expected))  # type: ignore[return-value]


def batch_layout(checkpoint: str | Path) -> dict[int, tuple[str, ...]]:
    """The input files each batch read, from a Spark checkpoint (none without one: a batch job)."""
    from verify.soak import batch_layout as layout

    return layout(Path(checkpoint)) if (Path(checkpoint) / "offsets").exists() else {}


def compare_runs(
    misa: tuple[Path, Path], spark: tuple[Path, Path], keys: Sequence[str] | None = None, windows_closed: bool = False
) -> Check:
    """Two runs given as (output folder, Spark checkpoint): batch by batch when every batch read the same files in
    both (:func:`compare_batches`), else their settled rows (:func:`compare_settled` with ``keys`` and
    ``windows_closed``)."""
    layout = batch_layout(misa[1])
    if layout and layout == batch_layout(spark[1]):
        return compare_folders(misa[0], spark[0])
    return compare_settled(misa[0], spark[0], keys, windows_closed)


def settled_keys(query: str, output_mode: str | None = None) -> tuple[str, ...] | None:
    """The key columns of a job's query (``jobs/*.py``) whose output is an update, None for append output (its
    ``output_mode``, else the job's default for the query)."""
    from jobs import cluster_monitoring, linear_road, nexmark, ysb

    if query in nexmark.QUERIES:
        mode, keys = nexmark.QUERIES[query].output_mode, nexmark.KEY_COLUMNS[query]
    elif query in linear_road.QUERIES:
        mode, keys = linear_road.QUERIES[query].output_modes[0], linear_road.KEY_COLUMNS[query]
    else:
        mode, keys = "update", {**cluster_monitoring.KEY_COLUMNS, **ysb.KEY_COLUMNS}[query]
    return None if (output_mode or mode) == "append" else tuple(keys)


def differ_exit(checks: Mapping[str, Check | None]) -> int:
    """Print each differing check (``name: outputs differ: ...`` and where); :data:`DIFFER_EXIT` if any, else 0."""
    differing = {name: check for name, check in checks.items() if check is not None and not check.same}
    for name, check in differing.items():
        print(f"{name}: {check.report()}", flush=True)
    return DIFFER_EXIT if differing else 0


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.same_output MISA_OUTPUT SPARK_OUTPUT``: two runs' output folders, batch by batch
    (``make run`` checks its two modes with it before ``misa report``'s ratios)."""
    import sys

    misa, spark = argv if argv is not None else sys.argv[1:]
    check = compare_folders(misa, spark)
    print(check.report(), flush=True)
    return 0 if check.same else DIFFER_EXIT


if __name__ == "__main__":
    raise SystemExit(main())
