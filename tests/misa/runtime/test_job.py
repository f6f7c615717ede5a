"""The job API on static DataFrames: a replayed batch id reloads the state before it."""

import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from misa.config import MisaConfig
from misa.job import StatefulJob
from misa.operators.aggregation import Agg, Aggregation
from misa.query.job import from_query
from misa.runtime.process import switch_interval


@pytest.mark.parametrize("mode, processes", [("sync", 1), ("misa", 1), ("misa", 2)])
def test_replayed_batch_is_not_counted_twice(spark, tmp_path, mode, processes):
    """Batch 1 runs twice: the second run rewinds to version 0 (with two processes: in both partitions)."""
    outputs: dict[int, pa.Table] = {}
    conf = {"spark.misa.state.shards": "2", "spark.misa.commit.mode": mode}
    conf["spark.misa.state.processes"] = str(processes)
    job = StatefulJob(
        Aggregation(["k"], [Agg("total", "sum", "x"), Agg("n", "count", "x")]),
        lambda batch_id, table: outputs.__setitem__(batch_id, table),
        str(tmp_path / "ckpt"),
        config=MisaConfig.from_mapping(conf),
        echo=None,
    )
    batch = spark.range(100).select((F.col("id") % 3).alias("k"), F.col("id").cast("double").alias("x"))
    try:
        for batch_id in (0, 1, 1, 2):  # batch 1 runs twice, as after a retried foreachBatch
            job.run_batch(batch, batch_id)
    finally:
        job.close()
    final = {row["k"]: (row["total"], row["n"]) for row in outputs[2].to_pylist()}
    per_batch = {
        k: (sum(x for x in range(100) if x % 3 == k), len([x for x in range(100) if x % 3 == k])) for k in range(3)
    }
    assert final == {k: (3 * s, 3 * n) for k, (s, n) in per_batch.items()}


def run_count_job(spark, sink, checkpoint_location: str, input_dir, mirror: bool = True) -> None:
    """Count rows per ``k`` of the Parquet files in ``input_dir`` with one available-now run of a job."""
    conf = {"spark.misa.state.shards": "1", "spark.misa.checkpoint.mirrorSparkLog": str(mirror).lower()}
    job = StatefulJob(
        Aggregation(["k"], [Agg("n", "count", "x")]),
        sink,
        checkpoint_location,
        config=MisaConfig.from_mapping(conf),
        echo=None,
    )
    stream = spark.readStream.schema("k long, x double").parquet(str(input_dir))
    try:
        job.start(spark, stream, {"availableNow": True}).awaitTermination()
    finally:
        job.close(spark)


def test_the_library_leaves_process_settings_to_the_entry_point(spark, tmp_path):
    """A job in a shared session changes neither the switch interval nor the collector; an entry point's
    ``switch_interval`` block sets the interval for the batches and restores it."""
    import gc
    import sys

    spark.range(10).select((F.col("id") % 2).alias("k"), F.col("id").cast("double").alias("x")).write.parquet(
        str(tmp_path / "in")
    )
    seen: list[tuple[float, bool]] = []

    def sink(batch_id: int, table: pa.Table) -> None:
        seen.append((sys.getswitchinterval(), gc.isenabled()))

    before = sys.getswitchinterval()
    run_count_job(spark, sink, str(tmp_path / "library"), tmp_path / "in")
    with switch_interval(0.001):
        run_count_job(spark, sink, str(tmp_path / "entry-point"), tmp_path / "in")
    assert seen == [(pytest.approx(before), True), (pytest.approx(0.001), True)]
    assert sys.getswitchinterval() == before


@pytest.mark.parametrize("mode", ["sync", "misa"])
def test_a_replayed_version_is_forgotten_before_it_is_rebuilt(spark, tmp_path, mode):
    """A replay must not overwrite ckpt/v and the DFS manifest of v while v's markers still count."""
    job = StatefulJob(
        Aggregation(["k"], [Agg("n", "count", "x")]),
        lambda batch_id, table: None,
        str(tmp_path / "ckpt"),
        config=MisaConfig.from_mapping({"spark.misa.state.shards": "2", "spark.misa.commit.mode": mode}),
        echo=None,
    )
    store = job.store
    rebuilt_while_committed: list[int] = []
    checkpoint = store.checkpoint

    def watched(version, *args, **kwargs):
        if version in store.checkpoints.local.versions() or version in store.checkpoints.dfs.committed_versions():
            rebuilt_while_committed.append(version)
        return checkpoint(version, *args, **kwargs)

    store.checkpoint = watched
    batch = spark.range(20).select((F.col("id") % 3).alias("k"), F.col("id").cast("double").alias("x"))
    try:
        for batch_id in (0, 1, 2, 1, 2):  # batches 1 and 2 run again, as after a re-evaluated DataFrame
            job.run_batch(batch, batch_id)
    finally:
        job.close()
    assert rebuilt_while_committed == []
    assert store.checkpoints.dfs.committed_versions()[-1] == 2


def test_a_hadoop_style_file_location_keeps_the_state_across_restarts(spark, tmp_path):
    """``file:/x`` is how Hadoop writes local paths; a restart must find Spark's logs and the state there."""
    rows = lambda start: spark.range(start, start + 30).select(  # noqa: E731
        (F.col("id") % 3).alias("k"), F.col("id").cast("double").alias("x")
    )
    outputs: dict[int, pa.Table] = {}

    def run() -> None:
        run_count_job(spark, outputs.__setitem__, f"file:{tmp_path / 'ckpt'}", tmp_path / "in")

    rows(0).write.mode("append").parquet(str(tmp_path / "in"))
    run()
    rows(30).write.mode("append").parquet(str(tmp_path / "in"))
    run()
    assert (tmp_path / "ckpt" / "misa-local").is_dir()
    assert {r["k"]: r["n"] for r in outputs[max(outputs)].to_pylist()} == {0: 20, 1: 20, 2: 20}


def test_an_idle_query_has_its_last_commit_mirrored_to_the_checkpoint_location(spark, tmp_path):
    """Spark's log is written locally and mirrored; once a batch is reported its commit entry reaches the
    checkpoint location while the query idles (no next upload carries it), so a start elsewhere does not
    replay the batch."""
    import time

    from common.location import parse
    from misa.runtime.spark_log import SparkCheckpointLog

    spark.range(30).select((F.col("id") % 3).alias("k"), F.col("id").cast("double").alias("x")).write.parquet(
        str(tmp_path / "in")
    )
    job = StatefulJob(
        Aggregation(["k"], [Agg("n", "count", "x")]),
        lambda batch_id, table: None,
        str(tmp_path / "ckpt"),
        config=MisaConfig.from_mapping({"spark.misa.state.shards": "1"}),
        echo=None,
    )
    assert job.mirror is not None  # the default: Spark's checkpoint local first, mirrored
    stream = spark.readStream.schema("k long, x double").parquet(str(tmp_path / "in"))
    mirrored = SparkCheckpointLog(parse(str(tmp_path / "ckpt")))
    query = job.start(spark, stream, {"processingTime": "1 second"})
    try:
        query.processAllAvailable()
        last = query.lastProgress["batchId"]
        deadline = time.monotonic() + 20
        while mirrored.last_committed() != last and time.monotonic() < deadline:
            time.sleep(0.05)
        assert query.isActive and mirrored.last_committed() == last
    finally:
        query.stop()
        job.close(spark)


def test_a_run_without_the_spark_log_mirror_between_mirrored_runs_continues_from_its_log(spark, tmp_path):
    """The run without the mirror writes Spark's log at the checkpoint location: the next mirrored start takes it
    from there, not from the older local copy of the first run."""
    outputs: dict[int, pa.Table] = {}
    for i, mirror in enumerate([True, False, True]):
        spark.range(i * 30, i * 30 + 30).select(
            (F.col("id") % 3).alias("k"), F.col("id").cast("double").alias("x")
        ).write.mode("append").parquet(str(tmp_path / "in"))
        run_count_job(spark, outputs.__setitem__, str(tmp_path / "ckpt"), tmp_path / "in", mirror=mirror)
    assert sorted(outputs) == [0, 1, 2]
    assert {r["k"]: r["n"] for r in outputs[2].to_pylist()} == {0: 30, 1: 30, 2: 30}


@pytest.mark.slow  # 12 s of the suite's time (CI's 600 s); run on demand
def test_close_stops_a_query_that_still_runs_before_it_releases_the_state(spark, tmp_path: Path):
    """``close()`` of a running query (a rate source always has input): it stops the query first, so that no batch
    reads a closed store (misa bench kafka saw a batch without data fail with DbClosedError after a close)."""
    rate = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 5).load()
    counts = rate.withWatermark("timestamp", "1 second").groupBy(F.window("timestamp", "2 seconds")).count()
    batches: list[int] = []
    job = from_query(counts, lambda batch_id, table: batches.append(batch_id), str(tmp_path / "ckpt"), echo=None)
    query = job.start({"processingTime": "0 seconds"})
    deadline = time.monotonic() + 120
    while len(batches) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    job.close()
    assert not query.isActive and query.exception() is None
