"""Spark's answer on Kafka (issue 62, item 3): queries over topics of the project's own broker, through
misa.from_query and through plain Spark, compared batch by batch (:mod:`verify.differential.scenarios`; each engine
reads topics of its own, made and fed the same way). The event time is the records' Kafka timestamp, stamped by the
producer; values are JSON decoded with ``from_json``, as a Kafka query decodes them."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterable

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewPartitions
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from services.kafka_client import admin, create_topic
from verify.differential.kafka_inputs import KafkaInputs, topic_name
from verify.differential.scenarios import Round, Rows, Scenario, drifting_rows, run_scenario

VALUE = "k long, v long, side int"
ON_EXECUTORS = {"spark.misa.state.placement": "executors", "spark.misa.state.processes": "1"}


def records(seed: int, batches: int = 3, partitions: int = 3) -> tuple[Rows, ...]:
    """30 records a batch over 8 keys, a tenth late by up to 8 s, over ``partitions`` partitions."""
    return drifting_rows(seed, batches, 30, keys=8, values=50, step_s=0.3, late_s=8, partitions=partitions)


def kafka_stream(spark: SparkSession, bootstrap: str, inputs: Path, name: str = "events", **options: str) -> DataFrame:
    """The topic's records decoded, with Kafka's own columns (partition, offset: never null), watermarked on the
    record timestamp."""
    reader = spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
    if "subscribePattern" not in options:
        reader = reader.option("subscribe", topic_name(inputs, name))
    reader = reader.option("startingOffsets", "earliest")
    for key, value in options.items():
        reader = reader.option(key, value)
    raw = reader.load()
    decoded = raw.select(
        F.from_json(F.col("value").cast("string"), VALUE).alias("j"), "partition", "offset", "timestamp"
    )
    return decoded.select("j.*", "partition", "offset", F.col("timestamp").alias("ts")).withWatermark("ts", "5 seconds")


def windowed(events: DataFrame) -> DataFrame:
    return events.groupBy(F.window("ts", "5 seconds"), "k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))


def self_join(events: DataFrame) -> DataFrame:
    """Impressions and clicks of one topic; each side keeps Kafka's non-nullable partition and offset."""
    left = events.where("side = 0").select(
        F.col("k").alias("lk"), F.col("ts").alias("lt"), F.col("partition").alias("lp"), F.col("offset").alias("lo")
    )
    right = events.where("side = 1").select(F.col("k").alias("rk"), F.col("ts").alias("rt"), F.col("v").alias("rv"))
    return left.join(right, F.expr("lk = rk AND rt BETWEEN lt AND lt + interval 10 seconds"))


def produced(name: str, batches: tuple[Rows, ...], first: int = 0) -> tuple[tuple[str, Rows], ...]:
    return tuple((f"kafka/{name}/{first + i}", rows) for i, rows in enumerate(batches))


def grow(bootstrap: str, topic: str, partitions: int, timeout_s: float = 30.0) -> None:
    """Add partitions to ``topic`` up to ``partitions`` (admin create_partitions); wait until its metadata shows
    them."""
    client = admin(bootstrap)
    if len(client.list_topics(topic, timeout=10).topics[topic].partitions) >= partitions:
        return
    client.create_partitions([NewPartitions(topic, partitions)], request_timeout=timeout_s)[topic].result()
    deadline = time.monotonic() + timeout_s
    while len(client.list_topics(topic, timeout=10).topics[topic].partitions) < partitions:
        assert time.monotonic() < deadline, f"{topic} did not show {partitions} partitions in {timeout_s} s"
        time.sleep(0.1)


def delete_before(bootstrap: str, topic: str, offsets: dict[int, int], timeout_s: float = 30.0) -> None:
    """Delete the records of ``topic`` before ``offsets`` (partition: offset), as retention would."""
    wanted = [TopicPartition(topic, p, offset) for p, offset in offsets.items() if offset > 0]
    client = admin(bootstrap)  # held until the answers: a client destroyed early never answers
    for future in client.delete_records(wanted, request_timeout=timeout_s).values():
        future.result(timeout=timeout_s)


class GrowingTopics(KafkaInputs):
    """Topics that gain partitions while a query runs: a produced file whose only row is ``{"_partitions": N}``
    adds partitions to the topic up to N instead of producing (a step of a round's ``later`` of its own, so that
    both engines' triggers see the new, empty partitions before any record lands in them)."""

    def produce(self, inputs: Path, name: str, rows: Iterable[dict[str, Any]]) -> None:
        rows = tuple(rows)
        if len(rows) == 1 and set(rows[0]) == {"_partitions"}:
            grow(self.bootstrap, topic_name(inputs, name), rows[0]["_partitions"])
        else:
            super().produce(inputs, name, rows)


def scenarios(bootstrap: str) -> dict[str, Scenario]:
    one_topic = KafkaInputs(bootstrap, {"events": 3})
    backlog = (Round(files=produced("events", records(62))),)
    two_runs = (Round(files=produced("events", records(63)[:2])), Round(files=produced("events", records(63)[2:])))

    def on(build, **options):
        return lambda spark, inputs: build(kafka_stream(spark, bootstrap, inputs, **options))

    def per_partition_start(spark: SparkSession, inputs: Path) -> DataFrame:
        starts = json.dumps({topic_name(inputs, "events"): {"0": 5, "1": -2, "2": 3}})
        return windowed(kafka_stream(spark, bootstrap, inputs, startingOffsets=starts))

    def static_names(spark: SparkSession, inputs: Path) -> DataFrame:
        names = spark.createDataFrame([(k, f"n{k}") for k in range(5)], "k long, name string")
        events = kafka_stream(spark, bootstrap, inputs).join(names, "k")
        return events.groupBy(F.window("ts", "5 seconds"), "name").agg(F.count("*").alias("n"))

    def two_topics(spark: SparkSession, inputs: Path) -> DataFrame:
        left = kafka_stream(spark, bootstrap, inputs, "impressions").select(
            F.col("k").alias("lk"), F.col("ts").alias("lt"), F.col("offset").alias("lo")
        )
        right = kafka_stream(spark, bootstrap, inputs, "clicks").select(
            F.col("k").alias("rk"), F.col("ts").alias("rt"), F.col("v").alias("rv")
        )
        return left.join(right, F.expr("lk = rk AND rt BETWEEN lt - interval 5 seconds AND lt + interval 5 seconds"))

    both = records(64, partitions=2)
    live = records(65, batches=4)
    slow = records(66, batches=4)
    three, five = records(67, batches=1)[0], records(67, batches=3, partitions=5)[1:]
    latest = records(68)
    lossy = records(69)
    limited = records(70, batches=4)

    def add_partitions(inputs: Path) -> None:
        grow(bootstrap, topic_name(inputs, "events"), 5)

    def on_pattern(spark: SparkSession, inputs: Path) -> DataFrame:
        pattern = f"(events|later)-{topic_name(inputs, '').rsplit('-', 1)[1]}"
        return windowed(kafka_stream(spark, bootstrap, inputs, subscribePattern=pattern))

    def create_later(inputs: Path) -> None:
        create_topic(bootstrap, topic_name(inputs, "later"), 3)  # the rows name 3

    def lose_records(inputs: Path) -> None:
        """Produce the second batch, then delete about half of what each partition got of it, unread."""
        ends = {p: sum(1 for r in lossy[0] if r["_partition"] == p) for p in range(3)}
        one_topic.produce(inputs, "events", lossy[1])
        gained = {p: sum(1 for r in lossy[1] if r["_partition"] == p) for p in range(3)}
        delete_before(bootstrap, topic_name(inputs, "events"), {p: ends[p] + gained[p] // 2 for p in range(3)})

    def data_loss(fail: str) -> Scenario:
        return Scenario(
            f"kafka data loss {fail}",
            on(windowed, failOnDataLoss=fail),
            "append",
            (
                Round(files=produced("events", lossy[:1])),
                Round(files=produced("events", lossy[2:], 2), before=lose_records),
            ),
            kafka=one_topic,
        )

    return {
        "a backlog under availableNow and maxOffsetsPerTrigger, windowed counts, append": Scenario(
            "kafka backlog", on(windowed, maxOffsetsPerTrigger="25"), "append", backlog, kafka=one_topic
        ),
        "a backlog under trigger once, windowed counts, update, restarted": Scenario(
            "kafka once", on(windowed), "update", two_runs, trigger={"once": True}, kafka=one_topic
        ),
        "a deduplication by key and event time, two runs": Scenario(
            "kafka dedup",
            on(lambda e: e.dropDuplicates(["k", "ts"]).select("k", "v", "ts"), maxOffsetsPerTrigger="40"),
            "append",
            two_runs,
            kafka=one_topic,
        ),
        "a self-join of one topic, sides keeping partition and offset": Scenario(
            "kafka self-join", on(self_join, maxOffsetsPerTrigger="30"), "append", backlog, kafka=one_topic
        ),
        "a filter on a decoded column after withWatermark, then a window": Scenario(
            "kafka decoded filter", on(lambda e: windowed(e.where("side = 1"))), "append", backlog, kafka=one_topic
        ),
        "startingOffsets per partition (JSON)": Scenario(
            "kafka starting offsets", per_partition_start, "update", backlog, kafka=one_topic
        ),
        "a topic joined with a static table": Scenario(
            "kafka static", static_names, "append", backlog, kafka=one_topic
        ),
        "two topics joined": Scenario(
            "kafka two topics",
            two_topics,
            "append",
            (Round(files=produced("impressions", both[:2]) + produced("clicks", both[1:])),),
            kafka=KafkaInputs(bootstrap, {"impressions": 2, "clicks": 2}),
        ),
        "live processingTime rounds, records produced while the query runs": Scenario(
            "kafka live",
            on(windowed),
            "append",
            (Round(files=produced("events", live[:1]), later=produced("events", live[1:], 1)),),
            trigger={"processingTime": "1 second"},
            kafka=one_topic,
        ),
        "minOffsetsPerTrigger with maxTriggerDelay, live": Scenario(
            "kafka min offsets",
            on(windowed, minOffsetsPerTrigger="50", maxTriggerDelay="30s"),
            "append",
            (Round(files=produced("events", slow[:1]), later=produced("events", slow[1:], 1)),),
            trigger={"processingTime": "1 second"},
            kafka=one_topic,
        ),
        "a partition added between two runs over one checkpoint": Scenario(
            "kafka partition added",
            on(windowed, maxOffsetsPerTrigger="30"),
            "update",
            (
                Round(files=(("kafka/events/0", three),)),
                Round(files=produced("events", five, 1), before=add_partitions),
            ),
            kafka=one_topic,
        ),
        "a partition added while the query runs": Scenario(
            "kafka partition added live",
            on(windowed),
            "update",
            (
                Round(
                    files=(("kafka/events/0", three),),
                    later=(("kafka/events/grow", ({"_partitions": 5},)), *produced("events", five, 1)),
                ),
            ),
            trigger={"processingTime": "1 second"},
            kafka=GrowingTopics(bootstrap, {"events": 3}),
        ),
        "subscribePattern with a topic created between runs": Scenario(
            "kafka pattern",
            on_pattern,
            "append",
            (
                Round(files=produced("events", latest[:1])),
                Round(files=produced("later", latest[1:], 1), before=create_later),
            ),
            kafka=one_topic,
        ),
        "startingOffsets latest: records produced before the first run skipped": Scenario(
            "kafka latest",
            on(windowed, startingOffsets="latest"),
            "update",
            (Round(files=produced("events", latest[:1])), Round(files=produced("events", latest[1:], 1))),
            kafka=one_topic,
        ),
        "records deleted by retention, failOnDataLoss false": data_loss("false"),
        "records deleted by retention, failOnDataLoss true": data_loss("true"),
        "a restart under maxOffsetsPerTrigger, windowed counts, update": Scenario(
            "kafka limited restart",
            on(windowed, maxOffsetsPerTrigger="25"),
            "update",
            (Round(files=produced("events", limited[:3])), Round(files=produced("events", limited[3:], 3))),
            kafka=one_topic,
        ),
    }


DEFAULT = ("a self-join of one topic, sides keeping partition and offset",)  # make test's time: the rest -m slow
NAMES = [
    "a backlog under availableNow and maxOffsetsPerTrigger, windowed counts, append",
    "a backlog under trigger once, windowed counts, update, restarted",
    "a deduplication by key and event time, two runs",
    "a self-join of one topic, sides keeping partition and offset",
    "a filter on a decoded column after withWatermark, then a window",
    "startingOffsets per partition (JSON)",
    "a topic joined with a static table",
    "two topics joined",
    "live processingTime rounds, records produced while the query runs",
    "minOffsetsPerTrigger with maxTriggerDelay, live",
    "a partition added between two runs over one checkpoint",
    "a partition added while the query runs",
    "subscribePattern with a topic created between runs",
    "startingOffsets latest: records produced before the first run skipped",
    "records deleted by retention, failOnDataLoss false",
    "a restart under maxOffsetsPerTrigger, windowed counts, update",
]


@pytest.mark.parametrize(
    "name", [name if name in DEFAULT else pytest.param(name, marks=pytest.mark.slow) for name in NAMES]
)
def test_sparks_batches_and_rows_on_kafka(spark, kafka_broker, tmp_path: Path, name: str):
    outcome = run_scenario(spark, scenarios(kafka_broker)[name], tmp_path)
    assert outcome.ok, f"{name}: {outcome}"
    assert outcome.spark_rows > 0, f"{name}: Spark wrote no rows"


@pytest.mark.slow
def test_records_deleted_by_retention_fail_both_engines_under_fail_on_data_loss(spark, kafka_broker, tmp_path: Path):
    outcome = run_scenario(
        spark, scenarios(kafka_broker)["records deleted by retention, failOnDataLoss true"], tmp_path
    )
    assert outcome.refused == "Spark", outcome  # both runs failed (a run of one engine alone: a mismatch)


@pytest.mark.slow  # make test runs it on the driver, and the files self-join on the executors
def test_the_self_join_on_kafka_with_its_state_on_the_executors(spark, kafka_broker, tmp_path: Path):
    on_topic = scenarios(kafka_broker)["a self-join of one topic, sides keeping partition and offset"]
    outcome = run_scenario(spark, Scenario(**{**on_topic.__dict__, "conf": ON_EXECUTORS}), tmp_path)
    assert outcome.ok, outcome
    assert outcome.spark_rows > 0


@pytest.mark.slow
def test_a_key_filter_on_one_side_of_a_two_topic_join_is_refused_at_start(spark, kafka_broker, tmp_path: Path):
    """misa fuzz --deployments seed 20124: Spark infers the impressions' filter on the decoded key for the clicks
    only in the batches where the impressions' topic has no new records (minOffsetsPerTrigger holding them back, a
    restart), so its watermark depends on which topics had records: misa refuses the query at start."""

    def side(spark: SparkSession, inputs: Path, name: str, prefix: str) -> DataFrame:
        """The topic's values decoded, the event time their field ``t`` (two fields of one from_json read)."""
        raw = spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka_broker)
        raw = raw.option("subscribe", topic_name(inputs, name)).option("startingOffsets", "earliest").load()
        decoded = raw.select(F.from_json(F.col("value").cast("string"), "t timestamp, k long").alias("j"))
        rows = decoded.select("j.*").withWatermark("t", "5 seconds")
        return rows.select(F.col("k").alias(f"{prefix}k"), F.col("t").alias(f"{prefix}t"))

    def filtered(spark: SparkSession, inputs: Path) -> DataFrame:
        left, right = side(spark, inputs, "impressions", "l"), side(spark, inputs, "clicks", "r")
        condition = "lk = rk AND rt BETWEEN lt - interval 5 seconds AND lt + interval 5 seconds"
        return left.where("lk >= 1").join(right, F.expr(condition))

    both = records(71, partitions=2)
    scenario = Scenario(
        "kafka inferred per batch",
        filtered,
        "append",
        (Round(files=produced("impressions", both[:1]) + produced("clicks", both[1:])),),
        kafka=KafkaInputs(kafka_broker, {"impressions": 2, "clicks": 2}),
    )
    outcome = run_scenario(spark, scenario, tmp_path)
    assert outcome.refused == "misa" and "only in the batches where" in outcome.message, outcome


def test_each_engine_reads_a_topic_of_its_own(kafka_broker, tmp_path: Path):
    inputs = KafkaInputs(kafka_broker, {"events": 2})
    inputs.create(tmp_path / "spark")
    inputs.create(tmp_path / "misa")
    topics = admin(kafka_broker).list_topics(timeout=10).topics
    assert {topic_name(tmp_path / engine, "events") for engine in ("spark", "misa")} <= set(topics)
    assert len(topics[topic_name(tmp_path / "misa", "events")].partitions) == 2
