"""A job's whole output (every row of every batch, with its batch id) as a multiset, compared with a reference.

Floats are compared up to summation order: rows are counted with their floats rounded to
:data:`SIGNIFICANT` digits, and the rows left unmatched on either side are then paired when their
other values are equal and their floats close (a rounding that fell on both sides of a digit).
The output of a replayed batch replaces its earlier attempt (:class:`misa.io.sink.ParquetBatchSink`),
so a run that was killed and restarted must give exactly the reference's multiset.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Sequence

from misa.io.sink import final_results, read_batches

SIGNIFICANT = 9  # digits a float keeps in the multiset
REL_TOL = 1e-8  # two rounded floats this close are equal (one unit of the 9th digit)

Row = tuple  # (batch_id, *the row's values in column order)


@dataclass(frozen=True)
class Output:
    """The rows of every batch of one run: ``columns`` (``batch_id`` first) and the multiset of rows."""

    columns: tuple[str, ...]
    rows: Counter = field(default_factory=Counter)

    @property
    def size(self) -> int:
        return sum(self.rows.values())


def canonical(value: Any) -> Any:
    """``value`` with a float rounded to :data:`SIGNIFICANT` significant digits (-0.0 as 0.0); a struct (a window)
    or a list as a tuple of canonical values."""
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.{SIGNIFICANT}g}") + 0.0
    if isinstance(value, dict):
        return tuple((k, canonical(v)) for k, v in value.items())
    if isinstance(value, list):
        return tuple(canonical(v) for v in value)
    return value


def read_output(root: str | Path) -> Output:
    """Every row of every batch under ``root`` (a :class:`~misa.io.sink.ParquetBatchSink` folder)."""
    rows: Counter = Counter()
    columns: tuple[str, ...] = ("batch_id",)
    for batch_id, table in read_batches(root):
        columns = ("batch_id", *table.column_names)
        rows.update((batch_id, *map(canonical, values)) for values in zip(*table.to_pydict().values()))
    return Output(columns, rows)


def without_batch_ids(rows: Counter) -> Counter:
    """The rows with their batch ids dropped (an append-mode output whose batches were cut differently)."""
    result: Counter = Counter()
    for row, n in rows.items():
        result[row[1:]] += n
    return result


def final_rows(root: str | Path, key_columns: Sequence[str]) -> Counter:
    """The last row written for each key, as canonical rows (an update-mode query's result, whatever its batches)."""
    return Counter(tuple(map(canonical, row.values())) for row in final_results(root, key_columns).values())


@dataclass(frozen=True)
class RowDiff:
    """Rows of the reference the output lacks (``missing``) and rows of the output beyond it (``extra``)."""

    missing: Counter
    extra: Counter
    expected: Counter  # the reference's rows, to tell doubled rows from wrong ones

    @property
    def lost(self) -> int:
        return sum(self.missing.values())

    @property
    def extra_rows(self) -> int:
        return sum(self.extra.values())

    @property
    def doubled(self) -> int:
        """Extra rows that are copies of reference rows (a batch's row written twice, or a stale one again)."""
        return sum(n for row, n in self.extra.items() if row in self.expected)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.extra

    def describe(self, columns: Iterable[str] = (), limit: int = 5) -> str:
        """A readable account: counts, then the first ``limit`` missing and extra rows (by batch id)."""
        if self.ok:
            return "the same rows as the reference"
        names = tuple(columns)
        lines = [
            f"{self.lost} reference rows missing, {self.extra_rows} extra rows "
            f"({self.doubled} of them copies of reference rows)" + (f"; columns {', '.join(names)}" if names else "")
        ]
        for title, rows in (("missing", self.missing), ("extra", self.extra)):
            shown = sorted(rows.items(), key=lambda item: repr(item[0]))[:limit]
            lines += [f"  {title}: {_show(row)}" + (f" x{n}" if n > 1 else "") for row, n in shown]
            if len(rows) > limit:
                lines.append(f"  ... {len(rows) - limit} more distinct {title} rows")
        return "\n".join(lines)


def _show(row: Row) -> str:
    """``row`` with its timestamps as text (``1970-01-01 00:00:19+00:00``) and other values as Python literals."""
    return "(" + ", ".join(str(v) if isinstance(v, datetime) else repr(v) for v in row) + ")"


def _close(a: Row, b: Row) -> bool:
    return all(
        x == y or (isinstance(x, float) and isinstance(y, float) and math.isclose(x, y, rel_tol=REL_TOL))
        for x, y in zip(a, b, strict=True)
    )


def _shape(row: Row) -> Row:
    """The row's values that must match exactly (floats blanked out)."""
    return tuple(None if isinstance(v, float) else v for v in row)


def _pair_close(missing: Counter, extra: Counter) -> None:
    """Remove from both sides the rows that differ only by float rounding (in place)."""
    by_shape: dict[Row, list[Row]] = {}
    for row in extra:
        by_shape.setdefault(_shape(row), []).append(row)
    for row in list(missing):
        for other in by_shape.get(_shape(row), ()):
            while missing[row] and extra[other] and _close(row, other):
                missing[row] -= 1
                extra[other] -= 1
    missing += Counter()  # drops the zero counts
    extra += Counter()


def diff_rows(got: Counter, expected: Counter) -> RowDiff:
    """The difference of two multisets of canonical rows (see :func:`read_output`)."""
    missing, extra = expected - got, got - expected
    _pair_close(missing, extra)
    return RowDiff(missing, extra, expected)
