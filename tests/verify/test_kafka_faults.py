"""Faults on Kafka (issue 62): misa against plain Spark on the same topic of the project's broker when the broker
restarts under a running query, when the driver is killed between batches or inside one and restarted on its
checkpoint (a Parquet sink and the transactional Kafka sink), and misa's transformWithStateInPandas adapter against
Spark's on a topic."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pytest
from kafka_driver import in_order, windowed_counts
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from misa import MisaConfig, from_query, transform_with_state_in_pandas
from misa.io.sink import read_batches
from services.kafka_broker import KafkaBroker
from services.kafka_client import Record, consume_all, create_topic, produce
from verify.differential import processor
from verify.differential.runner import compare

SENTINEL_T = 10_000.0  # a last record far ahead: its watermark closes every window before it
LIVE_DELAY = "30 seconds"  # more than any two records read in different batches are apart: rows not timing's
ROOT = Path(__file__).resolve().parents[2]


def new_topic(bootstrap: str, partitions: int = 3) -> str:
    topic = f"faults-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, partitions)
    return topic


def rows_of(tables: Iterator[pa.Table]) -> Counter:
    return Counter(tuple(row.values()) for table in tables for row in table.to_pylist())


def counted(rows: Counter) -> int:
    """The records the rows count, the sentinel's window left out."""
    return sum(n * times for (start, _k, n, _s), times in rows.items() if start.timestamp() < SENTINEL_T - 5)


@pytest.mark.slow  # a broker of its own, stopped and started (about 7 s), as the live queries through a restart
def test_a_broker_stopped_and_started_again_keeps_its_address_topics_and_records(tmp_path: Path):
    with KafkaBroker() as broker:
        bootstrap, folder = broker.bootstrap, broker.dir
        topic = new_topic(bootstrap)
        produce(bootstrap, topic, in_order(0, 4))
        broker.stop(keep_data=True)
        assert not broker.running and broker.dir == folder and broker.bootstrap == bootstrap
        broker.start()
        assert broker.running and broker.bootstrap == bootstrap
        produce(bootstrap, topic, in_order(4, 2))
        assert sorted(json.loads(r.value)["v"] for r in consume_all(bootstrap, topic)) == [i % 17 for i in range(6)]
    assert broker.dir is None and not folder.exists()  # stop() without keep_data removes the folder


@pytest.mark.slow  # 50 s under load: a broker of its own, two live queries (the restart itself: the test above)
def test_a_broker_restarted_under_running_queries_gives_misa_sparks_rows(spark, tmp_path: Path):
    """Plain Spark's query and misa's (from_query) read one topic side by side under a 1 s processingTime trigger
    while a producer writes to it; the broker is stopped for 3 s and started again on its data. Both queries keep
    running, read every record once, and write the same rows."""
    chunks, per_chunk = 12, 10
    with KafkaBroker() as broker:
        bootstrap = broker.bootstrap
        topic = new_topic(bootstrap)
        produced = threading.Semaphore(0)
        errors: list[BaseException] = []

        def producer() -> None:
            try:
                for chunk in range(chunks):
                    produce(bootstrap, topic, in_order(chunk * per_chunk, per_chunk), timeout_s=60)
                    produced.release()
                    time.sleep(0.3)
            except BaseException as error:  # noqa: BLE001 - told to the test below
                errors.append(error)
                produced.release()

        outputs: dict[str, dict[int, pa.Table]] = {"spark": {}, "misa": {}}
        spark_query = (
            windowed_counts(spark, bootstrap, topic, LIVE_DELAY)
            .writeStream.outputMode("append")
            .option("checkpointLocation", str(tmp_path / "spark"))
            .foreachBatch(lambda df, batch_id: outputs["spark"].__setitem__(batch_id, df.toArrow()))
            .trigger(processingTime="1 second")
            .start()
        )
        job = from_query(
            windowed_counts(spark, bootstrap, topic, LIVE_DELAY),
            outputs["misa"].__setitem__,
            str(tmp_path / "misa"),
            output_mode="append",
            config=MisaConfig.from_mapping({}),
            echo=None,
        )
        misa_query = job.start({"processingTime": "1 second"})
        writer = threading.Thread(target=producer, daemon=True)
        try:
            writer.start()
            for _ in range(4):
                produced.acquire(timeout=120)
            read_before = time.monotonic() + 120  # the broker goes down under queries that have read records
            while min(sum(p["numInputRows"] for p in q.recentProgress) for q in (spark_query, misa_query)) == 0:
                assert time.monotonic() < read_before, "no query read a record in 120 s"
                time.sleep(0.1)
            broker.stop(keep_data=True)
            time.sleep(3)
            broker.start()
            writer.join(timeout=180)
            assert not errors, errors
            produce(bootstrap, topic, [Record("0", json.dumps({"k": 0, "v": 0}), int(SENTINEL_T * 1000), 0)])
            deadline = time.monotonic() + 120
            while min(counted(rows_of(out.values())) for out in outputs.values()) < chunks * per_chunk:
                for query in (spark_query, misa_query):
                    assert query.isActive, f"the query stopped: {query.exception()}"
                assert time.monotonic() < deadline, {e: counted(rows_of(o.values())) for e, o in outputs.items()}
                time.sleep(0.2)
            time.sleep(2)  # a batch doubling rows would come now
            for query in (spark_query, misa_query):
                assert query.isActive and query.exception() is None
        finally:
            spark_query.stop()
            misa_query.stop()
            job.close()
    expected = rows_of(outputs["spark"].values())
    assert counted(expected) == chunks * per_chunk  # Spark read every record once
    assert rows_of(outputs["misa"].values()) == expected


RECORDS, PER_BATCH = 200, 40  # 5 batches of records 0.3 s apart (windows of 5 s, watermarked 5 s)


def sparks_batches(spark: SparkSession, bootstrap: str, topic: str, checkpoint: Path) -> dict[int, pa.Table]:
    """Plain Spark's batches of the driver's query, availableNow (foreachBatch: each batch's rows)."""
    outputs: dict[int, pa.Table] = {}
    query = windowed_counts(spark, bootstrap, topic, maxOffsetsPerTrigger=str(PER_BATCH))
    writer = query.writeStream.outputMode("append").option("checkpointLocation", str(checkpoint))
    writer.foreachBatch(lambda df, batch_id: outputs.__setitem__(batch_id, df.toArrow())).trigger(
        availableNow=True
    ).start().awaitTermination()
    return outputs


def drive(bootstrap: str, topic: str, run: Path, sink: list[str], failpoints: str = "") -> tuple[int, str]:
    """tests/kafka_driver.py in a process of its own (its Spark JVM in its session, ended with it); its exit status
    and stderr."""
    command = [sys.executable, str(ROOT / "tests" / "kafka_driver.py"), bootstrap, topic, str(run / "ckpt"), *sink]
    command += ["--per-batch", str(PER_BATCH)]
    env = dict(os.environ, MISA_FAILPOINTS=failpoints, PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable)
    driver = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, err = driver.communicate(timeout=300)
    finally:
        try:
            os.killpg(driver.pid, signal.SIGKILL)  # the JVM of a killed driver, if it outlived it
        except ProcessLookupError:
            pass
        driver.wait()
    return driver.returncode, err


def killed_then_restarted(bootstrap: str, topic: str, run: Path, sink: list[str], kills: list[str]) -> None:
    """One driver run killed at each failpoint in turn, each on the checkpoint the one before left; then a run to
    the end."""
    for spec in kills:
        status, err = drive(bootstrap, topic, run, sink, spec)
        point = spec.split("=")[0]
        assert status == -signal.SIGKILL and f"failpoint {point}: killing process" in err, (spec, err[-3000:])
    status, err = drive(bootstrap, topic, run, sink)
    assert status == 0, err[-3000:]


def as_json(rows: Counter) -> Counter:
    """Spark's rows as the Kafka sink writes them (JSON objects, timestamps in ISO 8601)."""
    columns = ("start", "k", "n", "s")
    return Counter(
        {json.dumps(dict(zip(columns, row)), default=lambda v: v.isoformat()): times for row, times in rows.items()}
    )


# (inside a batch, between batches): the state's commit after its rows reached RocksDB, before the flush; a
# version durable (its DFS marker) while Spark goes on; the Kafka sink's transaction before and after its commit
PARQUET_KILLS = ["commit.after_apply=kill(3)", "ckpt.after_dfs_marker=kill(2)"]
KAFKA_KILLS = {
    "inside a transaction": ["kafka_sink.before_commit=kill(3)"],
    "after a commit, then between batches": ["kafka_sink.after_commit=kill(2)", "ckpt.after_dfs_marker=kill(2)"],
}


@pytest.mark.slow  # three driver JVMs (277 s under load); make test runs the Kafka sink's kill below
def test_a_driver_killed_inside_a_batch_and_between_batches_gives_sparks_batches(spark, kafka_broker, tmp_path):
    topic = new_topic(kafka_broker)
    produce(kafka_broker, topic, in_order(0, RECORDS))
    expected = sparks_batches(spark, kafka_broker, topic, tmp_path / "spark")
    assert sum(t.num_rows for t in expected.values()) > 0
    killed_then_restarted(kafka_broker, topic, tmp_path / "misa", ["--parquet", str(tmp_path / "out")], PARQUET_KILLS)
    mismatch = compare(expected, dict(read_batches(tmp_path / "out")))
    assert mismatch is None, mismatch


KAFKA_CASES = [  # the suite's time: make test kills the sink inside a transaction without Spark (test_kafka_sink.py)
    pytest.param(KAFKA_KILLS["inside a transaction"], marks=pytest.mark.slow),
    pytest.param(KAFKA_KILLS["after a commit, then between batches"], marks=pytest.mark.slow),
]


@pytest.mark.parametrize("kills", KAFKA_CASES, ids=list(KAFKA_KILLS))
def test_a_driver_killed_under_the_kafka_sink_leaves_sparks_rows_once_read_committed(
    spark, kafka_broker, tmp_path, kills
):
    topic, out = new_topic(kafka_broker), new_topic(kafka_broker, partitions=2)
    produce(kafka_broker, topic, in_order(0, RECORDS))
    expected = as_json(rows_of(sparks_batches(spark, kafka_broker, topic, tmp_path / "spark").values()))
    assert expected
    killed_then_restarted(kafka_broker, topic, tmp_path / "misa", ["--kafka-sink", out], kills)
    committed = Counter(r.value.decode() for r in consume_all(kafka_broker, out, read_committed=True))
    assert committed == expected
    written = Counter(r.value.decode() for r in consume_all(kafka_broker, out))
    if "before_commit" in kills[0]:  # the killed transaction's rows were on the broker, aborted
        assert written - committed and not committed - written
    else:
        assert written == committed  # the committed batch was not written again


def payments_on_kafka(count: int, seed: int) -> list[Record]:
    """Payments of 4 cards over 2 partitions, a tenth late by up to 8 s, event times (ms) from 100 s on."""
    rng, out, clock = random.Random(seed), [], 100_000
    for i in range(count):
        clock += rng.choice((300, 900, 2_500, 300, 900, 16_000))  # a 16 s gap ends sessions (10 s + 5 s)
        t = clock - rng.randrange(8_000) if rng.random() < 0.1 else clock
        card = ("a", "b", "c", "")[rng.randrange(4)]
        row = {"card": card, "t": t, "amount": rng.randrange(1, 400), "merchant": f"m{rng.randrange(3)}"}
        out.append(Record(card, json.dumps(row), t, i % 2))
    return out


def processed(spark: SparkSession, bootstrap: str, topic: str, engine: str, checkpoint: Path) -> dict[int, pa.Table]:
    """One availableNow run of the processor over the topic: Spark's transformWithStateInPandas, or misa's."""
    reader = spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    raw = reader.option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "20").load()
    decoded = raw.select(F.from_json(F.col("value").cast("string"), processor.SOURCE).alias("p")).select("p.*")
    events = processor.payments(decoded).withWatermark(processor.EVENT_TIME, "5 seconds")
    outputs: dict[int, pa.Table] = {}
    shape = (processor.OUTPUT, "Append", "EventTime")
    if engine == "spark":
        query = events.groupBy("card").transformWithStateInPandas(processor.SessionFraudProcessor(), *shape)
        writer = query.writeStream.outputMode("append").option("checkpointLocation", str(checkpoint))
        writer = writer.foreachBatch(lambda df, batch_id: outputs.__setitem__(batch_id, df.toArrow()))
        writer.trigger(availableNow=True).start().awaitTermination()
        return outputs
    job = transform_with_state_in_pandas(
        events,
        ["card"],
        processor.SessionFraudProcessor(),
        *shape,
        outputs.__setitem__,
        str(checkpoint),
        config=MisaConfig.from_mapping({}),
        echo=None,
    )
    try:
        job.start({"availableNow": True}).awaitTermination()
    finally:
        job.close()
    return outputs


@pytest.mark.slow  # leaves the shared session slow: the Kafka self-join after it took 98 s instead of 12 (open)
def test_transform_with_state_in_pandas_on_a_topic_gives_sparks_batches(spark, session_conf, kafka_broker, tmp_path):
    """The session-fraud processor (value, list and map state, event-time timers) over a topic of two partitions,
    20 offsets a batch, in two runs over one checkpoint (records produced between them): misa's adapter writes
    Spark's rows batch by batch."""
    session_conf({**processor.RUN_CONF, "spark.sql.shuffle.partitions": "2"})
    topic = new_topic(kafka_broker, partitions=2)
    records = payments_on_kafka(70, seed=62)
    outputs: dict[str, dict[int, pa.Table]] = {"spark": {}, "misa": {}}
    for part in (records[:40], records[40:]):
        produce(kafka_broker, topic, part)
        for engine, out in outputs.items():
            out.update(processed(spark, kafka_broker, topic, engine, tmp_path / engine))
    assert len(outputs["spark"]) >= 4 and sum(t.num_rows for t in outputs["spark"].values()) > 0
    assert any(row["kind"] == "session" for t in outputs["spark"].values() for row in t.to_pylist())
    mismatch = compare(outputs["spark"], outputs["misa"])
    assert mismatch is None, mismatch
