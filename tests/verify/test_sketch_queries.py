"""Spark's sketch aggregates (issue 63, item 5) written in Spark's API, through misa.from_query and through plain
Spark, compared batch id by batch id over random rows with restarts (:func:`verify.differential.runner.run_case`;
a sketch compared by what it holds, :mod:`verify.differential.sketch_values`): tumbling, sliding and session windows
and none, every output mode, sizes small enough to take HyperLogLog to its HLL mode, Theta to estimation and KLL to
compaction, the unions of a window's sketches in a second window, and the forms misa refuses at start."""

from __future__ import annotations

import pytest

from verify.differential.cases import Query, Settings
from verify.differential.queries import query_case_of
from verify.differential.runner import run_case

SKETCHES_OF_INTEGERS = ("hll_sketch_agg", "theta_sketch_agg", "count_min_sketch", "kll_sketch_agg_bigint", "count")
CASES = {
    "tumbling windows, update: hll, theta, count-min and KLL sketches of integers": Query(
        "tumbling", {"k0": "string"}, SKETCHES_OF_INTEGERS, "bigint", 10, 10, 2
    ),
    "sliding windows, update: small theta, KLL sketches of doubles and floats": Query(
        "sliding",
        {"k0": "int"},
        ("theta_sketch_agg_5", "kll_sketch_agg_double", "kll_sketch_agg_float"),
        "double",
        10,
        5,
        2,
    ),
    "session windows, append: small hll, count-min and theta sketches of strings": Query(
        "session",
        {"k0": "string"},
        ("hll_sketch_agg_4", "count_min_sketch", "theta_sketch_agg"),
        "string",
        5,
        delay_s=2,
        output_mode="append",
    ),
    "no window, complete: compacting KLL, small hll and theta sketches of integers": Query(
        "global",
        {"k0": "bigint"},
        ("kll_sketch_agg_bigint_8", "hll_sketch_agg_4", "theta_sketch_agg_5"),
        "bigint",
        output_mode="complete",
    ),
    "tumbling windows, append, then their unions, intersections and merges per window of window_time": Query(
        "tumbling",
        {"k0": "string"},
        ("hll_sketch_agg_4", "theta_sketch_agg", "theta_sketch_agg_5", "kll_sketch_agg_bigint", "count"),
        "bigint",
        10,
        delay_s=2,
        output_mode="append",
        chain="window",
    ),
    "session windows, append: bitmaps of the bit positions and bytes of integers": Query(
        "session",
        {"k0": "string"},
        ("bitmap_construct_agg", "bitmap_or_agg", "bitmap_and_agg"),
        "bigint",
        5,
        delay_s=2,
        output_mode="append",
    ),
    "tumbling windows, update: theta of lgNomEntries 4, refused at start": Query(
        "tumbling", {"k0": "string"}, ("theta_sketch_agg_4",), "bigint", 10, 10, 2
    ),
    "tumbling windows, update: tuple sketches of strings, sums and maximums": Query(
        "tumbling", {"k0": "int"}, ("tuple_sketch_agg_double", "tuple_sketch_agg_integer_max"), "string", 10, 10, 2
    ),
    "sliding windows, update: a small tuple sketch of minimums of doubles": Query(
        "sliding", {"k0": "string"}, ("tuple_sketch_agg_double_min_5", "count"), "double", 10, 5, 2
    ),
    "tumbling windows, append, then unions and intersections of tuple sketches per window_time window": Query(
        "tumbling",
        {"k0": "string"},
        ("tuple_sketch_agg_double", "tuple_sketch_agg_integer_max", "tuple_sketch_agg_double_min_5"),
        "double",
        10,
        delay_s=2,
        output_mode="append",
        chain="window",
    ),
}
IN_MAKE_TEST = {"tumbling windows, update: hll, theta, count-min and KLL sketches of integers"}  # suite time


@pytest.mark.parametrize(
    "name", [name if name in IN_MAKE_TEST else pytest.param(name, marks=pytest.mark.slow) for name in CASES]
)
def test_each_sketch_gives_sparks_rows_and_types(spark, tmp_path, name):
    case = query_case_of(CASES[name], Settings(), seed=63)
    mismatch = run_case(spark, case, tmp_path / "run")
    assert mismatch is None, f"{case.describe()}\n{mismatch}"
