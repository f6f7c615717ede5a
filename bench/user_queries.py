"""``misa bench queries``: Spark users' queries on misa (``from_query``) and on Spark's own store, side by side.

The input is a backlog of ``--files`` Parquet files of ``--records`` payments each (``user`` drawn uniformly from
``--keys`` users, ``t`` epoch ms advancing ``--file-seconds`` per file, a tenth of the rows up to 5 s out of order,
``amount``). Each query, as a Spark user writes it with a 5 s watermark on the payment time:

* ``sliding``: per user, ``count(*)`` and ``sum(amount)`` over 30 s windows sliding every 2 s, update output;
* ``dedup``: ``dropDuplicatesWithinWatermark(["user"])``, append output;
* ``join``: each payment joined with the same user's payments of the 10 s before it (an inner stream-stream
  self-join with an event-time interval), append output;
* ``session``: per user, ``count(*)`` over session windows of a 5 s gap, append output;
* ``self_join``: issue 61's query: the one stream split by ``side`` (drawn 0 or 1 per payment) into the two sides
  of a join, each side-0 payment joined with the same user's side-1 payments of the 10 s after it, append output;
* ``join_then_count``: ``join``'s pairs counted per user over 10 s windows of the payment time (two stateful
  operations in a chain), append output;
* ``group_state``: ``applyInPandasWithState``: a running count and sum per user, kept in ``GroupState``, update
  output.

Both engines read the same files one per batch (``availableNow``) in one Spark session (``local[2]``): Spark with
its RocksDB store tuned as its docs advise (:func:`jobs.submit.native_state_store_conf`), its output collected as
Arrow (``toArrow``); misa through ``from_query``, whose sink gets the output as an Arrow table. A batch's time is
Spark's ``triggerExecution`` for both (misa's includes its state phase and hands the commit off as misa does);
wall is the query's start to its end. The engines alternate their order between ``--repeats``.

Each run keeps its output (every batch's Arrow table, by batch id) and each measured run of misa is checked against
Spark's run of the same repeat, batch by batch (:mod:`bench.same_output`): where they differ, the query's row
of the table shows no ratio but "outputs differ", the difference is printed and the command exits with
:data:`~bench.same_output.DIFFER_EXIT`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from statistics import median, quantiles
from typing import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState

from bench.same_output import Check, compare_batches, differ_exit
from jobs.submit import native_state_store_conf
from misa import MisaConfig, from_query
from misa.cli.main import name_list
from verify.differential.command import local_session

QUERIES = ("sliding", "dedup", "join", "session", "self_join", "join_then_count", "group_state")
OUTPUT_MODES = {"sliding": "update", "dedup": "append", "join": "append", "session": "append", "self_join": "append"}
OUTPUT_MODES |= {"join_then_count": "append", "group_state": "update"}
SCHEMA = "user string, t bigint, amount bigint, side int"
LATE_SHARE, LATE_MS = 0.1, 5_000  # a tenth of the rows up to 5 s out of order


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "queries",
        help="Spark users' queries (sliding window, deduplication, stream-stream join, session windows, a stream "
        "joined with itself through side filters, a join then a windowed count, applyInPandasWithState) on misa and "
        "on Spark's own store, side by side: wall time and batch p50/p99, once misa's output is checked against "
        "Spark's",
    )
    p.add_argument("--queries", type=lambda t: name_list(t, QUERIES), default=list(QUERIES), help=",".join(QUERIES))
    p.add_argument("--files", type=int, default=12, help="input files, one per batch")
    p.add_argument("--records", type=int, default=40_000, help="payments per file")
    p.add_argument("--keys", type=int, default=200_000, help="users the payments are drawn from")
    p.add_argument("--file-seconds", type=int, default=5, help="seconds of event time per file")
    p.add_argument("--repeats", type=int, default=1, help="runs of each engine per query, alternating")
    p.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="unmeasured runs of each engine per query first, over 2 small files (the JVM's and Python's warm-up, so "
        "that no engine's first measured run carries it)",
    )
    p.add_argument("--work", type=Path, default=Path("bench-out/queries"), help="input, checkpoints, results")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a spark.misa.* setting for misa")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    shutil.rmtree(args.work, ignore_errors=True)
    generate(args.work / "input", args.files, args.records, args.keys, args.file_seconds)
    generate(args.work / "warmup", 2, min(args.records, 2_000), args.keys, args.file_seconds)
    settings = dict(kv.split("=", 1) for kv in args.conf)
    MisaConfig.from_mapping(settings)  # a bad key or value fails here, named
    spark = local_session("misa-bench-queries")
    for key, value in settings.items():
        spark.conf.set(key, value)
    rows = []
    checks: dict[str, Check] = {}
    for name in args.queries:
        for warmup in range(args.warmup):
            for engine in ("spark", "misa"):
                run_dir = args.work / f"{name}-{engine}-warmup-{warmup}"
                (run_spark if engine == "spark" else run_misa)(spark, args, name, run_dir, args.work / "warmup")
        for repeat in range(args.repeats):
            outputs = {}
            for engine in ("spark", "misa") if repeat % 2 == 0 else ("misa", "spark"):
                run_dir = args.work / f"{name}-{engine}-{repeat}"
                runner = run_spark if engine == "spark" else run_misa
                wall, times, outputs[engine] = runner(spark, args, name, run_dir, args.work / "input")
                rows.append({"query": name, "engine": engine, "repeat": repeat, "wall_s": wall, "batch_ms": times})
                print(f"{name} on {engine} (run {repeat + 1}): {len(times)} batches, wall {wall:.1f} s", flush=True)
            check = compare_batches(outputs.pop("misa"), outputs.pop("spark"))
            print(f"{name} (run {repeat + 1}): {check.line()}", flush=True)
            if name not in checks or checks[name].same:  # a query's first difference is the one reported
                checks[name] = check
            for row in rows[-2:]:
                row |= {"output_rows": check.misa_rows if row["engine"] == "misa" else check.spark_rows}
                row |= {"same_output": check.same}
                with (args.work / "queries.jsonl").open("a") as out:
                    out.write(json.dumps(row) + "\n")
    text = table(rows)
    (args.work / "queries.md").write_text(text + "\n")
    print("\n" + text)
    return differ_exit(checks)


def generate(folder: Path, files: int, records: int, keys: int, file_seconds: int) -> None:
    """The backlog: ``files`` Parquet files of ``records`` payments over ``keys`` users, event time advancing
    ``file_seconds`` a file, a tenth of each file's rows up to 5 s earlier than their place, each payment's ``side``
    0 or 1 (for ``self_join``)."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(46)
    sides = np.random.default_rng(61)  # its own generator: the other columns are those of the inputs before it
    span = file_seconds * 1000
    for f in range(files):
        t = f * span + np.sort(rng.integers(0, span, records))
        late = rng.random(records) < LATE_SHARE
        t = np.where(late, np.maximum(0, t - rng.integers(0, LATE_MS, records)), t)
        table = pa.table(
            {
                "user": pa.array([f"u{u}" for u in rng.integers(0, keys, records)]),
                "t": pa.array(t, pa.int64()),
                "amount": pa.array(rng.integers(1, 500, records), pa.int64()),
                "side": pa.array(sides.integers(0, 2, records), pa.int32()),
            }
        )
        pq.write_table(table, folder / f"part-{f:05d}.parquet")


def query(payments: DataFrame, name: str) -> DataFrame:
    """The named query over the stream of payments, as a Spark user writes it."""
    events = payments.withColumn("event_time", F.timestamp_millis("t")).withWatermark("event_time", "5 seconds")
    if name == "sliding":
        return events.groupBy(F.window("event_time", "30 seconds", "2 seconds"), "user").agg(
            F.count("*").alias("n"), F.sum("amount").alias("total")
        )
    if name == "dedup":
        return events.dropDuplicatesWithinWatermark(["user"]).select("user", "t", "amount")
    if name in ("join", "join_then_count"):
        within = "r.user = p.user AND p.event_time BETWEEN r.event_time - INTERVAL 10 SECONDS AND r.event_time"
        pairs = events.alias("r").join(events.alias("p"), F.expr(within))
        if name == "join":
            return pairs.select("r.user", "r.t", "r.amount", F.col("p.t").alias("previous_t"))
        counted = pairs.select("r.user", "r.event_time", F.col("p.amount").alias("previous_amount"))
        return counted.groupBy(F.window("event_time", "10 seconds"), "user").agg(
            F.count("*").alias("pairs"), F.sum("previous_amount").alias("previous_total")
        )
    if name == "group_state":
        return events.groupBy("user").applyInPandasWithState(
            running_totals, "user string, payments long, total long", "payments long, total long", "Update", "NoTimeout"
        )
    if name == "self_join":  # issue 61's query: the one stream split by filters into both sides of a join
        left = events.where("side = 0").select(
            F.col("user").alias("lk"), F.col("event_time").alias("lt"), F.col("amount").alias("lv")
        )
        right = events.where("side = 1").select(
            F.col("user").alias("rk"), F.col("event_time").alias("rt"), F.col("amount").alias("rv")
        )
        return left.join(right, F.expr("lk = rk AND rt BETWEEN lt AND lt + interval 10 seconds"))
    return events.groupBy(F.session_window("event_time", "5 seconds"), "user").agg(F.count("*").alias("n"))


def running_totals(key: tuple, frames: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    """``group_state``'s function: the user's payments and their sum so far, kept in its ``GroupState``."""
    payments, total = state.get if state.exists else (0, 0)
    for frame in frames:
        payments, total = payments + len(frame), total + int(frame["amount"].sum())
    state.update((payments, total))
    yield pd.DataFrame({"user": [key[0]], "payments": [payments], "total": [total]})


def _stream(spark: SparkSession, folder: Path) -> DataFrame:
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(folder))


def _batch_times(query: object) -> list[float]:
    """Each data batch's ``triggerExecution`` (ms)."""
    progress = query.recentProgress  # type: ignore[attr-defined]
    return [float(p["durationMs"]["triggerExecution"]) for p in progress if p["numInputRows"] > 0]


def run_spark(
    spark: SparkSession, args: argparse.Namespace, name: str, run_dir: Path, folder: Path
) -> tuple[float, list[float], dict[int, pa.Table]]:
    """The query over ``folder`` in plain Spark on its tuned RocksDB store: its wall time, data batches' times and
    output (each batch's Arrow table by batch id, kept as collected: checked after the run)."""
    output: dict[int, pa.Table] = {}
    conf = native_state_store_conf("native", MisaConfig())
    previous = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        started = time.monotonic()
        running = (
            query(_stream(spark, folder), name)
            .writeStream.outputMode(OUTPUT_MODES[name])
            .foreachBatch(lambda df, batch_id: output.__setitem__(batch_id, df.toArrow()))
            .option("checkpointLocation", str(run_dir / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        running.awaitTermination()
        return time.monotonic() - started, _batch_times(running), output
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def run_misa(
    spark: SparkSession, args: argparse.Namespace, name: str, run_dir: Path, folder: Path
) -> tuple[float, list[float], dict[int, pa.Table]]:
    """The same query over ``folder`` through ``from_query``: its wall time, data batches' times and output (each
    batch's Arrow table as the sink got it, by batch id; a replayed batch replaces its earlier attempt)."""
    output: dict[int, pa.Table] = {}
    job = from_query(
        query(_stream(spark, folder), name),
        output.__setitem__,
        str(run_dir / "ckpt"),
        output_mode=OUTPUT_MODES[name],
        config=MisaConfig.from_session(spark),
        echo=None,
    )
    try:
        started = time.monotonic()
        running = job.start({"availableNow": True})
        running.awaitTermination()
        return time.monotonic() - started, _batch_times(running), output
    finally:
        job.close()


def _percentile(times: list[float], q: int) -> float:
    if len(times) < 2:
        return times[0]
    return quantiles(times, n=100, method="inclusive")[q - 1]


def table(rows: list[dict]) -> str:
    """Per query and engine the median wall time and the batch p50 and p99 over every run's batches and the rows
    the runs wrote; then misa's ratios to Spark, none for a query where a run's output differed from Spark's."""
    lines = [
        "| query | engine | runs | output rows | wall (s) | batch p50 (ms) | batch p99 (ms) | misa / Spark: wall | p50 "
        "| p99 |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    differ = {r["query"] for r in rows if r.get("same_output") is False}
    cells: dict[tuple[str, str], tuple[float, float, float, int, str]] = {}
    for name, engine in dict.fromkeys((r["query"], r["engine"]) for r in rows):
        runs = [r for r in rows if (r["query"], r["engine"]) == (name, engine)]
        times = [t for r in runs for t in r["batch_ms"]]
        wall = median(r["wall_s"] for r in runs)
        written = " / ".join(f"{n:,}" for n in dict.fromkeys(r["output_rows"] for r in runs if "output_rows" in r))
        cells[name, engine] = (wall, _percentile(times, 50), _percentile(times, 99), len(runs), written or "-")
    for (name, engine), (wall, p50, p99, runs, written) in cells.items():
        ratios = "| - | - | - |"
        if engine == "misa" and name in differ:
            ratios = "| outputs differ: no ratio | - | - |"
        elif engine == "misa" and (name, "spark") in cells:
            base = cells[name, "spark"]
            ratios = f"| {wall / base[0]:.2f} | {p50 / base[1]:.2f} | {p99 / base[2]:.2f} |"
        lines.append(f"| {name} | {engine} | {runs} | {written} | {wall:.1f} | {p50:,.0f} | {p99:,.0f} " + ratios)
    return "\n".join(lines)
