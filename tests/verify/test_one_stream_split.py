"""One stream split by filters into the branches of a plan (issue 61): the two sides of a self-join, the branches of
a union, a side also joined with a static table. Each filter belongs to its branch: Spark's optimizer moves it below
that branch's withWatermark only, so it filters only the rows that branch sees and moves only that branch's
watermark. Each query through misa.from_query and plain Spark, compared batch by batch, on files and on the tests'
Python offset source, with the state on the driver and on the executors; Spark's output must not be empty."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from verify.differential.scenarios import Round, Rows, Scenario, drifting_rows, run_scenario
from verify.differential.topic_source import TopicSource

ON_EXECUTORS = {"spark.misa.state.placement": "executors", "spark.misa.state.processes": "1"}


def split_rows(seed: int) -> tuple[Rows, ...]:
    """The issue's input, small: 3 files of 40 rows over 12 keys, a tenth of the rows out of order by up to 5 s, each
    row on side 0 or 1."""
    return drifting_rows(seed, batches=3, per_batch=40, keys=12, values=100, step_s=0.25, late_s=5)


def as_millis(rows: Rows) -> Rows:
    """The rows with ``t`` in epoch milliseconds (the issue's ``timestamp_millis`` column)."""
    return tuple({**row, "t": int(row["t"] * 1000)} for row in rows)


def file_events(spark: SparkSession, inputs: Path) -> DataFrame:
    """The issue's stream: parquet there, JSON here, event time from epoch milliseconds."""
    rows = spark.readStream.schema("k long, v long, t long, side int").option("maxFilesPerTrigger", 1)
    return rows.json(str(inputs / "in")).withColumn("ts", F.timestamp_millis("t")).withWatermark("ts", "10 seconds")


def topic_events(spark: SparkSession, inputs: Path) -> DataFrame:
    """The same stream from the Python offset source (Kafka's stand-in), a backlog read 30 records a batch."""
    spark.dataSource.register(TopicSource)
    reader = spark.readStream.format("misa-test-topic").schema("t timestamp, k int, v bigint, side int")
    rows = reader.option("maxRecordsPerBatch", 30).load(str(inputs / "topic"))
    return rows.withColumnRenamed("t", "ts").withWatermark("ts", "10 seconds")


def sides(events: DataFrame) -> tuple[DataFrame, DataFrame]:
    left = events.where("side = 0").select(F.col("k").alias("lk"), F.col("ts").alias("lt"), F.col("v").alias("lv"))
    right = events.where("side = 1").select(F.col("k").alias("rk"), F.col("ts").alias("rt"), F.col("v").alias("rv"))
    return left, right


def self_join(events: DataFrame) -> DataFrame:
    """The issue's query: impressions and clicks of one topic."""
    left, right = sides(events)
    return left.join(right, F.expr("lk = rk AND rt BETWEEN lt AND lt + interval 10 seconds"))


def self_join_with_static(spark: SparkSession, events: DataFrame) -> DataFrame:
    """The left side also joined with a static table of the keys' names (keys 0 to 7 have one)."""
    names = spark.createDataFrame([(k, f"n{k}") for k in range(8)], "k long, name string")
    left, right = sides(events.join(names, "k"))
    return left.join(right, F.expr("lk = rk AND rt BETWEEN lt AND lt + interval 10 seconds"))


def union_of_branches(events: DataFrame) -> DataFrame:
    """The two sides again as one stream (a filter on the key in one branch, on the value in the other), counted
    per tumbling window."""
    left, right = sides(events)
    union = left.where("lk >= 3").unionByName(right.where("rv < 80").toDF("lk", "lt", "lv"))
    return union.groupBy(F.window("lt", "5 seconds"), "lk").agg(F.count("*").alias("n"), F.sum("lv").alias("s"))


def two_streams_one_watermark(spark: SparkSession, inputs: Path) -> DataFrame:
    """Two folders unioned, then one withWatermark, and a filter on the key above the aggregation (Spark's
    optimizer pushes a copy of it into each branch, below the one watermark)."""
    read = spark.readStream.schema("k long, v long, t long, side int").option("maxFilesPerTrigger", 1)
    union = read.json(str(inputs / "in")).unionByName(read.json(str(inputs / "other")))
    events = union.withColumn("ts", F.timestamp_millis("t")).withWatermark("ts", "10 seconds")
    return events.groupBy(F.window("ts", "5 seconds"), "k").agg(F.count("*").alias("n")).where("k >= 3")


def on_files(build, rows: tuple[Rows, ...] = split_rows(61)) -> tuple:
    files = tuple((f"in/{i}.json", as_millis(r)) for i, r in enumerate(rows))
    return (lambda spark, inputs: build(spark, file_events(spark, inputs))), (Round(files=files),)


def on_topic(build, rows: tuple[Rows, ...] = split_rows(61)) -> tuple:
    topic = ((f"topic/{0:05d}.jsonl", tuple(r for batch in rows for r in batch)),)
    return (lambda spark, inputs: build(spark, topic_events(spark, inputs))), (Round(files=topic),)


def scenario(name: str, build_and_rounds: tuple, mode: str = "append", **options) -> Scenario:
    build, rounds = build_and_rounds
    return Scenario(name, build, mode, rounds, **options)


# A row no branch takes (side 2) far ahead of the others, then rows just behind the others: Spark's watermark nodes
# never see it (each branch's filter is below its node), so the rows behind still count.
FAR_AHEAD = (
    ({"k": 4, "v": 1, "t": 100, "side": 0}, {"k": 4, "v": 2, "t": 101, "side": 1}),
    ({"k": 4, "v": 3, "t": 500, "side": 2},),
    ({"k": 4, "v": 4, "t": 102, "side": 0}, {"k": 4, "v": 5, "t": 103, "side": 1}),
    ({"k": 4, "v": 6, "t": 130, "side": 0}, {"k": 4, "v": 7, "t": 131, "side": 1}),
)
# Only the right branch takes the row far ahead. Both branches read one withWatermark node, and Spark's tracker keeps
# one watermark per node, the latest of its occurrences': the rows behind are late under either policy.
ONE_BRANCH_AHEAD = (FAR_AHEAD[0], ({"k": 4, "v": 3, "t": 500, "side": 1},), FAR_AHEAD[2], FAR_AHEAD[3])
MAX_POLICY = {"spark.sql.streaming.multipleWatermarkPolicy": "max"}
SCENARIOS = {
    "the issue's self-join, files": scenario("self-join", on_files(lambda spark, e: self_join(e))),
    "the issue's self-join, Python offset source": scenario("self-join topic", on_topic(lambda spark, e: self_join(e))),
    "the self-join, a side with a static table too": scenario("self-join static", on_files(self_join_with_static)),
    "a union of the two branches, aggregated": scenario(
        "union", on_files(lambda spark, e: union_of_branches(e)), "update"
    ),
    "a row no branch takes moves no watermark (join)": scenario(
        "far ahead join", on_files(lambda spark, e: self_join(e), FAR_AHEAD)
    ),
    "a row no branch takes moves no watermark (union)": scenario(
        "far ahead union", on_files(lambda spark, e: union_of_branches(e), FAR_AHEAD)
    ),
    "a row one side takes moves the one watermark of both sides (self-join, min policy)": scenario(
        "one ahead join", on_files(lambda spark, e: self_join(e), ONE_BRANCH_AHEAD)
    ),
    "a row one branch takes moves its watermark only (union, min policy)": scenario(
        "one ahead min", on_files(lambda spark, e: union_of_branches(e), ONE_BRANCH_AHEAD)
    ),
    "a row one branch takes moves its watermark only (union, max policy)": scenario(
        "one ahead max", on_files(lambda spark, e: union_of_branches(e), ONE_BRANCH_AHEAD), session_conf=MAX_POLICY
    ),
    "two streams unioned below one withWatermark, a key filter above the aggregation": Scenario(
        "union below watermark",
        two_streams_one_watermark,
        "append",
        (
            Round(
                files=tuple(
                    (f"{('in', 'other')[i % 2]}/{i}.json", as_millis(rows)) for i, rows in enumerate(split_rows(62))
                )
            ),
        ),
    ),
}
ON_BOTH_PLACEMENTS = ("the issue's self-join, files", "the issue's self-join, Python offset source")
# make test's time: these run with -m slow (each shares its cause with a case make test runs)
SLOW = {
    "the issue's self-join, Python offset source",
    "a row one side takes moves the one watermark of both sides (self-join, min policy)",
    "the self-join, a side with a static table too",
    "a row no branch takes moves no watermark (join)",
    "a row no branch takes moves no watermark (union)",
    "a row one branch takes moves its watermark only (union, max policy)",
    "a row one branch takes moves its watermark only (union, min policy)",
    # on a real topic in make test (tests/verify/test_kafka_queries.py): here on files, on demand
    "a join side keeps a non-nullable column in its row",
    "a filter on a decoded column after withWatermark, then a windowed aggregation",
    "a join side keeps a non-nullable column (a literal)",
}


def cases(names) -> list:
    return [pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name for name in names]


@pytest.mark.parametrize("name", cases(SCENARIOS))
def test_sparks_rows_when_one_stream_is_split_by_filters(spark, tmp_path: Path, name: str):
    outcome = run_scenario(spark, SCENARIOS[name], tmp_path)
    assert outcome.ok, f"{name}: {outcome}"
    assert outcome.spark_rows > 0, f"{name}: Spark wrote no rows, so the comparison checked nothing"


@pytest.mark.parametrize("name", [ON_BOTH_PLACEMENTS[0], pytest.param(ON_BOTH_PLACEMENTS[1], marks=pytest.mark.slow)])
def test_the_self_join_with_its_state_on_the_executors(spark, tmp_path: Path, name: str):
    on_executors = SCENARIOS[name]
    outcome = run_scenario(spark, Scenario(**{**on_executors.__dict__, "conf": ON_EXECUTORS}), tmp_path)
    assert outcome.ok, f"{name}: {outcome}"
    assert outcome.spark_rows > 0, f"{name}: Spark wrote no rows"


# Kafka-shaped defects an independent generator found (issue 62, item 3): a join side that keeps a non-nullable column
# (Kafka's partition and offset, a literal, rate's columns), and a filter on a column decoded from ``value`` that
# Spark's optimizer pushes below withWatermark into the decoding projection.
def decoded(spark: SparkSession, inputs: Path) -> DataFrame:
    """Records whose ``value`` is a JSON string, decoded as a Kafka query decodes its value, then watermarked."""
    raw = spark.readStream.schema("value string").option("maxFilesPerTrigger", 1).json(str(inputs / "in"))
    fields = F.from_json("value", "k long, v long, t long, side int").alias("j")
    events = raw.select(fields).select("j.*").withColumn("ts", F.timestamp_millis("t"))
    return events.withWatermark("ts", "10 seconds")


def as_values(rows: Rows) -> Rows:
    return tuple({"value": json.dumps(row)} for row in as_millis(rows))


KAFKA_SHAPED = {
    "a join side keeps a non-nullable column (a literal)": Scenario(
        "non-nullable",
        lambda spark, inputs: self_join(file_events(spark, inputs).withColumn("one", F.lit(1))).select(
            "lk", "lt", "rv", F.lit(7).alias("seven")
        ),
        "append",
        on_files(lambda spark, e: e)[1],
    ),
    "a join side keeps a non-nullable column in its row": Scenario(
        "non-nullable row",
        lambda spark, inputs: (
            lambda left, right: left.withColumn("one", F.lit(1)).join(
                right, F.expr("lk = rk AND rt BETWEEN lt AND lt + interval 10 seconds")
            )
        )(*sides(file_events(spark, inputs))),
        "append",
        on_files(lambda spark, e: e)[1],
    ),
    "a filter on a decoded column after withWatermark, then a windowed aggregation": Scenario(
        "decoded filter",
        lambda spark, inputs: (
            decoded(spark, inputs)
            .where("side = 1")
            .groupBy(F.window("ts", "5 seconds"), "k")
            .agg(F.count("*").alias("n"))
        ),
        "append",
        (Round(files=tuple((f"in/{i}.json", as_values(r)) for i, r in enumerate(split_rows(63)))),),
    ),
}


@pytest.mark.parametrize("name", cases(KAFKA_SHAPED))
def test_sparks_rows_on_kafka_shaped_queries(spark, tmp_path: Path, name: str):
    outcome = run_scenario(spark, KAFKA_SHAPED[name], tmp_path)
    assert outcome.ok, f"{name}: {outcome}"
    assert outcome.spark_rows > 0, f"{name}: Spark wrote no rows"


@pytest.mark.slow  # Spark runs it (two stateful operations) before misa refuses it
def test_a_branch_that_aggregates_next_to_one_that_joins_is_refused_at_start(spark, tmp_path: Path):
    """Two stateful operations (a count per key of one branch, joined with the other branch): refused at start."""

    def build(spark: SparkSession, inputs: Path) -> DataFrame:
        left, right = sides(file_events(spark, inputs))
        counts = left.groupBy(F.window("lt", "5 seconds").alias("w"), "lk").count()
        return counts.join(right, F.expr("lk = rk AND rt >= w.start AND rt < w.end"))

    rounds = on_files(lambda spark, e: e)[1]
    outcome = run_scenario(spark, Scenario("aggregating branch", build, "append", rounds), tmp_path)
    assert outcome.mismatch is None and outcome.refused in ("Spark", "misa"), outcome
