"""Spark's arithmetic in misa's Aggregation: exact integers, overflow, output types, NaN order, refused inputs.

Each batch runs through Spark (the deltas) and the driver's merge; plain Spark over all rows is the reference.
"""

from __future__ import annotations

import math
from datetime import date, datetime, timezone

import numpy as np
import pyarrow as pa
import pytest
from aggregation_runs import assert_same, assert_same_types, run_misa, run_native
from pyspark.errors import ArithmeticException

from misa.exceptions import AggregateOverflowError
from misa.operators.aggregation import KEY_LAYOUT, PANE_LAYOUT, Agg, Aggregation
from misa.operators.lookup_aggregation import LookupAggregation
from misa.state.store import StateStore
from misa.state.view import StateView

BIG = 2**53 + 1  # the first integer a double cannot hold
LONG_MAX = 2**63 - 1
S = 1_000_000


@pytest.fixture
def view(config, tmp_path):
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        yield StateView(store)


def check_against_native(spark, op: Aggregation, schema: str, batches: list[list[tuple]], view: StateView):
    """misa's final rows and output types over ``batches`` are plain Spark's over all their rows."""
    got, got_schema = run_misa(spark, op, schema, batches, view)
    expected, expected_schema = run_native(spark, op, schema, [r for b in batches for r in b])
    assert_same(got, expected)
    assert_same_types(got_schema, expected_schema)
    return got


def test_integer_sum_min_max_stay_exact_bigints_across_batches(spark, view):
    aggs = [Agg("s", "sum", "x"), Agg("lo", "min", "x"), Agg("hi", "max", "x"), Agg("si", "sum", "i")]
    aggs += [Agg("li", "min", "i"), Agg("n", "count", "x"), Agg("a", "avg", "i")]
    op = Aggregation(["g"], aggs)
    batches = [[(1, BIG, 7), (2, -BIG, None)], [(1, 1, 2**31 - 1), (2, None, None), (1, BIG, -5)]]
    got = check_against_native(spark, op, "g long, x long, i int", batches, view)
    assert (got[(1,)]["s"], got[(1,)]["lo"], got[(1,)]["hi"]) == (2 * BIG + 1, 1, BIG)
    assert (got[(1,)]["si"], got[(2,)]["s"], got[(2,)]["li"], got[(2,)]["n"]) == (2**31 + 1, -BIG, None, 1)


def test_integer_sums_past_the_long_range_wrap_around_as_sparks_without_ansi(spark, view, session_conf):
    session_conf({"spark.sql.ansi.enabled": "false"})
    op = Aggregation(["g"], [Agg("s", "sum", "x")])
    got = check_against_native(spark, op, "g long, x long", [[(1, LONG_MAX)], [(1, 10), (1, LONG_MAX - 3)]], view)
    assert got[(1,)]["s"] == (2 * LONG_MAX + 7 + 2**63) % 2**64 - 2**63


def test_integer_sums_past_the_long_range_fail_as_sparks_under_ansi(spark, view, session_conf):
    session_conf({"spark.sql.ansi.enabled": "true"})
    op = Aggregation(["g"], [Agg("s", "sum", "x")])
    rows = [(1, 2**62), (1, 2**62)]
    with pytest.raises(ArithmeticException, match="ARITHMETIC_OVERFLOW"):
        run_native(spark, op, "g long, x long", rows)
    with pytest.raises(AggregateOverflowError, match=r"ARITHMETIC_OVERFLOW.*sum s.*spark.sql.ansi.enabled=false"):
        run_misa(spark, op, "g long, x long", [rows[:1], rows[1:]], view)


def test_min_and_max_keep_the_input_type(spark, view):
    """Timestamps stay timestamps (not epoch seconds), dates dates, floats floats, small integers small;
    count takes any column (here a string)."""
    t0, t1 = datetime(2024, 5, 1, 12, 0, 0, 123456, timezone.utc), datetime(1999, 1, 1, tzinfo=timezone.utc)
    aggs = [Agg("t_lo", "min", "t"), Agg("t_hi", "max", "t"), Agg("d_lo", "min", "d"), Agg("f_hi", "max", "f")]
    aggs += [Agg("h_lo", "min", "h"), Agg("f_sum", "sum", "f"), Agg("f_avg", "avg", "f"), Agg("n", "count", "s")]
    op = Aggregation(["g"], aggs)
    schema = "g long, t timestamp, d date, f float, h smallint, s string"
    batches = [[(1, t0, date(2020, 2, 29), 1.5, 3, "a")], [(1, t1, date(1970, 1, 1), -0.25, -7, "b"), (1, *[None] * 5)]]
    got = check_against_native(spark, op, schema, batches, view)
    assert (got[(1,)]["t_lo"], got[(1,)]["t_hi"], got[(1,)]["d_lo"]) == (t1, t0, date(1970, 1, 1))


def test_nan_and_numbers_of_one_group_in_different_batches_order_as_spark(spark, view):
    """Spark ranks NaN above every double: min skips NaN unless all are NaN; max is NaN if any is."""
    op = Aggregation(["g"], [Agg("lo", "min", "x"), Agg("hi", "max", "x"), Agg("s", "sum", "x")])
    nan = float("nan")
    batches = [[(1, nan), (2, 2.0), (3, nan)], [(1, 2.0), (2, nan), (1, -math.inf), (3, nan), (4, math.inf)]]
    got = check_against_native(spark, op, "g long, x double", batches, view)
    assert got[(1,)]["lo"] == -math.inf and got[(2,)]["lo"] == 2.0 and math.isnan(got[(2,)]["hi"])
    assert math.isnan(got[(3,)]["lo"]) and got[(4,)]["lo"] == math.inf


def test_nan_and_numbers_in_different_panes_of_one_batch_order_as_spark(spark, view):
    op = Aggregation(
        ["g"],
        [Agg("lo", "min", "x"), Agg("hi", "max", "x")],
        event_time="t",
        window="10 seconds",
        slide="5 seconds",
        watermark_delay="1 hour",
    )
    at = [datetime.fromtimestamp(s, timezone.utc) for s in (1, 6, 12)]
    rows = [(1, at[0], float("nan")), (1, at[1], 2.0), (1, at[2], 1.0), (2, at[0], 3.0), (2, at[1], float("nan"))]
    got = check_against_native(spark, op, "g long, t timestamp, x double", [rows], view)
    window = (datetime.fromtimestamp(0, timezone.utc), datetime.fromtimestamp(10, timezone.utc))
    assert got[(*window, 1)]["lo"] == 2.0 and got[(*window, 2)]["lo"] == 3.0 and math.isnan(got[(*window, 2)]["hi"])


@pytest.mark.parametrize(
    "agg,schema,message",
    [
        (Agg("lo", "min", "x"), "g long, x array<int>", r"aggregate lo: min of column x of type array<int> is not"),
        (Agg("s", "sum", "x"), "g long, x string", r"sum of column x of type string.*cast the column"),
        (Agg("a", "avg", "x"), "g long, x boolean", r"avg of column x of type boolean.*double, decimal only"),
        (Agg("hi", "max", "x"), "g long, x map<int,int>", r"max of column x of type map<int,int>.*string, boolean"),
    ],
)
def test_inputs_misa_cannot_aggregate_exactly_are_refused_before_spark_runs(spark, agg, schema, message):
    op = Aggregation(["g"], [agg])
    with pytest.raises(TypeError, match=message):
        op.deltas(spark.createDataFrame([], schema))


@pytest.mark.parametrize(
    "kwargs,clashes",
    [
        ({"group_by": ["g"], "aggs": [Agg("g", "sum", "x")]}, ["g"]),
        ({"group_by": ["g"], "aggs": [Agg("n", "sum", "x"), Agg("n", "max", "x")]}, ["n"]),
        ({"group_by": ["g"], "aggs": [Agg("window_start", "min", "t")], "window": "10s"}, ["window_start"]),
        ({"group_by": ["window_end"], "aggs": [Agg("n", "count", "x")], "window": "10s"}, ["window_end"]),
    ],
)
def test_output_column_names_that_clash_are_refused_when_built(kwargs, clashes):
    with pytest.raises(ValueError, match=rf"aggregation: output column names \{clashes!r}\ clash"):
        Aggregation(event_time="t", **kwargs)


def test_a_window_column_name_is_free_without_windows():
    Aggregation(["g"], [Agg("window_start", "min", "t")])


@pytest.mark.parametrize(
    "kwargs,layout",
    [({}, KEY_LAYOUT), ({"window": "10s"}, KEY_LAYOUT), ({"window": "10s", "slide": "5s"}, PANE_LAYOUT)],
)
def test_a_version_of_an_earlier_value_layout_is_refused_at_restore(kwargs, layout):
    op = Aggregation(["g"], [Agg("s", "sum", "x")], event_time="t", **kwargs)
    for old in [{"watermark_us": 5, "max_event_us": 9}, {"watermark_us": 5, "layout": "panes-v1"}]:
        with pytest.raises(ValueError, match=r"has layout .*new checkpoint location"):
            op.restore(old)
    op.restore(op.metadata())  # its own, and a fresh start, load
    op.restore({})
    assert op.metadata()["layout"] == layout


def deltas(values: pa.Array, keys: list[int]) -> pa.Table:
    """Unwindowed deltas of one aggregate: group g, partial value ``values``, one input row each."""
    ones = pa.array([1] * len(keys), pa.int64())
    return pa.table({"g": pa.array(keys, pa.int64()), "_rows": ones, "_v0": values, "_c0": ones})


def test_a_changed_input_type_is_refused_not_misread(view):
    op = Aggregation(["g"], [Agg("s", "sum", "x")])
    op.apply(deltas(pa.array([BIG]), [1]), view)
    restarted = Aggregation(["g"], [Agg("s", "sum", "x")])
    restarted.restore(op.metadata())
    with pytest.raises(ValueError, match=r"aggregate values as \['int64'\].*\['float64'\].*changed type"):
        restarted.apply(deltas(pa.array([1.5]), [1]), view)


def test_rows_of_one_key_in_one_batch_fold_together(view):
    """A lookup aggregation hands over one row per looked-up key: rows of keys with one value share a state."""
    op = Aggregation(["g"], [Agg("lo", "min", "x")])
    result = op.apply(deltas(pa.array([np.nan, 2.0, 5.0, np.nan]), [1, 1, 2, 1]), view)
    assert sorted(result.output.to_pylist(), key=lambda r: r["g"]) == [{"g": 1, "lo": 2.0}, {"g": 2, "lo": 5.0}]
    assert result.state_reads == 2


def test_lookup_aggregation_takes_its_aggregations_input_checks_and_ansi_mode(spark, view, session_conf):
    session_conf({"spark.sql.ansi.enabled": "true"})
    op = LookupAggregation("ad", Aggregation(["campaign"], [Agg("s", "sum", "x")]), lambda keys: ["c"] * len(keys))
    batch = spark.createDataFrame([("a", 2**62), ("b", 2**62)], "ad string, x long")
    deltas_ = op.deltas(batch).toArrow()
    with pytest.raises(AggregateOverflowError):  # two ads of one campaign overflow together
        op.apply(deltas_, view)
    with pytest.raises(TypeError, match="min of column x of type array<int>"):
        LookupAggregation("ad", Aggregation(["c"], [Agg("m", "min", "x")]), list).deltas(
            spark.createDataFrame([], "ad string, x array<int>")
        )
