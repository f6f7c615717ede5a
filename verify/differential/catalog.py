"""Spark's stateful operations and functions, and what ``misa.from_query`` does with each: the docs table.

Each :class:`Entry` is one row of docs/spark-queries.md: a query written in Spark's API over a small stream,
what misa does (``runs``, ``runs, with a difference``, or ``refused`` with its message), and for a query that
runs, the tags of the random differential cases that cover it (:func:`verify.differential.queries.case_tags`).
tests/verify/test_spark_queries.py builds every query through ``from_query`` and checks the table in the docs
is :func:`render`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.state import GroupState

RUNS, DIFFERS, REFUSED = "runs", "runs, with a difference", "refused"
SOURCE_SCHEMA = "k string, k2 bigint, t bigint, v bigint, d decimal(10,2), s string, b boolean"
W, T = "10 seconds", "event_time"
LATER = "1970-01-01 00:00:05"  # a time the catalog's filters on the event time keep rows after
ORDER_NOTE = (
    "misa takes the rows of a batch in the order Spark reads them; Spark aggregates with a sort where an aggregate's "
    "buffer is not fixed-width (a string, a decimal sum), which may reorder a key's rows, so its own first/last "
    "then depend on its plan (Spark documents both as non-deterministic): equal over numbers and booleans"
)


def count_rows(key: tuple, pdfs: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    """An applyInPandasWithState function: a group's rows so far."""
    n = (state.get[0] if state.exists else 0) + sum(len(pdf) for pdf in pdfs)
    state.update((n,))
    yield pd.DataFrame({"k": [key[0]], "n": [n]})


def count_latest(key: tuple, pdfs: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    """An applyInPandasWithState function: a group's rows so far, and its latest event time in a timestamp field."""
    n, at = state.get if state.exists else (0, None)
    for pdf in pdfs:
        n += len(pdf)
        at = max(filter(None, [at, pdf[T].max().to_pydatetime()]))
    state.update((n, at))
    yield pd.DataFrame({"k": [key[0]], "n": [n]})


class KeepNothing(StatefulProcessor):
    """A StatefulProcessor that outputs nothing."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803 - Spark's names
        return iter([])

    def close(self) -> None:
        pass


def events(rows: DataFrame) -> DataFrame:
    """The catalog's stream: the source's rows with an event time."""
    return rows.withColumn(T, F.timestamp_millis("t"))


def watermarked(rows: DataFrame) -> DataFrame:
    return events(rows).withWatermark(T, W)


def windowed(rows: DataFrame, *aggs: F.Column) -> DataFrame:
    return watermarked(rows).groupBy(F.window(T, W), "k").agg(*aggs)


def joined(rows: DataFrame, condition: str, how: str = "inner") -> DataFrame:
    """The stream joined with itself on ``k`` and ``condition`` (both sides watermarked)."""
    return watermarked(rows).alias("a").join(watermarked(rows).alias("b"), F.expr(f"a.k = b.k AND {condition}"), how)


@dataclass(frozen=True)
class Entry:
    """One row of the table."""

    spark: str  # the operation or function as a Spark user writes it
    misa: str  # RUNS, DIFFERS or REFUSED
    build: Callable[[DataFrame], DataFrame] = field(repr=False)
    output_mode: str = "update"
    note: str = ""  # the difference, or what to write instead
    refusal: str = ""  # a refused query's message contains this
    covered_by: tuple[str, ...] = ()  # differential case tags that exercise it (a runs row needs one)


ENTRIES: tuple[Entry, ...] = (
    # ------------------------------------------------------------------ stateful operations
    Entry(
        "`groupBy(cols).agg(...)` (no window), update output",
        RUNS,
        lambda r: events(r).groupBy("k").agg(F.sum("v")),
        covered_by=("mode:global:update",),
    ),
    Entry(
        "`groupBy(cols).agg(...)`, complete output",
        RUNS,
        lambda r: events(r).groupBy("k").agg(F.sum("v")),
        "complete",
        covered_by=("mode:global:complete",),
    ),
    Entry(
        "`withWatermark(t)` + `groupBy(cols, t)`, the event time itself a key (no window): update, append, complete",
        RUNS,
        lambda r: watermarked(r).groupBy("k", T).agg(F.sum("v")),
        "append",
        "each group's time is its instant: the watermark drops rows at or before it and evicts the groups at or "
        "before it (append emits them then), as Spark's aggregation judges an event-time key; a null time is a "
        "group Spark never closes, nor misa",
        covered_by=("time key:update", "time key:append", "time key:complete"),
    ),
    Entry(
        "`withWatermark` + `groupBy(window(t, size), cols)`: update, append, complete",
        RUNS,
        lambda r: windowed(r, F.sum("v")),
        "append",
        covered_by=("mode:tumbling:update", "mode:tumbling:append", "mode:tumbling:complete"),
    ),
    Entry(
        "`window(t, size, slide)` (sliding): update, append",
        RUNS,
        lambda r: watermarked(r).groupBy(F.window(T, W, "5 seconds"), "k").agg(F.max("v")),
        covered_by=("mode:sliding:update", "mode:sliding:append"),
    ),
    Entry(
        "`window(t, size, slide)`, complete output",
        RUNS,
        lambda r: events(r).groupBy(F.window(T, W, "5 seconds"), "k").agg(F.max("v")),
        "complete",
        "every window of every key, combined from the pane records each batch",
        covered_by=("mode:sliding:complete",),
    ),
    Entry(
        "`window(t, size, size, startTime)` (tumbling, with a start time)",
        RUNS,
        lambda r: watermarked(r).groupBy(F.window(T, W, W, "3 seconds"), "k").agg(F.sum("v")),
        covered_by=("startTime:tumbling",),
    ),
    Entry(
        "`window(t, size, slide, startTime)` (sliding, with a start time)",
        RUNS,
        lambda r: watermarked(r).groupBy(F.window(T, W, "5 seconds", "3 seconds"), "k").agg(F.sum("v")),
        note="panes start at the start time too",
        covered_by=("startTime:sliding",),
    ),
    Entry(
        "a window without `withWatermark` (update, complete)",
        RUNS,
        lambda r: events(r).groupBy(F.window(T, W), "k").agg(F.sum("v")),
        note="logs a warning: every window is kept, the state grows without bound (as in Spark)",
        covered_by=("no watermark:tumbling", "no watermark:sliding", "no watermark:session"),
    ),
    Entry(
        "`session_window(t, gap)`: append, complete",
        RUNS,
        lambda r: watermarked(r).groupBy(F.session_window(T, "5 seconds"), "k").agg(F.sum("v")),
        "append",
        covered_by=("mode:session:append", "mode:session:complete"),
    ),
    Entry(
        "`session_window(t, gap_column)` (a gap per row)",
        RUNS,
        lambda r: (
            watermarked(r)
            .groupBy(F.session_window(T, F.when(F.col("k") == "a", "5 seconds").otherwise(W)), "k")
            .agg(F.sum("v"))
        ),
        "append",
        covered_by=("per-row gap",),
    ),
    Entry(
        "`session_window`, update output",
        REFUSED,
        lambda r: watermarked(r).groupBy(F.session_window(T, "5 seconds"), "k").agg(F.sum("v")),
        note="Spark refuses it too: append or complete output",
        refusal="STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION",
    ),
    Entry(
        "`session_window` without group columns",
        REFUSED,
        lambda r: watermarked(r).groupBy(F.session_window(T, "5 seconds")).agg(F.sum("v")),
        "append",
        "Spark fails such a query when it runs: group by a key too",
        "a session window without group columns",
    ),
    Entry(
        "`dropDuplicates(cols)`",
        RUNS,
        lambda r: events(r).dropDuplicates(["k"]),
        "append",
        covered_by=("op:dedup",),
    ),
    Entry(
        "`withWatermark` + `dropDuplicates(cols + [t])`",
        RUNS,
        lambda r: watermarked(r).dropDuplicates(["k", T]),
        "append",
        covered_by=("op:dedup_time",),
    ),
    Entry(
        "`withWatermark` + `dropDuplicatesWithinWatermark(cols)`",
        RUNS,
        lambda r: watermarked(r).dropDuplicatesWithinWatermark(["k"]),
        "append",
        covered_by=("op:dedup_within",),
    ),
    Entry(
        "`withWatermark` + `dropDuplicates(cols)`, the event time not among them (renamed columns too)",
        RUNS,
        lambda r: watermarked(r).withColumnRenamed("k", "my k").dropDuplicates(["k2", "my k"]),
        "append",
        "rows at or before the watermark are dropped, as Spark's deduplication drops them by the event-time column of "
        "its input (the one `withWatermark` marked, renamed or not), unless nothing after it reads that column "
        "(Spark's optimizer prunes it below the deduplication, which then drops no row); the keys are kept for good",
        covered_by=("dedup:watermark elsewhere",),
    ),
    Entry(
        "a struct column among a deduplication's columns (`dropDuplicates()`, `dropDuplicates(['st', ...])`)",
        RUNS,
        lambda r: events(r).withColumn("st", F.struct("k", "k2")).dropDuplicates(["st"]),
        "append",
        "keyed by each struct's null flag and its fields (nested structs too), which Spark's key compares the same",
        covered_by=("struct keys:dedup", "struct keys:dedup_time", "struct keys:dedup_within"),
    ),
    Entry(
        "a `union` of streams that each have `withWatermark`, then a window, session window or deduplication",
        RUNS,
        lambda r: watermarked(r).union(events(r).withWatermark(T, "20 seconds")).groupBy(F.window(T, W), "k").count(),
        "append",
        "one global watermark over the streams', as Spark keeps it: `spark.sql.streaming.multipleWatermarkPolicy` "
        "(min: a stream without rows yet holds it at 0; or max), each stream's forgotten at a restart",
        covered_by=tuple(f"union:{form}" for form in ("tumbling", "sliding", "session", "dedup", "dedup_within")),
    ),
    Entry(
        "`select` / `where` / `withColumn` after the stateful operation",
        RUNS,
        lambda r: (
            windowed(r, F.sum("v").alias("s")).select("window.start", "k", (F.col("s") * 2).alias("x")).where("x > 0")
        ),
        covered_by=("select/where after",),
    ),
    Entry(
        "a filter on the event time between `withWatermark` and `groupBy(window(...))` or `groupBy(cols)`",
        RUNS,
        lambda r: watermarked(r).where(F.col(T) > F.lit(LATER).cast("timestamp")).groupBy(F.window(T, W), "k").count(),
        note="the rows it drops count for the watermark, as Spark's watermark node sees them before the filter (Spark "
        "pushes the filter's other conjuncts below it)",
        covered_by=("event-time filter:tumbling", "event-time filter:sliding", "event-time filter:global"),
    ),
    Entry(
        "a filter on the event time between `withWatermark` and a session window or a deduplication (a projection "
        "between them too)",
        RUNS,
        lambda r: watermarked(r).where(F.col(T) > F.lit(LATER).cast("timestamp")).dropDuplicatesWithinWatermark(["k"]),
        "append",
        note="the filter runs in misa's source, in Spark, whose watermark misa's operator follows: the rows it drops "
        "count as Spark's watermark node counts them (Spark pushes the filter's conjuncts that do not read the event "
        "time below it, and those rows do not count)",
        covered_by=tuple(f"event-time filter:{form}" for form in ("session", "dedup", "dedup_time", "dedup_within")),
    ),
    Entry(
        "a filter on the event time after `withWatermark` on a side of a stream-stream join",
        RUNS,
        lambda r: (
            watermarked(r)
            .where(F.col(T) > F.lit(LATER).cast("timestamp"))
            .alias("a")
            .join(
                watermarked(r).alias("b"), F.expr(f"a.k = b.k AND b.{T} BETWEEN a.{T} - INTERVAL 10 SECONDS AND a.{T}")
            )
        ),
        "append",
        note="the filter runs in the side's source, in Spark, whose watermark misa's join follows: a row it drops "
        "still moves the watermark, evicts state and makes later rows late, as in Spark",
        covered_by=("event-time filter:stream_join",),
    ),
    Entry(
        "`dropDuplicates(...)` or `dropDuplicatesWithinWatermark(...)`, then `groupBy(window(t, size), cols)` or "
        "`groupBy(cols)`: append, update",
        RUNS,
        lambda r: watermarked(r).dropDuplicates(["k", T]).groupBy(F.window(T, W), "k").agg(F.count("*")),
        "append",
        "the deduplication's output of a batch is the aggregation's input in the same batch, with Spark's propagated "
        "watermark (`PropagateWatermarkSimulator`); both operators' state in the one checkpoint, committed together",
        covered_by=("chain:aggregate:append", "chain:aggregate:update"),
    ),
    Entry(
        "`groupBy(window(t, size), cols)` (append), then `groupBy(window(window_time(window), size2))` (append)",
        RUNS,
        lambda r: windowed(r, F.count("*").alias("n")).groupBy(F.window(F.window_time("window"), "1 minute")).count(),
        "append",
        "the windows the first aggregation closes in a batch are the second's input in that batch, and close the "
        "second's windows in the batch Spark closes them (often one without data)",
        covered_by=("chain:window:append",),
    ),
    Entry(
        "inner stream-stream join, then `groupBy(window(t, size), cols)` over a side's event time (append, update; "
        "the join's columns under names of their own)",
        RUNS,
        lambda r: (
            joined(r, f"b.{T} BETWEEN a.{T} - INTERVAL 10 SECONDS AND a.{T}")
            .select(F.col("a.k").alias("k"), F.col(f"b.{T}").alias("bt"))
            .groupBy(F.window("bt", W), "k")
            .count()
        ),
        "append",
        "the aggregation's watermark is the join's output watermark: the least of its sides' state watermarks and "
        "the global one, as Spark propagates it, moved in the batches Spark runs without data for the aggregation "
        "(the join judges the next batch's late rows by it); in update output (Spark 4 runs an inner join in it) "
        "the aggregation emits its updated windows, every batch",
        covered_by=("chain:join:append", "chain:join:update"),
    ),
    Entry(
        "three or more stateful operations in a chain (a deduplication or an inner join, then a window's "
        "aggregation (append), then a window over `window_time(window)`; windows of windows of windows)",
        RUNS,
        lambda r: (
            watermarked(r)
            .dropDuplicates(["k", T])
            .groupBy(F.window(T, W), "k")
            .count()
            .groupBy(F.window(F.window_time("window"), "1 minute"))
            .count()
        ),
        "append",
        "each operation's input is the output of the one below in the same batch, its watermark the one below's "
        "output watermark (`PropagateWatermarkSimulator`); every operator's state in the one checkpoint",
        covered_by=("chain:window3:append", "chain:aggregate3:append"),
    ),
    Entry(
        "`dropDuplicates(cols)` above a window's aggregation (append) or an inner stream-stream join",
        DIFFERS,
        lambda r: windowed(r, F.count("*").alias("n")).dropDuplicates(["k"]),
        "append",
        "its rows are judged and its keys evicted by the window's end (a join's: by its event-time column, the "
        "join's output watermark); of a key's rows in one batch misa keeps the first the operation below emits, "
        "Spark the first its shuffle reads (not the same row where two differ but in other columns)",
        covered_by=("chain:window_dedup:append", "chain:join_dedup:append"),
    ),
    Entry(
        "an aggregation in update or complete output below another stateful operation",
        REFUSED,
        lambda r: windowed(r, F.count("*").alias("n")).groupBy(F.window(F.window_time("window"), "1 minute")).count(),
        note="Spark refuses it too: the aggregation below in append output",
        refusal="Detected pattern of possible 'correctness' issue",
    ),
    Entry(
        "a session window's aggregation (append), then `groupBy(window(window_time(session_window), size))`; a "
        "deduplication, a time window's aggregation or an aggregation by the event time (append), then a session "
        "window's aggregation (append; over `window_time(window)`, or the event time)",
        RUNS,
        lambda r: (
            watermarked(r)
            .groupBy(F.session_window(T, "5 seconds"), "k")
            .count()
            .groupBy(F.window(F.window_time("session_window"), "1 minute"))
            .count()
        ),
        "append",
        "the sessions a batch closes are the windows' input in that batch (a session's window_time: its end less "
        "1 us), with the sessions' output watermark; over a deduplication, its rows of a batch are the sessions' "
        "input in that batch, judged and closed by the propagated watermark; over the windows, the windows a batch "
        "closes are the sessions' input in that batch",
        covered_by=(
            "chain:session_below:append",
            "chain:session_above:append",
            "chain:window_sessions:append",
            "chain:instant_sessions:append",
        ),
    ),
    Entry(
        "a left, right or full outer or left semi stream-stream join, then `groupBy(window(t, size), cols)`; a "
        "stream-stream join, then a session window's aggregation (append: Spark runs outer joins in it only)",
        RUNS,
        lambda r: (
            joined(r, f"b.{T} BETWEEN a.{T} - INTERVAL 10 SECONDS AND a.{T}", "left_outer")
            .select(F.col("a.k").alias("k"), F.col(f"a.{T}").alias("at"))
            .groupBy(F.window("at", W), "k")
            .count()
        ),
        "append",
        "the join's output of a batch (its unmatched rows in the batch that evicts them, as Spark emits them) is the "
        "aggregation's input in that batch, judged and closed by the join's output watermark; sessions over an "
        "inner join's pairs alike",
        covered_by=("chain:outer_join:append", "chain:join_sessions:append"),
    ),
    Entry(
        "a stream-stream join (inner, outer or semi) above other stateful operations on one side or both: a "
        "deduplication, a window's aggregation (append), another join, or a chain of them",
        RUNS,
        lambda r: (
            watermarked(r)
            .dropDuplicates(["k", T])
            .alias("a")
            .join(
                watermarked(r).alias("b"), F.expr(f"a.k = b.k AND b.{T} BETWEEN a.{T} - INTERVAL 10 SECONDS AND a.{T}")
            )
        ),
        "append",
        "each side's input to the join in a batch is the output of its operations in that batch (or the stream's rows "
        "of the batch); the join judges and evicts by the least of the two sides' output watermarks (Spark's "
        "propagated one). Refused when an operation below has no watermark (Spark's join then follows the other "
        "side's), and a second such join in one chain",
        covered_by=(
            "chain:dedup_left:append",
            "chain:dedup_right:append",
            "chain:windows_left:append",
            "chain:dedup_both:append",
        ),
    ),
    Entry(
        "a stream-stream join above a stateful operation whose input has no `withWatermark`",
        REFUSED,
        lambda r: watermarked(r).alias("a").join(events(r).dropDuplicates(["k", T]).alias("b"), F.expr("a.k = b.k")),
        "append",
        note="Spark's join then takes the other side's watermark alone; misa's join reads the operation below's: "
        "`withWatermark` on that side's stream",
        refusal="it has no watermark",
    ),
    Entry(
        "two stream-stream joins above other stateful operations in one chain, each joining a stream of its own",
        REFUSED,
        lambda r: (
            watermarked(r)
            .dropDuplicates(["k", T])
            .alias("a")
            .join(
                watermarked(r).alias("b"), F.expr(f"a.k = b.k AND b.{T} BETWEEN a.{T} - INTERVAL 10 SECONDS AND a.{T}")
            )
            .select(F.col("a.k").alias("k1"), F.col(f"b.{T}").alias("t1"))
            .join(
                watermarked(r).alias("c"),
                F.expr(f"k1 = c.k AND c.{T} BETWEEN t1 - INTERVAL 10 SECONDS AND t1"),
            )
        ),
        "append",
        note="misa's source carries one join's other side past the operations below: one such join a query, the "
        "second query reading the first one's output",
        refusal="a second stream-stream join above",
    ),
    Entry(
        "`dropDuplicatesWithinWatermark` above a window's aggregation",
        REFUSED,
        lambda r: windowed(r, F.count("*").alias("n")).dropDuplicatesWithinWatermark(["k"]),
        "append",
        note="Spark's deduplication reads the window as a timestamp for its keys' expiries: `dropDuplicates(cols)` "
        "(judged by the window's end)",
        refusal="reads as a timestamp",
    ),
    Entry(
        "inner stream-stream join with an event-time interval (`a.join(b, keys & time bounds)`)",
        RUNS,
        lambda r: joined(r, f"b.{T} BETWEEN a.{T} - INTERVAL 10 SECONDS AND a.{T}"),
        "append",
        "the two sides' state watermarks are Spark's own (`StreamingJoinHelper`), the global watermark the minimum "
        "of both sides' (`spark.sql.streaming.multipleWatermarkPolicy`)",
        covered_by=("join:interval", "join:strict", "join:one_bound"),
    ),
    Entry(
        "inner stream-stream join on keys only, or with a predicate of both sides' values",
        RUNS,
        lambda r: joined(r, "a.v < b.v"),
        "append",
        "without time bounds both sides keep every row, as in Spark; a side whose event time nothing after the join "
        "reads drops no late row (Spark's optimizer prunes that column below the join, whose late-row filter reads "
        "its input's event-time column)",
        covered_by=("join:no_bound", "join:a.v < b.v"),
    ),
    Entry(
        "inner stream-stream join on the event time (`a.t = b.t` among the keys)",
        RUNS,
        lambda r: joined(r, f"a.{T} = b.{T}"),
        "append",
        "state is evicted by key, as Spark's key watermark does",
        covered_by=("join:key_time",),
    ),
    Entry(
        "left outer, right outer, full outer and left semi stream-stream joins (`how='left_outer'`, ...)",
        RUNS,
        lambda r: joined(r, f"b.{T} BETWEEN a.{T} - INTERVAL 10 SECONDS AND a.{T}", "left_outer"),
        "append",
        "the condition is evaluated on each pair of rows; a preserved side's row that never matched comes out "
        "with nulls in the batch Spark's state watermark evicts it (often one without data); a left semi join's "
        "left row comes out once, on its first match (a batch's right rows meet the stored left rows before its left "
        "rows meet the right ones, as in Spark 4.3)",
        covered_by=("join:left_outer", "join:right_outer", "join:full_outer", "join:left_semi"),
    ),
    Entry(
        "an outer or semi stream-stream join whose condition has a part of one side's columns alone (`a.v > 0`)",
        REFUSED,
        lambda r: joined(r, f"b.{T} BETWEEN a.{T} - INTERVAL 10 SECONDS AND a.{T} AND a.v > 0", "left_outer"),
        "append",
        "that side filtered before the join",
        "reads one side only",
    ),
    Entry(
        "`groupBy(cols).applyInPandasWithState(func, output, state, mode, timeout)`: NoTimeout, "
        "EventTimeTimeout, ProcessingTimeTimeout; Update and Append",
        DIFFERS,
        lambda r: (
            watermarked(r)
            .groupBy("k")
            .applyInPandasWithState(count_rows, "k string, n long", "n long", "Update", "NoTimeout")
        ),
        note="Spark's GroupState, state and timeouts as Spark keeps them; a processing-time timeout fires in the "
        "first data batch whose start (misa's clock when its state phase starts, Spark's trigger time) is after it: "
        "Spark also runs a batch without data after every batch for them (under availableNow without end)",
        covered_by=tuple(f"group_state:{t}" for t in ("NoTimeout", "EventTimeTimeout", "ProcessingTimeTimeout")),
    ),
    Entry(
        "`applyInPandasWithState` above a `dropDuplicates(...)` or an inner stream-stream join (a chain)",
        DIFFERS,
        lambda r: (
            watermarked(r)
            .dropDuplicates(["k", T])
            .groupBy("k")
            .applyInPandasWithState(count_rows, "k string, n long", "n long", "Update", "NoTimeout")
        ),
        note="the function's rows of a batch are the operation below's output of that batch, its watermark "
        "(`getCurrentWatermarkMs`, event-time timeouts) the one below's output watermark, as Spark propagates it; "
        "and the differences of `applyInPandasWithState` alone",
        covered_by=("chain:dedup_below:update", "chain:dedup_below:append"),
    ),
    Entry(
        "`applyInPandasWithState` (append, `NoTimeout`), then an aggregation (update)",
        RUNS,
        lambda r: (
            watermarked(r)
            .groupBy("k")
            .applyInPandasWithState(count_rows, "k string, n long", "n long", "Append", "NoTimeout")
            .groupBy("k")
            .count()
        ),
        "update",
        "the function's rows of a batch are the aggregation's input in that batch; neither runs a batch without data "
        "(applyInPandasWithState passes no watermark to the aggregation). Spark refuses it with event-time timeouts "
        "(its correctness check), and misa with Spark's message; another operation above applyInPandasWithState is "
        "refused at start, naming the pair",
        covered_by=("chain:aggregate_above:update",),
    ),
    Entry(
        "`applyInPandasWithState` with state fields of type timestamp, date, decimal, binary, day-time interval, "
        "array, map or struct (nested too)",
        RUNS,
        lambda r: (
            watermarked(r)
            .groupBy("k")
            .applyInPandasWithState(count_latest, "k string, n long", "n long, at timestamp", "Update", "NoTimeout")
        ),
        note="a value stored as Spark's JVM stores it and given back as Spark gives it: a decimal rounded half up to "
        "its scale (beyond its precision the batch fails, as Spark's), a value of another type than its field's "
        "null, anything in a string field its JVM string (where that is an identity hash, a HashMap's order or a "
        "Calendar's fields, misa fails the batch, naming the fix: `str(value)`), structs as `Row`s; a map's "
        "entries come back in another order than Spark's HashMap gives (equal as a dict). A year-month interval "
        "is refused; message: `which misa does not store as Spark does`",
        covered_by=("group_state:typed state",),
    ),
    Entry(
        "`groupBy(cols).applyInPandasWithState(...)` by a column of type struct (nested too), array, decimal or binary "
        "without floating values (alone or above another stateful operation)",
        RUNS,
        lambda r: (
            events(r)
            .groupBy("d")
            .applyInPandasWithState(count_rows, "k decimal(10,2), n long", "n long", "Update", "NoTimeout")
        ),
        note="the state keyed by the key's text (equal where Spark's keys are equal), the function given the key as "
        "Spark's worker converts it (a struct as a dict, an array as a numpy array, a Decimal, bytes); with "
        "timeouts, a timed-out group's call gets the key its last call with rows got. A map: refused, as Spark "
        "refuses grouping by one. A struct or array holding a float or double: refused (Spark groups a -0.0 with a "
        "0.0 within a batch but keys its state by the first key's bits, so across batches they are two groups); "
        "message: `a key holding floating values`",
        covered_by=("group_state:composite key",),
    ),
    Entry(
        "`groupBy(cols).applyInPandasWithState(...)` by a struct or array column holding a float or double",
        REFUSED,
        lambda r: (
            events(r)
            .withColumn("p", F.struct("k", F.col("v").cast("double").alias("x")))
            .groupBy("p")
            .applyInPandasWithState(count_rows, "p struct<k:string,x:double>, n long", "n long", "Update", "NoTimeout")
        ),
        note="Spark groups a -0.0 with a 0.0 within a batch but keys its state by the first key's bits (two groups "
        "across batches): the floating fields cast to a decimal or a string in the key",
        refusal="a key holding floating values",
    ),
    Entry(
        "`transformWithStateInPandas`, `flatMapGroupsWithState` (Scala)",
        REFUSED,
        lambda r: events(r).groupBy("k").transformWithStateInPandas(KeepNothing(), "k string", "Append", "None"),
        "append",
        "`misa.transform_with_state_in_pandas` for a StatefulProcessor, or a misa operator of your own",
        "arbitrary state",
    ),
    Entry(
        "`groupBy(expression)` (`upper(s)`, `(k % 2).alias('p')`, a struct's field `st.a`), with a window or without",
        RUNS,
        lambda r: watermarked(r).groupBy(F.window(T, W), F.upper("s"), (F.col("k2") % 2).alias("p")).count(),
        "append",
        "Spark computes the key in misa's source, misa groups by its value",
        covered_by=tuple(f"key expressions:{form}" for form in ("global", "tumbling", "sliding", "session")),
    ),
    Entry(
        "`groupBy(window, expression of the window)`",
        REFUSED,
        lambda r: watermarked(r).groupBy(F.window(T, W), F.window(T, W)["end"]).count(),
        "append",
        "group by the window, and compute from it in a `select` after the aggregation",
        "an expression of its window",
    ),
    Entry(
        "a group, join or deduplication key of type struct (nested too), array, decimal or binary (`groupBy('st')`, "
        "`groupBy(struct(a, b))`, `a.st = b.st`, `dropDuplicates(['arr'])`)",
        RUNS,
        lambda r: watermarked(r).groupBy(F.window(T, W), F.struct("k", "d").alias("kd")).count(),
        "append",
        "misa keys its state by a text Spark computes in misa's source, equal exactly where Spark's keys are (fields "
        "and elements by position, null fields equal, -0.0 and NaN normalized inside structs and arrays as Spark "
        "normalizes floating keys, decimals at their scale); an aggregation's output decodes it back to Spark's type; "
        "so too in a chain of stateful operations, above another and below one",
        covered_by=tuple(
            f"composite keys:{form}"
            for form in ("global", "tumbling", "sliding", "session", "dedup", "dedup_time", "dedup_within", "inner")
        )
        + ("composite keys:chain",),
    ),
    Entry(
        "a key of a map type (`dropDuplicatesWithinWatermark(['m'])`, a map in a struct or an array)",
        REFUSED,
        lambda r: watermarked(r).withColumn("m", F.create_map("k", "v")).dropDuplicatesWithinWatermark(["m"]),
        "append",
        "Spark refuses grouping by a map, joining on one and `dropDuplicates` of one itself (a map has no order): a "
        "key of its entries in an order of their own (`array_sort(map_entries(m))`)",
        "a map, which Spark does not group by",
    ),
    Entry(
        "an expression over aggregates inside `agg` (`agg(sum(v) * 2)`, `max(v) - min(v)`)",
        RUNS,
        lambda r: events(r).groupBy("k").agg((F.sum("v") * 2).alias("x"), F.max("v") - F.min("v")),
        note="misa computes the aggregates, Spark the expression from them on each batch's output (its SQL read "
        "from the plan, as Spark's aggregation computes its results)",
        covered_by=tuple(
            f"expressions over aggregates:{form}" for form in ("global", "tumbling", "sliding", "session")
        ),
    ),
    # ------------------------------------------------------------------ functions
    Entry(
        "`count(*)`, `count(col)`",
        RUNS,
        lambda r: windowed(r, F.count("*"), F.count("s")),
        covered_by=("count(*)", "fn:count:bigint", "fn:count:string"),
    ),
    Entry(
        "`sum`, `avg`, `min`, `max` of integers and doubles (an expression argument too)",
        RUNS,
        lambda r: windowed(r, F.sum(F.col("v") * 2), F.avg("v"), F.min("v"), F.max("v")),
        covered_by=("fn:sum:bigint", "fn:sum:double", "fn:avg:double", "fn:min:double", "fn:max:bigint"),
    ),
    Entry(
        "`sum`, `avg` of decimals (exact; Spark's result types and overflow)",
        RUNS,
        lambda r: windowed(r, F.sum("d"), F.avg("d")),
        covered_by=("fn:sum:decimal", "fn:avg:decimal"),
    ),
    Entry(
        "`min`, `max` of strings, booleans, decimals, dates, timestamps",
        RUNS,
        lambda r: windowed(r, F.min("s"), F.max("b"), F.max("d"), F.min(T)),
        covered_by=("fn:min:string", "fn:max:boolean", "fn:max:decimal"),
    ),
    Entry(
        "`stddev`, `stddev_samp`, `stddev_pop`, `variance`, `var_samp`, `var_pop` (sliding windows too)",
        RUNS,
        lambda r: windowed(r, F.stddev("v"), F.stddev_pop("v"), F.variance("d"), F.var_pop("v")),
        note="Spark's central moments (count, mean and squared deviations over doubles), merged as Spark merges them: "
        "equal up to floating-point rounding; the sample functions null for one row (Spark's default; "
        "`spark.sql.legacy.statisticalAggregate=true` is refused)",
        covered_by=(
            "fn:stddev:bigint",
            "fn:stddev_samp:decimal",
            "fn:stddev_pop:double",
            "fn:variance:sliding",
            "fn:var_samp:session",
            "fn:var_pop:global",
        ),
    ),
    Entry(
        "`count_if(cond)`, `bool_and` / `every`, `bool_or` / `some` (sliding windows too)",
        RUNS,
        lambda r: (
            watermarked(r)
            .groupBy(F.window(T, W, "5 seconds"), "k")
            .agg(F.count_if(F.col("v") > 1), F.bool_and("b"), F.every(F.col("v") > 0), F.bool_or("b"), F.some("b"))
        ),
        covered_by=("fn:count_if:bigint", "fn:bool_and:string", "fn:bool_or:sliding", "fn:count_if:session"),
    ),
    Entry(
        "`skewness`, `kurtosis`, `corr`, `covar_pop`, `covar_samp` (sliding windows too)",
        RUNS,
        lambda r: windowed(r, F.skewness("v"), F.kurtosis("d"), F.corr("v", "t"), F.covar_samp("t", "v")),
        note="Spark's moments (order 4; covariance and correlation over the rows where both are non-null), merged as "
        "Spark merges them: equal up to floating-point rounding; null where Spark divides by zero (one row, equal "
        "values, a constant column; `spark.sql.legacy.statisticalAggregate=true` is refused)",
        covered_by=(
            "fn:skewness:double",
            "fn:kurtosis:bigint",
            "fn:corr:sliding",
            "fn:covar_pop:decimal",
            "fn:covar_samp:global",
        ),
    ),
    Entry(
        "`bit_and(col)`, `bit_or(col)`, `bit_xor(col)` of integers (sliding and session windows too)",
        RUNS,
        lambda r: windowed(r, F.bit_and("v"), F.bit_or("k2"), F.bit_xor("v")),
        note="folded bitwise in the input's integer type, as Spark's; null for a group without a non-null value",
        covered_by=("fn:bit_and:bigint", "fn:bit_or:sliding", "fn:bit_xor:session", "fn:bit_and:global"),
    ),
    Entry(
        "`product(col)` of numbers (sliding and session windows too)",
        RUNS,
        lambda r: windowed(r, F.product("v"), F.product("d")),
        note="Spark's product of the values as doubles, nulls skipped, null without a value; misa multiplies each "
        "batch's partial products (and a sliding window's panes) in its own order: equal up to floating-point rounding",
        covered_by=("fn:product:bigint", "fn:product:double", "fn:product:sliding", "fn:product:session"),
    ),
    Entry(
        "`regr_count`, `regr_avgx`, `regr_avgy`, `regr_sxx`, `regr_syy`, `regr_sxy`, `regr_slope`, `regr_intercept`, "
        "`regr_r2` (sliding and session windows too)",
        RUNS,
        lambda r: windowed(
            r, F.regr_count("v", "t"), F.regr_avgx("d", "v"), F.regr_slope("v", "t"), F.regr_r2("t", "v")
        ),
        note="over the rows where both columns are non-null: the count and averages as Spark's replacements (`count`, "
        "`avg`), the others from the pairs' co-moments as Spark evaluates them (null without a pair; slope, intercept "
        "and R² null where x is constant, R² 1 where only y is): equal up to floating-point rounding",
        covered_by=("fn:regr_count:bigint", "fn:regr_slope:double", "fn:regr_r2:sliding", "fn:regr_sxy:session"),
    ),
    Entry(
        "`try_sum(col)` of floating values, `try_avg(col)` of numbers but decimals",
        RUNS,
        lambda r: windowed(r, F.try_sum(F.col("v").cast("double")), F.try_avg("v")),
        note="Spark sums them in doubles, where its try_ mode changes nothing: `sum` and `avg`",
        covered_by=("fn:try_sum:double", "fn:try_avg:bigint", "fn:try_avg:double"),
    ),
    Entry(
        "`try_sum(col)` of integers or decimals, `try_avg(col)` of decimals",
        REFUSED,
        lambda r: windowed(r, F.try_sum("v")),
        note="null where the sum overflows (order-dependent in Spark's partial sums): `sum(col)` (an overflow wraps "
        "around, or fails under `spark.sql.ansi.enabled`), or the try_ function of the column cast to double",
        refusal="is null where its sum overflows",
    ),
    Entry(
        "`listagg(col[, delimiter])`, `string_agg(col[, delimiter])` of strings or binary values",
        DIFFERS,
        lambda r: windowed(r, F.listagg("s"), F.string_agg(F.col("v").cast("string"), ", ")),
        note="the non-null values joined by the delimiter, null without one: misa collects them as `collect_list` "
        "does (bounded alike) and Spark's projection joins them, so their order is collect_list's, and differs where "
        "its does",
        covered_by=("fn:listagg:bigint", "fn:string_agg:double", "fn:listagg:sliding", "fn:string_agg:session"),
    ),
    Entry(
        "`listagg(col) WITHIN GROUP (ORDER BY ...)`, by the value or other columns (`ASC`, `DESC`, `NULLS FIRST` or "
        "`LAST`)",
        RUNS,
        lambda r: windowed(
            r,
            F.expr("listagg(s) WITHIN GROUP (ORDER BY s)"),
            F.expr("string_agg(v, ',') WITHIN GROUP (ORDER BY t DESC, v NULLS LAST)"),
        ),
        note="misa collects each value with its order keys (bounded like `collect_list`) and Spark's projection "
        "sorts them as Spark's `listagg` sorts its buffer: stably, ties in the order Spark read the rows (which "
        "collect_list keeps)",
        covered_by=("fn:listagg_ordered:string", "fn:listagg_by_time:double", "fn:listagg_by_time:session"),
    ),
    Entry(
        "`max_by(col, ord)`, `min_by(col, ord)`",
        DIFFERS,
        lambda r: windowed(r, F.max_by("s", "v"), F.min_by("v", "t")),
        note="the value at the greatest (least) ordering, rows of a null ordering skipped; on ties, the value Spark's "
        "aggregation of the batch picks (its reading order; Spark documents max_by/min_by as non-deterministic "
        "there), and across batches the later batch's, as Spark's merge of its state with a batch takes it; over "
        "sliding windows a tie within one batch between rows of two panes goes to the later pane's",
        covered_by=("fn:max_by:string", "fn:min_by:bigint", "fn:max_by:session", "fn:min_by:sliding"),
    ),
    Entry(
        "`any_value(col)`, `any_value(col, ignoreNulls=True)`",
        DIFFERS,
        lambda r: windowed(r, F.any_value("v"), F.any_value("s", F.lit(True))),
        note="Spark computes it as `first(col)`, and so does misa: " + ORDER_NOTE,
        covered_by=("fn:any_value:bigint", "fn:any_value:tumbling"),
    ),
    Entry(
        "`first(col)`, `last(col)`",
        DIFFERS,
        lambda r: windowed(r, F.first("v"), F.last("s")),
        note=ORDER_NOTE,
        covered_by=("fn:first:bigint", "fn:last:double"),
    ),
    Entry(
        "`first(col, ignorenulls=True)`, `last(col, ignorenulls=True)`",
        DIFFERS,
        lambda r: windowed(r, F.first("v", ignorenulls=True), F.last("s", ignorenulls=True)),
        note="the first (last) non-null value; " + ORDER_NOTE,
        covered_by=("fn:first_ignore_nulls:boolean", "fn:last_ignore_nulls:double"),
    ),
    Entry(
        "`collect_list(col)`",
        DIFFERS,
        lambda r: windowed(r, F.collect_list("v")),
        note="bounded: a group's list holds at most `spark.misa.aggregate.collectMaxItems` items (more fails "
        "the batch, naming the aggregate); its items in the order Spark reads the rows (Spark's own order changes "
        "where its hash aggregation falls back to sorting, past 128 keys in a task)",
        covered_by=("fn:collect_list:bigint", "fn:collect_list:string"),
    ),
    Entry(
        "`collect_set(col)`",
        DIFFERS,
        lambda r: windowed(r, F.collect_set("s")),
        note="bounded like collect_list; its items in first-seen order (Spark's are in its hash set's order)",
        covered_by=("fn:collect_set:string", "fn:collect_set:bigint"),
    ),
    Entry(
        "`max_by(x, y, k)`, `min_by(x, y, k)` (any window)",
        DIFFERS,
        lambda r: windowed(r, F.max_by("s", "v", 2), F.min_by("d", "t", 3)),
        note="Spark's heap of `k` slots, each batch's top `k` (Spark's) taken into the stored heap, ties kept by the "
        "stored rows as Spark's state merge keeps them; ties at the `k`-th place among one batch's rows can keep "
        "another row than Spark's, which follows its partial heaps' slots (Spark documents the function as "
        "non-deterministic on ties); ordered by numbers, strings, booleans, binary values, decimals and times (not "
        "structs or arrays)",
        covered_by=(
            "fn:max_by_k:string",
            "fn:min_by_k:double",
            "fn:max_by_k:sliding",
            "fn:min_by_k:session",
            "fn:max_by_k:tumbling",
        ),
    ),
    Entry(
        "`collect_union(col)` of arrays, `RESPECT NULLS` too (any window)",
        DIFFERS,
        lambda r: windowed(r, F.collect_union(F.array("v", "k2")), F.expr("collect_union(array(s)) RESPECT NULLS")),
        note="as collect_set: each batch's distinct elements (Spark's), merged into the stored ones as Spark's set "
        "keeps them (-0.0 as 0.0, one NaN; `RESPECT NULLS`: one null); in first-seen order (Spark's in its hash set's)",
        covered_by=(
            "fn:collect_union:string",
            "fn:collect_union:double",
            "fn:collect_union_nulls:bigint",
            "sliding:collect_union_nulls:string",
            "fn:collect_union:session",
        ),
    ),
    Entry(
        "`approx_count_distinct(col)`",
        DIFFERS,
        lambda r: windowed(r, F.approx_count_distinct("s")),
        note="Spark's hash and registers; equal to Spark's up to 400 distinct values per group; beyond, its own "
        "estimate with Spark's relative standard deviation (5 %; measured 4 to 5 %), not Spark's exact value",
        covered_by=("fn:approx_count_distinct:string", "fn:approx_count_distinct:bigint"),
    ),
    Entry(
        "`approx_count_distinct(col, rsd)` with another error",
        REFUSED,
        lambda r: windowed(r, F.approx_count_distinct("s", 0.01)),
        note="`approx_count_distinct(col)`",
        refusal="asks for relative error",
    ),
    Entry(
        "sliding windows: `max_by`, `min_by`, `approx_count_distinct`; `min`, `max` of strings, booleans, decimals; "
        "`sum`, `avg` of decimals",
        RUNS,
        lambda r: (
            watermarked(r)
            .groupBy(F.window(T, W, "5 seconds"), "k")
            .agg(F.max_by("s", "v"), F.min("s"), F.max("b"), F.sum("d"), F.avg("d"), F.approx_count_distinct("s"))
        ),
        note="each pane keeps the aggregates' states, combined into each window's as Spark's merge combines them (a "
        "tie of max_by/min_by to the later batch's; approx_count_distinct's registers as over tumbling windows)",
        covered_by=(
            "sliding:max_by:bigint",
            "sliding:min_by:string",
            "sliding:min:string",
            "sliding:max:boolean",
            "sliding:avg:decimal",
            "sliding:approx_count_distinct:string",
        ),
    ),
    Entry(
        "sliding windows: `first`, `last` (ignoring nulls too), `any_value`, `collect_list`, `collect_set`",
        DIFFERS,
        lambda r: (
            watermarked(r)
            .groupBy(F.window(T, W, "5 seconds"), "k")
            .agg(F.first("v"), F.last("v", ignorenulls=True), F.any_value("b"), F.collect_list("s"), F.collect_set("d"))
        ),
        note="each pane keeps its rows' values stamped with their batch and their place in it (Spark's reading order: "
        "partition, then row), and a window's value is of its panes' rows in that order, as Spark's is of the "
        "window's rows; the differences over tumbling windows stay: first/last where Spark aggregates with a sort "
        "(strings, decimals), collect_set's order, and collect_list's where Spark's hash aggregation falls back to "
        "sorting past 128 keys in a task, which sliding windows reach sooner (each row is in every window that holds "
        "it)",
        covered_by=(
            "sliding:first:bigint",
            "sliding:last:bigint",
            "sliding:first_ignore_nulls:double",
            "sliding:last_ignore_nulls:boolean",
            "sliding:any_value:double",
            "sliding:collect_list:string",
            "sliding:collect_set:decimal",
        ),
    ),
    Entry(
        "`mode(col, true)`, `mode() WITHIN GROUP (ORDER BY col)`, `... (ORDER BY col DESC)` (sliding windows too)",
        RUNS,
        lambda r: windowed(r, F.mode("v", True), F.expr("mode() WITHIN GROUP (ORDER BY s DESC)")),
        note="the most frequent non-null value (null if none), of counts per value added across batches and panes; "
        "on ties the lowest value in Spark's order (NaN above every double), the highest with DESC; -0.0 and 0.0 "
        "count as one value (0.0), every NaN as one; of numbers, strings, booleans, decimals, dates, timestamps",
        covered_by=("fn:mode:bigint", "fn:mode:string", "fn:mode_highest:double", "sliding:mode:double"),
    ),
    Entry(
        "`mode(col)`",
        DIFFERS,
        lambda r: windowed(r, F.mode("v")),
        note="as `mode(col, true)`, but on ties Spark returns any of the values (its hash map's order; Spark "
        "documents it as non-deterministic there), misa the lowest",
        covered_by=("fn:mode:boolean", "fn:mode:decimal", "fn:mode:session"),
    ),
    Entry(
        "`percentile_approx(col, p[, accuracy])`, `approx_percentile`, `p` a percentage or an array (sliding windows "
        "too)",
        DIFFERS,
        lambda r: windowed(r, F.percentile_approx("v", 0.5), F.approx_percentile("d", [0.25, 0.75], 100)),
        note="Spark's quantile sketch (QuantileSummaries), ported: a batch's rows of a group make one partial buffer, "
        "merged into the stored sketch as Spark merges them, so misa's result is Spark's where Spark reads those rows "
        "in one partition; Spark's own depends on how it splits them into partial buffers (input partitions, its "
        "sort-based fallback past 128 keys in a task) and on its shuffle's merge order, except while a group holds "
        "fewer than accuracy / 2 values, none NaN (every sample exact: the value at rank ceil(p * n)), where misa's "
        "always equals Spark's; beyond, the sketch's error bound (1 / accuracy of the count, in rank) holds for both; "
        "a merge next to a NaN drops samples in Spark's sketch and in misa's alike. Sliding windows: a sketch per "
        "pane, a window's merged from its panes earliest first (Spark's: one per window); session windows: the "
        "merged sessions' sketches in start order; equal under the same bound. Numbers, decimals, dates, timestamps, "
        "as Spark's types (`timestamp_ntz` and intervals refused)",
        covered_by=(
            "fn:percentile_approx:bigint",
            "fn:percentile_array:double",
            "fn:approx_percentile_5:decimal",
            "fn:approx_percentile_5:tumbling",
            "sliding:percentile_array:double",
        ),
    ),
    Entry(
        "`percentile(col, p)`, `median(col)`, `percentile_cont(p)` and `percentile_disc(p) WITHIN GROUP (ORDER BY col "
        "[DESC])`, `p` a percentage or an array (sliding and session windows too)",
        RUNS,
        lambda r: windowed(r, F.median("v"), F.percentile("d", [0.25, 0.75])),
        note="exact, as Spark's `Percentile` computes them: a group's counts per value, merged across batches, panes "
        "and sessions, sorted in Spark's order (NaN last) and interpolated in doubles; `percentile_disc` Spark 4's "
        "(`spark.sql.legacy.percentileDiscCalculation=true` refused). Numbers and decimals (intervals and "
        "`percentile`'s frequency argument refused). Like Spark's, a group's state holds each distinct value",
        covered_by=(
            "fn:percentile:bigint",
            "fn:median:decimal",
            "fn:percentile_cont_desc:tumbling",
            "fn:percentile_disc:session",
            "fn:percentile_disc_array:double",
            "sliding:median:double",
        ),
    ),
    Entry(
        "`count(DISTINCT col)`",
        REFUSED,
        lambda r: windowed(r, F.count_distinct("v")),
        note="Spark refuses it too: `approx_count_distinct(col)`",
        refusal="Distinct aggregations are not supported",
    ),
    Entry(
        "`histogram_numeric(col, nb)` of numbers, dates, timestamps (tumbling windows or none)",
        DIFFERS,
        lambda r: windowed(r, F.histogram_numeric("v", F.lit(3))),
        note="Spark's streaming histogram (`NumericHistogram`), ported with its tie-breaking random numbers: a "
        "batch's rows of a group make one buffer, merged into the stored one as Spark merges buffers (their bins "
        "sorted together and trimmed; equal centres stay apart until a trim), so misa's result is Spark's where Spark "
        "reads those rows in one partition; Spark's own depends on how it splits them into partial buffers (input "
        "partitions, its sort-based fallback past 128 keys in a task)",
        covered_by=("fn:histogram_3:bigint", "fn:histogram_20:double", "fn:histogram_3:global"),
    ),
    Entry(
        "`histogram_numeric` over sliding or session windows",
        REFUSED,
        lambda r: watermarked(r).groupBy(F.window(T, W, "5 seconds"), "k").agg(F.histogram_numeric("v", F.lit(3))),
        note="Spark builds each sliding window's histogram from its rows and merges sessions' buffers in its own "
        "order, which panes and misa's session merges do not follow: tumbling windows",
        refusal="histogram_numeric over",
    ),
    Entry(
        "`theta_sketch_agg(col[, lgNomEntries])`, `count_min_sketch(col, eps, confidence, seed)` (any window)",
        RUNS,
        lambda r: windowed(r, F.theta_sketch_agg("v"), F.count_min_sketch("s", F.lit(0.1), F.lit(0.9), F.lit(1))),
        note="Spark's sketch of each batch's rows, merged into the stored one: Spark's bytes (its merges do not "
        "depend on order)",
        covered_by=(
            "fn:theta_sketch_agg:double",
            "fn:theta_sketch_agg_5:bigint",
            "fn:count_min_sketch:string",
            "fn:count_min_sketch:bigint",
            "sliding:theta_sketch_agg:double",
        ),
    ),
    Entry(
        "`hll_sketch_agg(col[, lgConfigK])`, `kll_sketch_agg_bigint/float/double(col[, k])`, "
        "`tuple_sketch_agg_double/integer(key, summary[, lgNomEntries[, mode]])` (any window)",
        DIFFERS,
        lambda r: windowed(
            r, F.hll_sketch_agg("s"), F.kll_sketch_agg_bigint("v"), F.tuple_sketch_agg_integer("s", "v")
        ),
        note="a HyperLogLog sketch holds Spark's coupons or registers, but its image's table order and, past its "
        "list and set modes, its HIP estimate depend on the order of the merges, as Spark's own do on its partitions "
        "(`hll_sketch_estimate` may then differ within the sketch's error); a KLL sketch past `k` items compacts at "
        "random, in Spark too (its count, minimum and maximum are Spark's, its quantiles within the sketch's rank "
        "error); a tuple sketch holds Spark's entries (its image keeps them in its hash table's order), a double "
        "summary's sum added in the order of the merges",
        covered_by=(
            "fn:hll_sketch_agg:string",
            "fn:hll_sketch_agg_4:bigint",
            "fn:kll_sketch_agg_bigint:bigint",
            "fn:kll_sketch_agg_double:double",
            "fn:kll_sketch_agg_float:double",
            "fn:kll_sketch_agg_bigint_8:bigint",
            "fn:tuple_sketch_agg_double:string",
            "fn:tuple_sketch_agg_integer_max:bigint",
            "fn:tuple_sketch_agg_double_min_5:double",
        ),
    ),
    Entry(
        "`hll_union_agg`, `theta_union_agg`, `theta_intersection_agg`, `kll_merge_agg_*`, `tuple_union_agg_*`, "
        "`tuple_intersection_agg_*` of sketches",
        RUNS,
        lambda r: (
            windowed(r, F.hll_sketch_agg("s").alias("h"))
            .groupBy(F.window(F.window_time("window"), "1 minute"))
            .agg(F.hll_union_agg("h"))
        ),
        output_mode="append",
        note="as the sketches above (an HLL union's image as `hll_sketch_agg`'s); over sketches of another lgConfigK, "
        "Spark's `HLL_UNION_DIFFERENT_LG_K` unless allowed",
        covered_by=("sketch unions:window",),
    ),
    Entry(
        "`bitmap_construct_agg(bitmap_bit_position(col))`, `bitmap_or_agg(col)`, `bitmap_and_agg(col)` (any window)",
        RUNS,
        lambda r: windowed(r, F.bitmap_construct_agg(F.bitmap_bit_position("v")), F.bitmap_or_agg(F.unhex(F.hex("s")))),
        note="Spark's bitmap of each batch's rows, or-ed (and-ed) into the stored one: Spark's bytes",
        covered_by=(
            "fn:bitmap_construct_agg:bigint",
            "fn:bitmap_or_agg:string",
            "fn:bitmap_and_agg:bigint",
            "sliding:bitmap_construct_agg:bigint",
        ),
    ),
    Entry(
        "`theta_sketch_agg(col, 4)`, `theta_union_agg(col, 4)`",
        REFUSED,
        lambda r: windowed(r, F.theta_sketch_agg("v", 4)),
        note="lgNomEntries 5 or more (the least the DataSketches library misa merges with takes)",
        refusal="asks for lgNomEntries 4",
    ),
    Entry(
        "`approx_top_k(col[, k[, maxItemsTracked]])`, `approx_top_k_accumulate(col[, maxItemsTracked])`, "
        "`approx_top_k_combine(state[, maxItemsTracked])` (tumbling windows or none)",
        RUNS,
        lambda r: windowed(r, F.expr("approx_top_k(v, 3)"), F.expr("approx_top_k_accumulate(s, 20)")),
        note="Spark's frequent-items sketch (Java DataSketches' `ItemsSketch`), ported: each batch's state (Spark's "
        "own of its rows) merged into a fresh buffer after the stored one, as Spark's streaming aggregation merges "
        "them, so the counts, the purges past maxItemsTracked and the order of equal counts (the sketch's hash map, "
        "by each item's Java hash) are Spark's; Spark's own order of ties depends on its input partitions",
        covered_by=(
            "fn:approx_top_k:bigint",
            "fn:approx_top_k_small:decimal",
            "fn:approx_top_k_accumulate:string",
            "approx_top_k_combine:window",
        ),
    ),
    Entry(
        "`vector_sum(array<float>)`, `vector_avg(array<float>)` (tumbling windows or none)",
        RUNS,
        lambda r: windowed(r, F.call_function("vector_sum", F.array("v", "v").cast("array<float>"))),
        note="Spark's sum (average) of each batch's vectors with their count, merged into the stored one as Spark "
        "merges two buffers, in floats rounded at each step (a vector holding a null skipped, vectors of two lengths "
        "failing the batch, as in Spark)",
        covered_by=("fn:vector_sum:tumbling", "fn:vector_avg:global", "fn:vector_avg:string", "fn:vector_sum:boolean"),
    ),
    Entry(
        "`approx_top_k` and its family, `vector_sum`, `vector_avg` over sliding or session windows",
        REFUSED,
        lambda r: watermarked(r).groupBy(F.window(T, W, "5 seconds"), "k").agg(F.expr("approx_top_k(v)")),
        note="Spark orders equal counts (rounds float sums) in the order each window's rows (each session's buffers) "
        "reach its buffer, which panes and misa's session merges do not follow: tumbling windows",
        refusal="over sliding windows: Spark builds",
        covered_by=("row-ordered:refused windows",),
    ),
    Entry(
        "`approx_top_k` of a collated string (`UTF8_LCASE`, ICU collations)",
        REFUSED,
        lambda r: windowed(r, F.expr("approx_top_k(collate(s, 'UTF8_LCASE'))")),
        note="Spark counts their collation keys by a Java hash misa does not compute: the column without a collation",
        refusal="collation key",
    ),
    Entry(
        "`schema_of_variant_agg(v)` (any window)",
        RUNS,
        lambda r: windowed(r, F.schema_of_variant_agg(F.parse_json(F.to_json(F.struct("v", "s"))))),
        note="Spark's schema of each batch's variants (its printed text), merged into the stored one as Spark merges "
        "two schemas (JSON inference's `compatibleType` after the analyzer's tightest common type, `VARIANT` where "
        "none fits) and printed as Spark prints it",
        covered_by=(
            "fn:schema_of_variant_agg_cased:tumbling",
            "fn:schema_of_variant_agg_cased:global",
            "fn:schema_of_variant_agg:session",
            "fn:schema_of_variant_agg:sliding",
        ),
    ),
    Entry(
        "`schema_of_variant_agg` over sliding or session windows, of objects of one size whose field names differ "
        "only in case",
        DIFFERS,
        lambda r: (
            watermarked(r)
            .groupBy(F.window(T, W, "5 seconds"), "k")
            .agg(F.schema_of_variant_agg(F.parse_json(F.to_json(F.struct("v", "s")))))
        ),
        note="two such objects meeting in one merge become one object (Spark's tightest common type), else they keep "
        "both names; which ones meet depends on the order of the merges: each sliding window's rows in Spark, its "
        "panes in misa, and Spark's own on its partitions",
        covered_by=("fn:schema_of_variant_agg:sliding", "fn:schema_of_variant_agg:session"),
    ),
)


def render() -> str:
    """The docs table of :data:`ENTRIES`."""
    lines = ["| Spark | misa | notes |", "|---|---|---|"]
    for e in ENTRIES:
        note = e.note or ("-" if e.misa != REFUSED else "")
        if e.misa == REFUSED:
            note = f"{note}; message: `{e.refusal}`" if note else f"message: `{e.refusal}`"
        lines.append(f"| {e.spark} | {e.misa} | {note} |")
    return "\n".join(lines)
