"""Exactly-once into Kafka (issue 62, item 4): KafkaTransactionalSink against the project's broker. A batch is
one transaction; a crash inside it leaves rows only a read_uncommitted consumer sees; a batch replayed after its
commit is skipped; a from_query job's topic, read committed, holds Spark's rows once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pyarrow as pa
from pyspark.sql import functions as F

from misa import KafkaTransactionalSink, MisaConfig, from_query
from services.kafka_client import consume_all, create_topic

ROOT = Path(__file__).resolve().parents[3]


def batch(*values: int) -> pa.Table:
    return pa.table({"k": pa.array(values, pa.int64()), "n": pa.array([v * 10 for v in values], pa.int64())})


def rows(bootstrap: str, topic: str, read_committed: bool = True) -> Counter:
    return Counter(r.value.decode() for r in consume_all(bootstrap, topic, read_committed=read_committed))


def fresh_topic(bootstrap: str) -> str:
    topic = f"sink-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, partitions=2)
    return topic


def killed_in(bootstrap: str, topic: str, sink_id: str, point: str, batch_id: int) -> int:
    """A process whose sink writes one batch and is SIGKILLed at ``point``; its exit status."""
    code = (
        "import pyarrow as pa; from misa import KafkaTransactionalSink as S; "
        f"S({bootstrap!r}, {topic!r}, {sink_id!r}, key_column='k')"
        f"({batch_id}, pa.table({{'k': pa.array([7, 8], pa.int64()), 'n': pa.array([70, 80], pa.int64())}}))"
    )
    env = dict(os.environ, MISA_FAILPOINTS=f"{point}=kill")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, timeout=120).returncode


def test_each_batch_is_visible_once_and_a_replayed_batch_is_skipped(kafka_broker):
    topic = fresh_topic(kafka_broker)
    sink = KafkaTransactionalSink(kafka_broker, topic, f"t-{topic}", key_column="k")
    sink(0, batch(1, 2))
    sink(1, batch(3))
    sink.close()
    again = KafkaTransactionalSink(kafka_broker, topic, f"t-{topic}", key_column="k")
    again(1, batch(3))  # a replay after a crash between the commit and misa's record of the batch
    again(2, batch(4))
    assert again.committed_batch() == 2
    again.close()
    expected = Counter(json.dumps({"k": k, "n": k * 10}) for k in (1, 2, 3, 4))
    assert rows(kafka_broker, topic) == expected
    assert rows(kafka_broker, topic, read_committed=False) == expected


def test_a_process_killed_inside_a_transaction_leaves_nothing_a_committed_reader_sees(kafka_broker):
    topic = fresh_topic(kafka_broker)
    assert killed_in(kafka_broker, topic, f"t-{topic}", "kafka_sink.before_commit", 0) == -9
    restarted = KafkaTransactionalSink(kafka_broker, topic, f"t-{topic}", key_column="k")
    restarted(0, batch(7, 8))  # init_transactions aborted the killed one's open transaction
    restarted.close()
    once = Counter(json.dumps({"k": k, "n": k * 10}) for k in (7, 8))
    assert rows(kafka_broker, topic) == once
    assert rows(kafka_broker, topic, read_committed=False) == once + once  # the aborted rows were written


def test_a_process_killed_after_its_commit_does_not_write_the_batch_again(kafka_broker):
    topic = fresh_topic(kafka_broker)
    assert killed_in(kafka_broker, topic, f"t-{topic}", "kafka_sink.after_commit", 0) == -9
    restarted = KafkaTransactionalSink(kafka_broker, topic, f"t-{topic}", key_column="k")
    restarted(0, batch(7, 8))
    restarted.close()
    assert rows(kafka_broker, topic, read_committed=False) == Counter(json.dumps({"k": k, "n": k * 10}) for k in (7, 8))


def test_a_queries_topic_read_committed_holds_sparks_rows_once(spark, kafka_broker, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for i, times in enumerate(((100, 101, 102), (109, 111), (125, 95))):
        (folder / f"{i}.json").write_text("".join(json.dumps({"t": t, "k": t % 3}) + "\n" for t in times))

    def query():
        events = spark.readStream.schema("t timestamp, k int").option("maxFilesPerTrigger", 1).json(str(folder))
        windowed = events.withWatermark("t", "5 seconds").groupBy(F.window("t", "10 seconds"), "k")
        return windowed.agg(F.count("*").alias("n"))

    expected: Counter = Counter()

    def collect(df, _: int) -> None:
        expected.update(json.dumps(r.asDict(recursive=True), default=str) for r in df.collect())

    spark_query = (
        query()
        .writeStream.option("checkpointLocation", str(tmp_path / "spark"))
        .foreachBatch(
            lambda df, _: expected.update(json.dumps(r.asDict(recursive=True), default=str) for r in df.collect())
        )
        .trigger(availableNow=True)
        .start()
    )
    spark_query.awaitTermination()
    topic = fresh_topic(kafka_broker)
    sink = KafkaTransactionalSink(kafka_broker, topic, f"q-{topic}", key_column="k")
    job = from_query(query(), sink, str(tmp_path / "misa"), config=MisaConfig.from_mapping({}), echo=None)
    job.start({"availableNow": True}).awaitTermination()
    job.close()
    sink.close()
    got = Counter()
    for value in rows(kafka_broker, topic):
        row = json.loads(value)
        window = {name: bound.replace("T", " ").split("+")[0] for name, bound in row["window"].items()}
        got[json.dumps({**row, "window": window}, default=str)] += 1
    assert expected and got == expected
