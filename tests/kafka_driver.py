"""A driver of its own for the Kafka fault tests (tests/verify/test_kafka_faults.py): misa's ``from_query`` over a
topic of the project's broker, windowed counts per key, ``availableNow`` with ``maxOffsetsPerTrigger``, written to a
Parquet sink or to the transactional Kafka sink. The tests run it as a process of its own (``MISA_FAILPOINTS``
kills it at a commit stage) and again on the same checkpoint; plain Spark runs :func:`windowed_counts` in the
tests' session.

    python tests/kafka_driver.py BOOTSTRAP TOPIC CHECKPOINT (--parquet DIR | --kafka-sink TOPIC) [--per-batch N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from services.kafka_client import Record

VALUE = "k long, v long"


def in_order(first: int, count: int) -> list[Record]:
    """Records ``first`` .. ``first + count - 1`` over 3 partitions: keyed by k (6 keys), event time 0.3 s apart
    from t = 100 s."""
    out = []
    for i in range(first, first + count):
        k, t = i % 6, 100.0 + 0.3 * i
        out.append(Record(str(k), json.dumps({"k": k, "v": i % 17}), int(t * 1000), i % 3))
    return out


def windowed_counts(
    spark: SparkSession, bootstrap: str, topic: str, delay: str = "5 seconds", **options: str
) -> DataFrame:
    """Counts and sums per 5 s window and key of the topic's records, on their timestamps, watermarked ``delay``."""
    reader = spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
    reader = reader.option("subscribe", topic).option("startingOffsets", "earliest")
    for key, value in options.items():
        reader = reader.option(key, value)
    events = reader.load().select(F.from_json(F.col("value").cast("string"), VALUE).alias("j"), "timestamp")
    events = events.select("j.*", F.col("timestamp").alias("ts")).withWatermark("ts", delay)
    counts = events.groupBy(F.window("ts", "5 seconds"), "k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))
    return counts.select(F.col("window.start").alias("start"), "k", "n", "s")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("checkpoint")
    out = parser.add_mutually_exclusive_group(required=True)
    out.add_argument("--parquet", help="a ParquetBatchSink's folder")
    out.add_argument("--kafka-sink", help="the topic of a KafkaTransactionalSink (its sink id: the topic's name)")
    parser.add_argument("--per-batch", type=int, default=25, help="maxOffsetsPerTrigger")
    args = parser.parse_args(argv)

    from misa import KafkaTransactionalSink, MisaConfig, ParquetBatchSink, from_query
    from services.kafka_install import connector_jars

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.jars", ",".join(connector_jars()))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    if args.parquet:
        sink = ParquetBatchSink(args.parquet)
    else:
        sink = KafkaTransactionalSink(args.bootstrap, args.kafka_sink, args.kafka_sink, key_column="k")
    query = windowed_counts(spark, args.bootstrap, args.topic, maxOffsetsPerTrigger=str(args.per_batch))
    config = MisaConfig.from_mapping({"spark.misa.state.shards": "2"})
    job = from_query(query, sink, args.checkpoint, output_mode="append", config=config, echo=None)
    try:
        job.start({"availableNow": True}).awaitTermination()
    finally:
        job.close()
        if not args.parquet:
            sink.close()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
