"""A user's job written only in Spark's DataFrame API, run on misa through ``misa.from_query`` (or in plain Spark).

    spark-submit jobs/spark_queries.py --query sliding|dedup|session|repeat --input DIR --output DIR --checkpoint DIR
        [--mode misa|native]

Input: JSON lines of payments ``user string, payment_id bigint, t bigint (epoch ms), amount bigint``, one file
per batch (``availableNow``, the files in order). The queries, as a Spark user writes them:

* ``sliding``: per user, count, total and largest amount over 10 s windows sliding every 5 s, update output;
* ``dedup``: payments deduplicated by ``payment_id`` within the watermark (a payment re-sent), append output;
* ``session``: per user, sessions of payments at most 10 s apart: count, total, first amount; append output;
* ``repeat``: each payment joined with the same user's payments of the 30 s before it (a stream-stream self-join
  with an event-time interval), append output.

Each has a 5 s watermark on the payment time. ``--mode misa`` runs the query through ``from_query`` (its stateful
part on misa, ``spark.misa.*`` from the session's conf); ``--mode native`` runs the same DataFrame with
``writeStream`` on Spark's RocksDB store. Both write each batch with :class:`misa.ParquetBatchSink` to
``--output``.
"""

from __future__ import annotations

import argparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.submit import native_state_store_conf
from misa import MisaConfig, ParquetBatchSink, from_query

SCHEMA = "user string, payment_id bigint, t bigint, amount bigint"
OUTPUT_MODES = {"sliding": "update", "dedup": "append", "session": "append", "repeat": "append"}


def query(payments: DataFrame, name: str) -> DataFrame:
    """The named query over the stream of payments."""
    events = payments.withColumn("event_time", F.timestamp_millis("t")).withWatermark("event_time", "5 seconds")
    if name == "sliding":
        return events.groupBy(F.window("event_time", "10 seconds", "5 seconds"), "user").agg(
            F.count("*").alias("n"), F.sum("amount").alias("total"), F.max("amount").alias("largest")
        )
    if name == "dedup":
        return events.dropDuplicatesWithinWatermark(["payment_id"]).select("payment_id", "user", "amount")
    if name == "repeat":
        within = "r.user = p.user AND p.event_time BETWEEN r.event_time - INTERVAL 30 SECONDS AND r.event_time"
        return (
            events.alias("r")
            .join(events.alias("p"), F.expr(within))
            .select("r.payment_id", "r.user", "r.amount", F.col("p.payment_id").alias("previous_id"))
        )
    return events.groupBy(F.session_window("event_time", "10 seconds"), "user").agg(
        F.count("*").alias("n"), F.sum("amount").alias("total"), F.first("amount").alias("first_amount")
    )


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(args.input)
    result, mode, sink = query(stream, args.query), OUTPUT_MODES[args.query], ParquetBatchSink(args.output)
    if args.mode == "native":
        for key, value in native_state_store_conf("native", MisaConfig.from_session(spark)).items():
            spark.conf.set(key, value)
        writer = result.writeStream.outputMode(mode).option("checkpointLocation", args.checkpoint)
        writer.foreachBatch(lambda df, batch_id: sink(batch_id, df.toArrow())).trigger(
            availableNow=True
        ).start().awaitTermination()
        return
    job = from_query(result, sink, args.checkpoint, output_mode=mode, config=MisaConfig.from_session(spark))
    try:
        job.start({"availableNow": True}).awaitTermination()
    finally:
        job.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--query", choices=sorted(OUTPUT_MODES), required=True)
    parser.add_argument("--mode", choices=("misa", "native"), default="misa")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--checkpoint", required=True)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    spark = SparkSession.builder.appName("spark-queries").getOrCreate()
    run(spark, parse_args(argv))


if __name__ == "__main__":
    main()
