"""``misa bench processor``: one StatefulProcessor on Spark's transformWithStateInPandas and on misa, side by side.

The processor is :class:`verify.differential.processor.SessionFraudProcessor` (per card: value, list and map state
and an event-time session timer). Its initial state holds ``--keys`` cards (``handleInitialState`` once per card
in the first batch, as in SPARK-54392's measurement); the input is ``--batches`` Parquet files of ``--records``
payments each, cards drawn uniformly from the same ``--keys`` (so each batch reads that many cards' state); event
times advance 5 s per batch under a 60 s watermark delay, so no session closes during the run
and every batch is input rows against a growing state. Both engines read the same files one per batch
(``availableNow``) in one Spark session (``local[2]``): Spark with its RocksDB state store tuned as its docs advise
(changelog checkpointing, checkpoint format v2; :func:`jobs.submit.native_state_store_conf`), misa with
``--processes`` worker processes. A batch's time is Spark's ``triggerExecution`` of the micro-batch for both
(for misa it includes the state phase and hands the commit off as misa does); records/s is the records over the
sum of those times; the first batch, which loads the initial state too, is reported apart as initial-state
keys/s. The order of the engines alternates between ``--repeats``.

Each run keeps its output (each batch's Arrow table by batch id: Spark's collected with ``toArrow`` in its
``foreachBatch``, as misa's sink gets it; before issue 61 Spark's batches only counted their rows) and each misa run
is checked against Spark's run of the same repeat, batch by batch (:mod:`bench.same_output`). Where they
differ the table gives no ratio, the difference is printed and the command exits with
:data:`~bench.same_output.DIFFER_EXIT`.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path
from statistics import quantiles

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from bench.same_output import Check, compare_batches, differ_exit
from jobs.submit import native_state_store_conf
from misa import MisaConfig, transform_with_state_in_pandas
from verify.differential.command import local_session
from verify.differential.processor import EVENT_TIME, OUTPUT, SessionFraudProcessor, payments

DELAY = "60 seconds"
SCHEMA = "card string, t bigint, amount bigint, merchant string"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "processor",
        help="a StatefulProcessor (session-tracking fraud rule) on Spark's transformWithStateInPandas (RocksDB, "
        "tuned) and on misa, side by side: records/s and batch p50/p99",
    )
    parser.add_argument("--keys", type=int, default=1_000_000, help="cards in the initial state (payments' cards too)")
    parser.add_argument("--records", type=int, default=100_000, help="payments per batch (one input file)")
    parser.add_argument("--batches", type=int, default=5, help="batches per run")
    parser.add_argument("--processes", type=int, default=1, help="misa's spark.misa.state.processes")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each engine, alternating")
    parser.add_argument("--work", default="runs/bench-processor", help="folder for the input and the checkpoints")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    _generate(work / "input", args.keys, args.records, args.batches)
    _initial(work / "initial", args.keys)
    spark = local_session("misa-bench-processor")
    results: dict[str, list[list[float]]] = {"spark": [], "misa": []}
    checks: dict[str, Check] = {}
    for repeat in range(args.repeats):
        outputs: dict[str, dict[int, pa.Table]] = {}
        for engine in ("spark", "misa") if repeat % 2 == 0 else ("misa", "spark"):
            started = time.monotonic()
            run_dir = work / f"{engine}-{repeat}"
            run = _spark(spark, work, run_dir) if engine == "spark" else _misa(spark, args, run_dir)
            times, outputs[engine] = run
            results[engine].append(times)
            print(f"{engine} run {repeat + 1}: {len(times)} batches, {time.monotonic() - started:.0f} s", flush=True)
        checks[f"run {repeat + 1}"] = compare_batches(outputs["misa"], outputs["spark"])
        print(f"run {repeat + 1}: {checks[f'run {repeat + 1}'].line()}", flush=True)
    if all(check.same for check in checks.values()):
        print(table(results, args.records, args.keys))
    return differ_exit(checks)


def table(results: dict[str, list[list[float]]], records: int, keys: int) -> str:
    """Markdown rows: per engine the first batch (initial state) as keys/s, then the other batches' records/s,
    p50 and p99 (ms), and misa's ratios to Spark."""
    rates, loads = {}, {}
    lines = [
        "| engine | first batch s (initial state) | initial keys/s | batches | records/s | p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for engine, runs in results.items():
        first = [run[0] for run in runs]
        times = [t for run in runs for t in run[1:]]
        loads[engine] = keys * len(first) / (sum(first) / 1000)
        rates[engine] = records * len(times) / (sum(times) / 1000)
        p50, p99 = _percentiles(times)
        lines.append(
            f"| {engine} | {sum(first) / len(first) / 1000:,.1f} | {loads[engine]:,.0f} | {len(times)} | "
            f"{rates[engine]:,.0f} | {p50:,.0f} | {p99:,.0f} |"
        )
    lines.append(
        f"\nmisa / Spark: initial keys/s {loads['misa'] / loads['spark']:.2f}, "
        f"records/s {rates['misa'] / rates['spark']:.2f}"
    )
    return "\n".join(lines)


def _percentiles(times: list[float]) -> tuple[float, float]:
    if len(times) < 2:
        return times[0], times[0]
    cuts = quantiles(times, n=100, method="inclusive")
    return cuts[49], cuts[98]


def _generate(folder: Path, keys: int, records: int, batches: int) -> None:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(7)
    for b in range(batches):
        cards = rng.integers(0, keys, records)
        table = pa.table(
            {
                "card": pa.array([f"c{c}" for c in cards]),
                "t": pa.array(b * 5000 + rng.integers(0, 5000, records), pa.int64()),
                "amount": pa.array(rng.integers(1, 500, records), pa.int64()),
                "merchant": pa.array([f"m{m}" for m in rng.integers(0, 20, records)]),
            }
        )
        pq.write_table(table, folder / f"part-{b:05d}.parquet")


def _initial(folder: Path, keys: int) -> None:
    """Every card's history: payments and total so far."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(8)
    table = pa.table(
        {
            "card": pa.array([f"c{c}" for c in range(keys)]),
            "payments": pa.array(rng.integers(1, 50, keys), pa.int64()),
            "total": pa.array(rng.integers(1, 5000, keys), pa.int64()),
        }
    )
    pq.write_table(table, folder / "initial.parquet")


def _stream(spark: SparkSession, folder: Path) -> DataFrame:
    rows = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(folder))
    return payments(rows).withWatermark(EVENT_TIME, DELAY)


def _data_batch_times(query) -> list[float]:
    return [float(p["durationMs"]["triggerExecution"]) for p in query.recentProgress if p["numInputRows"] > 0]


def _spark(spark: SparkSession, work: Path, run_dir: Path) -> tuple[list[float], dict[int, pa.Table]]:
    """The processor in plain Spark: its data batches' times and output by batch id."""
    output: dict[int, pa.Table] = {}
    for key, value in native_state_store_conf("native", MisaConfig()).items():
        spark.conf.set(key, value)
    initial = spark.read.parquet(str(work / "initial")).groupBy("card")
    query = (
        _stream(spark, work / "input")
        .groupBy("card")
        .transformWithStateInPandas(SessionFraudProcessor(), OUTPUT, "Append", "EventTime", initialState=initial)
        .writeStream.foreachBatch(lambda df, batch_id: output.__setitem__(batch_id, df.toArrow()))
        .option("checkpointLocation", str(run_dir / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return _data_batch_times(query), output


def _misa(spark: SparkSession, args: argparse.Namespace, run_dir: Path) -> tuple[list[float], dict[int, pa.Table]]:
    """The processor through misa: its data batches' times and output by batch id, as its sink got it."""
    output: dict[int, pa.Table] = {}
    config = MisaConfig.from_mapping({"spark.misa.state.processes": str(args.processes)})
    job = transform_with_state_in_pandas(
        _stream(spark, Path(args.work) / "input"),
        ["card"],
        SessionFraudProcessor(),
        OUTPUT,
        "Append",
        "EventTime",
        output.__setitem__,
        str(run_dir / "ckpt"),
        initial_state=spark.read.parquet(str(Path(args.work) / "initial")),
        config=config,
        echo=None,
    )
    try:
        query = job.start({"availableNow": True})
        query.awaitTermination()
        return _data_batch_times(query), output
    finally:
        job.close()
