"""The jobs' Kafka source: a topic's records as the jobs read a folder of JSON lines.

``--kafka BOOTSTRAP --topic T`` (with ``--starting-offsets`` and ``--max-offsets-per-trigger``) replaces
``--input DIR``: each record's value is one JSON line, so the rest of a job (its quarantine of malformed records,
its schema) is the same on either source. Spark's Kafka connector must be on the session's jars
(``make kafka-jars``; :func:`services.kafka_install.connector_jars`).
"""

from __future__ import annotations

import argparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType


def add_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    """The Kafka source's options of a job's command line."""
    group = parser.add_argument_group("Kafka source (instead of --input)")
    group.add_argument("--kafka", metavar="BOOTSTRAP", help="read the topic on these bootstrap servers")
    group.add_argument("--topic", help="the topic to read (with --kafka)")
    group.add_argument(
        "--starting-offsets",
        default="earliest",
        help="earliest, latest or Spark's per-partition JSON (a new query only; default earliest)",
    )
    group.add_argument("--max-offsets-per-trigger", type=int, help="at most this many records a batch")
    group.add_argument(
        "--output-topic",
        help="also write each batch's output rows into this topic on the same broker, in one transaction per batch "
        "(exactly once for a read_committed consumer; jobs/kafka_output.py)",
    )


def check_source(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """One source: ``--input`` or ``--kafka`` with ``--topic`` (a parser error naming the options otherwise)."""
    if args.kafka and not args.topic:
        parser.error("--kafka needs --topic")
    if not args.kafka and not args.input:
        parser.error("give the input: --input DIR, or --kafka BOOTSTRAP --topic TOPIC")
    if args.output_topic and not args.kafka:
        parser.error("--output-topic needs --kafka (the topic is written on the source's broker)")


def kafka_lines(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The topic's records' values as text (column ``value``, as ``readStream.text`` gives a file's lines)."""
    reader = spark.readStream.format("kafka").option("kafka.bootstrap.servers", args.kafka)
    reader = reader.option("subscribe", args.topic).option("startingOffsets", args.starting_offsets)
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
    return reader.load().select(F.col("value").cast("string").alias("value"))


def kafka_json(spark: SparkSession, args: argparse.Namespace, schema: StructType) -> DataFrame:
    """The topic's JSON values as ``schema``'s columns, as Spark's JSON reader gives a file's lines (PERMISSIVE: a
    malformed record's fields are null)."""
    parsed = F.from_json("value", schema, {"mode": "PERMISSIVE"}).alias("record")
    return kafka_lines(spark, args).select(parsed).select("record.*")
