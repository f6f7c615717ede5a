"""Rows to pandas and back as Spark's Python worker converts them for ``applyInPandasWithState``, a batch at a time.

Spark's worker converts each group's rows on its own (a column's pandas type is of the group's values: integers with
a null become floats in that group only) and takes the key from the group's converted key columns. Converting every
group on its own costs a conversion per group and column; :class:`PandasConversion` converts once per batch the
columns whose pandas values do not depend on which other rows are converted with them (flat types without a null, or
whose null does not change the column's type) and slices them per group, converting only the others per group.

The output goes the other way: the frames a function yielded are converted as each on its own converts (misa's
batches do not split as Spark's tasks do, so frames are not merged across pandas types); a run of frames of the same
columns and pandas types is converted together when that needs no cast fallback, which gives each frame's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.conversion import ArrowBatchTransformer, PandasToArrowConversion
from pyspark.sql.pandas.types import to_arrow_schema

PLAIN_KINDS = "biufcO"  # numpy kinds whose array items are what Series.iloc gives


def batch_invariant(column: pa.ChunkedArray) -> bool:
    """Whether ``column``'s pandas values are the same converted whole as converted a group at a time: a flat type
    whose pandas type a null does not change (floats, strings, binary, times, decimals), or integers and booleans
    without a null. Nested and dictionary types convert per group."""
    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        return column.null_count == 0
    return any(
        check(kind)
        for check in (
            pa.types.is_floating,
            pa.types.is_string,
            pa.types.is_large_string,
            pa.types.is_binary,
            pa.types.is_large_binary,
            pa.types.is_timestamp,
            pa.types.is_date,
            pa.types.is_decimal,
        )
    )


@dataclass(frozen=True)
class PandasConversion:
    """How Spark's Python worker converts rows to pandas and back (the session's settings at start)."""

    timezone: str = "UTC"
    prefer_int_ext_dtype: bool = False
    safecheck: bool = False
    assign_cols_by_name: bool = True
    int_to_decimal_coercion: bool = False

    def series(self, rows: pa.Table) -> list[pd.Series]:
        """Each column of ``rows`` as Spark's worker gives it to a pandas function."""
        return ArrowBatchTransformer.to_pandas(
            rows,
            timezone=self.timezone,
            struct_in_pandas="dict",
            ndarray_as_list=False,
            prefer_int_ext_dtype=self.prefer_int_ext_dtype,
            df_for_struct=False,
        )

    def table(self, frame: pd.DataFrame, schema: T.StructType, arrow_cast: bool = True) -> pa.Table:
        """A function's output rows as Spark converts them to ``schema`` (timestamps in UTC, as misa's tables);
        ``arrow_cast`` False: no cast fallback (a value of another type fails)."""
        batch = PandasToArrowConversion.convert(
            frame,
            schema,
            timezone=self.timezone,
            safecheck=self.safecheck,
            arrow_cast=arrow_cast,
            assign_cols_by_name=self.assign_cols_by_name,
            int_to_decimal_coercion_enabled=self.int_to_decimal_coercion,
        )
        return pa.Table.from_batches([batch]).cast(to_arrow_schema(schema, timezone="UTC"))

    def group_frames(self, rows: pa.Table, bounds: np.ndarray) -> list[pd.DataFrame]:
        """The DataFrame of each group of ``rows`` (sorted by group, group ``i`` from ``bounds[i]`` to
        ``bounds[i + 1]``), as Spark's worker converts the group's rows on their own."""
        names = rows.column_names
        whole = [i for i, column in enumerate(rows.columns) if batch_invariant(column)]
        if len(set(names)) != len(names):
            whole = []  # duplicated names: every column per group, as before
        each = [i for i in range(rows.num_columns) if i not in whole]
        converted = pd.concat(self.series(rows.select(whole)), axis=1) if whole else None
        rest = rows.select(each)
        frames = []
        for begin, end in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            parts = [] if converted is None else [_rows_of(converted, begin, end)]
            if each:
                parts += self.series(rest.slice(begin, end - begin))
            if not each:
                frames.append(parts[0])
            else:
                frame = pd.concat(parts, axis=1)
                frames.append(frame[names] if whole else frame)
        return frames

    def key_tuples(self, keys: pa.Table) -> list[tuple]:
        """Each row of the grouping columns ``keys`` as the key Spark's worker makes from its group's rows: the
        tuple of the first value of each key column's pandas Series, converted with the group."""
        columns = []
        for i, column in enumerate(keys.columns):
            one = keys.select([i])
            if batch_invariant(column):
                columns.append(_items(self.series(one)[0]))
            else:
                columns.append([self.series(one.slice(r, 1))[0].iloc[0] for r in range(keys.num_rows)])
        return list(zip(*columns))

    def tables(self, frames: list[pd.DataFrame], schema: T.StructType) -> pa.Table:
        """Non-empty output frames as converting each on its own gives them; a run of frames of the same columns and
        pandas types converted together, unless that takes the cast fallback (then each on its own)."""
        tables = []
        for run in _runs(frames):
            together = self._together(run, schema) if len(run) > 1 else None
            tables += [together] if together is not None else [self.table(frame, schema) for frame in run]
        return pa.concat_tables(tables)

    def _together(self, run: list[pd.DataFrame], schema: T.StructType) -> pa.Table | None:
        """Frames of the same columns and types converted as one, without the cast fallback (None: that failed;
        converting each on its own raises the error, if there is one)."""
        try:
            return self.table(pd.concat(run, ignore_index=True), schema, arrow_cast=False)
        except Exception:  # noqa: BLE001 - any failure: each frame on its own
            return None


def _rows_of(frame: pd.DataFrame, begin: int, end: int) -> pd.DataFrame:
    """Rows ``begin`` to ``end`` of ``frame`` as a DataFrame of their own (index from 0, as a group's conversion
    gives; a shallow copy of the batch's arrays, the rows of no other group)."""
    part = frame.iloc[begin:end].copy(deep=False)
    part.index = pd.RangeIndex(end - begin)
    return part


def _items(series: pd.Series) -> list[Any]:
    """The values of ``series`` as ``series.iloc[i]`` gives each (numpy scalars, objects, Timestamps, ...)."""
    if isinstance(series.dtype, np.dtype) and series.dtype.kind in PLAIN_KINDS:
        return list(series.to_numpy())
    return [series.iloc[i] for i in range(len(series))]


def _runs(frames: list[pd.DataFrame]) -> Iterator[list[pd.DataFrame]]:
    """Consecutive frames of the same (unique) columns and pandas types, together."""
    run: list[pd.DataFrame] = []
    shape: tuple | None = None
    for frame in frames:
        this = _shape(frame)
        if run and (this is None or this != shape):
            yield run
            run = []
        run.append(frame)
        shape = this
    if run:
        yield run


def _shape(frame: pd.DataFrame) -> tuple | None:
    """A frame's column labels and pandas types (None: duplicated labels, which convert on their own)."""
    if not frame.columns.is_unique:
        return None
    return tuple(frame.columns), tuple(_dtypes(frame))


def _dtypes(frame: pd.DataFrame) -> list[Any]:
    """The frame's column types in column order (through pandas' block manager where it has one: ``frame.dtypes``
    builds a Series, 30 times slower, per one-row frame a function yields)."""
    manager = getattr(frame, "_mgr", None)
    get = getattr(manager, "get_dtypes", None)
    return list(get()) if get is not None else list(frame.dtypes)
