"""``mode`` and ``percentile_approx`` written in Spark's API, through misa.from_query and through plain Spark, compared
batch id by batch id over rows in JSON files with a restart between rounds
(:func:`verify.differential.scenarios.run_scenario`); refused before ("misa does not compute mode(v) yet", "... of
Spark's quantile sketch").

``mode(col, true)`` and ``mode() WITHIN GROUP (ORDER BY col DESC)`` over ties (of every type, NaN, -0.0 and 0.0
among doubles, nulls); ``mode(col)``, whose ties Spark breaks by its hash map's order (docs/spark-queries.md), over
``w``, whose greatest count is unique in every window and batch.

``percentile_approx`` of every type it takes, scalar and array percentages: each batch is one file, which Spark reads
as one partition, so it builds one partial buffer per group and batch, as misa does: small accuracies (4, 5: the
sketch compresses from 3 values on) give Spark's values exactly over tumbling windows and none, NaN among them. Over
sliding windows misa merges panes' sketches where Spark keeps one per window: there the accuracy is the default
(every sample kept exactly) and the doubles have no NaN (Spark's merge of sketches drops samples next to a NaN)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from scenario_helpers import assert_sparks_rows

from verify.differential.scenarios import Round

SCHEMA = "k string, t bigint, v bigint, x double, s string, d decimal(10,2), b boolean, day string, w bigint"
NAN = math.nan


def row(k: str, t: float, v: Any = None, x: Any = None, s: Any = None, d: Any = None, **more: Any) -> dict:
    """One input row of key ``k`` at ``t`` seconds (``day``: a date's text; ``b``, ``w``: a boolean, an integer)."""
    return {"k": k, "t": int(t * 1000), "v": v, "x": x, "s": s, "d": d, **more}


# p's values tie within a window (NaN twice, 1.0 twice, -0.0 and 0.0 as one value twice; "a" and "b"; ...), q's are
# null at first; the restart (round 2) adds rows that change the counts of windows kept in the state
ROUNDS = (
    Round(
        files=(
            (
                "a/0.json",
                (
                    row("p", 1, 3, NAN, "b", 2.5, b=True, day="2024-03-02", w=5),
                    row("p", 2, 1, 1.0, "a", 1.25, b=False, day="2024-03-01", w=5),
                    row("p", 3, 3, -0.0, "b", 2.5, b=True, day="2024-03-02", w=8),
                    row("q", 6),
                    row("q", 7, 7, 0.0, "z", b=None, w=9),
                ),
            ),
            (
                "a/1.json",
                (
                    row("p", 4, 1, NAN, "a", 1.25, b=False, day="2024-03-01", w=5),
                    row("p", 8, 2, 1.0, "c", 0.5, b=False, day="2024-02-29", w=5),
                    row("p", 4.5, 2, 0.0, "c", 0.5, b=True, day="2024-02-29", w=5),
                    row("q", 9, 7, 1.0, "y", 3.0, b=True, day="2024-01-01", w=9),
                ),
            ),
        )
    ),
    Round(
        files=(
            (
                "a/2.json",
                (
                    row("p", 11, 3, -0.0, "a", 2.5, b=True, day="2024-03-02", w=5),
                    row("p", 12, 2, NAN, "c", 0.5, b=True, day="2024-02-29", w=5),
                    row("p", 13, 9, 9.0, "d", 9.0, b=None, w=5),
                    row("q", 14, 8, 2.0, "y", 3.0, b=False, day="2024-01-02", w=9),
                ),
            ),
        )
    ),
)
DETERMINISTIC = ("v", "x", "s", "d", "b", "day", "ts")  # of every type, ties to the lowest


def stream(spark: SparkSession, inputs: Path, delay: str = "1 hour") -> DataFrame:
    """The JSON files of ``inputs/a``, one per batch: ``t`` the event time (watermarked with ``delay``), ``day`` a
    date, ``ts`` a timestamp."""
    rows = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(inputs / "a"))
    rows = rows.withColumn("ts", F.timestamp_seconds(F.col("v") * 3600)).withColumn("day", F.to_date("day"))
    return rows.withColumn("t", F.timestamp_millis("t")).withWatermark("t", delay)


def modes() -> list[Column]:
    """``mode(col, true)`` of every type, ``mode() WITHIN GROUP (ORDER BY ... DESC)``, ``mode(w)`` (no ties)."""
    lowest = [F.mode(c, True).alias(f"lowest_{c}") for c in DETERMINISTIC]
    highest = [F.expr(f"mode() WITHIN GROUP (ORDER BY {c} DESC)").alias(f"highest_{c}") for c in ("x", "s", "v")]
    return [*lowest, *highest, F.mode("w").alias("any_w")]


def percentiles(sliding: bool) -> list[Column]:
    """percentile_approx of integers, doubles, decimals, dates and timestamps (accuracies 4 and 5; over sliding
    windows the default, and doubles without NaN)."""
    low, lower = (10_000, 10_000) if sliding else (4, 5)
    doubles = F.col("v") / 2 if sliding else F.col("x")
    return [
        F.percentile_approx("v", 0.5, low).alias("median_v"),
        F.percentile_approx(doubles, [0.1, 0.5, 0.9], lower).alias("deciles_x"),
        F.approx_percentile("d", 0.25, low).alias("quartile_d"),
        F.percentile_approx("day", [0.75], lower).alias("day_p"),
        F.percentile_approx("ts", 0.4, low).alias("ts_p"),
        F.percentile_approx(F.col("v").cast("int") * 2, [0.0, 1.0]).alias("ends"),
    ]


SHAPES = {  # append: a 2 s delay, so that round 2's rows (13 s) close the first window
    "sliding windows, update": (lambda rows: rows.groupBy(F.window("t", "10 seconds", "5 seconds"), "k"), "update"),
    "sliding windows, complete": (lambda rows: rows.groupBy(F.window("t", "10 seconds", "3 seconds"), "k"), "complete"),
    "tumbling windows, append": (lambda rows: rows.groupBy(F.window("t", "10 seconds"), "k"), "append"),
    "tumbling windows, complete": (lambda rows: rows.groupBy(F.window("t", "10 seconds"), "k"), "complete"),
    "no window, update": (lambda rows: rows.groupBy("k"), "update"),
}


@pytest.mark.slow  # 7 to 30 s each: make test runs both through the operator (test_more_aggregates.py)
@pytest.mark.parametrize("name", list(SHAPES))
def test_mode_and_percentile_approx_give_sparks_rows_and_types(spark, tmp_path, name):
    """Sliding windows: each pane keeps its counts per value and its sketch, a window's are its panes' merged."""
    group, mode = SHAPES[name]
    delay = "2 seconds" if mode == "append" else "1 hour"
    aggregates = [*modes(), *percentiles(sliding="sliding" in name)]
    build = lambda spark, inputs: group(stream(spark, inputs, delay)).agg(*aggregates)  # noqa: E731
    assert_sparks_rows(spark, name, build, mode, ROUNDS, tmp_path / "run")


def exact_percentiles() -> list[Column]:
    """percentile and median of integers, doubles (NaN, -0.0 and 0.0 among them) and decimals, scalar and array
    percentages; percentile_cont and percentile_disc, ascending and descending."""
    return [
        F.percentile("v", 0.3).alias("p30_v"),
        F.median("x").alias("median_x"),
        F.percentile("d", [0.0, 0.25, 0.5, 1.0]).alias("quartiles_d"),
        F.expr("percentile_cont(0.4) WITHIN GROUP (ORDER BY x DESC)").alias("cont_desc_x"),
        F.expr("percentile_disc(0.6) WITHIN GROUP (ORDER BY v)").alias("disc_v"),
        F.expr("percentile_disc(array(0.1, 0.9)) WITHIN GROUP (ORDER BY d DESC)").alias("disc_desc_d"),
        F.percentile(F.col("w") / 3, 0.75).alias("p75_w"),
    ]


@pytest.mark.slow  # make test's time: make test checks Spark's own values (operators/test_percentile.py)
@pytest.mark.parametrize("name", list(SHAPES))
def test_exact_percentiles_give_sparks_rows_and_types(spark, tmp_path, name):
    """Refused before ("misa does not compute percentile(v, 0.3, 1) yet"). Each group's counts per value, merged across
    batches and panes, sorted in Spark's order and interpolated as Spark's Percentile does."""
    group, mode = SHAPES[name]
    delay = "2 seconds" if mode == "append" else "1 hour"
    build = lambda spark, inputs: group(stream(spark, inputs, delay)).agg(*exact_percentiles())  # noqa: E731
    assert_sparks_rows(spark, name, build, mode, ROUNDS, tmp_path / "run")
