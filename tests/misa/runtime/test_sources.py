"""Sources that deliver empty micro-batches or none for a while run through a job like any other, with plain
Spark's results: the rate sources (an empty first batch, offsets per batch) and the file source (idle
triggers, an empty file, a file whose rows the upstream filters out)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from checkpoint.retry import RetryPolicy
from common.location import parse
from misa.config import MisaConfig
from misa.io.quarantine import Quarantine, parse_json_lines, read_quarantine
from misa.job import StatefulJob
from misa.operators.aggregation import Agg, Aggregation
from misa.runtime.next_input import FileSourcePeek
from misa.runtime.spark_mirror import SparkLogMirror

Outputs = dict[int, list[dict]]  # batch id -> its output rows, sorted


def rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["k"])


def wait_for(job: StatefulJob, query, version: int, seconds: float = 90) -> None:
    """Until the job has run batch ``version`` and Spark has reported it (so its metrics record is written
    when the query stops); the query's error, if it failed."""
    deadline = time.monotonic() + seconds
    while not (job.version >= version and reported(query) >= version) and time.monotonic() < deadline:
        if not query.isActive:
            break
        time.sleep(0.1)
    assert query.exception() is None
    assert job.version >= version, f"batch {version} did not run in {seconds} s"


def reported(query) -> int:
    """The newest batch Spark has reported progress for (-1: none)."""
    progress = query.lastProgress
    return -1 if progress is None else progress.batchId


def native_outputs(
    stream: DataFrame, upstream: Callable[[DataFrame], DataFrame], aggs: list, trigger: dict, last: int
) -> Outputs:
    """Plain Spark's update-mode aggregation of ``stream`` by ``k``: each batch's output up to batch ``last``."""
    outputs: Outputs = {}
    query = (
        upstream(stream)
        .groupBy("k")
        .agg(*aggs)
        .writeStream.outputMode("update")
        .foreachBatch(lambda df, batch_id: outputs.__setitem__(batch_id, rows(df.toArrow())))
        .trigger(**trigger)
        .start()
    )
    try:
        deadline = time.monotonic() + 90
        while max(outputs, default=-1) < last and query.isActive and time.monotonic() < deadline:
            time.sleep(0.1)
        assert query.exception() is None
    finally:
        query.stop()
    return {b: r for b, r in outputs.items() if b <= last}


RATE_UPSTREAM = lambda df: df.select((F.col("value") % 3).alias("k"), F.col("value"))  # noqa: E731
RATE_TRIGGER = {"processingTime": "300 milliseconds"}


def rate_job(tmp_path: Path, sink: Callable[[int, pa.Table], None]) -> StatefulJob:
    """A count per ``value % 3`` over a rate source's rows."""
    return StatefulJob(
        Aggregation(["k"], [Agg("n", "count", "value")]),
        sink,
        str(tmp_path / "ckpt"),
        upstream=RATE_UPSTREAM,
        config=MisaConfig.from_mapping({"spark.misa.state.shards": "1"}),
        metrics_path=str(tmp_path / "metrics.jsonl"),
        echo=None,
    )


def run_until(spark, job: StatefulJob, source: str, options: dict[str, str], version: int) -> None:
    """Run ``job`` over ``source`` until it has run batch ``version``, then stop it and close it."""
    query = job.start(spark, spark.readStream.format(source).options(**options).load(), RATE_TRIGGER)
    try:
        wait_for(job, query, version)
    finally:
        query.stop()
        job.close(spark)


def test_the_rate_sources_batches_run_and_are_counted(spark, tmp_path):
    """The rate source's batches (its first may be empty: that used to hang in reading the batch's observed counts)
    each run and are counted."""
    outputs: dict[int, pa.Table] = {}
    run_until(spark, rate_job(tmp_path, outputs.__setitem__), "rate", {"rowsPerSecond": "20"}, 3)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    inputs = {r["batch_id"]: r["input_rows"] for r in records if "input_rows" in r}
    last = max(inputs)  # the newest batch Spark reported before the stop
    final: dict[int, int] = {}
    for batch_id in sorted(b for b in outputs if b <= last):
        final.update((r["k"], r["n"]) for r in outputs[batch_id].to_pylist())
    assert sum(final.values()) == sum(inputs.values())  # every row the runtime counted is in the state
    assert sorted(inputs) == list(range(last + 1))  # every batch ran and was counted (an empty one too)


@pytest.mark.slow  # 13 s: runs with -m slow (CI time)
def test_an_offset_based_source_is_replayed_from_sparks_offsets_log_as_plain_spark_runs_it(spark, tmp_path):
    """rate-micro-batch, like Kafka, keeps no log of its own that says what a batch read: Spark's offsets log
    does. After a restart whose state is ahead of Spark's commits, Spark replays the batch from its logged
    offsets, which recovery keeps as they are, and every batch's output equals plain Spark's for the batch."""
    options = {"rowsPerBatch": "10"}
    ckpt = tmp_path / "ckpt"
    calls: list[int] = []
    outputs: dict[int, pa.Table] = {}

    def sink(batch_id: int, table: pa.Table) -> None:
        calls.append(batch_id)
        outputs[batch_id] = table

    first = rate_job(tmp_path, sink)
    run_until(spark, first, "rate-micro-batch", options, 2)
    committed = max(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    if first.version == committed:  # as if the driver died after the state's commit, before Spark's (which the
        for log_dir in (first.spark_checkpoint.local, ckpt):  # local copy Spark writes holds, the mirror too)
            # the stop may have come after Spark planned the next batch: before Spark's commit, it had not
            for log, batch in (("commits", committed), ("offsets", committed + 1)):
                for name in (str(batch), f".{batch}.crc"):
                    (log_dir / log / name).unlink(missing_ok=True)
    replayed = first.version  # else the stop came in between: the state is ahead already
    planned = (ckpt / "offsets" / str(replayed)).read_text()
    second = rate_job(tmp_path, sink)
    run_until(spark, second, "rate-micro-batch", options, replayed + 1)
    assert calls.count(replayed) == 2
    assert (ckpt / "offsets" / str(replayed)).read_text() == planned
    last = second.version
    stream = spark.readStream.format("rate-micro-batch").options(**options).load()
    native = native_outputs(stream, RATE_UPSTREAM, [F.count("value").alias("n")], RATE_TRIGGER, last)
    assert {b: rows(t) for b, t in outputs.items() if b <= last} == native


def write_json(folder: Path, name: str, records: list[tuple[int, int]]) -> None:
    """One input file, whole: written under a hidden name (Spark skips it), then renamed."""
    hidden = folder / f".{name}"
    hidden.write_text("".join(json.dumps({"k": k, "x": x}) + "\n" for k, x in records))
    hidden.rename(folder / name)


@pytest.mark.parametrize("prefetch", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_a_file_source_with_idle_triggers_and_empty_batches_gives_plain_sparks_results(spark, tmp_path, prefetch):
    """Triggers that find no new file run no batch; an empty file and a file whose rows the upstream drops
    run batches without deltas. With prefetching on, the files are read ahead between batches too."""
    folder, ckpt = tmp_path / "in", str(tmp_path / "ckpt")
    folder.mkdir()
    schema = "k long, x long"
    upstream = lambda df: df.where("k >= 0")  # noqa: E731
    conf = {"spark.misa.state.shards": "1", "spark.misa.prefetch.enabled": str(prefetch).lower()}
    outputs: dict[int, pa.Table] = {}
    job = StatefulJob(
        Aggregation(["k"], [Agg("n", "count", "x"), Agg("total", "sum", "x")]),
        outputs.__setitem__,
        ckpt,
        upstream=upstream,
        next_input=FileSourcePeek(str(folder), ckpt, lambda files: spark.read.schema(schema).json(files), 1),
        config=MisaConfig.from_mapping(conf),
        metrics_path=str(tmp_path / "metrics.jsonl"),
        echo=None,
    )
    files = [[(1, 10), (2, 20), (1, 5)], [], [(-1, 7), (-2, 1)], [(2, 1), (3, 3)]]  # 1: empty, 2: filtered out
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(folder))
    query = job.start(spark, stream, {"processingTime": "200 milliseconds"})
    try:
        write_json(folder, "part-0.json", files[0])
        wait_for(job, query, 0)
        time.sleep(1.0)  # five triggers without a new file
        assert job.version == 0 and query.isActive
        for i in range(1, len(files)):
            write_json(folder, f"part-{i}.json", files[i])
            wait_for(job, query, i)
    finally:
        query.stop()
        job.close(spark)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["input_rows"] for r in records if "input_rows" in r] == [3, 0, 2, 2]
    reference = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(folder))
    aggs = [F.count("x").alias("n"), F.sum("x").alias("total")]
    native = native_outputs(reference, upstream, aggs, {"availableNow": True}, len(files) - 1)
    assert {b: rows(t) for b, t in outputs.items()} == native
    assert native[1] == native[2] == []  # the empty batches: no rows updated


def test_a_batch_whose_rows_yield_no_deltas_is_counted(spark, tmp_path):
    """Rows that the upstream drops, or that are all bad records, leave the delta job's shuffle empty, so
    adaptive execution skips the stage after it and Spark never fills the batch's observed counts (reading
    them failed the batch)."""
    outputs: dict[int, pa.Table] = {}
    job = StatefulJob(
        Aggregation(["k"], [Agg("n", "count", "x")]),
        outputs.__setitem__,
        str(tmp_path / "ckpt"),
        upstream=lambda df: df.where("k >= 0"),
        bad_records=Quarantine(tmp_path / "bad"),
        config=MisaConfig.from_mapping({"spark.misa.state.shards": "1"}),
        echo=None,
    )
    batches = [['{"k": -1, "x": 7}', '{"k": -2, "x": 1}'], ['{"k": 2, "x": 1}', '{"k": -3}'], ['{"k": 1, "x": "a"}']]
    try:
        for batch_id, lines in enumerate(batches):
            raw = spark.createDataFrame([(line,) for line in lines], "value string")
            job.run_batch(parse_json_lines(raw, StructType.fromDDL("k long, x long"), ["k", "x"]), batch_id)
    finally:
        job.close()
    pending = job.metrics._pending  # the runtime's records, waiting for a progress report no query sends here
    assert [(pending[b]["input_rows"], pending[b]["bad_records"]) for b in (0, 1, 2)] == [(2, 0), (2, 1), (1, 1)]
    assert [rows(outputs[b]) for b in (0, 1, 2)] == [[], [{"k": 2, "n": 1}], []]
    assert read_quarantine(tmp_path / "bad") == ['{"k": -3}', '{"k": 1, "x": "a"}']


@pytest.mark.parametrize(
    "mirrored",
    [pytest.param(m, marks=pytest.mark.slow) for m in (True, False)],
    ids=["local-copy", "spark-writes-the-location"],
)
def test_a_temp_file_left_by_a_kill_during_sparks_first_offsets_write_does_not_block_the_restart(
    spark, tmp_path, mirrored
):
    """A driver killed while Spark wrote its first offsets entry leaves ``offsets/.0.<uuid>.tmp`` where Spark
    writes (the local copy, or the location itself without the mirror); Spark then refuses batch 0
    (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY) on every restart. Recovery removes it."""
    ckpt = tmp_path / "ckpt"
    spark_dir = ckpt
    if mirrored:  # the killed start had made its local copy (and its index) before Spark wrote
        mirror = SparkLogMirror(ckpt / "misa-local", parse(str(ckpt)), RetryPolicy())
        mirror.prepare()
        spark_dir = mirror.local_root
    (spark_dir / "offsets").mkdir(parents=True)
    abandoned = spark_dir / "offsets" / ".0.0b6d1e1f-2f5e-4a55-9c1a-0c6f1d9e2a11.tmp"
    abandoned.touch()
    outputs: dict[int, pa.Table] = {}
    job = StatefulJob(
        Aggregation(["k"], [Agg("n", "count", "value")]),
        outputs.__setitem__,
        str(ckpt),
        upstream=lambda df: df.select((F.col("value") % 3).alias("k"), F.col("value")),
        config=MisaConfig.from_mapping(
            {"spark.misa.state.shards": "1", "spark.misa.checkpoint.mirrorSparkLog": str(mirrored).lower()}
        ),
        metrics_path=str(tmp_path / "metrics.jsonl"),
        echo=None,
    )
    stream = spark.readStream.format("rate-micro-batch").options(rowsPerBatch="6").load()
    query = job.start(spark, stream, {"processingTime": "200 milliseconds"})
    try:
        deadline = time.monotonic() + 60
        while job.version < 1 and query.isActive and time.monotonic() < deadline:
            time.sleep(0.2)
        assert query.exception() is None
        assert job.version >= 1
    finally:
        query.stop()
        job.close(spark)
    assert not abandoned.exists()  # (a stop may leave a temp file of its own: Spark's next write, cut short)
