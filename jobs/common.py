"""What every spark-submit job shares: the command line, the Spark session, triggers, native runs."""
from __future__ import annotations

import argparse
import logging
from typing import Any, Callable, Sequence

from pyspark.sql import DataFrame, SparkSession

from misa.config import MisaConfig, parse_seconds
from misa.job import StatefulJob
from misa.metrics import BatchMetrics, summary_line
from misa.operators import StatefulOperator
from misa.sink import ParquetBatchSink

MODES = ("sync", "async-ckpt", "misa", "native")


def job_arguments(description: str, queries: tuple[str, ...]) -> argparse.ArgumentParser:
    """The command line shared by the jobs."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--query", required=True, choices=queries)
    p.add_argument("--input", required=True, help="directory of JSON-lines files (read as a stream)")
    p.add_argument("--output", required=True, help="Parquet output, one folder per batch id")
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint location")
    p.add_argument("--state-dir", help="local state directory (default: CHECKPOINT/misa-local)")
    p.add_argument("--dfs", help="fsspec URL for durable state (default: file://CHECKPOINT/misa-state)")
    p.add_argument("--mode", choices=MODES, default="misa")
    p.add_argument("--trigger", default="3s", help="processing-time trigger interval")
    p.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    p.add_argument("--max-files-per-trigger", type=int, default=None)
    p.add_argument("--output-mode", choices=("update", "append"), default="update")
    p.add_argument("--watermark-delay", default="10s", help="allowed lateness of event time")
    p.add_argument("--metrics", help="append one JSON record per batch to this file")
    p.add_argument("--quiet", action="store_true", help="no per-batch summary")
    return p


def spark_session(app_name: str) -> SparkSession:
    """The session spark-submit gives us, with small-machine defaults unless set by --conf.

    The runtime's warnings (retries, thread restarts, recovery decisions) go to stderr.
    """
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        force=True)
    spark = SparkSession.builder.appName(app_name).getOrCreate()
    conf = spark.sparkContext.getConf()
    if not conf.contains("spark.sql.shuffle.partitions"):
        spark.conf.set("spark.sql.shuffle.partitions", "4")
    return spark


def trigger(args: argparse.Namespace) -> dict[str, Any]:
    if args.available_now:
        return {"availableNow": True}
    return {"processingTime": f"{parse_seconds(args.trigger)} seconds"}


def read_stream(spark: SparkSession, args: argparse.Namespace, schema: Any) -> DataFrame:
    reader = spark.readStream.schema(schema)
    if args.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", args.max_files_per_trigger)
    return reader.json(args.input)


def run_misa(spark: SparkSession, args: argparse.Namespace, stream: DataFrame, operator: StatefulOperator,
             upstream: Callable[[DataFrame], DataFrame], sink: ParquetBatchSink,
             hint_stages: Sequence[Callable[[DataFrame], DataFrame]] | None = None) -> None:
    """Run the query through the MiSA runtime until it ends (available-now) or is stopped.

    ``hint_stages``: candidate stages for prefetch hints, earliest first (default: ``upstream``).
    """
    config = MisaConfig.from_session(spark).with_values(commit_mode=args.mode)
    job = StatefulJob(operator, sink, args.checkpoint, upstream=upstream, hint_stages=hint_stages, config=config,
                      state_dir=args.state_dir, dfs_url=args.dfs, metrics_path=args.metrics,
                      echo=None if args.quiet else print)
    try:
        job.start(spark, stream, trigger(args), query_name=f"{args.query}-{args.mode}").awaitTermination()
    finally:
        job.close(spark)


def run_native(spark: SparkSession, args: argparse.Namespace, result: DataFrame, sink: ParquetBatchSink) -> None:
    """Run the same query in plain Spark Structured Streaming with Spark's RocksDB state store."""
    spark.conf.set("spark.sql.streaming.stateStore.providerClass",
                   "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    metrics = BatchMetrics(args.metrics, "native", None if args.quiet else (lambda r: print(summary_line(r))))
    listener = metrics.listener()
    spark.streams.addListener(listener)
    try:
        query = (result.writeStream.outputMode(args.output_mode)
                 .foreachBatch(lambda df, batch_id: (metrics.add(batch_id, {}), sink(batch_id, df.toArrow())))
                 .option("checkpointLocation", args.checkpoint.removeprefix("file://"))
                 .queryName(f"{args.query}-native").trigger(**trigger(args)).start())
        query.awaitTermination()
    finally:
        metrics.wait_reported()
        spark.streams.removeListener(listener)
