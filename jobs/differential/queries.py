"""Differential cases written in Spark's DataFrame API: the one query runs in plain Spark and through
``misa.from_query``.

:func:`spark_api_query` writes a case's query as a Spark user would (``withWatermark``, ``groupBy(window(...))``,
``agg``, ``dropDuplicates``, ``select``/``where`` after); :func:`random_query_case` draws the forms misa runs
(docs/spark-queries.md), with the inputs of :mod:`jobs.differential.cases` (late rows, rows out of order,
back-to-back batches, restarts, every key type).
"""

from __future__ import annotations

import random
from dataclasses import replace
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.differential.cases import (
    COMMIT_MODES,
    FUNCTIONS,
    KEY_TYPES,
    PREFETCHING,
    Case,
    Query,
    Settings,
    random_rounds,
)

EVENT_TIME = "event_time"
QUERY_FORMS = ("tumbling", "sliding", "global", "session", "dedup", "dedup_time", "dedup_within", "stream_join")
JOIN_SHAPES = ("interval", "strict", "one_bound", "no_bound", "key_time")  # a stream_join's event-time condition
SPARK_FUNCTIONS = {"sum": F.sum, "count": F.count, "avg": F.avg, "min": F.min, "max": F.max, "first": F.first}
SPARK_FUNCTIONS |= {"last": F.last, "collect_list": F.collect_list, "collect_set": F.collect_set}
SPARK_FUNCTIONS |= {"approx_count_distinct": F.approx_count_distinct}
SPARK_FUNCTIONS |= {"first_ignore_nulls": lambda c: F.first(c, ignorenulls=True)}
SPARK_FUNCTIONS |= {"last_ignore_nulls": lambda c: F.last(c, ignorenulls=True)}
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
    q = case.query
    events = rows.withColumn(EVENT_TIME, F.timestamp_millis("t"))
    keys = list(q.keys)
    if q.operator == "stream_join":
        return _stream_join(q, events)
    if q.operator.startswith("dedup"):
        watermarked = events.withWatermark(EVENT_TIME, f"{q.delay_s} seconds")
        if q.operator == "dedup":
            deduplicated = events.dropDuplicates(keys)
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
    if q.operator == "global":
        grouped = events.groupBy(*keys).agg(*aggregates)
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
    if q.watermark:
        events = events.withWatermark(EVENT_TIME, f"{q.delay_s} seconds")
    grouped = events.groupBy(window, *keys).agg(*aggregates)
    if not q.above:
        return grouped
    window_column = "session_window" if q.operator == "session" else "window"
    return _above(grouped, q, [F.col(f"{window_column}.end").alias("ends"), *[F.col(k) for k in keys]])


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
    left = events.withWatermark(EVENT_TIME, f"{q.delay_s} seconds").alias("a")
    right = events.where("v IS NULL OR CAST(v AS STRING) <> '1'") if q.right_filter else events
    right = (right.withWatermark(EVENT_TIME, f"{q.right_delay_s} seconds") if q.watermark else right).alias("b")
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
    joined = left.join(right, reduce(lambda x, y: x & y, condition))
    if not q.above:
        return joined  # both sides' columns, with the same names
    columns = [F.col(f"a.{k}").alias(k) for k in q.keys]
    columns += [F.col("a.v").alias("av"), F.col("b.v").alias("bv"), a_t.alias("at"), b_t.alias("bt")]
    return joined.select(*columns).where("bv IS NULL OR CAST(bv AS STRING) <> '7'")


def random_query_case(seed: int) -> Case:
    """A random case of a query form misa runs, written in Spark's API and run through from_query."""
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
    settings = Settings(
        commit_mode=rng.choice(COMMIT_MODES),
        prefetching=rng.choice(PREFETCHING),
        shards=rng.randint(1, 4),
        cache_max_bytes=rng.choice((4096, 1 << 20)),
        processes=rng.choice((1, 1, 2)) if form != "global" or key_count else 1,
        from_query=True,
    )
    return Case(seed, query, settings, random_rounds(rng, query))


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
    )
    settings = Settings(
        commit_mode=rng.choice(COMMIT_MODES),
        prefetching=rng.choice(PREFETCHING),
        shards=rng.randint(1, 4),
        cache_max_bytes=rng.choice((4096, 1 << 20)),
        processes=rng.choice((1, 1, 2)),
        from_query=True,
    )
    return Case(seed, query, settings, random_rounds(rng, query))


def _output_mode(rng: random.Random, form: str) -> str:
    if form.startswith("dedup"):
        return rng.choice(("append", "update"))
    if form == "global":
        return rng.choice(("update", "complete"))
    if form in ("tumbling", "sliding"):
        return rng.choice(("update", "append", "complete"))
    return rng.choice(("append", "complete"))  # session windows


def case_tags(case: Case) -> set[str]:
    """What a case exercises, as the docs table's rows name it (docs/spark-queries.md)."""
    q = case.query
    tags = {f"op:{q.operator}", f"mode:{q.operator}:{q.output_mode}"}
    if q.operator == "stream_join":
        tags |= {f"join:{q.join_shape}"} | ({"join:a.v < b.v"} if q.residual else set())
        tags |= {"select/where after"} if q.above else set()
        return tags | ({"join:right side without watermark"} if not q.watermark else set())
    tags |= {"count(*)"} if q.count_star and not q.operator.startswith("dedup") else set()
    tags |= {f"startTime:{q.operator}"} if q.start_s else set()
    tags |= {"select/where after"} if q.above else set()
    tags |= {"per-row gap"} if q.dynamic_gap else set()
    tags |= {f"no watermark:{q.operator}"} if not q.watermark else set()
    if not q.operator.startswith("dedup"):
        tags |= {f"fn:{f}:{q.value_type.split('(')[0]}" for f in q.functions}
    return tags


def query_case_of(query: Query, settings: Settings, seed: int) -> Case:
    """A from_query case of a given query and settings, with random input drawn from ``seed``."""
    return Case(seed, query, replace(settings, from_query=True), random_rounds(random.Random(seed), query))
