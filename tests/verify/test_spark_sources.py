"""Batches without data exactly when Spark runs them, on the sources, plans and triggers users deploy (issue 44's
findings 1-5): each query through misa.from_query and through plain Spark, compared batch id by batch id
(verify/differential/scenarios.py). Each input is built so that a batch without data run where Spark runs none
moves the watermark early and loses a row Spark counts."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from verify.differential.scenarios import Round, Scenario, judge, run_scenario
from verify.differential.topic_source import TopicSource

SCHEMA = "t timestamp, k int, v bigint"


def rows(*events: tuple[int, int | None]) -> tuple[dict, ...]:
    """Records at (event time in seconds, key), each with v = the time."""
    return tuple({"t": t, "k": k, "v": t} for t, k in events)


# A backlog read a batch at a time: Spark judges the second batch by the first batch's watermark (0), so 85 (its window
# ends at 90) counts; a batch without data between them would move the watermark to 97 and drop it.
FIRST, SECOND, THIRD = rows((100, 0), (101, 1), (102, 0)), rows((85, 0), (110, 1), (111, 0)), rows((125, 1))


def windowed(events: DataFrame) -> DataFrame:
    return (
        events.withWatermark("t", "5 seconds")
        .groupBy(F.window("t", "10 seconds"), "k")
        .agg(F.count("*").alias("n"), F.sum("v").alias("total"))
    )


def files(spark: SparkSession, path: Path) -> DataFrame:
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(path))


def topic(spark: SparkSession, inputs: Path) -> DataFrame:
    spark.dataSource.register(TopicSource)
    return spark.readStream.format("misa-test-topic").option("maxRecordsPerBatch", 3).load(str(inputs / "topic"))


def clicks_join(spark: SparkSession, inputs: Path, ad_ids_from: int | None = None) -> DataFrame:
    """The programming guide's impressions/clicks join, each side from its own folder (impressions of ads from
    ``ad_ids_from`` on, if given)."""
    impressions = (
        files(spark, inputs / "impressions")
        .select(F.col("k").alias("adId"), F.col("t").alias("impressionTime"))
        .withWatermark("impressionTime", "10 seconds")
    )
    clicks = (
        files(spark, inputs / "clicks")
        .select(F.col("k").alias("clickAdId"), F.col("t").alias("clickTime"))
        .withWatermark("clickTime", "20 seconds")
    )
    if ad_ids_from is not None:
        impressions = impressions.where(F.col("adId") >= ad_ids_from)
    condition = "clickAdId = adId AND clickTime >= impressionTime AND clickTime <= impressionTime + interval 1 minute"
    return impressions.join(clicks, F.expr(condition))


def names(spark: SparkSession) -> DataFrame:
    """A static table of the keys' names."""
    return spark.createDataFrame([(0, "zero"), (1, "one")], "k int, name string")


def static_side(spark: SparkSession, inputs: Path) -> DataFrame:
    events = files(spark, inputs / "in").withWatermark("t", "5 seconds").join(names(spark), "k")
    return events.groupBy(F.window("t", "10 seconds"), "name").agg(F.count("*").alias("n"))


SCENARIOS = {
    # Key 2 has no name: the join drops its row at 125 s, yet Spark's watermark node below the join saw it (120 s),
    # so the window [100, 110) closes and the row at 104 s is late (seed 520 of misa fuzz --deployments).
    "a stream-static join drops a row that still moves Spark's watermark": Scenario(
        "static drops",
        static_side,
        "append",
        (
            Round(
                files=(
                    ("in/0.json", rows((100, 0), (101, 1))),
                    ("in/1.json", rows((125, 2))),
                    ("in/2.json", rows((104, 0))),
                )
            ),
        ),
    ),
    # A click without a key never joins: Spark's optimizer filters it below withWatermark (the inner join's inferred
    # isnotnull), so the clicks' watermark stays 0 and the click at 105 s still joins; counting the keyless click
    # (at 1000 s) moves misa's watermark to 290 s and drops it (seed 1122 of misa fuzz --deployments).
    "two streams joined, a keyless row that Spark filters below the watermark": Scenario(
        "keyless",
        clicks_join,
        "append",
        (
            Round(
                files=(
                    ("impressions/0.json", rows((100, 1), (300, 2))),
                    ("clicks/0.json", rows((1000, None))),
                    ("clicks/1.json", rows((105, 1))),
                )
            ),
        ),
    ),
    # Spark plans a stateful query's batches without adaptive execution: the join of a Python source (no size
    # known) with a static table is a sort-merge join, whose rows come sorted by k, and the deduplication keeps the
    # row of k = 0. Adaptive execution (on for misa's stateless query) made it a broadcast join in the topic's
    # order, and misa kept the row of k = 1 (seed 2559 of misa fuzz --deployments).
    "a deduplication over a Python source joined with a static table": Scenario(
        "dedup order",
        lambda spark, inputs: topic(spark, inputs).join(names(spark), "k").dropDuplicates(["v"]),
        "append",
        (Round(files=(("topic/00000.jsonl", rows((101, 1), (101, 0))),)),),
    ),
    # Spark infers clickAdId >= 1 from the impressions' filter and the join's keys, and filters the clicks by it
    # below their withWatermark: the click of ad 0 at 1000 s moves no watermark.
    "two streams joined, a filter on one side that Spark infers for the other": Scenario(
        "inferred",
        lambda spark, inputs: clicks_join(spark, inputs, ad_ids_from=1),
        "append",
        (
            Round(
                files=(
                    ("impressions/0.json", rows((100, 1), (300, 2))),
                    ("clicks/0.json", rows((1000, 0))),
                    ("clicks/1.json", rows((105, 1))),
                )
            ),
        ),
    ),
    # Spark pushes a filter on a group key above the aggregation below withWatermark: the row at 200 s (k = 0) moves
    # no watermark, so no window closes before the end.
    "dropDuplicatesWithinWatermark, a key first seen without event time, forgotten at the first eviction": Scenario(
        "null time dedup",
        lambda spark, inputs: (
            files(spark, inputs / "in").withWatermark("t", "5 seconds").dropDuplicatesWithinWatermark(["k"])
        ),
        "append",
        (
            # Spark stores the key's expiry from the null time read as 0: 0 + 5 s, past at the next batch's eviction
            Round(
                files=(("in/0.json", rows((None, 1), (100, 2))), ("in/1.json", rows((110, 3)))),
            ),
            Round(files=(("in/2.json", rows((None, 1), (130, 4))),)),  # after a restart: k 1 is new again
        ),
    ),
    "a filter on a group key above the aggregation": Scenario(
        "having",
        lambda spark, inputs: windowed(files(spark, inputs / "in")).where("k > 0"),
        "append",
        (Round(files=(("in/0.json", rows((100, 1), (200, 0))), ("in/1.json", rows((95, 1))))),),
    ),
    "two different streams joined (the guide's impressions and clicks)": Scenario(
        "two streams",
        clicks_join,
        "append",
        (
            Round(
                files=(
                    ("impressions/0.json", rows((10, 1), (200, 3))),
                    ("clicks/0.json", rows((210, 3))),
                    ("clicks/1.json", rows((65, 1))),
                )
            ),
        ),
    ),
}
RIGHT_FIRST = (
    Round(files=(("clicks/0.json", rows((30, 1), (40, 2))),)),
    Round(files=(("impressions/0.json", rows((25, 1))),)),
    Round(files=(("impressions/1.json", rows((70, 2))), ("clicks/1.json", rows((95, 2))))),
)
SLOW_SCENARIOS = {
    "a Python source with a backlog (Kafka's case; a real topic in make test), append": Scenario(
        "topic",
        lambda spark, inputs: windowed(topic(spark, inputs)),
        "append",
        (Round(files=(("topic/00000.jsonl", FIRST + SECOND + THIRD),)),),
    ),
    "two streams: right rows only, a restart, then a left row (min policy)": Scenario(
        "right first", clicks_join, "append", RIGHT_FIRST
    ),
    "two streams: right rows only, a restart, then a left row (max policy)": Scenario(
        "right first, max",
        clicks_join,
        "append",
        RIGHT_FIRST,
        session_conf={"spark.sql.streaming.multipleWatermarkPolicy": "max"},
    ),
    "the rate-micro-batch source, always input waiting, a restart": Scenario(
        "rate",
        lambda spark, inputs: windowed(
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", 4)
            .load()
            .select(
                (
                    F.col("timestamp")
                    + F.expr("INTERVAL 15 SECONDS")
                    - F.when(F.col("value") % 4 == 3, F.expr("INTERVAL 7 SECONDS")).otherwise(
                        F.expr("INTERVAL 0 SECONDS")
                    )
                ).alias("t"),
                (F.col("value") % 2).cast("int").alias("k"),
                F.col("value").alias("v"),
            )
        ),
        "update",
        (Round(batches=6), Round(batches=3)),
        trigger={"processingTime": "0 seconds"},
    ),
    "a stream-static join below the aggregation": Scenario(
        "static",
        static_side,
        "append",
        (Round(files=(("in/0.json", FIRST), ("in/1.json", SECOND), ("in/2.json", THIRD))),),
    ),
    "a glob path": Scenario(
        "glob",
        lambda spark, inputs: windowed(files(spark, inputs / "in" / "*.json")),
        "update",
        (Round(files=(("in/0.json", FIRST), ("in/1.json", SECOND), ("in/2.json", THIRD))),),
    ),
    "files in subfolders": Scenario(
        "subfolders",
        lambda spark, inputs: windowed(files(spark, inputs / "in")),
        "update",
        (Round(files=(("in/day=0/0.json", FIRST), ("in/day=1/1.json", SECOND), ("in/day=2/2.json", THIRD))),),
    ),
    "trigger once, a run per file": Scenario(
        "once",
        lambda spark, inputs: windowed(files(spark, inputs / "in")),
        "update",
        (
            Round(files=(("in/0.json", FIRST),)),
            Round(files=(("in/1.json", SECOND),)),
            Round(files=(("in/2.json", THIRD),)),
        ),
        trigger={"once": True},
    ),
    "processing-time rounds, files arriving between triggers": Scenario(
        "live",
        lambda spark, inputs: windowed(files(spark, inputs / "in")),
        "append",
        (Round(later=(("in/0.json", FIRST), ("in/1.json", SECOND), ("in/2.json", THIRD))),),
        trigger={"processingTime": "1 second"},
    ),
    # The query's first trigger finds both folders empty: Spark's stateful query waits, while misa's query plans a
    # batch 0 for its request source alone (seed 504 of misa fuzz --deployments), which misa must not number, at
    # the restarts too.
    "two streams joined, files arriving after the first trigger, restarts (processing time)": Scenario(
        "two streams, live",
        clicks_join,
        "append",
        tuple(Round(later=round_.files) for round_ in RIGHT_FIRST),
        trigger={"processingTime": "1 second"},
        folders=("impressions", "clicks"),
    ),
}


# make test's time: -m slow (the other stream-stream joins stay in make test)
SLOW_TOO = ("two different streams joined (the guide's impressions and clicks)",)


@pytest.mark.parametrize(
    "name", [name if name not in SLOW_TOO else pytest.param(name, marks=pytest.mark.slow) for name in SCENARIOS]
)
def test_sparks_batches_and_rows(spark, tmp_path: Path, name: str):
    outcome = run_scenario(spark, SCENARIOS[name], tmp_path)
    assert outcome.ok, f"{name}: {outcome}"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SLOW_SCENARIOS))
def test_sparks_batches_and_rows_slow(spark, tmp_path: Path, name: str):
    outcome = run_scenario(spark, SLOW_SCENARIOS[name], tmp_path)
    assert outcome.ok, f"{name}: {outcome}"


def test_a_run_that_fails_in_spark_must_fail_in_misa_too():
    """A query Spark cannot run to its end (a partition folder appearing while it runs, say) is judged like a
    refusal when misa fails too; a run that fails in one engine only is a mismatch naming it."""
    boom = RuntimeError("Invalid batch")
    both = judge({}, {"spark": boom, "misa": boom}, {"spark": {}, "misa": {}})
    assert both.refused == "Spark" and both.mismatch is None and "Invalid batch" in both.message
    one = judge({}, {"misa": boom}, {"spark": {}, "misa": {}})
    assert one.mismatch is not None and "misa failed while running" in one.mismatch.what


def decoded(spark: SparkSession, path: Path, prefix: str) -> DataFrame:
    """JSON lines read as text a file a batch and decoded with ``from_json`` (as a Kafka query decodes its values)."""
    rows = spark.readStream.option("maxFilesPerTrigger", 1).text(str(path))
    rows = rows.select(F.from_json("value", SCHEMA).alias("j")).select("j.*").withWatermark("t", "5 seconds")
    return rows.select(F.col("k").alias(f"{prefix}k"), F.col("t").alias(f"{prefix}t"), "v")


def decoded_join(spark: SparkSession, inputs: Path, both_sides: bool) -> DataFrame:
    """The left filtered on its key (the right too, with ``both_sides``), then joined with the right on it."""
    left = decoded(spark, inputs / "in", "l").where(F.col("lk") >= 1)
    right = decoded(spark, inputs / "other", "r")
    if both_sides:
        right = right.where(F.col("rk") >= 1)
    return left.join(right, F.expr("lk = rk AND rt >= lt - interval 4 seconds AND rt <= lt + interval 4 seconds"))


# Batch 0 reads both streams (watermark min(195, 95) s); batch 1 only the right's key 0 at 300 s. Spark plans batch 1
# with the left's scan empty and then infers the left's filter on the from_json key for the right (not in batch 0's
# plan): that row moves no watermark, and Spark runs no batch without data after it (misa fuzz --deployments seed
# 20124, on Kafka with minOffsetsPerTrigger, found it as one batch more).
DECODED_JOIN_ROUNDS = (
    Round(
        files=(
            ("in/0.json", rows((200, 1))),
            ("other/0.json", rows((100, 1))),
            ("other/1.json", rows((300, 0))),
        )
    ),
)


@pytest.mark.slow  # the default suite checks the refusal on the plan: tests/jobs/test_pushdown.py
def test_a_filter_spark_infers_for_the_other_side_only_without_its_input_is_refused_at_start(spark, tmp_path: Path):
    scenario = Scenario(
        "inferred per batch", lambda s, inputs: decoded_join(s, inputs, False), "append", DECODED_JOIN_ROUNDS
    )
    outcome = run_scenario(spark, scenario, tmp_path)
    assert outcome.refused == "misa", outcome
    assert "only in the batches where" in outcome.message, outcome


@pytest.mark.slow
def test_the_same_filter_written_on_both_sides_gives_sparks_batches(spark, tmp_path: Path):
    scenario = Scenario(
        "filtered both sides", lambda s, inputs: decoded_join(s, inputs, True), "append", DECODED_JOIN_ROUNDS
    )
    outcome = run_scenario(spark, scenario, tmp_path)
    assert outcome.ok, outcome
