"""One owner per checkpoint: a locked state dir, a fenced DFS location, batch continuity, restart in process."""

from __future__ import annotations

import contextlib
import time

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from checkpoint.exceptions import OwnershipError
from common import failpoints
from misa import job as job_module
from misa.config import MisaConfig
from misa.exceptions import ConfigError, RecoveryError
from misa.job import StatefulJob
from misa.operators.aggregation import Agg, Aggregation
from misa.state.store import StateStore


def test_a_second_store_on_a_state_dir_is_refused_before_it_changes_anything(config, tmp_path):
    first = StateStore(config, tmp_path / "state", (tmp_path / "dfs").as_uri())
    try:
        first.write([(b"k", b"v")])
        first.flush()
        with pytest.raises(OwnershipError, match="is in use by"):
            StateStore(config, tmp_path / "state", (tmp_path / "dfs2").as_uri())
        assert first.get(b"k") == b"v"
        assert (tmp_path / "state" / "shard-0" / "db").is_dir()
    finally:
        first.close()
    StateStore(config, tmp_path / "state", (tmp_path / "dfs").as_uri()).close()  # the lock went with the store


def _commit(store: StateStore, version: int) -> None:
    store.write([(f"k{version}".encode(), b"v")])
    store.checkpoint(version)
    store.checkpoints.upload_and_retain(version)


def test_a_superseded_driver_stops_before_its_next_marker(config, tmp_path):
    dfs = (tmp_path / "dfs").as_uri()
    old = StateStore(config, tmp_path / "a", dfs)
    new = StateStore(config, tmp_path / "b", dfs)
    try:
        assert old.claim("query-1").epoch == 1
        _commit(old, 0)
        assert new.claim("query-1").epoch == 2  # the standby takes over
        with pytest.raises(OwnershipError, match="superseded"):
            _commit(old, 1)
        with pytest.raises(OwnershipError, match="superseded"):
            old.checkpoints.upload_and_retain(0)
        assert new.checkpoints.dfs.committed_versions() == [0]
        new.checkpoints.check_owner()
    finally:
        old.close()
        new.close()


def test_another_querys_dfs_location_and_state_dir_are_refused(config, tmp_path):
    dfs = (tmp_path / "dfs").as_uri()
    with StateStore(config, tmp_path / "a", dfs) as first:
        first.claim("query-1")
        with StateStore(config, tmp_path / "b", dfs) as second:
            with pytest.raises(OwnershipError, match="belongs to query query-1.*checkpoint.dfsUrl"):
                second.claim("query-2")
    with StateStore(config, tmp_path / "a", (tmp_path / "other-dfs").as_uri()) as again:
        with pytest.raises(OwnershipError, match="state dir.*belongs to query query-1"):
            again.claim("query-2")
        assert not (tmp_path / "other-dfs" / "_owner.json").exists()  # refused before the DFS was claimed


@pytest.mark.parametrize("dfs", ["state", "state/dfs", "."])
def test_a_dfs_copy_overlapping_the_state_dir_is_refused(config, tmp_path, dfs):
    with pytest.raises(ConfigError, match="dfsUrl.*overlap"):
        StateStore(config, tmp_path / "state", (tmp_path / dfs).as_uri())


def _counting_job(checkpoint: str, state_dir: str | None = None, **conf: str) -> tuple[StatefulJob, dict]:
    outputs: dict[int, pa.Table] = {}
    job = StatefulJob(
        Aggregation(["k"], [Agg("n", "count", "x")]),
        outputs.__setitem__,
        checkpoint,
        config=MisaConfig.from_mapping({"spark.misa.state.shards": "1", **conf}),
        state_dir=state_dir,
        echo=None,
    )
    return job, outputs


def _rows(spark, n: int = 30):
    return spark.range(n).select((F.col("id") % 3).alias("k"), F.col("id").cast("double").alias("x"))


def _counts(outputs: dict[int, pa.Table]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for batch_id in sorted(outputs):
        counts.update({r["k"]: r["n"] for r in outputs[batch_id].to_pylist()})
    return counts


@pytest.mark.parametrize("mode", ["sync", "misa"])
def test_a_batch_that_does_not_follow_the_state_fails_before_it_writes(spark, tmp_path, mode):
    job, outputs = _counting_job(str(tmp_path / "ckpt"), **{"spark.misa.commit.mode": mode})
    try:
        job.run_batch(_rows(spark), 0)
        with pytest.raises(RecoveryError, match="runs batch 2 .* state is at version 0"):
            job.run_batch(_rows(spark), 2)
        assert sorted(outputs) == [0]
        job.controller.drain()
        assert job.store.checkpoints.dfs.committed_versions() == [0]
    finally:
        job.close()


def _write_input(spark, folder, start: int, files: int) -> None:
    for i in range(start, start + files):
        _rows(spark, 12).coalesce(1).write.mode("append").parquet(str(folder / f"part={i}"))


def _stream(spark, folder):
    return spark.readStream.schema("k long, x double").option("maxFilesPerTrigger", 1).parquet(f"{folder}/part=*")


def test_start_again_after_a_failed_commit_counts_each_row_once(spark, tmp_path):
    """A retry wrapper calls start() again on the same job after its query failed in a commit."""
    _write_input(spark, tmp_path / "in", 0, 2)
    job, outputs = _counting_job(
        str(tmp_path / "ckpt"), **{"spark.misa.commit.mode": "misa", "spark.misa.commit.maxRestarts": "0"}
    )
    try:
        failpoints.configure("commit.after_apply=raise(1)")  # version 0's commit fails in the background
        with pytest.raises(Exception, match="commit of version 0 failed"):
            job.start(spark, _stream(spark, tmp_path / "in"), {"availableNow": True}).awaitTermination()
        failpoints.configure("")
        job.start(spark, _stream(spark, tmp_path / "in"), {"availableNow": True}).awaitTermination()
    finally:
        job.close(spark)
    assert _counts(outputs) == {0: 8, 1: 8, 2: 8}  # 2 files of 12 rows


@pytest.mark.slow  # on demand, like the soak's standby scenario (two drivers on one checkpoint, kills, restarts)
def test_a_standby_started_while_the_old_driver_runs_never_continues_on_stale_state(spark, tmp_path):
    """Driver B recovers version 3; before its query starts, driver A (still running) runs batches 4..6.
    B must not run Spark's later batches on version 3: it fails loudly, and its restart is exact."""
    ckpt, data = str(tmp_path / "ckpt"), tmp_path / "in"
    _write_input(spark, data, 0, 4)
    old, _ = _counting_job(ckpt, str(tmp_path / "a"), **{"spark.misa.commit.mode": "misa"})
    old_query = old.start(spark, _stream(spark, data), {"processingTime": "200 milliseconds"})
    new, outputs = _counting_job(ckpt, str(tmp_path / "b"), **{"spark.misa.commit.mode": "misa"})
    real_reconcile = job_module.reconcile

    def held_reconcile(store, location, allow_previous):
        version = real_reconcile(store, location, allow_previous)
        _write_input(spark, data, 4, 3)  # the old driver's query picks these up while this one waits
        deadline = time.monotonic() + 60
        while old_query.isActive and old.version < 6 and time.monotonic() < deadline:
            time.sleep(0.2)
        _write_input(spark, data, 7, 1)
        return version

    try:
        while old.version < 3:
            assert old_query.isActive, old_query.exception()
            time.sleep(0.2)
        job_module.reconcile = held_reconcile
        try:
            query = new.start(spark, _stream(spark, data), {"availableNow": True})
        finally:
            job_module.reconcile = real_reconcile
        try:
            query.awaitTermination()
            loud = None
        except Exception as exc:  # noqa: BLE001 -- a clear refusal is one right outcome, checked below
            loud = str(exc)
        old_query.stop()
        if loud is not None:
            assert "runs batch" in loud or "superseded" in loud, loud
            new.start(spark, _stream(spark, data), {"availableNow": True}).awaitTermination()
    finally:
        old_query.stop()
        new.close(spark)
        with contextlib.suppress(Exception):  # the old driver's commits were refused: that is the point
            old.close(spark)
    assert _counts(outputs) == {0: 32, 1: 32, 2: 32}  # 8 files of 12 rows


def test_every_version_records_its_query_and_another_querys_version_is_refused(config, tmp_path):
    dfs = (tmp_path / "dfs").as_uri()
    with StateStore(config, tmp_path / "a", dfs) as first:
        first.claim("query-1")
        _commit(first, 0)
        assert first.checkpoints.dfs.manifests(0)[0].metadata["misa.owner"] == {"query_id": "query-1", "epoch": 1}
    (tmp_path / "dfs" / "_owner.json").unlink()  # an owner record lost (or a DFS copied without it)
    with StateStore(config, tmp_path / "b", dfs) as second:
        second.claim("query-2")
        with pytest.raises(OwnershipError, match="version 0 .* written by query query-1"):
            second.load(0)


def test_two_queries_configured_with_one_dfs_url_the_second_is_refused_at_start(spark, tmp_path):
    _write_input(spark, tmp_path / "in", 0, 1)
    dfs = {"spark.misa.checkpoint.dfsUrl": (tmp_path / "shared-dfs").as_uri()}
    first, first_out = _counting_job(str(tmp_path / "ckpt-1"), **dfs)
    second, second_out = _counting_job(str(tmp_path / "ckpt-2"), **dfs)
    try:
        first_query = first.start(spark, _stream(spark, tmp_path / "in"), {"availableNow": True})
        with pytest.raises(OwnershipError, match="belongs to query .* not to this query"):
            second.start(spark, _stream(spark, tmp_path / "in"), {"availableNow": True})
        first_query.awaitTermination()
    finally:
        first.close(spark)
        second.close(spark)
    assert _counts(first_out) == {0: 4, 1: 4, 2: 4} and second_out == {}
