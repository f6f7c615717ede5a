"""count_if, bool_and/bool_or, max_by/min_by, skewness/kurtosis, covar_pop/covar_samp/corr through misa's Aggregation,
batch by batch, give plain Spark's rows and types over all the rows at once (issue 63, item 5).

The moments are compared to 12 significant digits (Spark's own merge order changes their last bits); the rest
exactly. max_by/min_by's orderings are distinct per group here (ties are Spark's reading order: docs).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from aggregation_runs import assert_same_types, by_key, run_misa

from misa.operators.aggregation import Agg, Aggregation
from misa.operators.percentile_approx import Percentiles
from misa.state.store import StateStore
from misa.state.view import StateView

SCHEMA = "g long, t timestamp, x double, y long, b boolean, s string"
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
VECTORIZED = [
    Agg("n_if", "count_if", "b"),
    Agg("all", "bool_and", "b"),
    Agg("any", "bool_or", "b"),
    Agg("skew", "skewness", "x"),
    Agg("kurt", "kurtosis", "y"),
    Agg("cov_p", "covar_pop", "x", "y"),
    Agg("cov_s", "covar_samp", "y", "x"),
    Agg("r", "corr", "x", "y"),
]
OBJECTS = [Agg("s_max_y", "max_by", "s", "y"), Agg("x_min_y", "min_by", "x", "y")]
ORDERED = [  # of the rows' order (first/last over numbers and booleans: Spark's sort aggregation reorders strings)
    Agg("x_first", "first", "x"),
    Agg("y_last", "last", "y"),
    Agg("b_first", "first_ignore_nulls", "b"),
    Agg("x_last", "last_ignore_nulls", "x"),
    Agg("s_list", "collect_list", "s"),
    Agg("y_set", "collect_set", "y"),
]
# mode: ties to the lowest value (Spark's mode(col, true)), or the highest (WITHIN GROUP (ORDER BY col DESC))
MODES = [Agg("x_mode", "mode", "x"), Agg("s_mode", "mode", "s"), Agg("y_top", "mode_highest", "y")]
MODES += [Agg("b_mode", "mode", "b"), Agg("t_mode", "mode_highest", "t")]
# percentile_approx below accuracy / 2 values per window: every sample kept, Spark's result whatever its merges
PERCENTILES = [
    Agg("x_median", "percentile_approx", "x", percentiles=Percentiles((0.5,), accuracy=20)),
    Agg("y_quartiles", "percentile_approx", "y", percentiles=Percentiles((0.75, 0.1, 0.25, 1.0), True, 30)),
    Agg("t_p", "percentile_approx", "t", percentiles=Percentiles((0.3,))),
]
SHAPES = {
    "continuous": {},
    "tumbling": {"event_time": "t", "window": "10 seconds", "watermark_delay": "1 hour"},
    "sliding": {"event_time": "t", "window": "10 seconds", "slide": "4 seconds", "watermark_delay": "1 hour"},
}


def row(g: int | None, second: float, x: float | None, y: int | None, b: bool | None, s: str | None) -> tuple:
    return (g, EPOCH + timedelta(seconds=second), x, y, b, s)


# groups of one row, of equal values (skewness null), a constant column (corr null), nulls on either side, NaN
BATCHES = [
    [
        row(1, 1, 1.5, 3, True, "a"),
        row(1, 2, 2.25, 7, None, "b"),
        row(2, 3, 5.0, 1, False, None),
        row(3, 4, 2.0, 4, True, "c"),
        row(None, 5, None, 2, None, "d"),
    ],
    [
        row(1, 6, -4.0, 11, False, "e"),
        row(2, 12, 5.0, 2, False, "f"),
        row(3, 4.5, 2.0, 5, True, None),
        row(4, 7, math.nan, 8, True, "g"),
        row(1, 15, 0.5, None, True, "h"),
    ],
    [
        row(1, 8, 9.0, -6, True, "i"),
        row(2, 13, 5.0, 9, None, "j"),
        row(4, 9, 1.0, 6, None, None),
        row(3, 5, 2.0, 6, True, "k"),
        row(1, 16, 7.25, 0, False, "l"),
    ],
]


def spark_function(agg: Agg):
    from pyspark.sql import functions as F

    if agg.percentiles is not None:
        p = agg.percentiles
        percentages = list(p.percentages) if p.array else p.percentages[0]
        return F.percentile_approx(agg.column, percentages, p.accuracy).alias(agg.name)
    if agg.function == "mode":
        return F.mode(agg.column, True).alias(agg.name)
    if agg.function == "mode_highest":
        return F.expr(f"mode() WITHIN GROUP (ORDER BY {agg.column} DESC)").alias(agg.name)
    if agg.function.endswith("_ignore_nulls"):
        return getattr(F, agg.function.removesuffix("_ignore_nulls"))(agg.column, ignorenulls=True).alias(agg.name)
    function = getattr(F, agg.function)
    return (function(agg.column, agg.other) if agg.other else function(agg.column)).alias(agg.name)


def native(spark, op: Aggregation, rows: list[tuple]) -> tuple[dict, Any]:
    """Plain Spark's aggregation of all rows at once (windows as the operator's window_start/window_end)."""
    from pyspark.sql import functions as F

    events = spark.createDataFrame(rows, SCHEMA)
    aggregates = [spark_function(a) for a in op.aggs]
    if not op.window:
        table = events.groupBy(*op.group_by).agg(*aggregates).toArrow()
    else:
        window = F.window(op.event_time, op.window, op.slide or op.window)
        grouped = events.groupBy(window, *op.group_by).agg(*aggregates)
        starts = [F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end")]
        table = grouped.select(*starts, *op.group_by, *[a.name for a in op.aggs]).toArrow()
    return by_key(op, table.to_pylist()), table.schema


def same(got: Any, expected: Any, unordered: bool = False) -> bool:
    """Equal (floats to 12 digits, NaN to NaN; ``unordered``: lists as sorted, a collect_set's order is Spark's hash
    set's)."""
    if unordered:
        return sorted(got) == sorted(expected)
    if isinstance(expected, float) and isinstance(got, float):
        if math.isnan(expected) or math.isnan(got):
            return math.isnan(expected) and math.isnan(got)
        return math.isclose(got, expected, rel_tol=1e-12, abs_tol=1e-12)
    return got == expected


def check(spark, tmp_path, aggs: list[Agg], shape: str) -> None:
    op = Aggregation(["g"], aggs, **SHAPES[shape])
    with _store(tmp_path) as store:
        got, got_schema = run_misa(spark, op, SCHEMA, BATCHES, StateView(store))
    expected, expected_schema = native(spark, op, [r for b in BATCHES for r in b])
    assert got.keys() == expected.keys()
    sets = {a.name for a in aggs if a.function == "collect_set"}
    for key, values in expected.items():
        for column, value in values.items():
            assert same(got[key][column], value, column in sets), (key, column, got[key][column], value)
    assert_same_types(got_schema, expected_schema)


def _store(tmp_path):
    from misa.config import MisaConfig

    config = MisaConfig.from_mapping({"spark.misa.state.shards": "2"})
    return StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}")


def test_the_new_vectorized_functions_over_tumbling_windows_give_sparks_rows_and_types(spark, tmp_path):
    check(spark, tmp_path, VECTORIZED, "tumbling")


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["continuous", "sliding"])
def test_the_new_vectorized_functions_give_sparks_rows_and_types(spark, tmp_path, shape):
    check(spark, tmp_path, VECTORIZED, shape)


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["continuous", "tumbling"])
def test_max_by_and_min_by_give_sparks_rows_and_types(spark, tmp_path, shape):
    check(spark, tmp_path, OBJECTS, shape)


def test_max_by_ties_across_batches_take_the_later_value_as_spark(spark, tmp_path):
    """Each batch's value at the tied ordering differs: Spark's streaming merge takes the later batch's (found by
    the differential fuzz, seed 14: Spark's rows keep the later value)."""
    op = Aggregation(["g"], [Agg("v", "max_by", "s", "y"), Agg("w", "min_by", "s", "y")])
    batches = [[row(1, 1, 0.0, 5, None, "a")], [row(1, 2, 0.0, 5, None, "b")], [row(1, 3, 0.0, None, None, "c")]]
    with _store(tmp_path) as store:
        got, _ = run_misa(spark, op, SCHEMA, batches, StateView(store))
    assert got[(1,)] == {"g": 1, "v": "b", "w": "b"}


def test_object_aggregates_over_sliding_windows_give_sparks_rows_in_its_order(spark, tmp_path):
    """Their states are kept per pane and combined into each window's (refused before: issue 63, item 5): max_by's and
    min_by's, and first's, last's and collect's values stamped with their batch and place, a window's in Spark's order
    of its rows."""
    check(spark, tmp_path, OBJECTS + ORDERED, "sliding")


def test_mode_and_percentile_approx_over_sliding_windows_give_sparks_rows(spark, tmp_path):
    """mode's counts per value are kept per pane and added into each window's (refused before: issue 63, item 5); on
    ties the lowest value (the highest: WITHIN GROUP (ORDER BY col DESC)). percentile_approx's sketches are kept per
    pane and merged into each window's (test_quantiles.py checks the sketch itself). From Spark's API, with NaN and
    -0.0: tests/verify/test_mode_percentile_queries.py."""
    check(spark, tmp_path, MODES + PERCENTILES, "sliding")
