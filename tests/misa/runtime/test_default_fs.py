"""A scheme-less checkpoint path on a cluster whose default FS is not the driver's disk (Hadoop's viewfs here)."""

from __future__ import annotations

import shutil
import uuid

import pyarrow as pa
from pyspark.sql import functions as F

from misa.config import MisaConfig
from misa.job import StatefulJob
from misa.operators.aggregation import Agg, Aggregation
from misa.runtime.hadoop_fs import resolve_location


def _viewfs_default(spark, mount: str, target) -> dict[str, str | None]:
    """Make ``viewfs://<new cluster>/`` the session's default FS, with ``mount`` linked to ``target``."""
    cluster = f"misa{uuid.uuid4().hex[:8]}"
    settings = {"fs.defaultFS": f"viewfs://{cluster}/", f"fs.viewfs.mounttable.{cluster}.link.{mount}": target.as_uri()}
    saved = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    return saved


def _restore(spark, saved: dict[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


def _run(spark, checkpoint: str, state_dir, input_path: str, outputs: dict[int, pa.Table]) -> None:
    job = StatefulJob(
        Aggregation(["k"], [Agg("n", "count", "x")]),
        outputs.__setitem__,
        checkpoint,
        config=MisaConfig.from_mapping({"spark.misa.state.shards": "1"}),
        state_dir=str(state_dir),
        echo=None,
    )
    stream = spark.readStream.schema("k long, x double").option("maxFilesPerTrigger", 1).parquet(input_path)
    try:
        job.start(spark, stream, {"availableNow": True}).awaitTermination()
    finally:
        job.close(spark)


def test_a_scheme_less_checkpoint_is_read_where_spark_writes_it(spark, tmp_path):
    """Spark writes ``/x`` to the default FS; recovery on another node must find its logs and the state there."""
    node_disk, cluster = tmp_path / "node-disk", tmp_path / "cluster"  # the path as the job names it, where it lives
    (cluster / "in").mkdir(parents=True)
    checkpoint, input_path = str(node_disk / "ckpt"), str(node_disk / "in")
    rows = spark.range(30).select((F.col("id") % 3).alias("k"), F.col("id").cast("double").alias("x"))
    outputs: dict[int, pa.Table] = {}
    saved = _viewfs_default(spark, str(node_disk), cluster)
    try:
        location = resolve_location(checkpoint, spark)
        assert location.url.startswith("viewfs://") and location.local is None
        for part in range(2):
            rows.coalesce(1).write.parquet((cluster / "in" / f"part-{part}").as_uri())
        _run(spark, checkpoint, tmp_path / "node-a", f"{input_path}/part-*", outputs)
        assert (cluster / "ckpt" / "misa-state" / "_commits").is_dir()  # the DFS copy beside Spark's checkpoint
        shutil.rmtree(node_disk, ignore_errors=True)  # a new node: nothing of the old one's local disk
        rows.coalesce(1).write.parquet((cluster / "in" / "part-2").as_uri())
        _run(spark, checkpoint, tmp_path / "node-b", f"{input_path}/part-*", outputs)
    finally:
        _restore(spark, saved)
    final = {r["k"]: r["n"] for r in outputs[max(outputs)].to_pylist()}
    assert final == {0: 30, 1: 30, 2: 30}
