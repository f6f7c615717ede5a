"""An Aggregation run batch by batch through Spark and misa, and plain Spark's result over all rows (the reference)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import pyarrow as pa
from pyspark.sql import functions as F

from jobs.submit import native_aggregation
from misa.operators.aggregation import Aggregation
from misa.state.view import StateView

Rows = dict[tuple, dict[str, Any]]  # output rows by key (window bounds, group columns)


def key_columns(op: Aggregation) -> list[str]:
    return (["window_start", "window_end"] if op.window else []) + list(op.group_by)


def by_key(op: Aggregation, rows: Sequence[dict[str, Any]]) -> Rows:
    """Rows by their key; a later row of a key replaces an earlier one (update mode's latest value)."""
    return {tuple(r[c] for c in key_columns(op)): r for r in rows}


def run_misa(
    spark, op: Aggregation, schema: str, batches: Sequence[list[tuple]], view: StateView
) -> tuple[Rows, pa.Schema]:
    """Each batch through ``op`` (deltas on Spark, merge on the driver): the final row per key, the output schema."""
    final: Rows = {}
    output_schema = None
    for batch_id, rows in enumerate(batches):
        deltas = op.deltas(spark.createDataFrame(rows, schema)).toArrow()
        output = op.apply(deltas, view).output
        view.freeze(batch_id)  # the next batch reads this one's changes below the cache
        final |= by_key(op, output.to_pylist())
        output_schema = output.schema
    return final, output_schema


def run_native(spark, op: Aggregation, schema: str, rows: list[tuple]) -> tuple[Rows, pa.Schema]:
    """Plain Spark's aggregation of all rows at once: its rows by key and its schema."""
    events = spark.createDataFrame(rows, schema)
    if op.window:
        result = native_aggregation(op, events)
    else:
        functions = {"sum": F.sum, "count": F.count, "avg": F.avg, "min": F.min, "max": F.max}
        result = events.groupBy(*op.group_by).agg(*[functions[a.function](a.column).alias(a.name) for a in op.aggs])
    table = result.toArrow()
    return by_key(op, table.to_pylist()), table.schema


def same_value(got: Any, expected: Any) -> bool:
    """Equal, NaN equal to NaN."""
    if isinstance(got, float) and isinstance(expected, float) and math.isnan(expected):
        return math.isnan(got)
    return got == expected


def assert_same(got: Rows, expected: Rows) -> None:
    """The same keys with the same values."""
    assert got.keys() == expected.keys(), (sorted(got, key=str), sorted(expected, key=str))
    for key, row in expected.items():
        for column, value in row.items():
            assert same_value(got[key][column], value), (key, column, got[key][column], value)


def assert_same_types(got: pa.Schema, expected: pa.Schema) -> None:
    """The same column names and Arrow types (nullability and field metadata aside)."""
    assert [(f.name, f.type) for f in got] == [(f.name, f.type) for f in expected]
