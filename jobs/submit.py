"""What every spark-submit job shares: the command line, the Spark session, triggers, reading the input
with bad records quarantined, runs on the MiSA runtime and the plain-Spark references."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from functools import partial, reduce
from typing import Any, Callable, Protocol, Sequence

import pyarrow as pa
from pyspark import SparkConf, SparkContext
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StructType

from checkpoint.exceptions import OwnershipError
from common.errors import LocationError
from common.location import parse, spark_location
from jobs.kafka_output import BatchSink, with_kafka_output
from jobs.kafka_source import add_kafka_arguments, check_source, kafka_json, kafka_lines
from misa.config import MisaConfig
from misa.config_forms import parse_seconds
from misa.config_keys import CommitMode
from misa.exceptions import AnalysisError, ConfigError, IncompatibleStateError, RecoveryError
from misa.io.json_arrow import read_json_lines_arrow
from misa.io.quarantine import Quarantine, good_records, parse_json_lines
from misa.io.sink import ParquetBatchSink
from misa.job import StatefulJob
from misa.obs.metrics import BatchMetrics, summary_line
from misa.operators.aggregation import Aggregation
from misa.operators.base import StatefulOperator, spark_interval
from misa.operators.interval_join import PREV, IntervalJoin
from misa.query.job import from_query
from misa.runtime.interrupt import EXIT_INTERRUPTED, StopOnInterrupt
from misa.runtime.next_input import FileSourcePeek, NextInput
from misa.runtime.process import switch_interval

RUNTIME_MODES = tuple(m.value for m in CommitMode)  # the command line's names of the runtime's modes
NATIVE_MODES = ("native", "native-default")
MODES = RUNTIME_MODES + NATIVE_MODES
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
_ROCKSDB = "spark.sql.streaming.stateStore.rocksdb."
RETRY_MESSAGE = "calling start() again"  # logged by each --retry-start retry (the crash soak looks for it)
log = logging.getLogger(__name__)


def is_native(mode: str) -> bool:
    """Whether ``mode`` runs the query in plain Spark (the reference) rather than on the runtime."""
    return mode in NATIVE_MODES


def native_state_store_conf(mode: str, config: MisaConfig) -> dict[str, str]:
    """Spark's RocksDB state store for a native mode.

    ``native`` is Spark 4 tuned as its documentation advises for stateful streaming: changelog
    checkpointing (only the changed rows go to the checkpoint per batch), checkpoint format v2,
    no row counting, and RocksDB memory bounded to the runtime's own budget (block cache plus every
    shard's write buffers, one memory pool for all instances). ``native-default`` is the provider
    with Spark's defaults. Sizes are rounded up to whole MB, at least 1 (Spark's unit): scaled-down
    caches (``misa bench live --state-volume``) stay scaled down, never 0.
    """
    conf = {"spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER}
    if mode == "native":
        write_buffers = config.state_shards * config.rocksdb_max_write_buffers * config.rocksdb_write_buffer_bytes
        conf.update(
            {
                _ROCKSDB + "changelogCheckpointing.enabled": "true",
                "spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
                _ROCKSDB + "trackTotalNumberOfRows": "false",
                _ROCKSDB + "boundedMemoryUsage": "true",
                _ROCKSDB + "maxMemoryUsageMB": _mb(config.rocksdb_block_cache_bytes + write_buffers),
                _ROCKSDB + "writeBufferSizeMB": _mb(config.rocksdb_write_buffer_bytes),
                _ROCKSDB + "maxWriteBufferNumber": str(config.rocksdb_max_write_buffers),
                _ROCKSDB + "blockCacheSizeMB": _mb(config.rocksdb_block_cache_bytes),
            }
        )
    return conf


def _mb(size: int) -> str:
    """``size`` bytes in whole MB, rounded up, at least 1."""
    return str(max(1, -(-size // (1 << 20))))


_PARTNER = "_partner_"  # prefix of the older row's columns in the native self-join


def job_arguments(
    description: str, queries: tuple[str, ...], output_mode: str | None = "update"
) -> argparse.ArgumentParser:
    """The command line shared by the jobs; ``output_mode`` is the default (None: the job chooses per query)."""
    p = _JobParser(description=description)
    p.add_argument("--query", required=True, choices=queries)
    p.add_argument("--input", help="directory of JSON-lines files (read as a stream); or a Kafka topic, below")
    p.add_argument("--output", required=True, help="Parquet output, one folder per batch id")
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint location")
    p.add_argument("--state-dir", help="local state directory (default: CHECKPOINT/misa-local)")
    p.add_argument("--dfs", help="fsspec URL for durable state (default: file://CHECKPOINT/misa-state)")
    p.add_argument("--mode", choices=MODES, default="misa")
    p.add_argument("--trigger", default="3s", help="processing-time trigger interval")
    p.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    p.add_argument("--max-files-per-trigger", type=int, default=None)
    p.add_argument(
        "--output-mode",
        choices=("update", "append"),
        default=output_mode,
        help=f"default: {output_mode or 'per query'}",
    )
    p.add_argument("--watermark-delay", default="10s", help="allowed lateness of event time")
    p.add_argument("--metrics", help="append one JSON record per batch to this file")
    p.add_argument(
        "--quarantine",
        help="where the runtime writes bad input records, one folder per batch id "
        "(default: CHECKPOINT/quarantine); native mode skips them",
    )
    p.add_argument("--quiet", action="store_true", help="no per-batch summary")
    p.add_argument(
        "--from-query",
        action="store_true",
        help="run the query as a Spark user writes it (the native mode's DataFrame over Spark's own JSON reader, "
        "whose PERMISSIVE mode nulls a malformed line's fields: no quarantine): runtime modes through "
        "misa.from_query, instead of the job's own operator, upstream, prefetch hints and quarantine; native modes "
        "over that reader instead of the job's",
    )
    p.add_argument(
        "--retry-start",
        type=int,
        default=0,
        metavar="N",
        help="runtime modes: when the query fails (or its start does), log the error and call start() again in "
        "this driver, at most N times (default 0)",
    )
    add_kafka_arguments(p)
    return p


class _JobParser(argparse.ArgumentParser):
    """A job's command line: one source, ``--input`` or ``--kafka`` (:func:`jobs.kafka_source.check_source`)."""

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        parsed = super().parse_args(args, namespace)
        check_source(self, parsed)
        return parsed


def spark_session(app_name: str) -> SparkSession:
    """The session spark-submit gives us, with small-machine defaults unless set by --conf.

    The runtime's warnings (retries, thread restarts, recovery decisions) go to stderr.
    """
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    spark = SparkSession.builder.appName(app_name).getOrCreate()
    conf = spark.sparkContext.getConf()
    if not conf.contains("spark.sql.shuffle.partitions"):
        spark.conf.set("spark.sql.shuffle.partitions", "4")
    return spark


#: Errors that a user fixes in the job's settings, locations or query (Spark's AnalysisException: a missing
#: input path, an unknown column): one line on stderr, exit status 2, no traceback.
USER_ERRORS = (
    ConfigError,
    LocationError,
    OwnershipError,
    RecoveryError,
    IncompatibleStateError,
    AnalysisError,
    AnalysisException,
)


def run_job(app_name: str, args: argparse.Namespace, run: Callable[[SparkSession, argparse.Namespace], None]) -> None:
    """A job script's main: the session named ``app_name``, ``run`` with the parsed command line, then stop.

    The ``spark.misa.*`` settings are checked before the session starts (no Spark log in front of a typo),
    and a user error ends the job with its one-line message."""
    try:
        SparkContext._ensure_initialized()  # the gateway to spark-submit's JVM, whose conf holds the --conf values
        config = MisaConfig.from_mapping(dict(SparkConf().getAll()))  # checked before the context starts
        check_dfs(("spark.misa.checkpoint.dfsUrl", config.dfs_url), ("--dfs", getattr(args, "dfs", None)))
        spark = spark_session(app_name)
        try:
            run(spark, args)
        finally:
            spark.stop()  # drains the listener bus while Python still answers it
    except USER_ERRORS as exc:
        print(f"error: {(str(exc).splitlines() or [''])[0]}", file=sys.stderr)  # Spark's add the plan below
        raise SystemExit(2) from None


def check_dfs(*settings: tuple[str, str | None]) -> None:
    """A :class:`LocationError` naming the setting (and the pip extra to install) when no file system serves
    the DFS URL it gives."""
    for name, url in settings:
        if url:
            try:
                parse(url).filesystem()
            except LocationError as exc:
                raise LocationError(f"{name}: {exc}") from None


def trigger(args: argparse.Namespace) -> dict[str, Any]:
    if args.available_now:
        return {"availableNow": True}
    return {"processingTime": f"{parse_seconds(args.trigger)} seconds"}


def read_stream(
    spark: SparkSession, args: argparse.Namespace, schema: StructType, required: Sequence[str] = ()
) -> DataFrame:
    """The input's JSON lines as a stream of ``schema``'s columns (see :mod:`misa.io.quarantine` for bad records).

    In native mode the stream holds the good records only (the reference); otherwise it also has the
    raw line and the bad flag, which :func:`run_misa`'s quarantine splits off per batch. ``required``:
    the columns without which a record is bad.
    """
    reader = spark.readStream
    if args.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", args.max_files_per_trigger)
    lines = kafka_lines(spark, args) if args.kafka else reader.text(args.input)
    parsed = parse_json_lines(lines, schema, required)
    return good_records(parsed) if is_native(args.mode) else parsed


def read_json_stream(spark: SparkSession, args: argparse.Namespace, schema: StructType) -> DataFrame:
    """The input as a Spark user reads it: Spark's JSON reader with ``schema`` (its PERMISSIVE mode: a malformed
    line's fields are null; no quarantine)."""
    if args.kafka:
        return kafka_json(spark, args, schema)
    reader = spark.readStream.schema(schema)
    if args.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", args.max_files_per_trigger)
    return reader.json(args.input)


def peek_input(
    spark: SparkSession,
    args: argparse.Namespace,
    schema: StructType,
    required: Sequence[str] = (),
    shape: Callable[[DataFrame], DataFrame] | None = None,
    hint_stage: Callable[[pa.Table], pa.Table] | None = None,
) -> FileSourcePeek | None:
    """The input files that arrived and no batch read yet, read as :func:`read_stream` reads a batch of them
    (``shape``: what the job adds to the stream, applied to them too); with ``hint_stage`` (the job's last hint
    stage in Arrow), their hint rows are read on the driver without a Spark job. None on Kafka (hints then come
    from each batch's own rows)."""
    if args.kafka:
        return None

    def read(files: list[str]) -> DataFrame:
        rows = parse_json_lines(spark.read.text(files), schema, required)
        return shape(rows) if shape else rows

    def hint_rows(stage: Callable[[pa.Table], pa.Table], files: list[str]) -> pa.Table:
        return stage(read_json_lines_arrow(files, schema, required))

    rows = partial(hint_rows, hint_stage) if hint_stage else None
    return FileSourcePeek(args.input, args.checkpoint, read, args.max_files_per_trigger, hint_rows=rows)


def quarantine_dir(args: argparse.Namespace) -> str:
    """Where bad input records go (any location): ``--quarantine``, by default ``CHECKPOINT/quarantine``."""
    return args.quarantine or parse(args.checkpoint).child("quarantine").url


def native_aggregation(operator: Aggregation, events: DataFrame) -> DataFrame:
    """Plain Spark's windowed aggregation equal to a windowed ``operator`` over ``events`` (the reference).

    Columns: window_start, window_end, the group columns, the aggregates (as the operator names them, with
    Spark's result types).
    """
    if not operator.window:
        raise ValueError("native_aggregation covers windowed aggregations only")
    functions = {"sum": F.sum, "count": F.count, "avg": F.avg, "min": F.min, "max": F.max}
    grouped = (
        events.withWatermark(operator.event_time, f"{operator.delay_ms} milliseconds")
        .groupBy(
            F.window(
                operator.event_time, spark_interval(operator.window), spark_interval(operator.slide or operator.window)
            ),
            *operator.group_by,
        )
        .agg(*[functions[a.function](a.column).alias(a.name) for a in operator.aggs])
    )
    return grouped.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        *operator.group_by,
        *[a.name for a in operator.aggs],
    )


def native_interval_join(operator: IntervalJoin, events: DataFrame) -> DataFrame:
    """Plain Spark's stream-stream self-join equal to ``operator`` over ``events`` (the reference).

    Append mode only. Columns: the keys, then ``c, prev_c`` per payload column, as the operator's.
    """
    t, delay = operator.event_time, f"{operator.delay_ms} milliseconds"
    columns = [*operator.keys, t, *operator.payload]
    r = events.select(*columns).withWatermark(t, delay)
    p = events.select(*[F.col(c).alias(_PARTNER + c) for c in columns]).withWatermark(_PARTNER + t, delay)
    interval = F.expr(f"INTERVAL {operator.interval_us} MICROSECONDS")
    condition = [F.col(k) == F.col(_PARTNER + k) for k in operator.keys]
    condition += [F.col(_PARTNER + t) >= F.col(t) - interval, F.col(_PARTNER + t) < F.col(t)]
    joined = r.join(p, reduce(lambda a, b: a & b, condition), "inner")
    return joined.select(
        *operator.keys,
        *[column for c in operator.payload for column in (F.col(c), F.col(_PARTNER + c).alias(PREV + c))],
    )


def run_misa(
    spark: SparkSession,
    args: argparse.Namespace,
    stream: DataFrame,
    operator: StatefulOperator,
    upstream: Callable[[DataFrame], DataFrame],
    sink: BatchSink,
    hint_stages: Sequence[Callable[[DataFrame], DataFrame]] | None = None,
    next_input: NextInput | None = None,
) -> None:
    """Run the query through the MiSA runtime until it ends (available-now) or is stopped.

    ``stream`` comes from :func:`read_stream`; each batch's bad records go to :func:`quarantine_dir`.
    ``hint_stages``: candidate stages for prefetch hints, earliest first (default: ``upstream``);
    ``next_input``: the input read ahead (:func:`peek_input`), for hints between batches.
    """
    job = StatefulJob(
        operator,
        sink,
        args.checkpoint,
        upstream=upstream,
        hint_stages=hint_stages,
        next_input=next_input,
        **misa_options(spark, args),
    )
    run_started(spark, job, lambda: job.start(spark, stream, trigger(args), f"{args.query}-{args.mode}"), args)


def run_from_query(spark: SparkSession, args: argparse.Namespace, result: DataFrame, sink: BatchSink) -> None:
    """Run ``result``, the query as a Spark user writes it, through :func:`misa.from_query` until it ends."""
    options = {**misa_options(spark, args), "bad_records": None}  # Spark's own reader: no quarantine columns
    query = from_query(result, sink, args.checkpoint, output_mode=args.output_mode, **options)
    name = f"{args.query}-{args.mode}"
    run_started(spark, query.job, lambda: query.job.start(spark, query.source, trigger(args), name), args)


def misa_options(spark: SparkSession, args: argparse.Namespace) -> dict[str, Any]:
    """The runtime's options of the command line (a :class:`StatefulJob`'s keyword arguments)."""
    return dict(
        bad_records=Quarantine(quarantine_dir(args)),
        config=MisaConfig.from_session(spark).with_values(commit_mode=CommitMode(args.mode)),
        state_dir=args.state_dir,
        dfs_url=args.dfs,
        metrics_path=args.metrics,
        echo=None if args.quiet else print,
        pause_gc=True,
    )


def run_started(
    spark: SparkSession, job: StatefulJob, start: Callable[[], StreamingQuery], args: argparse.Namespace
) -> None:
    """Run the query ``start`` starts until it ends (available-now) or is stopped, with ``--retry-start``; Ctrl-C
    stops it, then the commits drain."""
    # this process is the job's: tune it for the runtime
    with switch_interval(job.config.python_switch_interval_s), StopOnInterrupt(spark) as interrupt:
        try:
            run_with_retries(
                lambda: interrupt.watch(start(), job.batch_running),
                args.retry_start,
                settle=job.settle,  # a last commit, or the last mirror of Spark's log, fails after the query ends
                stopped=interrupt.requested.is_set,
            )
        finally:
            job.close(spark)
    if interrupt.requested.is_set():
        durable = job.checkpoints.newest_durable()
        state = f"the state is durable up to version {durable} (batch {durable})"
        if durable is None:
            state = "no state is durable yet"
        print(f"stopped by Ctrl-C; {state}; restart resumes from there", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED)


def run_with_retries(
    start: Callable[[], StreamingQuery],
    retries: int,
    settle: Callable[[], None] = lambda: None,
    stopped: Callable[[], bool] = lambda: False,
) -> None:
    """Start the query, wait for its end, then ``settle`` (what must still succeed after it: the runtime's last
    commits); when any of them fails, log the error and call ``start`` again (for :meth:`StatefulJob.start`, a
    full restart in this process), at most ``retries`` times; a user error (:data:`USER_ERRORS`: the
    configuration, the query's definition, another owner) is raised at once, as a retry would fail the same
    way. Once ``stopped()`` (the user stopped the query), its end is no failure: a batch it interrupted is
    replayed by the next start."""
    for attempt in range(1, retries + 2):
        try:
            start().awaitTermination()
            settle()
            return
        except Exception as exc:
            if stopped():
                log.info("the query stopped by request ended with %s: %s", type(exc).__name__, exc)
                return
            if attempt > retries or isinstance(exc, USER_ERRORS):
                raise
            log.error(
                "the query failed: %s: %s; %s (retry %d of %d)",
                type(exc).__name__,
                exc,
                RETRY_MESSAGE,
                attempt,
                retries,
            )


class JobQuery(Protocol):
    """One query of a job, described once for the runtime and for plain Spark."""

    sort_by: tuple[tuple[str, str], ...]  # the order of each batch's output rows

    def upstream(self, events: DataFrame) -> DataFrame:
        """The stateless part before the stateful operator."""

    def hint_stages(self) -> list[Callable[[DataFrame], DataFrame]]:
        """Candidate stages for prefetch hints, earliest first."""

    def arrow_hint_stage(self) -> Callable[[pa.Table], pa.Table]:
        """The last hint stage on Arrow rows: the next batch's hint rows are then read on the driver."""

    def operator(self, args: argparse.Namespace) -> StatefulOperator:
        """The stateful operator on the MiSA runtime."""

    def native(self, events: DataFrame, args: argparse.Namespace) -> DataFrame:
        """The whole query in plain Spark Structured Streaming (the reference)."""


def run_query(
    spark: SparkSession, args: argparse.Namespace, query: JobQuery, schema: StructType, required: Sequence[str]
) -> None:
    """Run ``query`` over the input in the mode of the command line, writing Parquet per batch id."""
    sink = with_kafka_output(ParquetBatchSink(args.output, sort_by=query.sort_by), args)
    if args.from_query:  # the query as a Spark user writes it, over Spark's own JSON reader
        written = query.native(read_json_stream(spark, args, schema), args)
        if is_native(args.mode):
            run_native(spark, args, written, sink)
        else:
            run_from_query(spark, args, written, sink)
        return
    stream = read_stream(spark, args, schema, required)
    if is_native(args.mode):
        run_native(spark, args, query.native(stream, args), sink)
    else:
        peek = peek_input(spark, args, schema, required, hint_stage=query.arrow_hint_stage())
        run_misa(spark, args, stream, query.operator(args), query.upstream, sink, query.hint_stages(), peek)


def write_native(spark: SparkSession, sink: BatchSink, batch_id: int, rows: DataFrame) -> None:
    """Write a native batch's output: on a cluster from the executors, as a Spark user's DataFrame sink writes (one
    sorted file after a shuffle to one task, so that the stateful stage keeps its parallelism), in local mode
    (or to a sink of tables only, such as the Kafka output's) through the driver."""
    if spark.sparkContext.master.startswith("local[") or not isinstance(sink, ParquetBatchSink):
        sink(batch_id, rows.toArrow())
    else:
        sink.write_frame(batch_id, rows.repartition(1) if sink.sort_by else rows)


def run_native(spark: SparkSession, args: argparse.Namespace, result: DataFrame, sink: BatchSink) -> None:
    """Run the same query in plain Spark Structured Streaming with Spark's RocksDB state store, configured for
    ``args.mode`` (:func:`native_state_store_conf`; every setting is printed)."""
    conf = native_state_store_conf(args.mode, MisaConfig.from_session(spark))
    previous = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
        print(f"{args.mode}: {key}={value}", flush=True)
    metrics = BatchMetrics(args.metrics, args.mode, None if args.quiet else (lambda r: print(summary_line(r))))
    listener = metrics.listener()
    spark.streams.addListener(listener)
    try:
        query = (
            result.writeStream.outputMode(args.output_mode)
            .foreachBatch(lambda df, batch_id: (metrics.add(batch_id), write_native(spark, sink, batch_id, df)))
            .option("checkpointLocation", spark_location(args.checkpoint))
            .queryName(f"{args.query}-{args.mode}")
            .trigger(**trigger(args))
            .start()
        )
        metrics.follow(str(query.id))
        query.awaitTermination()
    finally:
        metrics.wait_reported()
        spark.streams.removeListener(listener)
        for key, value in previous.items():  # a shared session keeps its own settings
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)


def run_batch_reference(reference: DataFrame, args: argparse.Namespace, sink: BatchSink) -> None:
    """The reference as one plain Spark batch job: compute ``reference`` and write it as batch 0, with one
    metrics record (mode ``native-batch``) holding its wall time."""
    started = time.time()
    table = reference.toArrow()
    sink(0, table)
    if args.metrics:
        record = {
            "batch_id": 0,
            "mode": "native-batch",
            "started": started,
            "latency_s": time.time() - started,
            "output_rows": table.num_rows,
        }
        with open(args.metrics, "a") as out:
            out.write(json.dumps(record) + "\n")
