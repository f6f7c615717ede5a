"""Session windows' deltas of each row (no grouping in Spark) against the deltas Spark groups per (group, row
session): the same rows out of the operator, batch by batch, for every aggregate that has a partial of one row, over
integers, doubles (NaN, -0.0, null), timestamps and nulls, rows sharing a group and an event time among them."""

from __future__ import annotations

import datetime
import math
from pathlib import Path

import numpy as np
import pytest
from idle_runs import IdleBatchRun, row_reprs
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from misa.operators.aggregation import Agg
from misa.operators.sessions import SessionAggregation

AGGS = [
    Agg("rows", "count", "*"),
    Agg("n", "count", "x"),
    Agg("total", "sum", "x"),
    Agg("dsum", "sum", "d"),
    Agg("low", "min", "d"),
    Agg("high", "max", "x"),
    Agg("mean", "avg", "d"),
    Agg("latest", "max", "t"),
    Agg("fsum", "sum", "f"),
]
SCHEMA = "k string, x int, d double, f float, t timestamp"


def _batch(spark: SparkSession, rng: np.random.Generator, base_s: int, n: int) -> DataFrame:
    """``n`` rows over four keys (one null), event times on whole seconds (so that rows share a session)."""
    doubles = [None, math.nan, -0.0, 0.0, 1.5, -2.25, 1e300]
    rows = [
        (
            (None, "a", "b", "c")[int(rng.integers(0, 4))],
            None if rng.random() < 0.2 else int(rng.integers(-5, 5)),
            doubles[int(rng.integers(0, len(doubles)))],
            None if rng.random() < 0.2 else float(rng.integers(-3, 3)) / 4,
            _timestamp(base_s + int(rng.integers(-3, 8))),
        )
        for _ in range(n)
    ]
    frame = spark.createDataFrame(rows, SCHEMA)
    return frame.withColumn(
        "session", F.struct(F.col("t").alias("start"), (F.col("t") + F.expr("INTERVAL 3 SECONDS")).alias("end"))
    )


def _timestamp(seconds: int) -> datetime.datetime:
    return datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=seconds)


@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_deltas_of_each_row_give_the_rows_of_deltas_spark_grouped(spark, tmp_path: Path, monkeypatch, seed: int):
    rng = np.random.default_rng(seed)
    per_row = IdleBatchRun(tmp_path / "per-row", SessionAggregation(["k"], AGGS, "session", "t", watermark_delay="2s"))
    grouped = IdleBatchRun(tmp_path / "grouped", SessionAggregation(["k"], AGGS, "session", "t", watermark_delay="2s"))
    try:
        emitted = 0
        for n in range(6):
            batch = _batch(spark, rng, n * 4, int(rng.integers(5, 30)))
            rows_deltas = per_row.operator.deltas(batch)
            with monkeypatch.context() as patched:
                patched.setattr(Agg, "row_partials", lambda self, index, dtype: None)
                grouped_deltas = grouped.operator.deltas(batch)
            assert "Aggregate" not in rows_deltas._jdf.queryExecution().analyzed().toString().split("\n")[0]
            rows_table, grouped_table = rows_deltas.toArrow(), grouped_deltas.toArrow()
            assert rows_table.schema == grouped_table.schema
            (data, idle), (expected, expected_idle) = per_row.step(rows_table), grouped.step(grouped_table)
            got = row_reprs(data.output.to_pylist() + idle.output.to_pylist())
            assert got == row_reprs(expected.output.to_pylist() + expected_idle.output.to_pylist()), f"batch {n}"
            assert data.late_rows == expected.late_rows, f"batch {n}"
            emitted += len(got)
        assert emitted > 0
    finally:
        per_row.close()
        grouped.close()
