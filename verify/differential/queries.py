"""Differential cases written in Spark's DataFrame API: the one query runs in plain Spark and through
``misa.from_query``.

:func:`spark_api_query` writes a case's query as a Spark user would (``withWatermark``, ``groupBy(window(...))``,
``agg``, ``dropDuplicates``, ``select``/``where`` after); :func:`random_query_case` draws the forms misa runs
(docs/spark-queries.md), with the inputs of :mod:`verify.differential.cases` (late rows, rows out of order,
back-to-back batches, restarts, every key type).
"""

from __future__ import annotations

import random
from dataclasses import replace
from functools import reduce
from typing import Any, Callable, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from verify.differential.cases import (
    COMMIT_MODES,
    COMPOSITE_KEY_TYPES,
    FUNCTIONS,
    KEY_TYPES,
    PREFETCHING,
    Case,
    Query,
    Settings,
    random_rounds,
    with_placement,
)
from verify.differential.group_state import DRAWN, SHAPES, TOTALLED, TYPED, group_state_query, totalled

EVENT_TIME = "event_time"
GROUP_STATE_SHARE = 0.06  # of the seeds: an applyInPandasWithState case (drawn apart from the forms below)
QUERY_FORMS = ("tumbling", "sliding", "global", "session", "dedup", "dedup_time", "dedup_within", "stream_join")
JOIN_SHAPES = ("interval", "strict", "one_bound", "no_bound", "key_time")  # a stream_join's event-time condition
CHAINS = ("window", "aggregate", "join", "session_below", "session_above")  # a second one over the first's (_chained)
LONGER_CHAINS = ("window3", "aggregate3", "window_dedup", "join_dedup")  # a third, or a deduplication above (issue 63)
WINDOW_SESSIONS = "window_sessions"  # sessions per key over a tumbling window's output (drawn apart)
TIME_KEY_CHAIN = "instant_sessions"  # sessions per key over a count per key and event time (append)
JOIN_CHAINS = ("outer_join", "join_sessions")  # windows over an outer or semi join's, sessions over an inner one's
GROUP_STATE_CHAIN = "dedup_below"  # an applyInPandasWithState case's: over a dropDuplicates of its keys and event time
GROUP_STATE_CHAIN_SHARE = 0.3  # of the applyInPandasWithState cases (drawn apart)
GROUP_STATE_TOTALLED_SHARE = 0.2  # of the others: an aggregation over the function's output (drawn apart)
# a stream-stream join above a deduplication (left, right or both sides) or windows (left)
JOIN_BELOW = ("dedup_left", "dedup_right", "windows_left", "dedup_both")
REFUSED_CHAINS = {  # chains Spark runs and misa refuses at start: the chain -> a part of misa's message
    "within_above": "reads as a timestamp",  # dropDuplicatesWithinWatermark over a window's aggregation
}
# misa's refusal of a join above deduplications of both sides whose right side has no watermark (a part of it)
REFUSED_UNWATERMARKED_BELOW_JOIN = "it has no watermark (Spark's join then reads the other side's)"
GROUP_STATE_TYPED_SHARE = 0.3  # of the applyInPandasWithState cases: the function ``typed`` (drawn apart)
GROUP_STATE_COMPOSITE_KEY_SHARE = 0.15  # of the applyInPandasWithState cases: a composite key (drawn apart)
REFUSED_FLOATING_KEY = "a key holding floating values"  # misa's refusal of such a key with floats (a part of it)
# an applyInPandasWithState case's composite keys: those of the other forms (their structs and arrays hold floats,
# which misa refuses there) and a struct and an array without floats
GROUP_STATE_KEY_TYPES = (
    *COMPOSITE_KEY_TYPES,
    "struct<a: int, s: string, n: struct<l: array<bigint>>>",
    "array<string>",
)
JOIN_HOWS = ("inner", "left_outer", "right_outer", "full_outer", "left_semi")  # its join type
SPARK_FUNCTIONS = {"sum": F.sum, "count": F.count, "avg": F.avg, "min": F.min, "max": F.max, "first": F.first}
SPARK_FUNCTIONS |= {"last": F.last, "collect_list": F.collect_list, "collect_set": F.collect_set}
SPARK_FUNCTIONS |= {"approx_count_distinct": F.approx_count_distinct}
SPARK_FUNCTIONS |= {"first_ignore_nulls": lambda c: F.first(c, ignorenulls=True)}
SPARK_FUNCTIONS |= {"last_ignore_nulls": lambda c: F.last(c, ignorenulls=True)}
MOMENT_FUNCTIONS = ("stddev", "stddev_samp", "stddev_pop", "variance", "var_samp", "var_pop")
SPARK_FUNCTIONS |= {f: getattr(F, f) for f in MOMENT_FUNCTIONS}
# issue 63's functions: of a condition on v, of v ordered by t, of v and t; drawn by _with_more_functions
CONDITION_FUNCTIONS = ("count_if", "bool_and", "bool_or")
SPARK_FUNCTIONS |= {f: lambda c, f=f: getattr(F, f)(F.col(c).cast("string") > "1") for f in CONDITION_FUNCTIONS}
SHAPE_FUNCTIONS = ("skewness", "kurtosis")
CO_MOMENT_FUNCTIONS = ("corr", "covar_pop", "covar_samp")
SPARK_FUNCTIONS |= {f: getattr(F, f) for f in SHAPE_FUNCTIONS}
SPARK_FUNCTIONS |= {f: lambda c, f=f: getattr(F, f)(c, "t") for f in (*CO_MOMENT_FUNCTIONS, "max_by", "min_by")}
SPARK_FUNCTIONS |= {"any_value": F.any_value}
BIT_FUNCTIONS = ("bit_and", "bit_or", "bit_xor")  # of integers: drawn by _with_bit_functions
SPARK_FUNCTIONS |= {f: getattr(F, f) for f in BIT_FUNCTIONS}
TRY_FUNCTIONS = ("try_sum", "try_avg")  # drawn by _with_try_functions; misa refuses those that can overflow
SPARK_FUNCTIONS |= {f: getattr(F, f) for f in TRY_FUNCTIONS}
SPARK_FUNCTIONS |= {"product": F.product}  # drawn by _with_product
REGRESSION_FUNCTIONS = tuple(f"regr_{f}" for f in ("count", "avgx", "avgy", "sxx", "syy", "sxy", "slope"))
REGRESSION_FUNCTIONS += ("regr_intercept", "regr_r2")  # of (v, t): drawn by _with_regressions
SPARK_FUNCTIONS |= {f: lambda c, f=f: getattr(F, f)(c, "t") for f in REGRESSION_FUNCTIONS}
REFUSED_OVERFLOW = "is null where its sum overflows"  # misa's refusal of try_sum of integers, try_ of decimals
REFUSED_HISTOGRAM = "histogram_numeric over"  # misa's refusal of it over sliding and session windows
# listagg / string_agg of the values as strings (no delimiter, or ", "); ordered WITHIN GROUP by the value, or by the
# event time descending then the value
LISTAGG_FUNCTIONS = ("listagg", "string_agg", "listagg_ordered", "listagg_by_time")  # drawn by _with_listagg
SPARK_FUNCTIONS |= {"listagg": lambda c: F.listagg(F.col(c).cast("string"))}
SPARK_FUNCTIONS |= {"string_agg": lambda c: F.string_agg(F.col(c).cast("string"), ", ")}
SPARK_FUNCTIONS |= {
    "listagg_ordered": lambda c: F.expr(f"listagg(CAST({c} AS STRING), '|') WITHIN GROUP (ORDER BY {c})"),
    "listagg_by_time": lambda c: F.expr(f"string_agg({c}, ';') WITHIN GROUP (ORDER BY t DESC, {c} NULLS LAST)"),
}
# mode with its ties broken by Spark's order (mode(col) breaks them by its hash map's order: docs/spark-queries.md)
MODE_FUNCTIONS = ("mode", "mode_highest")
SPARK_FUNCTIONS |= {"mode": lambda c: F.mode(c, True)}
SPARK_FUNCTIONS |= {"mode_highest": lambda c: F.expr(f"mode() WITHIN GROUP (ORDER BY {c} DESC)")}
# percentile_approx at its default accuracy (every sample kept exactly: any merges give Spark's), and at accuracy 5,
# where its sketch compresses: equal to Spark's when each batch's rows of a group are one partial buffer (one file)
PERCENTILE_FUNCTIONS = ("percentile_approx", "percentile_array", "approx_percentile_5")
SPARK_FUNCTIONS |= {"percentile_approx": lambda c: F.percentile_approx(c, 0.5)}
SPARK_FUNCTIONS |= {"percentile_array": lambda c: F.percentile_approx(c, [0.1, 0.5, 0.9])}
SPARK_FUNCTIONS |= {"approx_percentile_5": lambda c: F.approx_percentile(c, [0.25, 0.75], 5)}
# histogram_numeric of few bins (ties between equally close bins broken by Spark's random numbers) and of many
HISTOGRAM_FUNCTIONS = ("histogram_3", "histogram_20")  # drawn by _with_histogram
SPARK_FUNCTIONS |= {f"histogram_{n}": lambda c, n=n: F.histogram_numeric(c, F.lit(n)) for n in (3, 20)}
# exact percentiles: percentile and median, percentile_cont and percentile_disc (descending too), arrays of them
EXACT_FUNCTIONS = ("percentile", "median", "percentile_cont_desc", "percentile_disc", "percentile_disc_array")
SPARK_FUNCTIONS |= {"percentile": lambda c: F.percentile(c, 0.3), "median": F.median}
SPARK_FUNCTIONS |= {"percentile_cont_desc": lambda c: _within_group("percentile_cont(0.4)", c, "DESC")}
SPARK_FUNCTIONS |= {"percentile_disc": lambda c: _within_group("percentile_disc(0.6)", c, "")}
SPARK_FUNCTIONS |= {"percentile_disc_array": lambda c: _within_group("percentile_disc(array(0.1, 0.9))", c, "DESC")}
# the sketch aggregates (drawn by _with_sketches): at their defaults and at sizes small enough for the rows of a group
# to take HyperLogLog to its HLL mode, Theta to estimation and KLL to compaction; refused: Theta below the C++
# library's least size
SKETCHES = {"hll_sketch_agg": F.hll_sketch_agg, "hll_sketch_agg_4": lambda c: F.hll_sketch_agg(c, 4)}
SKETCHES |= {"theta_sketch_agg": F.theta_sketch_agg, "theta_sketch_agg_5": lambda c: F.theta_sketch_agg(c, 5)}
SKETCHES |= {"kll_sketch_agg_bigint": F.kll_sketch_agg_bigint, "kll_sketch_agg_double": F.kll_sketch_agg_double}
SKETCHES |= {"kll_sketch_agg_bigint_8": lambda c: F.kll_sketch_agg_bigint(c, 8)}
SKETCHES |= {"kll_sketch_agg_float": lambda c: F.kll_sketch_agg_float(F.col(c).cast("float"))}
SKETCHES |= {"count_min_sketch": lambda c: F.count_min_sketch(c, F.lit(0.2), F.lit(0.9), F.lit(7))}
SKETCHES |= {"tuple_sketch_agg_double": lambda c: F.tuple_sketch_agg_double(c, F.lit(1.5))}  # summed per key
SKETCHES |= {  # the longest text of each key's values; each key's least value, in a small sketch
    "tuple_sketch_agg_integer_max": lambda c: F.tuple_sketch_agg_integer(
        c, F.length(F.col(c).cast("string")), 12, "max"
    ),
    "tuple_sketch_agg_double_min_5": lambda c: F.tuple_sketch_agg_double(c, c, 5, "min"),
}
BITMAPS = {"bitmap_construct_agg": lambda c: F.bitmap_construct_agg(F.bitmap_bit_position(c))}  # of bigint values
BITMAPS |= {f: lambda c, f=f: getattr(F, f)(F.unhex(F.hex(c))) for f in ("bitmap_or_agg", "bitmap_and_agg")}  # bytes
SPARK_FUNCTIONS |= BITMAPS
# collect_union of each value's characters (its text split), and of [value, null] with RESPECT NULLS
COLLECT_UNIONS = {"collect_union": lambda c: F.collect_union(F.split(F.col(c).cast("string"), ""))}
COLLECT_UNIONS |= {"collect_union_nulls": lambda c: F.expr(f"collect_union(array({c}, NULL)) RESPECT NULLS")}
SPARK_FUNCTIONS |= COLLECT_UNIONS
# max_by(v, y, 2) and min_by(v, y, 3) by a hash of the value and its event time: rows that tie share their value
TOP_K = {"max_by_k": lambda c: F.max_by(c, F.xxhash64(c, EVENT_TIME), 2)}
TOP_K |= {"min_by_k": lambda c: F.min_by(c, F.xxhash64(c, EVENT_TIME), 3)}
SPARK_FUNCTIONS |= TOP_K
# approx_top_k at its default size and at one its rows overflow (purged), the state of approx_top_k_accumulate
APPROX_TOP_K = {"approx_top_k": lambda c: F.expr(f"approx_top_k({c}, 3)")}
APPROX_TOP_K |= {"approx_top_k_small": lambda c: F.expr(f"approx_top_k({c}, 4, 6)")}
APPROX_TOP_K |= {"approx_top_k_accumulate": lambda c: F.expr(f"approx_top_k_accumulate({c}, 20)")}
SPARK_FUNCTIONS |= APPROX_TOP_K
# schema_of_variant_agg of variants each value picks by its hash: numbers, decimals, strings, nested objects and
# arrays, names that need quotes; "_cased" adds objects whose field names differ only in case, whose merges depend on
# their order (in Spark too: docs/spark-queries.md), drawn over tumbling windows and none
VARIANT_DOCS = ('{"a": 1, "b": [1, 2]}', '{"a": 1.5, "c": "x"}', '{"a": "s", "b": [1.25, null]}', '[1, {"x": 2}]')
VARIANT_DOCS += ('{"a": 12345678901234567890123, "d": {"e": true}}', "null", '{"a": 1e308, "b": [], "`q": 1}')
VARIANT_DOCS += ('{"a": {"x": 1}, "b": {"y": [null]}}', "7", '"str"', '{"a": -3.25}', "[[1], [1.5], []]")
VARIANT_DOCS += ('{"é": 1, "z": 2, "Z": 3}', '{"a b": {"c:d": 1}}', '{"a": 99999999999999999999.5}')
CASED_DOCS = ('{"A": 2, "B": [3]}', '{"a": {"X": "t"}, "b": {"y": [1]}}')


def _variant_schema(docs: tuple[str, ...]) -> Callable[[str], Column]:
    """schema_of_variant_agg of the variant of one of ``docs`` per value (by its hash)."""

    def aggregate(c: str) -> Column:
        picked = F.element_at(F.array(*map(F.lit, docs)), F.pmod(F.hash(F.col(c)), F.lit(len(docs))) + 1)
        return F.schema_of_variant_agg(F.parse_json(picked))

    return aggregate


VARIANT_SCHEMAS = {"schema_of_variant_agg": _variant_schema(VARIANT_DOCS)}
VARIANT_SCHEMAS |= {"schema_of_variant_agg_cased": _variant_schema(VARIANT_DOCS + CASED_DOCS)}
SPARK_FUNCTIONS |= VARIANT_SCHEMAS


# vector_sum and vector_avg of two floats from each value's hash: null where the value is, an element null now and then
# (Spark skips such a vector)
def _vector(c: str) -> Column:
    elements = [F.pmod(F.hash(F.col(c), F.lit(i)), F.lit(1000)) / 7 for i in range(2)]
    elements = [F.when(F.pmod(F.hash(F.col(c), F.lit(9)), F.lit(13)) == 0, None).otherwise(e) for e in elements]
    return F.when(F.col(c).isNull(), None).otherwise(F.array(*elements).cast("array<float>"))


VECTORS = {"vector_sum": lambda c: F.call_function("vector_sum", _vector(c))}
VECTORS |= {"vector_avg": lambda c: F.call_function("vector_avg", _vector(c))}
SPARK_FUNCTIONS |= VECTORS
REFUSED_SKETCHES = {"theta_sketch_agg_4": lambda c: F.theta_sketch_agg(c, 4)}
REFUSED_SKETCHES |= {"approx_top_k_lcase": lambda c: F.expr(f"approx_top_k(collate({c}, 'UTF8_LCASE'))")}
SPARK_FUNCTIONS |= SKETCHES | REFUSED_SKETCHES
TUPLES = ("tuple_sketch_agg_double", "tuple_sketch_agg_integer_max")  # of any value type
SKETCH_TYPES = {  # value type -> the sketches of it Spark takes (in the order the random cases draw from)
    "bigint": ("hll_sketch_agg", "hll_sketch_agg_4", "theta_sketch_agg", "theta_sketch_agg_5", "count_min_sketch")
    + ("kll_sketch_agg_bigint", "kll_sketch_agg_bigint_8", *TUPLES),
    "double": ("theta_sketch_agg", "theta_sketch_agg_5", "kll_sketch_agg_double", "kll_sketch_agg_float", *TUPLES)
    + ("tuple_sketch_agg_double_min_5",),
    "string": ("hll_sketch_agg", "hll_sketch_agg_4", "theta_sketch_agg", "count_min_sketch", *TUPLES),
}
REFUSED_SKETCH = {"theta_sketch_agg_4": "asks for lgNomEntries 4"}
REFUSED_APPROX_TOP_K = {"approx_top_k_lcase": "collation key"}
# misa's refusal of approx_top_k's family (their ties follow the rows' order) and the vector aggregates (float sums
# rounded in that order) over sliding and session windows
REFUSED_ORDERED_WINDOWS = {"sliding": "over sliding windows: Spark builds", "session": "over session windows: Spark"}


def _within_group(function: str, column: str, order: str) -> Column:
    """``function WITHIN GROUP (ORDER BY column order)``, SQL's form of the inverse distribution functions."""
    return F.expr(f"{function} WITHIN GROUP (ORDER BY {column} {order})")


# after withWatermark: Spark keeps the conjunct on the event time above its watermark node (the rows it drops count
# for the watermark) and pushes the other below it
TIME_FILTER = f"second({EVENT_TIME}) % 3 <> 0 AND (v IS NULL OR CAST(v AS STRING) <> '2')"
NUMERIC_VALUES = ("bigint", "double", "decimal(12,2)")  # the value types the random cases draw stddev/variance of
OBJECT_FUNCTIONS = ("first", "last", "collect_list", "collect_set", "approx_count_distinct")
OBJECT_FUNCTIONS += ("first_ignore_nulls", "last_ignore_nulls")
ORDER_FUNCTIONS = ("first", "last", "first_ignore_nulls", "last_ignore_nulls")
UNORDERED = tuple(f for f in OBJECT_FUNCTIONS if f not in ORDER_FUNCTIONS)
VALUE_TYPES = {  # value type -> the functions of it the random cases draw
    "bigint": (*FUNCTIONS, *OBJECT_FUNCTIONS),
    "double": (*FUNCTIONS, *OBJECT_FUNCTIONS),
    "boolean": ("count", "min", "max", *OBJECT_FUNCTIONS),
    # Spark aggregates these with a sort (their buffers are not fixed-width), which reorders a key's rows of a
    # batch: its first/last then depend on its plan, not on the input's order (a difference docs/spark-queries.md
    # states), so the random cases draw first/last over the three types above only
    "decimal(12,2)": (*FUNCTIONS, *UNORDERED),
    "string": ("count", "min", "max", *UNORDERED),
}


def spark_api_query(case: Case, rows: DataFrame) -> DataFrame:
    """The case's query over the source's rows, in Spark's DataFrame API."""
    query = _stateful_query(case.query, rows)
    q = case.query
    above = q.chain and q.operator != "group_state" and q.chain not in JOIN_BELOW  # those are below the join
    return _chained(query, q) if above else query


def _chained(lower: DataFrame, q: Query) -> DataFrame:
    """Stateful operations over the output of ``lower`` (:data:`CHAINS`): a 20 s (twice the window) window over
    window_time of a tumbling window's, an aggregation (windowed when there is a watermark) over a deduplication's,
    or a count per window of the right side's event time over an inner join's; :data:`LONGER_CHAINS`: a third
    operation above those, or a dropDuplicates above a window's or a join's; :data:`REFUSED_CHAINS`: misa's refusals."""
    keys = [F.col(k) for k in q.keys]
    if q.chain == "within_above":
        return lower.dropDuplicatesWithinWatermark(list(q.keys) or ["window"])
    if q.chain == "session_below":
        return lower.groupBy(F.window(F.window_time("session_window"), f"{2 * q.window_s} seconds")).count()
    if q.chain == WINDOW_SESSIONS:  # sessions per key of the windows, over window_time(window)
        session = F.session_window(F.window_time("window"), f"{2 * q.window_s} seconds")
        return lower.groupBy(session, *keys).agg(F.count("*").alias("windows"))
    if q.chain == "session_above":  # sessions per key of a deduplication's output
        session = F.session_window(EVENT_TIME, f"{q.window_s} seconds")
        return lower.groupBy(session, *keys).agg(F.count("*").alias("rows"), F.max("v").alias("most"))
    if q.chain == TIME_KEY_CHAIN:  # sessions per key of the instants the count per key and time closed
        session = F.session_window(EVENT_TIME, f"{q.window_s} seconds")
        return lower.groupBy(session, *keys).agg(F.count("*").alias("instants"))
    if q.chain == "outer_join":  # the rows per window of the left side's event time (unmatched ones too)
        return lower.groupBy(F.window("at", f"{2 * q.window_s} seconds"), *keys).agg(F.count("*").alias("rows"))
    if q.chain == "join_sessions":  # sessions per key of the pairs, by the right side's event time
        session = F.session_window("bt", f"{q.window_s} seconds")
        return lower.groupBy(session, *keys).agg(F.count("*").alias("pairs"), F.max("bv").alias("most"))
    if q.chain == "join_dedup":  # whole rows, judged and evicted by the right side's event time
        return lower.select(*keys, "bt", "bv").dropDuplicates([*q.keys, "bt", "bv"])
    if q.chain == "join":  # the pairs per window of the right side's event time (the join's columns renamed)
        return lower.groupBy(F.window("bt", f"{2 * q.window_s} seconds"), *keys).agg(F.count("*").alias("pairs"))
    if q.chain in ("window", "window3", "window_dedup"):
        window = F.window(F.window_time("window"), f"{2 * q.window_s} seconds")
        if q.chain == "window_dedup":  # one row a window and key: no tie (which row of one Spark keeps is its order)
            return lower.dropDuplicates(["window", *q.keys])
        second = lower.groupBy(window, *keys).agg(F.count("*").alias("windows"), *_sketch_unions(q))
        return _third(second, q, "windows") if q.chain == "window3" else second
    window = [F.window(EVENT_TIME, f"{q.window_s} seconds")] if q.watermark else []
    second = lower.groupBy(*window, *keys).agg(F.count("*").alias("rows"), F.max("v").alias("most"))
    return _third(second, q, "rows") if q.chain == "aggregate3" else second


def _sketch_unions(q: Query) -> list[Column]:
    """Over the windows' sketches, Spark's aggregates of sketches: hll_union_agg, theta_union_agg (of the default
    size's) or theta_intersection_agg (of the smaller's), kll_merge_agg_*, tuple_union_agg_* and
    tuple_intersection_agg_*."""
    unions = []
    for f in (f for f in q.functions if f in SKETCHES and f != "count_min_sketch"):
        column = f"{f}_v"
        if f.startswith("hll"):
            unions.append(F.hll_union_agg(column).alias(f"{f}_union"))
        elif f.startswith("theta"):
            union = F.theta_union_agg(column, 12) if f == "theta_sketch_agg" else F.theta_intersection_agg(column)
            unions.append(union.alias(f"{f}_{'union' if f == 'theta_sketch_agg' else 'intersection'}"))
        elif f.startswith("tuple"):
            unions.append(_tuple_union(f, column))
        else:
            merge = getattr(F, f"kll_merge_agg_{f.split('_')[3]}")
            unions.append(merge(column).alias(f"{f}_merge"))
    if "approx_top_k_accumulate" in q.functions:  # of the default size, and of the accumulations' own
        for sized in ("", ", 30"):
            combine = F.expr(f"approx_top_k_combine(approx_top_k_accumulate_v{sized})")
            unions.append(combine.alias(f"approx_top_k_combine{sized[2:]}"))
    return unions


def _tuple_union(function: str, column: str) -> Column:
    """A union (sums, minimums) or an intersection (maximums) of the windows' tuple sketches of ``function``."""
    if function == "tuple_sketch_agg_integer_max":
        return F.tuple_intersection_agg_integer(column, "max").alias(f"{function}_intersection")
    if function == "tuple_sketch_agg_double_min_5":
        return F.tuple_union_agg_double(column, 5, "min").alias(f"{function}_union")
    return F.tuple_union_agg_double(column).alias(f"{function}_union")


def _third(second: DataFrame, q: Query, count: str) -> DataFrame:
    """A third stateful operation: the second's ``count`` summed per window of window_time(window), twice its size."""
    window = F.window(F.window_time("window"), f"{4 * q.window_s} seconds")
    return second.groupBy(window).agg(F.sum(count).alias("total"), F.count("*").alias("windows2"))


def _stateful_query(q: Query, rows: DataFrame) -> DataFrame:
    """The query's (first) stateful operation over the source's rows, and the steps after it."""
    events = rows.withColumn(EVENT_TIME, F.timestamp_millis("t"))
    keys = list(q.keys)
    if q.operator == "stream_join":
        return _stream_join(q, events)
    if q.operator == "group_state":
        state_rows = group_state_query(events, q.keys, q.functions[0], q.delay_s, q.chain == GROUP_STATE_CHAIN)
        return totalled(state_rows, q.keys) if q.chain == TOTALLED else state_rows
    if q.operator.startswith("dedup"):
        if q.struct_keys:
            events, keys = events.withColumn("ks", F.struct(*[F.col(k) for k in keys])), ["ks"]
        watermarked = _watermarked(events, q)
        if q.time_filter:
            watermarked = watermarked.where(TIME_FILTER)
        if q.operator == "dedup":
            deduplicated = (watermarked if q.watermark else events).dropDuplicates(keys)
        elif q.operator == "dedup_time":
            deduplicated = watermarked.dropDuplicates([*keys, EVENT_TIME])
        else:
            deduplicated = watermarked.dropDuplicatesWithinWatermark(keys)
        return (
            deduplicated.where("v IS NULL OR CAST(v AS STRING) <> '7'").select("*", (F.col("t") + 1).alias("t1"))
            if q.above
            else (deduplicated)
        )
    aggregates = [SPARK_FUNCTIONS[f]("v").alias(f"{f}_v") for f in q.functions]
    if q.count_star:
        aggregates.append(F.count("*"))
    if q.over_aggregates:
        aggregates += _over_aggregates(q.value_type)
    if q.watermark and (q.operator != "global" or q.time_filter or q.time_key):
        events = _watermarked(events, q)
    if q.time_filter:
        events = events.where(TIME_FILTER)
    if q.operator == "global":
        grouped = events.groupBy(*_group_keys(q), *([F.col(EVENT_TIME)] if q.time_key else [])).agg(*aggregates)
        return _above(grouped, q, [F.col(k) for k in keys]) if q.above else grouped
    if q.operator == "session":
        gap: str | Column = f"{q.window_s} seconds"
        if q.dynamic_gap:  # rows of a null or zero-valued first key: twice the gap; of value 2: none (dropped)
            first = F.col(keys[0]).cast("string") if keys else F.lit(None)
            gap = F.when(first.isNull() | (first == "0"), f"{2 * q.window_s} seconds")
            gap = gap.when(first == "2", "0 seconds").otherwise(f"{q.window_s} seconds")
        window = F.session_window(EVENT_TIME, gap)
    else:
        window = F.window(EVENT_TIME, f"{q.window_s} seconds", f"{q.slide_s} seconds", f"{q.start_s} seconds")
    grouped = events.groupBy(window, *_group_keys(q)).agg(*aggregates)
    if not q.above:
        return grouped
    window_column = "session_window" if q.operator == "session" else "window"
    return _above(grouped, q, [F.col(f"{window_column}.end").alias("ends"), *[F.col(k) for k in keys]])


def _watermarked(events: DataFrame, query: Query) -> DataFrame:
    """``events`` with withWatermark, or unioned with themselves, each with its own withWatermark (a second delay 5 s
    longer: Spark's global watermark is the policy's choice of the two)."""
    watermarked = events.withWatermark(EVENT_TIME, f"{query.delay_s} seconds")
    if not query.union:
        return watermarked
    return watermarked.union(events.withWatermark(EVENT_TIME, f"{query.delay_s + 5} seconds"))


def _group_keys(query: Query) -> list[Column]:
    """The group keys, or with ``key_expressions`` the same names for keys Spark computes: the first an expression,
    the second a struct's field."""
    keys = [F.col(k) for k in query.keys]
    if not query.key_expressions:
        return keys
    computed = [F.upper(keys[0].cast("string")), *(F.struct(k.alias("f"))["f"] for k in keys[1:])]
    return [key.alias(name) for key, name in zip(computed, query.keys)]


def _over_aggregates(value_type: str) -> list[Column]:
    """Expressions over aggregates inside agg (Spark computes them from the aggregates' results)."""
    v = F.col("v")
    if value_type in ("string", "boolean"):
        return [F.concat_ws("/", F.max(v).cast("string"), (F.count(v) * 2).cast("string")).alias("over_aggregates")]
    return [(F.max(v) - F.min(v)).alias("spread"), (F.sum(v) / F.count("*")).alias("mean"), F.sum(v) * 2]


def _above(grouped: DataFrame, query: Query, leading: list[Column]) -> DataFrame:
    """A select with a cast, a rename and arithmetic, then a filter, over the aggregation's output."""
    first = f"{query.functions[0]}_v"
    value = F.sort_array(F.col(first)) if first.startswith("collect_set") else F.col(first)  # its order is Spark's own
    columns = [*leading, F.coalesce(value.cast("string"), F.lit("-")).alias("text"), value.alias("x")]
    if query.count_star:
        columns.append((F.col("count(1)") * 2).alias("twice"))
    return grouped.select(*columns).where("text <> '2'")


def _stream_join(q: Query, events: DataFrame) -> DataFrame:
    """The stream joined with itself (the right side maybe filtered) on the keys and an event-time condition."""
    left = events.withWatermark(EVENT_TIME, f"{q.delay_s} seconds")
    left = _below_join(left.where(TIME_FILTER) if q.time_filter else left, q, "left").alias("a")
    right = events.where("v IS NULL OR CAST(v AS STRING) <> '1'") if q.right_filter else events
    right = right.withWatermark(EVENT_TIME, f"{q.right_delay_s} seconds") if q.watermark else right
    right = _below_join(right, q, "right").alias("b")
    a_t, b_t = F.col(f"a.{EVENT_TIME}"), F.col(f"b.{EVENT_TIME}")
    interval = F.expr(f"INTERVAL {q.interval_s} SECONDS")
    condition = [F.col(f"a.{k}") == F.col(f"b.{k}") for k in q.keys]
    condition += {
        "interval": [b_t.between(a_t - interval, a_t)],
        "strict": [b_t > a_t - interval, b_t < a_t + F.expr(f"INTERVAL {q.window_s} SECONDS")],
        "one_bound": [b_t <= a_t + interval],
        "no_bound": [],
        "key_time": [a_t == b_t],
    }[q.join_shape]
    condition += [F.col("a.v") < F.col("b.v")] if q.residual else []
    joined = left.join(right, reduce(lambda x, y: x & y, condition), q.join_how)
    if not q.above:
        return joined  # both sides' columns, with the same names
    columns = [F.col(f"a.{k}").alias(k) for k in q.keys]
    if q.join_how == "left_semi":  # the left side's columns only
        return joined.select(*columns, F.col("a.v").alias("av"), a_t.alias("at")).where(
            "av IS NULL OR CAST(av AS STRING) <> '7'"
        )
    columns += [F.col("a.v").alias("av"), F.col("b.v").alias("bv"), a_t.alias("at")]
    columns += [] if q.one_time else [b_t.alias("bt")]
    return joined.select(*columns).where("bv IS NULL OR CAST(bv AS STRING) <> '7'")


def _below_join(rows: DataFrame, q: Query, side: str) -> DataFrame:
    """A join's ``side`` with the stateful operation :data:`JOIN_BELOW` puts below it: the rows
    deduplicated by keys and event time, or counted per window and keys (the count the side's ``v``, the window's
    time its event time)."""
    if q.chain in (f"dedup_{side}", "dedup_both"):
        return rows.dropDuplicates([*q.keys, EVENT_TIME])
    if q.chain == f"windows_{side}":
        counts = rows.groupBy(F.window(EVENT_TIME, f"{q.window_s} seconds"), *q.keys).agg(F.count("*").alias("v"))
        return counts.select(*q.keys, F.window_time("window").alias(EVENT_TIME), "v")
    return rows


def random_query_case(seed: int) -> Case:
    """A random case of a query form misa runs, written in Spark's API and run through from_query."""
    if random.Random(f"from_query-group-state-{seed}").random() < GROUP_STATE_SHARE:
        return _random_group_state_case(seed)
    rng = random.Random(f"from_query-{seed}")
    form = rng.choice(QUERY_FORMS)
    dedup = form.startswith("dedup")
    key_count = rng.choice((1, 1, 2)) if dedup or form == "session" else rng.choice((0, 1, 1, 2))
    window = rng.choice((5, 10, 20))
    slide = rng.choice((window // 5, window // 2)) if form == "sliding" else window
    value_type = rng.choice(("bigint", "double")) if form == "sliding" else rng.choice(list(VALUE_TYPES))
    functions = FUNCTIONS if form == "sliding" or value_type == "decimal(12,2)" and rng.random() < 0.5 else None
    functions = [f for f in functions or VALUE_TYPES[value_type] if form != "sliding" or f in FUNCTIONS]
    if form == "stream_join":
        return _random_join_case(rng, seed)
    query = Query(
        operator=form,
        keys={f"k{i}": rng.choice(KEY_TYPES) for i in range(key_count)},
        functions=tuple(rng.sample(functions, rng.randint(1, 3))),
        value_type=value_type,
        window_s=window,
        slide_s=slide,
        delay_s=rng.choice((0, 0, 2, 5, 10)),
        output_mode=_output_mode(rng, form),
        start_s=rng.choice((0, 0, 1, 3)) % slide if form in ("tumbling", "sliding") else 0,
        count_star=rng.random() < 0.4,
        above=rng.random() < 0.3,
        dynamic_gap=form == "session" and rng.random() < 0.4,
    )
    if form in ("tumbling", "sliding", "session") and rng.random() < 0.15:  # Spark keeps every window
        modes = ("complete",) if form == "session" else ("update", "complete")
        query = replace(query, watermark=False, output_mode=rng.choice(modes))
    if not dedup:
        query = _with_later_forms(random.Random(f"from_query-later-{seed}"), query)
        query = _with_more_functions(random.Random(f"from_query-functions-{seed}"), query)
        query = _with_sliding_objects(random.Random(f"from_query-sliding-objects-{seed}"), query)
        query = _with_sliding_order(random.Random(f"from_query-sliding-order-{seed}"), query)
        query = _with_mode(random.Random(f"from_query-mode-{seed}"), query)
        query = _with_bit_functions(random.Random(f"from_query-bits-{seed}"), query)
        query = _with_try_functions(random.Random(f"from_query-try-{seed}"), query)
        query = _with_product(random.Random(f"from_query-product-{seed}"), query)
        query = _with_regressions(random.Random(f"from_query-regressions-{seed}"), query)
        query = _with_listagg(random.Random(f"from_query-listagg-{seed}"), query)
    query = _with_computed_keys_and_unions(random.Random(f"from_query-keys-{seed}"), query)
    query = _with_percentiles(random.Random(f"from_query-percentiles-{seed}"), query)
    query = _with_exact_percentiles(random.Random(f"from_query-exact-percentiles-{seed}"), query)
    query = _with_histogram(random.Random(f"from_query-histogram-{seed}"), query)
    query = _with_sketches(random.Random(f"from_query-sketches-{seed}"), query)
    query = _with_bitmaps(random.Random(f"from_query-bitmaps-{seed}"), query)
    query = _with_one_of(random.Random(f"from_query-collect-union-{seed}"), query, COLLECT_UNIONS)
    query = _with_approx_top_k(random.Random(f"from_query-approx-top-k-{seed}"), query)
    query = _with_variant_schema(random.Random(f"from_query-variant-schema-{seed}"), query)
    query = _with_one_of(random.Random(f"from_query-vectors-{seed}"), query, VECTORS)
    query = _with_one_of(random.Random(f"from_query-top-k-{seed}"), query, TOP_K)
    query = _with_composite_keys(random.Random(f"from_query-key-types-{seed}"), query)
    query = _with_event_time_filter(random.Random(f"from_query-time-filter-{seed}"), query)
    query = _with_chain(random.Random(f"from_query-chain-{seed}"), query)
    query = _with_longer_chain(random.Random(f"from_query-chain-more-{seed}"), query)
    query = _with_session_chain(random.Random(f"from_query-session-chain-{seed}"), query)
    query = _with_window_sessions(random.Random(f"from_query-window-sessions-{seed}"), query)
    query = _with_time_key(random.Random(f"from_query-time-key-{seed}"), query)
    settings = Settings(
        commit_mode=rng.choice(COMMIT_MODES),
        prefetching=rng.choice(PREFETCHING),
        shards=rng.randint(1, 4),
        cache_max_bytes=rng.choice((4096, 1 << 20)),
        processes=rng.choice((1, 1, 2)) if form != "global" or key_count else 1,
        from_query=True,
    )
    return Case(seed, query, _placed(seed, query, settings), random_rounds(rng, query))


def _placed(seed: int, query: Query, settings: Settings) -> Settings:
    """``settings`` with the state's placement drawn; a chain's operators run in the driver's process
    (misa.operators.chain)."""
    settings = with_placement(seed, settings)
    return replace(settings, processes=1, placement="driver") if query.chain else settings


def _with_chain(rng: random.Random, query: Query) -> Query:
    """A tumbling window's aggregation (append), a deduplication or an inner stream-stream join ``query`` with, at
    random, a second stateful operation over its output (:func:`_chained`; drawn from its own ``rng``, so every seed
    keeps its earlier form and rows): Spark runs them with its watermark propagated (issue 63)."""
    if rng.random() >= 0.15:
        return query
    if query.operator == "tumbling" and query.watermark:
        return replace(query, chain="window", output_mode="append", above=False)
    if query.operator.startswith("dedup"):
        return replace(query, chain="aggregate", output_mode=query.output_mode if query.watermark else "update")
    if query.operator == "stream_join" and query.join_how == "inner" and query.watermark:
        return replace(query, chain="join", above=True)  # the join's columns under names of their own
    return query


def _with_longer_chain(rng: random.Random, query: Query) -> Query:
    """``query`` with, at random, the chains added since (issue 63; drawn from its own ``rng``, so every seed keeps
    its earlier form and rows but the chain): a third operation over a window's or a deduplication's chain
    (:data:`LONGER_CHAINS`), a dropDuplicates over a window's or an inner join's output, a join's chain in update
    output; and now and then a chain misa refuses (:data:`REFUSED_CHAINS`), whose case checks the refusal at start."""
    draw = rng.random()
    if query.chain == "window":
        return replace(query, chain="window3" if draw < 0.35 else "window_dedup" if draw < 0.7 else "window")
    if query.chain == "aggregate" and query.watermark and query.output_mode == "append" and draw < 0.5:
        return replace(query, chain="aggregate3")
    inner_join = query.operator == "stream_join" and query.join_how == "inner" and query.watermark
    if inner_join and (query.chain or draw < 0.3):
        chain, mode = rng.choice((("join", "append"), ("join", "update"), ("join_dedup", "append")))
        return replace(query, chain=chain, output_mode=mode, above=True)  # the join's columns under names of their own
    append = query.output_mode == "append" and query.watermark and not query.chain
    if append and query.operator == "tumbling" and draw < 0.12:
        return replace(query, chain="within_above", above=False)
    if append and query.operator == "session" and draw < 0.08:
        return replace(query, chain="session_below", above=False)
    return query


def _with_session_chain(rng: random.Random, query: Query) -> Query:
    """A deduplication ``query`` (append, with a watermark) with, at random, sessions per key over its output (drawn
    from its own ``rng``, so every seed keeps its earlier form and rows but the chain)."""
    append = query.output_mode == "append" and query.watermark and not query.chain and not query.above
    if append and query.operator.startswith("dedup") and not query.struct_keys and rng.random() < 0.15:
        return replace(query, chain="session_above")
    return query


def _with_join_chain(rng: random.Random, query: Query) -> Query:
    """A stream-stream join ``query`` (a watermark on both sides, no chain yet) with, at random, an aggregation over
    an outer or semi join's output, or sessions per key over an inner join's (:data:`JOIN_CHAINS`; drawn from its
    own ``rng``, so every seed keeps its earlier form and rows but the chain)."""
    if query.operator != "stream_join" or not query.watermark or query.chain or rng.random() >= 0.3:
        return query
    if query.join_how != "inner":
        return replace(query, chain=JOIN_CHAINS[0], output_mode="append", above=True)  # Spark: outer joins append
    if query.keys and not query.one_time:  # Spark fails sessions without keys; they read the right's event time
        return replace(query, chain=JOIN_CHAINS[1], output_mode="append", above=True)
    return query


def _with_join_below(rng: random.Random, query: Query) -> Query:
    """A stream-stream join ``query`` (no chain yet) with, at random, a stateful operation below one side
    (:data:`JOIN_BELOW`; the right side's only when it has a watermark; windows without a residual condition, which
    compares the count), and now and then below both sides of an inner join (drawn from its own ``rng``, so every seed
    keeps its earlier form and rows but that)."""
    if query.operator != "stream_join" or query.chain or rng.random() >= 0.3:
        return query
    both = 1 if query.join_how == "inner" else 0  # Spark refuses an outer or semi join of some of them itself
    drawn = rng.choices(JOIN_BELOW, weights=(4, 3 if query.watermark else 0, 3, both))[0]
    if drawn == "windows_left" and query.residual:
        drawn = "dedup_left"
    return replace(query, chain=drawn, output_mode="append")


def _with_time_key(rng: random.Random, query: Query) -> Query:
    """An aggregation without a window ``query`` with, at random, the event time among its keys over its
    withWatermark, in any output mode; a third of those in append with sessions per key over its output (drawn from
    its own ``rng``, so every seed keeps its earlier form and rows but these)."""
    if query.operator != "global" or query.chain or rng.random() >= 0.25:
        return query
    query = replace(query, time_key=True, watermark=True, output_mode=rng.choice(("update", "append", "complete")))
    if query.keys and not query.above and rng.random() < 1 / 3:  # Spark fails sessions without keys
        return replace(query, output_mode="append", chain=TIME_KEY_CHAIN)
    return query


def _with_window_sessions(rng: random.Random, query: Query) -> Query:
    """A tumbling window's chain of a second window (:func:`_with_chain`) with, at random, sessions per key of the
    windows instead (drawn from its own ``rng``, so every seed keeps its earlier form and rows but the chain)."""
    if query.chain == "window" and query.keys and rng.random() < 0.5:  # Spark fails sessions without keys
        return replace(query, chain=WINDOW_SESSIONS)
    return query


def _with_later_forms(rng: random.Random, query: Query) -> Query:
    """An aggregation ``query`` with, at random, the forms added since the first fuzz run: stddev and variance,
    expressions over aggregates, a filter on the event time after withWatermark (session windows:
    :func:`_with_event_time_filter`; drawn from their own ``rng``, so
    every seed keeps its earlier form and rows)."""
    moments = query.value_type in NUMERIC_VALUES and rng.random() < 0.3
    functions = query.functions + (tuple(rng.sample(MOMENT_FUNCTIONS, rng.randint(1, 2))) if moments else ())
    return replace(
        query,
        functions=functions,
        over_aggregates=rng.random() < 0.2,
        time_filter=query.operator in ("tumbling", "sliding", "global") and rng.random() < 0.2,
    )


def _with_more_functions(rng: random.Random, query: Query) -> Query:
    """An aggregation ``query`` with, at random, one or two of issue 63's functions its form and value type run
    (drawn from their own ``rng``, so every seed keeps its earlier form and rows): over sliding windows those whose
    state merges across panes, the moments over numbers only, any_value where first is drawn."""
    if query.operator == "stream_join" or rng.random() >= 0.3:
        return query
    functions = list(CONDITION_FUNCTIONS)
    functions += [*SHAPE_FUNCTIONS, *CO_MOMENT_FUNCTIONS] if query.value_type in NUMERIC_VALUES else []
    if query.operator != "sliding":
        functions += ["max_by", "min_by"] + (["any_value"] if "first" in VALUE_TYPES[query.value_type] else [])
    drawn = tuple(f for f in rng.sample(functions, rng.randint(1, 2)) if f not in query.functions)
    return replace(query, functions=query.functions + drawn)


SLIDING_OBJECTS = {  # value type -> the functions of it over sliding windows whose states panes keep
    "bigint": ("max_by", "min_by", "approx_count_distinct"),
    "double": ("max_by", "min_by"),
    "decimal(12,2)": ("sum", "avg", "min", "max", "max_by", "count"),
    "string": ("min", "max", "min_by", "approx_count_distinct", "count"),
    "boolean": ("min", "max", "max_by", "count"),
}


def _with_sliding_objects(rng: random.Random, query: Query) -> Query:
    """A sliding-window ``query`` with, at random, the object aggregates panes keep (issue 63, item 5): max_by or
    min_by added over its numbers, or its values of another type with that type's functions (drawn from their own
    ``rng``, so every seed keeps its earlier form and rows)."""
    if query.operator != "sliding" or rng.random() >= 0.5:
        return query
    value_type = rng.choice(list(SLIDING_OBJECTS)) if rng.random() < 0.6 else query.value_type
    if value_type == query.value_type:
        drawn = tuple(f for f in rng.sample(SLIDING_OBJECTS[value_type], 1) if f not in query.functions)
        return replace(query, functions=query.functions + drawn)
    functions = SLIDING_OBJECTS[value_type]
    return replace(query, value_type=value_type, functions=tuple(rng.sample(functions, min(3, len(functions)))))


def _with_mode(rng: random.Random, query: Query) -> Query:
    """An aggregation ``query`` with, at random, mode (ties to the lowest value, or the highest) of its values (issue
    63, item 5; drawn from their own ``rng``, so every seed keeps its earlier form and rows): every window, every value
    type."""
    if query.operator == "stream_join" or rng.random() >= 0.15:
        return query
    return replace(query, functions=query.functions + (rng.choice(MODE_FUNCTIONS),))


def _with_bit_functions(rng: random.Random, query: Query) -> Query:
    """An aggregation ``query`` of integers with, at random, one or two of bit_and, bit_or and bit_xor (drawn from
    their own ``rng``, so every seed keeps its earlier form and rows): every window."""
    if query.operator == "stream_join" or query.value_type != "bigint" or rng.random() >= 0.25:
        return query
    return _added(query, rng.sample(BIT_FUNCTIONS, rng.randint(1, 2)))


def _with_try_functions(rng: random.Random, query: Query) -> Query:
    """An aggregation ``query`` of numbers with, at random, try_sum or try_avg (drawn from their own ``rng``, so every
    seed keeps its earlier form and rows): those that sum in doubles (try_sum of doubles, try_avg of anything but
    decimals) run; now and then one that can overflow, which misa refuses at start (:func:`expected_refusals`)."""
    if not _aggregates_numbers(query) or rng.random() >= 0.2:
        return query
    runs = [f for f in TRY_FUNCTIONS if not _may_overflow(f, query.value_type)]
    refused = [f for f in TRY_FUNCTIONS if f not in runs]
    return _added(query, [rng.choice(refused if refused and (not runs or rng.random() < 0.1) else runs)])


def _with_product(rng: random.Random, query: Query) -> Query:
    """An aggregation ``query`` of numbers with, at random, product (drawn from its own ``rng``, so every seed keeps
    its earlier form and rows): every window."""
    if not _aggregates_numbers(query) or rng.random() >= 0.12:
        return query
    return _added(query, ["product"])


def _with_regressions(rng: random.Random, query: Query) -> Query:
    """An aggregation ``query`` of numbers with, at random, one or two regr_* functions of its values on the event
    time (drawn from their own ``rng``, so every seed keeps its earlier form and rows): every window."""
    if not _aggregates_numbers(query) or rng.random() >= 0.15:
        return query
    return _added(query, rng.sample(REGRESSION_FUNCTIONS, rng.randint(1, 2)))


def _with_listagg(rng: random.Random, query: Query) -> Query:
    """An aggregation ``query`` with, at random, listagg or string_agg of its values as strings (drawn from their own
    ``rng``, so every seed keeps its earlier form and rows): every window; a quarter of them ordered WITHIN GROUP."""
    if query.operator == "stream_join" or rng.random() >= 0.12:
        return query
    ordered = rng.random() < 0.25
    return _added(query, [rng.choice(LISTAGG_FUNCTIONS[2:] if ordered else LISTAGG_FUNCTIONS[:2])])


def _added(query: Query, functions: Sequence[str]) -> Query:
    """``query`` with those of ``functions`` it does not compute yet."""
    return replace(query, functions=query.functions + tuple(f for f in functions if f not in query.functions))


def _may_overflow(function: str, value_type: str) -> bool:
    """Whether ``function`` (a try_ function) of ``value_type`` sums in a type that overflows (misa refuses it)."""
    return value_type.startswith("decimal") or function == "try_sum" and value_type != "double"


def _with_percentiles(rng: random.Random, query: Query) -> Query:
    """An aggregation ``query`` of numbers with, at random, percentile_approx (issue 63, item 5; drawn from their own
    ``rng``, so every seed keeps its earlier form and rows): at accuracy 5 only over tumbling windows or none of one
    stream (a batch's rows of a group in one partial buffer, as misa builds them; a union reads two)."""
    if not _aggregates_numbers(query) or rng.random() >= 0.2:
        return query
    functions = PERCENTILE_FUNCTIONS[:2]
    functions += PERCENTILE_FUNCTIONS[2:] if query.operator in ("tumbling", "global") and not query.union else ()
    return replace(query, functions=query.functions + (rng.choice(functions),))


def _with_histogram(rng: random.Random, query: Query) -> Query:
    """An aggregation ``query`` of bigint or double values over tumbling windows or none, of one stream, with, at
    random, histogram_numeric (drawn from its own ``rng``, so every seed keeps its earlier form and rows): a batch's
    rows of a group in one partial buffer, as misa builds them; over sliding or session windows, which misa refuses,
    now and then (:func:`expected_refusals`)."""
    numbers = _aggregates_numbers(query) and query.value_type in ("bigint", "double") and not query.union
    if not numbers or query.chain or rng.random() >= 0.15:
        return query
    if query.operator in ("tumbling", "global") or rng.random() < 0.25:
        return _added(query, [rng.choice(HISTOGRAM_FUNCTIONS)])
    return query


def _with_sketches(rng: random.Random, query: Query) -> Query:
    """An aggregation ``query`` of bigint, double or string values with, at random, one or two sketch aggregates of
    its value type (drawn from their own ``rng``, so every seed keeps its earlier form and rows), over tumbling
    windows now and then with their unions in a second window (:func:`_sketch_unions`); now and then one misa
    refuses (:func:`expected_refusals`)."""
    if not _aggregates(query) or query.value_type not in SKETCH_TYPES or query.chain:
        return query
    if rng.random() >= 0.15:
        return query
    drawn = rng.sample(SKETCH_TYPES[query.value_type], rng.randint(1, 2))
    if rng.random() < 0.1:
        drawn = [rng.choice(list(REFUSED_SKETCH))]
    elif query.operator == "tumbling" and query.watermark and rng.random() < 0.7:  # their unions in a second window
        query = replace(query, chain="window", output_mode="append", above=False)
    return _added(query, drawn)


def _with_bitmaps(rng: random.Random, query: Query) -> Query:
    """An aggregation ``query`` of bigint or string values with, at random, one or two of Spark's bitmap aggregates
    (drawn from their own ``rng``, so every seed keeps its earlier form and rows): bitmap_construct_agg of the bigint
    values' bit positions, bitmap_or_agg and bitmap_and_agg of the values' bytes."""
    if not _aggregates(query) or query.value_type not in ("bigint", "string") or rng.random() >= 0.1:
        return query
    bitmaps = list(BITMAPS) if query.value_type == "bigint" else ["bitmap_or_agg", "bitmap_and_agg"]
    return _added(query, rng.sample(bitmaps, rng.randint(1, 2)))


def _with_approx_top_k(rng: random.Random, query: Query) -> Query:
    """An aggregation ``query`` with, at random (8%), one or two of :data:`APPROX_TOP_K` (drawn from their own
    ``rng``, so every seed keeps its earlier form and rows): over tumbling windows now and then with the
    accumulations' approx_top_k_combine in a second window (:func:`_sketch_unions`); of strings now and then one
    of a collated column, which misa refuses."""
    if not _aggregates(query) or query.chain or rng.random() >= 0.08:
        return query
    drawn = rng.sample(list(APPROX_TOP_K), rng.randint(1, 2))
    if query.value_type == "string" and rng.random() < 0.15:
        drawn = ["approx_top_k_lcase"]
    elif query.operator == "tumbling" and query.watermark and rng.random() < 0.5:
        drawn, query = ["approx_top_k_accumulate", *drawn[1:]], replace(query, chain="window", output_mode="append")
        query = replace(query, above=False)
    return _added(query, list(dict.fromkeys(drawn)))


def _with_variant_schema(rng: random.Random, query: Query) -> Query:
    """An aggregation ``query`` with, at random (6%), schema_of_variant_agg (drawn from its own ``rng``, so every
    seed keeps its earlier form and rows): of objects whose field names differ only in case too, over tumbling
    windows and none."""
    if not _aggregates(query) or rng.random() >= 0.06:
        return query
    cased = query.operator in ("tumbling", "global") and rng.random() < 0.5
    return _added(query, ["schema_of_variant_agg_cased" if cased else "schema_of_variant_agg"])


def _with_one_of(rng: random.Random, query: Query, functions: dict[str, Any]) -> Query:
    """An aggregation ``query`` with, at random (8%), one of ``functions`` (:data:`COLLECT_UNIONS`, :data:`TOP_K`;
    drawn from its own ``rng``, so every seed keeps its earlier form and rows)."""
    if not _aggregates(query) or rng.random() >= 0.08:
        return query
    return _added(query, [rng.choice(list(functions))])


def _with_one_time(rng: random.Random, query: Query) -> Query:
    """A join ``query`` with a select after it that keeps, at random, only the left side's event time (drawn from its
    own ``rng``, so every seed keeps its earlier form): Spark's optimizer then prunes the right's below the join, and
    its join judges no right row late (misa fuzz seed 10763 found the shape in a chain). Not under a chain, which
    reads the right's event time."""
    if query.operator != "stream_join" or not query.above or query.join_how == "left_semi" or query.chain:
        return query
    return replace(query, one_time=rng.random() < 0.3)


def _with_exact_percentiles(rng: random.Random, query: Query) -> Query:
    """An aggregation ``query`` of numbers with, at random, an exact percentile (drawn from their own ``rng``, so every
    seed keeps its earlier form and rows): over every window and none, one stream or a union."""
    if not _aggregates_numbers(query) or rng.random() >= 0.2:
        return query
    return replace(query, functions=query.functions + (rng.choice(EXACT_FUNCTIONS),))


def _aggregates(query: Query) -> bool:
    """Whether ``query`` is an aggregation (a window's, or none)."""
    return query.operator not in ("stream_join", "group_state") and not query.operator.startswith("dedup")


def _aggregates_numbers(query: Query) -> bool:
    """Whether ``query`` is an aggregation (a window's, or none) of a numeric value."""
    return _aggregates(query) and query.value_type in NUMERIC_VALUES


SLIDING_ORDER = ("first", "last", "first_ignore_nulls", "last_ignore_nulls", "any_value")  # of the rows' order
SLIDING_COLLECT = ("collect_list", "collect_set")


def _with_sliding_order(rng: random.Random, query: Query) -> Query:
    """A sliding-window ``query`` with, at random, one or two of the functions of its window's rows in Spark's order
    (issue 63, item 5; drawn from their own ``rng``, so every seed keeps its earlier form and rows): collect_list and
    collect_set of every value type, first, last and any_value where the random cases draw first
    (:data:`VALUE_TYPES`: not of the types Spark aggregates with a sort)."""
    if query.operator != "sliding" or rng.random() >= 0.6:
        return query
    functions = SLIDING_COLLECT + (SLIDING_ORDER if "first" in VALUE_TYPES[query.value_type] else ())
    drawn = tuple(f for f in rng.sample(functions, rng.randint(1, 2)) if f not in query.functions)
    return replace(query, functions=query.functions + drawn)


def _with_computed_keys_and_unions(rng: random.Random, query: Query) -> Query:
    """A window or deduplication ``query`` with, at random, keys Spark computes (an expression, a struct), a
    deduplication with withWatermark on a column not among its keys, and a union of two watermarked streams (drawn
    from their own ``rng``, so every seed keeps its earlier form and rows)."""
    dedup = query.operator.startswith("dedup")
    watermark = rng.random() < 0.5 if query.operator == "dedup" else query.watermark
    return replace(
        query,
        watermark=watermark,
        key_expressions=not dedup and bool(query.keys) and rng.random() < 0.25,
        struct_keys=dedup and rng.random() < 0.3,
        union=query.operator != "global" and watermark and not query.time_filter and rng.random() < 0.2,
    )


def _with_event_time_filter(rng: random.Random, query: Query) -> Query:
    """A session window, deduplication or stream-stream join ``query`` (the join's left side) with, at random, a filter
    on the event time after withWatermark (issue 63; drawn from its own ``rng``, so every seed keeps its earlier form
    and rows; the join's since the filter on a join side ran)."""
    forms = ("session", "dedup", "dedup_time", "dedup_within", "stream_join")
    if query.operator not in forms or not query.watermark or query.union or rng.random() >= 0.2:
        return query
    return replace(query, time_filter=True)


def _with_composite_keys(rng: random.Random, query: Query) -> Query:
    """``query`` with, in a third of the cases with keys, each key's type a struct (nested too), an array, a decimal or
    binary at random (drawn from their own ``rng``, so every seed keeps its earlier form; rows change only with it)."""
    if not query.keys or rng.random() >= 1 / 3:
        return query
    keys = {name: rng.choice(COMPOSITE_KEY_TYPES) if rng.random() < 0.7 else t for name, t in query.keys.items()}
    return replace(query, keys=keys)


def _random_join_case(rng: random.Random, seed: int) -> Case:
    shape = rng.choice(JOIN_SHAPES)
    key_count = rng.choice((0, 1, 2) if shape == "key_time" else (1, 1, 2))  # the event time may be the only key
    query = Query(
        operator="stream_join",
        keys={f"k{i}": rng.choice(KEY_TYPES) for i in range(key_count)},
        value_type=rng.choice(list(VALUE_TYPES)),
        window_s=rng.choice((2, 5, 10)),
        delay_s=rng.choice((0, 0, 2, 5, 10)),
        output_mode="append",
        interval_s=rng.choice((2, 5, 10, 30)),
        above=rng.random() < 0.5,
        watermark=rng.random() < 0.8,
        join_shape=shape,
        right_delay_s=rng.choice((0, 2, 5, 10)),
        residual=rng.random() < 0.3,
        right_filter=rng.random() < 0.4,
        join_how=random.Random(f"join how {seed}").choices(JOIN_HOWS, weights=(6, 1, 1, 1, 1))[0],
    )
    query = _with_composite_keys(random.Random(f"from_query-key-types-{seed}"), query)
    query = _with_event_time_filter(random.Random(f"from_query-time-filter-{seed}"), query)
    settings = Settings(
        commit_mode=rng.choice(COMMIT_MODES),
        prefetching=rng.choice(PREFETCHING),
        shards=rng.randint(1, 4),
        cache_max_bytes=rng.choice((4096, 1 << 20)),
        processes=rng.choice((1, 1, 2)),
        from_query=True,
    )
    query = _with_chain(random.Random(f"from_query-chain-{seed}"), query)
    query = _with_longer_chain(random.Random(f"from_query-chain-more-{seed}"), query)
    query = _with_one_time(random.Random(f"from_query-one-time-{seed}"), query)
    query = _with_join_chain(random.Random(f"from_query-join-chain-{seed}"), query)
    query = _with_join_below(random.Random(f"from_query-join-below-{seed}"), query)
    return Case(seed, query, _placed(seed, query, settings), random_rounds(rng, query))


def _random_group_state_case(seed: int) -> Case:
    """A case of an applyInPandasWithState function (:mod:`verify.differential.group_state`), drawn from a generator
    of its own (the other seeds keep their forms and rows): one key column, bigint values. Keys are strings or ints:
    Spark converts the output DataFrames of a task's groups together, and a bigint key's null group makes them
    floats, which changes the extreme keys (misa converts each call's alone: docs/spark-queries.md)."""
    rng = random.Random(f"group-state-{seed}")
    function = rng.choice(DRAWN)
    query = Query(
        operator="group_state",
        keys={"k0": rng.choice(("string", "int"))},
        functions=(function,),
        delay_s=rng.choice((0, 2, 5, 10)),
        output_mode=SHAPES[function].mode,
    )
    if random.Random(f"group-state-typed-{seed}").random() < GROUP_STATE_TYPED_SHARE:  # drawn apart: seeds keep rows
        query = replace(query, functions=(TYPED,), output_mode=SHAPES[TYPED].mode)
    if random.Random(f"group-state-chain-{seed}").random() < GROUP_STATE_CHAIN_SHARE:  # drawn apart: seeds keep rows
        query = replace(query, chain=GROUP_STATE_CHAIN)
    elif random.Random(f"group-state-totalled-{seed}").random() < GROUP_STATE_TOTALLED_SHARE:  # drawn apart too
        query = replace(query, functions=("counted",), chain=TOTALLED, output_mode="update")
    key_rng = random.Random(f"group-state-key-type-{seed}")  # drawn apart: other seeds keep their rows
    if key_rng.random() < GROUP_STATE_COMPOSITE_KEY_SHARE:  # a struct, array, decimal or binary key
        query = replace(query, keys={"k0": key_rng.choice(GROUP_STATE_KEY_TYPES)})
    settings = Settings(
        commit_mode=rng.choice(COMMIT_MODES),
        prefetching=rng.choice(PREFETCHING),
        shards=rng.randint(1, 4),
        processes=rng.choice((1, 1, 2)),
        from_query=True,
    )
    return Case(seed, query, _placed(seed, query, settings), random_rounds(rng, query))


def _output_mode(rng: random.Random, form: str) -> str:
    if form.startswith("dedup"):
        return rng.choice(("append", "update"))
    if form == "global":
        return rng.choice(("update", "complete"))
    if form in ("tumbling", "sliding"):
        return rng.choice(("update", "append", "complete"))
    return rng.choice(("append", "complete"))  # session windows


def expected_refusals(q: Query) -> tuple[str, ...]:
    """A part of misa's message for each reason misa refuses at start a case's query that Spark runs (a chain of
    :data:`REFUSED_CHAINS`, applyInPandasWithState by a composite key holding floats, a try_ function that can
    overflow, a join above deduplications of both sides whose right side has no watermark, ...); misa names the
    first reason it meets, so its message holds one of them. Empty when misa runs the query."""
    floating_key = q.operator == "group_state" and any(
        t in GROUP_STATE_KEY_TYPES and ("double" in t or "float" in t) for t in q.keys.values()
    )
    overflow = any(f in TRY_FUNCTIONS and _may_overflow(f, q.value_type) for f in q.functions)
    histogram = q.operator in ("sliding", "session") and set(q.functions) & set(HISTOGRAM_FUNCTIONS)
    ordered = q.operator in REFUSED_ORDERED_WINDOWS and set(q.functions) & {*APPROX_TOP_K, *VECTORS}
    refused_functions = REFUSED_SKETCH | REFUSED_APPROX_TOP_K
    reasons = (
        REFUSED_FLOATING_KEY if floating_key else "",
        REFUSED_OVERFLOW if overflow else "",
        REFUSED_HISTOGRAM if histogram else "",
        *(refused_functions[f] for f in q.functions if f in refused_functions),
        REFUSED_ORDERED_WINDOWS[q.operator] if ordered else "",
        REFUSED_UNWATERMARKED_BELOW_JOIN if q.chain == "dedup_both" and not q.watermark else "",
        REFUSED_CHAINS.get(q.chain, ""),
    )
    return tuple(reason for reason in reasons if reason)


def case_tags(case: Case) -> set[str]:
    """What a case exercises, as the docs table's rows name it (docs/spark-queries.md)."""
    q = case.query
    tags = {f"op:{q.operator}", f"mode:{q.operator}:{q.output_mode}"}
    tags |= {f"chain:{q.chain}:{q.output_mode}"} if q.chain else set()
    if q.operator == "group_state":
        composite = {"group_state:composite key"} if set(q.keys.values()) & set(GROUP_STATE_KEY_TYPES) else set()
        composite = {"group_state:refused key"} if expected_refusals(q) else composite
        typed = {"group_state:typed state"} if q.functions[0] == TYPED else set()
        return tags | {f"group_state:{SHAPES[q.functions[0]].timeout}"} | composite | typed
    tags |= {"chain:refused"} if q.chain in REFUSED_CHAINS else set()
    refusals = set(expected_refusals(q))
    tags |= {"try:refused"} if REFUSED_OVERFLOW in refusals else set()
    tags |= {"histogram:refused"} if REFUSED_HISTOGRAM in refusals else set()
    tags |= {"row-ordered:refused windows"} if refusals & set(REFUSED_ORDERED_WINDOWS.values()) else set()
    if q.operator == "stream_join":
        tags |= {f"join:{q.join_shape}", f"join:{q.join_how}"} | ({"join:a.v < b.v"} if q.residual else set())
        tags |= {"select/where after"} if q.above else set()
        tags |= {f"composite keys:{q.join_how}"} if set(q.keys.values()) & set(COMPOSITE_KEY_TYPES) else set()
        tags |= {"event-time filter:stream_join"} if q.time_filter else set()
        tags |= {"join:the right's event time pruned"} if q.one_time else set()
        return tags | ({"join:right side without watermark"} if not q.watermark else set())
    tags |= {"count(*)"} if q.count_star and not q.operator.startswith("dedup") else set()
    tags |= {f"startTime:{q.operator}"} if q.start_s else set()
    tags |= {"select/where after"} if q.above else set()
    tags |= {"per-row gap"} if q.dynamic_gap else set()
    tags |= {f"no watermark:{q.operator}"} if not q.watermark else set()
    tags |= {"dedup:watermark elsewhere"} if q.operator == "dedup" and q.watermark else set()
    tags |= {f"key expressions:{q.operator}"} if q.key_expressions else set()
    tags |= {f"struct keys:{q.operator}"} if q.struct_keys else set()
    tags |= {f"union:{q.operator}"} if q.union else set()
    composite = set(q.keys.values()) & set(COMPOSITE_KEY_TYPES)
    tags |= {f"composite keys:{q.operator}"} if composite else set()
    tags |= {"composite keys:chain"} if composite and q.chain and q.chain not in REFUSED_CHAINS else set()
    if not q.operator.startswith("dedup"):
        tags |= {f"fn:{f}:{q.value_type.split('(')[0]}" for f in q.functions}
        tags |= {f"fn:{f}:{q.operator}" for f in q.functions}
        tags |= (
            {"sketch unions:window"} if q.chain in ("window", "window3") and set(q.functions) & set(SKETCHES) else set()
        )
        tags |= (
            {"approx_top_k_combine:window"}
            if q.chain in ("window", "window3") and "approx_top_k_accumulate" in q.functions
            else set()
        )
        tags |= {f"sliding:{f}:{q.value_type.split('(')[0]}" for f in q.functions} if q.operator == "sliding" else set()
        tags |= {f"expressions over aggregates:{q.operator}"} if q.over_aggregates else set()
    tags |= {f"event-time filter:{q.operator}"} if q.time_filter and q.watermark else set()
    return tags | ({f"time key:{q.output_mode}"} if q.time_key else set())


def query_case_of(query: Query, settings: Settings, seed: int) -> Case:
    """A from_query case of a given query and settings, with random input drawn from ``seed``."""
    return Case(seed, query, replace(settings, from_query=True), random_rounds(random.Random(seed), query))
