"""Queries with stateful operations one above the other (issue 63: two, three, a deduplication above an aggregation or
a join), through misa.from_query and through plain Spark, compared batch id by batch id
(:func:`verify.differential.scenarios.run_scenario`).

Spark runs them with its watermark propagated from operation to operation (``PropagateWatermarkSimulator``): the
lower operation's output of a batch (the rows it emits in append mode) is the upper one's input in the same batch,
and the upper one closes its windows in the batch Spark closes them (often one without data, after the lower one
emitted the windows that close them). Each case has one file a batch (``maxFilesPerTrigger`` 1), late rows, and a
restart between rounds; chains Spark refuses are refused with Spark's reason, chains misa does not run with misa's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout

from misa.exceptions import UnsupportedQueryError
from misa.query.chain import ALLOW_MULTIPLE
from misa.query.job import planned
from tests.verify.test_query_shapes import event, stream
from verify.differential.catalog import count_rows
from verify.differential.group_state import SHAPES
from verify.differential.scenarios import Round, Scenario, run_scenario

Build = Callable[[SparkSession, Path], DataFrame]

# Batch 0 sees x twice at 100 s (a duplicate in the batch) and moves the watermark to 100 s (delay 5 s); batch 1's
# x at 100 s is a duplicate of a key seen before, its y at 95 s still counts (judged by batch 0's 0 s) and closes at
# once with [90, 100); batch 2 moves the watermark to 126 s, which the batch Spark runs without data then closes
# [100, 110) and [110, 120) with (and the 20 s window [100, 120) above them). After the restart y at 118 s is late
# (its windows closed), x at 130 s twice a duplicate, and the last batch closes the rest.
ROUNDS = (
    Round(
        files=(
            ("a/0.json", (event("x", 100, 1), event("x", 100, 1), event("y", 101, 2), event("x", 105, 3))),
            ("a/1.json", (event("x", 100, 1), event("x", 112, 4), event("y", 113, 5), event("y", 95, 6))),
            ("a/2.json", (event("y", 125, 7), event("x", 131, 8))),
        )
    ),
    Round(
        files=(
            ("a/3.json", (event("y", 118, 9), event("x", 130, 10), event("x", 130, 10), event("y", 142, 11))),
            ("a/4.json", (event("x", 161, 12), event("y", 190, 13))),
        )
    ),
)


def watermarked(spark: SparkSession, inputs: Path) -> DataFrame:
    return stream(spark, inputs).withWatermark("t", "5 seconds")


def windowed_counts(rows: DataFrame, time: F.Column | str = "t", size: str = "10 seconds") -> DataFrame:
    return rows.groupBy(F.window(time, size), "k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))


def deduplicated(spark: SparkSession, inputs: Path) -> DataFrame:
    """dropDuplicates with the event time among the keys, then a count per 10 s window and key."""
    return windowed_counts(watermarked(spark, inputs).dropDuplicates(["k", "t"]))


def deduplicated_within(spark: SparkSession, inputs: Path) -> DataFrame:
    """dropDuplicatesWithinWatermark of the key and value, then a count per 10 s window and key."""
    return windowed_counts(watermarked(spark, inputs).dropDuplicatesWithinWatermark(["k", "v"]))


def deduplicated_then_grouped(spark: SparkSession, inputs: Path) -> DataFrame:
    """dropDuplicates of the key and value (the watermark drops late rows), then a count per key without a window."""
    return watermarked(spark, inputs).dropDuplicates(["k", "v"]).groupBy("k").agg(F.count("*").alias("n"))


def windows_of_windows(spark: SparkSession, inputs: Path, time: F.Column | str | None = None) -> DataFrame:
    """A count per 10 s window and key, then the counts summed per 20 s window of window_time(window) (or of
    ``time``: the window column itself, which Spark's analyzer turns into its window_time)."""
    counts = windowed_counts(watermarked(spark, inputs))
    window = F.window(F.window_time("window") if time is None else time, "20 seconds")
    return counts.groupBy(window).agg(F.sum("n").alias("rows"), F.max("total").alias("most"))


def windows_of_the_window_column(spark: SparkSession, inputs: Path) -> DataFrame:
    return windows_of_windows(spark, inputs, "window")


def joined_then_counted(spark: SparkSession, inputs: Path) -> DataFrame:
    """Impressions joined with their clicks within 20 s, then the matches per 10 s window of the click time."""
    impressions = watermarked(spark, inputs).select(F.col("k").alias("ad"), F.col("t").alias("shown"))
    clicks = stream(spark, inputs, "b").withWatermark("t", "10 seconds")
    clicks = clicks.select(F.col("k").alias("clicked_ad"), F.col("t").alias("clicked"), "v")
    condition = "ad = clicked_ad AND clicked BETWEEN shown AND shown + INTERVAL 20 SECONDS"
    matched = impressions.join(clicks, F.expr(condition))
    return matched.groupBy(F.window("clicked", "10 seconds"), "ad").agg(F.count("*").alias("n"), F.sum("v").alias("s"))


JOIN_ROUNDS = (
    Round(
        files=(
            ("a/0.json", (event("x", 100), event("y", 101), event("x", 104))),
            ("b/0.json", (event("x", 103, 1), event("y", 112, 2), event("z", 113, 3))),
            ("a/1.json", (event("z", 110), event("x", 125))),
            ("b/1.json", (event("x", 131, 4), event("z", 125, 5), event("x", 110, 6))),
        )
    ),
    Round(
        files=(
            ("a/2.json", (event("y", 150), event("x", 160))),
            ("b/2.json", (event("y", 160, 7), event("x", 170, 8), event("x", 99, 9))),
            ("a/3.json", (event("x", 300),)),
            ("b/3.json", (event("x", 310, 10),)),
        )
    ),
)


def joined(spark: SparkSession, inputs: Path) -> DataFrame:
    """Impressions joined with their clicks within 20 s: the ad, the click time (the one event time) and the value."""
    impressions = watermarked(spark, inputs).select(F.col("k").alias("ad"), F.col("t").alias("shown"))
    clicks = stream(spark, inputs, "b").withWatermark("t", "10 seconds")
    clicks = clicks.select(F.col("k").alias("clicked_ad"), F.col("t").alias("clicked"), "v")
    condition = "ad = clicked_ad AND clicked BETWEEN shown AND shown + INTERVAL 20 SECONDS"
    return impressions.join(clicks, F.expr(condition)).select("ad", "clicked", "v")


def deduplicated_windows_of_windows(spark: SparkSession, inputs: Path) -> DataFrame:
    """(a) three: dropDuplicates with the event time, a count per 10 s window, their sum per 20 s window."""
    counts = deduplicated(spark, inputs)
    return counts.groupBy(F.window(F.window_time("window"), "20 seconds")).agg(F.sum("n").alias("rows"))


def windows_of_windows_of_windows(spark: SparkSession, inputs: Path) -> DataFrame:
    """(a) three aggregations: 10 s windows, 20 s windows of them, 40 s windows of those."""
    twenties = windows_of_windows(spark, inputs)
    window = F.window(F.window_time("window"), "40 seconds")
    return twenties.groupBy(window).agg(F.sum("rows").alias("rows"), F.count("*").alias("windows"))


def joined_deduplicated_counted(spark: SparkSession, inputs: Path) -> DataFrame:
    """(a) three: a join, its matches deduplicated by ad and click time, counted per 10 s window of the click."""
    matches = joined(spark, inputs).dropDuplicates(["ad", "clicked"])
    return matches.groupBy(F.window("clicked", "10 seconds")).agg(F.count("*").alias("n"), F.sum("v").alias("s"))


def joined_then_deduplicated(spark: SparkSession, inputs: Path) -> DataFrame:
    """A join, then dropDuplicatesWithinWatermark of the ad and value (a click: no two rows of one key differ in a
    batch), judged by the join's output watermark."""
    return joined(spark, inputs).dropDuplicatesWithinWatermark(["ad", "v"])


def counted_then_deduplicated(spark: SparkSession, inputs: Path) -> DataFrame:
    """(b): a count per 10 s window and key (append), then the first window of each key and count
    (dropDuplicates judges the rows by the window's end)."""
    return windowed_counts(watermarked(spark, inputs)).dropDuplicates(["k", "n"])


def grouped_after_join(spark: SparkSession, inputs: Path) -> DataFrame:
    """(c): a join, then a count per ad without a window (update output)."""
    return joined(spark, inputs).groupBy("ad").agg(F.count("*").alias("n"), F.sum("v").alias("s"))


def with_group_state(rows: DataFrame, key: str, function: str) -> DataFrame:
    """``rows`` grouped by ``key`` through the fuzz's applyInPandasWithState ``function``
    (:mod:`verify.differential.group_state`: ``running``, ``NoTimeout``, update; ``sessions``, ``EventTimeTimeout``,
    append; each reads ``t`` in epoch milliseconds and ``v``)."""
    shape = SHAPES[function]
    output, mode = f"k0 string, {shape.output}", shape.mode.capitalize()
    return rows.groupBy(key).applyInPandasWithState(shape.function, output, shape.state, mode, shape.timeout)


def in_milliseconds(rows: DataFrame, event_time: str) -> DataFrame:
    """``rows`` with ``t``, the epoch milliseconds of ``event_time`` (which the group-state functions read)."""
    return rows.withColumn("t", F.unix_millis(event_time))


def deduplicated_then_running(spark: SparkSession, inputs: Path) -> DataFrame:
    """(d): dropDuplicates with the event time, then a running count and total per key (NoTimeout, update)."""
    return with_group_state(watermarked(spark, inputs).dropDuplicates(["k", "t"]), "k", "running")


def deduplicated_then_sessions(spark: SparkSession, inputs: Path) -> DataFrame:
    """(d): dropDuplicates, then sessions per key closed by an event-time timeout (append)."""
    rows = stream(spark, inputs).withColumn("event_time", F.col("t")).withWatermark("event_time", "5 seconds")
    deduplicated = in_milliseconds(rows, "event_time").dropDuplicates(["k", "event_time"])
    return with_group_state(deduplicated, "k", "sessions")


def joined_then_sessions(spark: SparkSession, inputs: Path) -> DataFrame:
    """(d): a join, then sessions of each ad's clicks closed by an event-time timeout at the join's output
    watermark."""
    return with_group_state(in_milliseconds(joined(spark, inputs), "clicked"), "ad", "sessions")


# Each batch moves the watermark (delay 5 s) less than a window (10 s), so it closes at most one window of a key: a
# deduplication above the windows never meets two rows of one key in a batch (which one Spark keeps depends on the
# order its shuffle reads them). x's windows [100, 110) and [120, 130) both count 2 (the second dropped); y's 1 and 2.
UNTIED_ROUNDS = (
    Round(
        files=(
            ("a/0.json", (event("x", 100, 1), event("y", 101, 2), event("x", 103, 3))),
            ("a/1.json", (event("x", 112, 4), event("y", 95, 5), event("y", 111, 6), event("y", 114, 7))),
        )
    ),
    Round(
        files=(
            ("a/2.json", (event("x", 121, 8), event("x", 122, 9), event("y", 110, 10), event("y", 123, 11))),
            ("a/3.json", (event("x", 131, 12), event("y", 139, 13))),
            ("a/4.json", (event("x", 148, 14), event("y", 150, 15))),
        )
    ),
)


def assert_as_spark(spark: SparkSession, tmp_path: Path, name: str, build: Build, mode: str, rounds=ROUNDS) -> None:
    outcome = run_scenario(spark, Scenario(name, build, mode, rounds), tmp_path / "run")
    assert outcome.ok and outcome.spark_rows, f"{name}: {outcome}"


@pytest.mark.slow  # 25 s: the suite's time
def test_windows_of_windows_close_in_sparks_batches(spark, tmp_path: Path):
    """(b): a windowed count (append), then a 20 s window over window_time(window) (append)."""
    assert_as_spark(spark, tmp_path, "windows of windows", windows_of_windows, "append")


@pytest.mark.slow
def test_windows_of_the_window_column(spark, tmp_path: Path):
    """(b) with window("window", ...): Spark's analyzer takes the window column's window_time."""
    assert_as_spark(spark, tmp_path, "windows of the window column", windows_of_the_window_column, "append")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["append", "update"])
@pytest.mark.parametrize("build", [deduplicated, deduplicated_within], ids=["dropDuplicates", "within"])
def test_deduplication_then_a_windowed_aggregation(spark, tmp_path: Path, build: Build, mode: str):
    """(a): a deduplication, then a count per window and key, in the output modes Spark allows."""
    assert_as_spark(spark, tmp_path, f"{build.__name__} {mode}", build, mode)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["update", "complete"])
def test_deduplication_then_an_aggregation_without_a_window(spark, tmp_path: Path, mode: str):
    assert_as_spark(spark, tmp_path, f"grouped {mode}", deduplicated_then_grouped, mode)


@pytest.mark.slow
def test_join_then_a_windowed_aggregation(spark, tmp_path: Path):
    """(c): an inner stream-stream join, then a count per window of the click time (append): the join's output
    watermark is its sides' state watermarks' least."""
    assert_as_spark(spark, tmp_path, "join then windows", joined_then_counted, "append", JOIN_ROUNDS)


@pytest.mark.slow
@pytest.mark.parametrize(
    "build, rounds",
    [
        (deduplicated_windows_of_windows, ROUNDS),
        (windows_of_windows_of_windows, ROUNDS),
        (joined_deduplicated_counted, JOIN_ROUNDS),
    ],
    ids=["dedup-window-window", "window-window-window", "join-dedup-window"],
)
def test_three_stateful_operations_in_a_chain(spark, tmp_path: Path, build: Build, rounds):
    """(a): three operations, each above taking the output watermark of the one below."""
    assert_as_spark(spark, tmp_path, build.__name__, build, "append", rounds)


@pytest.mark.slow
def test_a_deduplication_above_windows(spark, tmp_path: Path):
    """(b): dropDuplicates over a windowed count's output (append)."""
    assert_as_spark(spark, tmp_path, "counted then deduplicated", counted_then_deduplicated, "append", UNTIED_ROUNDS)


@pytest.mark.slow
def test_a_deduplication_above_a_join(spark, tmp_path: Path):
    assert_as_spark(spark, tmp_path, "joined then deduplicated", joined_then_deduplicated, "append", JOIN_ROUNDS)


@pytest.mark.slow
@pytest.mark.parametrize("build", [joined_then_counted, grouped_after_join], ids=["windows", "no-window"])
def test_a_join_then_an_aggregation_in_update_output(spark, tmp_path: Path, build: Build):
    """(c): Spark 4 runs an inner stream-stream join in update output, and the aggregation above it emits in it."""
    assert_as_spark(spark, tmp_path, f"{build.__name__} update", build, "update", JOIN_ROUNDS)


def joined_on_keys(spark: SparkSession, inputs: Path) -> DataFrame:
    """Impressions joined with clicks on the ad alone (no time bound: both sides keep every row): the ad, the click
    time and the value; nothing reads the impression time, which Spark's optimizer prunes below the join."""
    impressions = watermarked(spark, inputs).select(F.col("k").alias("ad"), F.col("t").alias("shown"))
    clicks = stream(spark, inputs, "b").withWatermark("t", "10 seconds")
    clicks = clicks.select(F.col("k").alias("clicked_ad"), F.col("t").alias("clicked"), "v")
    return impressions.join(clicks, F.expr("ad = clicked_ad")).select("ad", "clicked", "v")


def joined_on_keys_then_counted(spark: SparkSession, inputs: Path) -> DataFrame:
    """(seed 10763) :func:`joined_on_keys`, then the matches per 10 s window of the click time."""
    return joined_on_keys(spark, inputs).groupBy(F.window("clicked", "10 seconds"), "ad").agg(F.count("*").alias("n"))


def joined_on_keys_then_deduplicated(spark: SparkSession, inputs: Path) -> DataFrame:
    """:func:`joined_on_keys`, then dropDuplicates of its whole rows (judged by the click time)."""
    return joined_on_keys(spark, inputs).dropDuplicates(["ad", "clicked", "v"])


def joined_on_keys_then_sessions(spark: SparkSession, inputs: Path) -> DataFrame:
    """:func:`joined_on_keys`, then sessions of each ad's clicks closed by an event-time timeout."""
    return with_group_state(in_milliseconds(joined_on_keys(spark, inputs), "clicked"), "ad", "sessions")


# Batch 0 matches x at 100 s with x at 100 s and moves the watermark to 90 s (the clicks' delay, 10 s); Spark's
# batch without data runs with it (the windows above close by it), and so the join judges the next batch's rows by
# it. After the restart the click x at 85 s is late and dropped; the impression x at 80 s is late too, but Spark's
# join judges an impression by a column it no longer has (the impression time, pruned): it joins both clicks of x
# at 100 s. The watermark stays (no batch without data after: the suite's time).
LATE_AFTER_RESTART = (
    Round(files=(("a/0.json", (event("x", 100),)), ("b/0.json", (event("x", 100, 1),)))),
    Round(files=(("a/1.json", (event("x", 80),)), ("b/1.json", (event("x", 85, 2), event("x", 100, 3))))),
)
# The same, and z at 200 s moves the watermark past every window (append output emits them in the batch after).
CLOSED_AFTER_RESTART = (
    LATE_AFTER_RESTART[0],
    Round(files=tuple((path, (*rows, event("z", 200, 4))) for path, rows in LATE_AFTER_RESTART[1].files)),
)


def test_a_join_in_a_chain_judges_late_rows_by_the_watermark_of_sparks_batch_without_data(spark, tmp_path: Path):
    """(seed 10763) The join below a windowed count moves its watermark in the batches Spark runs without data for
    the count (after them misa judged the join's rows by the watermark of the data batch before: late clicks joined),
    and drops no late row of a side whose event time nothing above it reads (Spark prunes that column below the
    join, and its join drops by the columns it gets). One shuffle partition: the suite's time."""
    one = {"spark.sql.shuffle.partitions": "1"}
    scenario = Scenario(
        "joined on keys, counted", joined_on_keys_then_counted, "update", LATE_AFTER_RESTART, session_conf=one
    )
    outcome = run_scenario(spark, scenario, tmp_path / "run")
    assert outcome.ok and outcome.spark_rows, outcome


@pytest.mark.slow
def test_a_join_in_a_chain_judges_late_rows_by_the_watermark_of_a_live_batch_without_data(spark, tmp_path: Path):
    """Seed 10763's causes without a restart: under a processing-time trigger Spark runs the batch without data as
    soon as a trigger finds no input; the late click comes in the next batch, the late impression in the one after."""
    first, second = LATE_AFTER_RESTART
    live = Round(files=first.files, later=tuple(reversed(second.files)))
    trigger = {"processingTime": "1 second"}
    scenario = Scenario("joined on keys, counted, live", joined_on_keys_then_counted, "update", (live,), trigger)
    outcome = run_scenario(spark, scenario, tmp_path / "run")
    assert outcome.ok and outcome.spark_rows, outcome


# Data batches back to back (no batch without data between them): batch 2 judges rows by batch 1's eviction
# watermark, 90 s; its click x at 80 s is dropped, its impression x at 60 s joins both clicks of x (its time pruned).
BACK_TO_BACK_ROUNDS = (
    Round(
        files=(
            ("a/0.json", (event("x", 100),)),
            ("b/0.json", (event("x", 100, 1),)),
            ("a/1.json", (event("y", 150),)),
            ("b/1.json", (event("y", 200, 2),)),
            ("a/2.json", (event("x", 60),)),
            ("b/2.json", (event("x", 80, 3), event("x", 160, 4))),
        )
    ),
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "build, mode, rounds",
    [
        (joined_on_keys_then_counted, "append", CLOSED_AFTER_RESTART),
        (joined_on_keys_then_deduplicated, "append", CLOSED_AFTER_RESTART),
        (joined_on_keys_then_sessions, "append", CLOSED_AFTER_RESTART),
        (joined_on_keys_then_counted, "update", BACK_TO_BACK_ROUNDS),
        (joined_on_keys, "append", BACK_TO_BACK_ROUNDS),
    ],
    ids=["count-append", "dedup", "sessions", "count-back-to-back", "join-alone"],
)
def test_a_join_without_time_bounds_drops_late_rows_as_spark(spark, tmp_path: Path, build: Build, mode: str, rounds):
    """Seed 10763's causes under the other operations above a join without time bounds (its watermark moves in
    Spark's batches without data), and in data batches back to back, the join alone too (the side whose event time
    Spark prunes drops no late row)."""
    assert_as_spark(spark, tmp_path, f"{build.__name__} {mode}", build, mode, rounds)


@pytest.mark.slow
@pytest.mark.parametrize(
    "build, mode, rounds",
    [
        (deduplicated_then_running, "update", ROUNDS),
        (deduplicated_then_sessions, "append", ROUNDS),
        (joined_then_sessions, "append", JOIN_ROUNDS),
    ],
    ids=["dedup-running", "dedup-sessions", "join-sessions"],
)
def test_apply_in_pandas_with_state_above_another_operation(spark, tmp_path: Path, build: Build, mode: str, rounds):
    """(d): applyInPandasWithState over a deduplication's or a join's output (its watermark the one below's output
    watermark: the functions emit it)."""
    assert_as_spark(spark, tmp_path, build.__name__, build, mode, rounds)


def refused_at_start(spark: SparkSession, tmp_path: Path, build: Build, mode: str, match: str) -> None:
    """``build``'s query is refused by from_query at start (what it checks and builds before a job exists)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with pytest.raises((UnsupportedQueryError, AnalysisException), match=match):
        planned(build(spark, tmp_path), mode, lambda batch_id, table: None)


def test_an_aggregation_in_update_mode_below_another_is_refused_as_spark_refuses_it(spark, tmp_path: Path):
    refused_at_start(spark, tmp_path, windows_of_windows, "update", "Detected pattern of possible 'correctness' issue")


@pytest.mark.parametrize(
    "build, reason",
    [
        (
            lambda s, i: windowed_counts(watermarked(s, i)).dropDuplicatesWithinWatermark(["k"]),
            "reads as a timestamp",
        ),
        pytest.param(  # the suite's time: make test checks both refusals through their catalog rows
            lambda s, i: (
                watermarked(s, i)
                .select(F.col("k").alias("ad"), F.col("t").alias("shown"))
                .join(
                    stream(s, i, "b").dropDuplicates(["k", "t"]).select(F.col("k").alias("clicked_ad"), "v"),
                    F.expr("ad = clicked_ad"),
                )
            ),
            "it has no watermark",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            lambda s, i: (
                joined_above("dedup", "inner")(s, i)
                .select("ad", "clicked")
                .join(
                    watermarked(s, i).select(F.col("k").alias("k3"), F.col("t").alias("t3")),
                    F.expr("ad = k3 AND t3 BETWEEN clicked AND clicked + INTERVAL 5 SECONDS"),
                )
            ),
            "a second stream-stream join above",
            marks=pytest.mark.slow,
        ),
    ],
    ids=["within-above-windows", "join-above-no-watermark", "two-joins-above"],
)
def test_chains_misa_does_not_run_are_refused_at_start(spark, tmp_path: Path, build: Build, reason: str):
    refused_at_start(spark, tmp_path, build, "append", reason)


def sessions_of_windows(spark: SparkSession, inputs: Path) -> DataFrame:
    """A windowed count (append), then sessions per key of the windows over window_time(window) (append)."""
    windows = windowed_counts(watermarked(spark, inputs))
    session = F.session_window(F.window_time("window"), "15 seconds")
    return windows.groupBy(session, "k").agg(F.count("*").alias("windows"), F.sum("n").alias("rows"))


@pytest.mark.slow
def test_sessions_of_windows_close_in_sparks_batches(spark, tmp_path: Path):
    """The windows a batch closes are the sessions' input in that batch; the sessions close by the windows' output
    watermark (it was refused at start)."""
    assert_as_spark(spark, tmp_path, "sessions of windows", sessions_of_windows, "append")


def counted_then_totalled(spark: SparkSession, inputs: Path) -> DataFrame:
    """applyInPandasWithState (NoTimeout, append): each key's rows so far, emitted per call; then per key the calls
    and the most rows (update)."""
    counted = (
        watermarked(spark, inputs)
        .groupBy("k")
        .applyInPandasWithState(count_rows, "k string, n long", "n long", "Append", GroupStateTimeout.NoTimeout)
    )
    return counted.groupBy("k").agg(F.count("*").alias("calls"), F.max("n").alias("most"))


def sessions_then_totalled(spark: SparkSession, inputs: Path) -> DataFrame:
    """Sessions per key closed by an event-time timeout (append), then per key the sessions closed so far (update)."""
    rows = stream(spark, inputs).withColumn("event_time", F.col("t")).withWatermark("event_time", "5 seconds")
    sessions = with_group_state(in_milliseconds(rows, "event_time"), "k", "sessions")
    return sessions.groupBy("k0").agg(F.count("*").alias("sessions"))


@pytest.mark.slow  # the suite's time
def test_apply_in_pandas_with_state_below_an_aggregation(spark, tmp_path: Path):
    """Spark runs an aggregation (update) over applyInPandasWithState's output (append, NoTimeout); refused before
    ("below another stateful operation"). Neither runs a batch without data (applyInPandasWithState passes no
    watermark to the aggregation: misa's chain asked Spark for one after a restart before)."""
    assert_as_spark(spark, tmp_path, "counted, then totalled", counted_then_totalled, "update")


def test_apply_in_pandas_with_state_with_event_time_timeouts_below_an_aggregation_is_refused_as_spark_refuses_it(
    spark, tmp_path: Path
):
    refused_at_start(spark, tmp_path, sessions_then_totalled, "update", "Detected pattern of possible 'correctness'")


def test_a_chain_is_refused_without_sparks_propagated_watermarks(spark, tmp_path: Path):
    spark.conf.set(ALLOW_MULTIPLE, "false")
    try:
        refused_at_start(spark, tmp_path, deduplicated, "append", "allowMultiple")
    finally:
        spark.conf.unset(ALLOW_MULTIPLE)


def sessions_then_windows(spark: SparkSession, inputs: Path) -> DataFrame:
    """Sessions per key (a 5 s gap, append), then the sessions counted per 20 s window of window_time(session_window)
    (append): the sessions a batch closes are the windows' input in that batch."""
    sessions = watermarked(spark, inputs).groupBy(F.session_window("t", "5 seconds"), "k").agg(F.count("*").alias("n"))
    return sessions.groupBy(F.window(F.window_time("session_window"), "20 seconds")).agg(
        F.count("*").alias("sessions"), F.sum("n").alias("rows")
    )


@pytest.mark.slow  # the suite's time: test_spark_queries.py builds the chain in make test
def test_windows_of_sessions_close_in_sparks_batches(spark, tmp_path: Path):
    """Refused before ("misa runs no stateful operation over a session window's output yet")."""
    assert_as_spark(spark, tmp_path, "windows of sessions", sessions_then_windows, "append")


def deduplicated_then_session_windows(spark: SparkSession, inputs: Path) -> DataFrame:
    """dropDuplicates of the key and event time, then sessions per key (a 5 s gap, append) over its output."""
    deduplicated = watermarked(spark, inputs).dropDuplicates(["k", "t"])
    return deduplicated.groupBy(F.session_window("t", "5 seconds"), "k").agg(F.count("*").alias("n"), F.sum("v"))


@pytest.mark.slow  # the suite's time
def test_sessions_of_a_deduplication_close_in_sparks_batches(spark, tmp_path: Path):
    """Refused before ("misa runs no Aggregate over another stateful operation's output yet")."""
    assert_as_spark(spark, tmp_path, "sessions of a deduplication", deduplicated_then_session_windows, "append")


def joined_then_sessions_windows(spark: SparkSession, inputs: Path) -> DataFrame:
    """An inner join, then sessions of each ad's clicks (a 5 s gap, append) over its output."""
    matches = joined(spark, inputs)
    return matches.groupBy(F.session_window("clicked", "5 seconds"), "ad").agg(F.count("*").alias("n"), F.sum("v"))


def outer_joined_then_sessions(spark: SparkSession, inputs: Path) -> DataFrame:
    """A left outer join, then sessions of each ad's impressions (a 5 s gap, append), unmatched ones too."""
    impressions = watermarked(spark, inputs).select(F.col("k").alias("ad"), F.col("t").alias("shown"))
    clicks = stream(spark, inputs, "b").withWatermark("t", "10 seconds")
    clicks = clicks.select(F.col("k").alias("clicked_ad"), F.col("t").alias("clicked"), "v")
    condition = "ad = clicked_ad AND clicked BETWEEN shown AND shown + INTERVAL 20 SECONDS"
    rows = impressions.join(clicks, F.expr(condition), "left_outer")
    return rows.groupBy(F.session_window("shown", "5 seconds"), "ad").agg(F.count("*").alias("n"), F.sum("v"))


@pytest.mark.slow  # the suite's time
@pytest.mark.parametrize("build", [joined_then_sessions_windows, outer_joined_then_sessions], ids=["inner", "outer"])
def test_sessions_of_a_join_close_in_sparks_batches(spark, tmp_path: Path, build: Build):
    """Refused before ("misa runs a session window over a deduplication's or a window's output only")."""
    assert_as_spark(spark, tmp_path, "sessions of a join", build, "append", OUTER_ROUNDS)


# JOIN_ROUNDS with an impression and a click that never match (w, u): their rows come out unmatched when evicted
OUTER_ROUNDS = (
    Round(files=((("a/0.json", (*JOIN_ROUNDS[0].files[0][1], event("w", 102))),) + JOIN_ROUNDS[0].files[1:])),
    Round(
        files=(JOIN_ROUNDS[1].files[:1] + (("b/2.json", (*JOIN_ROUNDS[1].files[1][1], event("u", 161, 11))),))
        + JOIN_ROUNDS[1].files[2:]
    ),
)


def outer_joined_then_counted(how: str, time: str) -> Build:
    """Impressions ``how``-joined with their clicks within 20 s, then the rows per 10 s window of ``time`` (its
    unmatched rows come out when the join evicts them, and count in the windows they fall in)."""

    def build(spark: SparkSession, inputs: Path) -> DataFrame:
        impressions = watermarked(spark, inputs).select(F.col("k").alias("ad"), F.col("t").alias("shown"))
        clicks = stream(spark, inputs, "b").withWatermark("t", "10 seconds")
        clicks = clicks.select(F.col("k").alias("clicked_ad"), F.col("t").alias("clicked"), "v")
        condition = "ad = clicked_ad AND clicked BETWEEN shown AND shown + INTERVAL 20 SECONDS"
        rows = impressions.join(clicks, F.expr(condition), how)
        return rows.groupBy(F.window(time, "10 seconds")).agg(F.count("*").alias("n"))

    build.__name__ = f"{how}_joined_then_counted"
    return build


@pytest.mark.slow  # the suite's time
@pytest.mark.parametrize(
    "how, time",
    [("left_outer", "shown"), ("left_semi", "shown"), ("right_outer", "clicked"), ("full_outer", "shown")],
)
def test_an_aggregation_over_an_outer_or_semi_join(spark, tmp_path: Path, how: str, time: str):
    """Refused before ("misa runs an aggregation over an inner stream-stream join's output only")."""
    assert_as_spark(spark, tmp_path, how, outer_joined_then_counted(how, time), "append", OUTER_ROUNDS)


def counted_per_instant(spark: SparkSession, inputs: Path) -> DataFrame:
    """A count per key and event time (append: each closes when the watermark passes its time)."""
    return watermarked(spark, inputs).groupBy("k", "t").agg(F.count("*").alias("n"))


@pytest.mark.slow  # the suite's time
@pytest.mark.parametrize(
    "above",
    [
        lambda rows: rows.groupBy(F.session_window("t", "5 seconds"), "k").agg(F.sum("n").alias("rows")),
        lambda rows: rows.groupBy(F.window("t", "10 seconds")).agg(F.sum("n").alias("rows"), F.count("*")),
    ],
    ids=["sessions", "windows"],
)
def test_an_aggregation_by_the_event_time_below_another(spark, tmp_path: Path, above):
    """groupBy(k, t) (append), then sessions or windows of t over its output (refused before: "an aggregation
    without a time window emits no final rows")."""

    def build(spark: SparkSession, inputs: Path) -> DataFrame:
        return above(counted_per_instant(spark, inputs))

    assert_as_spark(spark, tmp_path, "by the event time, then", build, "append")


def clicks_of(spark: SparkSession, inputs: Path) -> DataFrame:
    """The clicks (folder b, a 10 s delay): the ad, the click time and the value."""
    clicks = stream(spark, inputs, "b").withWatermark("t", "10 seconds")
    return clicks.select(F.col("k").alias("clicked_ad"), F.col("t").alias("clicked"), "v")


def joined_above(lower: str, how: str) -> Build:
    """A stateful operation on one side of a ``how`` stream-stream join: the impressions deduplicated by key and time
    (``dedup``), counted per 10 s window and key (``windows``, the window's time the impression's), or the clicks
    deduplicated by key and time (``dedup_right``), or the clicks matched with the impressions (``join``); then
    joined with the other stream within 20 s; or both sides' (``dedup_both``, ``windows_both``: the impressions'
    windows or deduplication, the clicks' deduplication)."""

    def build(spark: SparkSession, inputs: Path) -> DataFrame:
        impressions = watermarked(spark, inputs)
        clicks = clicks_of(spark, inputs)
        if lower in ("windows", "windows_both"):
            counts = windowed_counts(impressions)
            impressions = counts.select(F.col("k").alias("ad"), F.window_time("window").alias("shown"), "n")
        elif lower == "join":  # the clicks matched once, joined with the clicks again
            impressions = joined(spark, inputs).select("ad", F.col("clicked").alias("shown"))
        else:
            if lower in ("dedup", "dedup_both"):
                impressions = impressions.dropDuplicates(["k", "t"])
            impressions = impressions.select(F.col("k").alias("ad"), F.col("t").alias("shown"))
        if lower in ("dedup_right", "dedup_both", "windows_both"):
            clicks = clicks.dropDuplicates(["clicked_ad", "clicked"])
        condition = "ad = clicked_ad AND clicked BETWEEN shown AND shown + INTERVAL 20 SECONDS"
        return impressions.join(clicks, F.expr(condition), how)

    build.__name__ = f"{lower}_then_{how}_joined"
    return build


@pytest.mark.slow  # the suite's time: make test plans the form (test_spark_queries.py) and checks its refusals
def test_a_join_above_a_deduplication(spark, tmp_path: Path):
    """The rows a deduplication emits in a batch are its side's input to the join in that batch, judged and evicted
    by its output watermark (refused before: "misa runs no Join over another stateful operation's output")."""
    assert_as_spark(spark, tmp_path, "dedup, then join", joined_above("dedup", "inner"), "append", OUTER_ROUNDS)


@pytest.mark.slow  # the suite's time
@pytest.mark.parametrize(
    "lower, how",
    [
        ("windows", "inner"),
        ("dedup_right", "inner"),
        ("join", "inner"),
        ("dedup", "left_outer"),
        ("windows", "left_outer"),
        ("dedup", "right_outer"),
        ("dedup", "full_outer"),
        ("dedup", "left_semi"),
        ("dedup_both", "inner"),
        ("windows_both", "left_outer"),
    ],
)
def test_a_join_above_another_stateful_operation(spark, tmp_path: Path, lower: str, how: str):
    """The rows a lower operation emits in a batch are its side's input to the join in that batch, judged and
    evicted by its output watermark (refused before: "misa runs no Join over another stateful operation's output")."""
    assert_as_spark(spark, tmp_path, f"{lower}, then {how} join", joined_above(lower, how), "append", OUTER_ROUNDS)


def deduplicated_joined_counted(spark: SparkSession, inputs: Path) -> DataFrame:
    """Three: the impressions deduplicated, joined with the clicks, the pairs counted per 10 s window of the click."""
    pairs = joined_above("dedup", "inner")(spark, inputs)
    return pairs.groupBy(F.window("clicked", "10 seconds"), "ad").agg(F.count("*").alias("n"), F.sum("v").alias("s"))


@pytest.mark.slow  # the suite's time
def test_an_aggregation_above_a_join_above_a_deduplication(spark, tmp_path: Path):
    assert_as_spark(spark, tmp_path, "dedup, join, windows", deduplicated_joined_counted, "append", OUTER_ROUNDS)
