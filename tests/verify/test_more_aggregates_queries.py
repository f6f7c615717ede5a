"""Issue 63's aggregate functions (and bit_and, bit_or, bit_xor, try_sum, try_avg, product, regr_*, listagg, the
sketches and bitmaps, collect_union, max_by/min_by of k) written in Spark's API, through misa.from_query and through
plain Spark, compared batch id by batch id over random rows with restarts (:func:`verify.differential.runner.run_case`;
a sketch compared by what it holds, :mod:`verify.differential.sketch_values`): every output mode, tumbling, sliding
and session windows and none; sketches at sizes small enough to take HyperLogLog to its HLL mode, Theta to estimation
and KLL to compaction, their unions in a second window, and the forms misa refuses at start."""

from __future__ import annotations

import pytest

from verify.differential.cases import Query, Settings
from verify.differential.queries import query_case_of
from verify.differential.runner import run_case

SKETCHES_OF_INTEGERS = ("hll_sketch_agg", "theta_sketch_agg", "count_min_sketch", "kll_sketch_agg_bigint", "count")

CASES = {
    "tumbling windows, update: count_if, bool_and, max_by, skewness, corr of integers": Query(
        "tumbling", {"k0": "string"}, ("count_if", "bool_and", "max_by", "skewness", "corr"), "bigint", 10, 10, 2
    ),
    "tumbling windows, append: min_by, kurtosis, covar_samp, any_value of doubles": Query(
        "tumbling",
        {"k0": "int"},
        ("min_by", "kurtosis", "covar_samp", "any_value"),
        "double",
        10,
        delay_s=2,
        output_mode="append",
    ),
    "sliding windows, update: count_if, bool_or, skewness, covar_pop of doubles": Query(
        "sliding", {"k0": "bigint"}, ("count_if", "bool_or", "skewness", "covar_pop"), "double", 10, 5, 2
    ),
    "sliding windows, complete: corr, kurtosis, bool_and of integers": Query(
        "sliding", {"k0": "string"}, ("corr", "kurtosis", "bool_and"), "bigint", 10, 5, 2, "complete"
    ),
    "no window, complete: covar_samp, max_by, count_if of decimals": Query(
        "global", {"k0": "bigint"}, ("covar_samp", "max_by", "count_if"), "decimal(12,2)", output_mode="complete"
    ),
    "session windows, append: skewness, min_by, bool_or of integers": Query(
        "session", {"k0": "string"}, ("skewness", "min_by", "bool_or"), "bigint", 5, delay_s=2, output_mode="append"
    ),
    "tumbling windows, update: bit_and, bit_or, bit_xor of integers": Query(
        "tumbling", {"k0": "int"}, ("bit_and", "bit_or", "bit_xor", "count"), "bigint", 10, 10, 2
    ),
    "sliding windows, append: bit_xor, bit_and of integers": Query(
        "sliding", {"k0": "string"}, ("bit_xor", "bit_and"), "bigint", 10, 5, 2, "append"
    ),
    "session windows, append: bit_or, bit_xor of integers": Query(
        "session", {"k0": "string"}, ("bit_or", "bit_xor"), "bigint", 5, delay_s=2, output_mode="append"
    ),
    "tumbling windows, append: try_avg of integers": Query(
        "tumbling", {"k0": "string"}, ("try_avg", "sum"), "bigint", 10, delay_s=2, output_mode="append"
    ),
    "sliding windows, update: try_sum, try_avg of doubles": Query(
        "sliding", {"k0": "int"}, ("try_sum", "try_avg"), "double", 10, 5, 2
    ),
    "sliding windows, append: product of doubles": Query(
        "sliding", {"k0": "string"}, ("product", "count"), "double", 10, 5, 2, "append"
    ),
    "session windows, append: product of decimals": Query(
        "session", {"k0": "int"}, ("product", "sum"), "decimal(12,2)", 5, delay_s=2, output_mode="append"
    ),
    "tumbling windows, update: regr_count, regr_avgx, regr_slope, regr_r2 of integers": Query(
        "tumbling", {"k0": "string"}, ("regr_count", "regr_avgx", "regr_slope", "regr_r2"), "bigint", 10, 10, 2
    ),
    "sliding windows, append: regr_sxx, regr_syy, regr_intercept of doubles": Query(
        "sliding", {"k0": "int"}, ("regr_sxx", "regr_syy", "regr_intercept"), "double", 10, 5, 2, "append"
    ),
    "session windows, append: regr_sxy, regr_avgy of decimals": Query(
        "session", {"k0": "string"}, ("regr_sxy", "regr_avgy"), "decimal(12,2)", 5, delay_s=2, output_mode="append"
    ),
    "no window, complete: bit_and, bit_or of integers": Query(
        "global", {"k0": "bigint"}, ("bit_and", "bit_or"), "bigint", output_mode="complete"
    ),
    "tumbling windows, update: listagg, string_agg of integers": Query(
        "tumbling", {"k0": "string"}, ("listagg", "string_agg", "count"), "bigint", 10, 10, 2
    ),
    "sliding windows, append: string_agg of strings": Query(
        "sliding", {"k0": "int"}, ("string_agg", "listagg"), "string", 10, 5, 2, "append"
    ),
    "session windows, append: listagg of doubles": Query(
        "session", {"k0": "string"}, ("listagg", "sum"), "double", 5, delay_s=2, output_mode="append"
    ),
    "no window, complete: string_agg of decimals": Query(
        "global", {"k0": "bigint"}, ("string_agg",), "decimal(12,2)", output_mode="complete"
    ),
    "tumbling windows, update: listagg ordered WITHIN GROUP by the value, by the event time of integers": Query(
        "tumbling", {"k0": "string"}, ("listagg_ordered", "listagg_by_time", "count"), "bigint", 10, 10, 2
    ),
    "sliding windows, append: listagg ordered by the event time of doubles": Query(
        "sliding", {"k0": "int"}, ("listagg_by_time", "sum"), "double", 10, 5, 2, "append"
    ),
    "session windows, append: listagg ordered by the value of strings": Query(
        "session", {"k0": "string"}, ("listagg_ordered", "count"), "string", 5, delay_s=2, output_mode="append"
    ),
    "tumbling windows, update: histogram_numeric of integers, 3 bins": Query(
        "tumbling", {"k0": "string"}, ("histogram_3", "count"), "bigint", 10, 10, 2
    ),
    "no window, complete: histogram_numeric of doubles, 20 bins": Query(
        "global", {"k0": "int"}, ("histogram_20", "sum"), "double", output_mode="complete"
    ),
    "tumbling windows, append: histogram_numeric of doubles, 3 bins": Query(
        "tumbling", {"k0": "int"}, ("histogram_3",), "double", 10, delay_s=2, output_mode="append"
    ),
    "tumbling windows, update: collect_union of characters, of values and nulls respecting nulls": Query(
        "tumbling", {"k0": "string"}, ("collect_union", "collect_union_nulls", "count"), "double", 10, 10, 2
    ),
    "sliding windows, append: collect_union of strings respecting nulls": Query(
        "sliding", {"k0": "int"}, ("collect_union_nulls",), "string", 10, 5, 2, "append"
    ),
    "tumbling windows, update: max_by(v, y, 2) and min_by(v, y, 3) of strings": Query(
        "tumbling", {"k0": "int"}, ("max_by_k", "min_by_k", "count"), "string", 10, 10, 2
    ),
    "sliding windows, update: max_by(v, y, 2) of doubles": Query(
        "sliding", {"k0": "string"}, ("max_by_k",), "double", 10, 5, 2
    ),
    "session windows, append: min_by(v, y, 3) of integers": Query(
        "session", {"k0": "string"}, ("min_by_k", "sum"), "bigint", 5, delay_s=2, output_mode="append"
    ),
    "sliding windows, update: histogram_numeric, refused at start": Query(
        "sliding", {"k0": "string"}, ("histogram_3",), "bigint", 10, 5, 2
    ),
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
    "tumbling windows, update: approx_top_k, small and default, its accumulation, of integers": Query(
        "tumbling",
        {"k0": "string"},
        ("approx_top_k", "approx_top_k_small", "approx_top_k_accumulate"),
        "bigint",
        10,
        10,
        2,
    ),
    "no window, complete: approx_top_k of decimals": Query(
        "global", {"k0": "bigint"}, ("approx_top_k", "approx_top_k_small"), "decimal(12,2)", output_mode="complete"
    ),
    "sliding windows, update: approx_top_k of doubles, refused at start": Query(
        "sliding", {"k0": "string"}, ("approx_top_k", "approx_top_k_accumulate", "count"), "double", 10, 5, 2
    ),
    "session windows, append: approx_top_k of strings, refused at start": Query(
        "session",
        {"k0": "string"},
        ("approx_top_k", "approx_top_k_small"),
        "string",
        5,
        delay_s=2,
        output_mode="append",
    ),
    "tumbling windows, append, then approx_top_k_combine per window of window_time": Query(
        "tumbling",
        {"k0": "string"},
        ("approx_top_k_accumulate", "approx_top_k"),
        "bigint",
        10,
        delay_s=2,
        output_mode="append",
        chain="window",
    ),
    "tumbling windows, update: approx_top_k of a collated string, refused at start": Query(
        "tumbling", {"k0": "string"}, ("approx_top_k_lcase",), "string", 10, 10, 2
    ),
    "tumbling windows, update: schema_of_variant_agg of variants picked by integers": Query(
        "tumbling", {"k0": "string"}, ("schema_of_variant_agg_cased", "count"), "bigint", 10, 10, 2
    ),
    "session windows, append: schema_of_variant_agg of variants picked by strings": Query(
        "session", {"k0": "string"}, ("schema_of_variant_agg",), "string", 5, delay_s=2, output_mode="append"
    ),
    "sliding windows, complete: schema_of_variant_agg of variants picked by doubles": Query(
        "sliding", {"k0": "bigint"}, ("schema_of_variant_agg", "count"), "double", 10, 5, 2, "complete"
    ),
    "no window, update: schema_of_variant_agg of variants picked by decimals": Query(
        "global", {"k0": "bigint"}, ("schema_of_variant_agg_cased",), "decimal(12,2)"
    ),
    "tumbling windows, update: vector_sum and vector_avg of floats from integers": Query(
        "tumbling", {"k0": "string"}, ("vector_sum", "vector_avg", "count"), "bigint", 10, 10, 2
    ),
    "no window, complete: vector_sum and vector_avg of floats from strings": Query(
        "global", {"k0": "bigint"}, ("vector_sum", "vector_avg"), "string", output_mode="complete"
    ),
    "sliding windows, update: vector_avg, refused at start": Query(
        "sliding", {"k0": "string"}, ("vector_avg",), "double", 10, 5, 2
    ),
}
# suite time: tests/verify/test_listagg_order.py checks listagg in make test, test_sketches.py the sketches' merges
IN_MAKE_TEST = {"tumbling windows, update: hll, theta, count-min and KLL sketches of integers"}


@pytest.mark.parametrize(
    "name", [name if name in IN_MAKE_TEST else pytest.param(name, marks=pytest.mark.slow) for name in CASES]
)
def test_each_function_gives_sparks_rows_and_types(spark, tmp_path, name):
    case = query_case_of(CASES[name], Settings(), seed=63)
    mismatch = run_case(spark, case, tmp_path / "run")
    assert mismatch is None, f"{case.describe()}\n{mismatch}"
