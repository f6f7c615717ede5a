"""Sources that deliver empty micro-batches (Spark's rate sources) run through a job like any other."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from misa.config import MisaConfig
from misa.operators.aggregation import Agg, Aggregation
from misa.runtime.job import StatefulJob


@pytest.mark.parametrize(
    ("source", "options"),
    [("rate", {"rowsPerSecond": "20"}), ("rate-micro-batch", {"rowsPerBatch": "10"})],
)
def test_a_source_with_empty_batches_runs_and_counts_them(spark, tmp_path, source, options):
    """The rate source's first batch is empty (it used to hang in reading the batch's observed counts);
    rate-micro-batch delivers a fixed number of rows per batch."""
    outputs: dict[int, pa.Table] = {}
    job = StatefulJob(
        Aggregation(["k"], [Agg("n", "count", "value")]),
        outputs.__setitem__,
        str(tmp_path / "ckpt"),
        upstream=lambda df: df.select((F.col("value") % 3).alias("k"), F.col("value")),
        config=MisaConfig.from_mapping({"spark.misa.state.shards": "1"}),
        metrics_path=str(tmp_path / "metrics.jsonl"),
        echo=None,
    )
    query = job.start(
        spark, spark.readStream.format(source).options(**options).load(), {"processingTime": "300 milliseconds"}
    )
    try:
        deadline = time.monotonic() + 90
        while job.version < 3 and query.isActive and time.monotonic() < deadline:
            time.sleep(0.2)
        assert query.exception() is None
        assert job.version >= 3, "fewer than 4 batches in 90 s"
    finally:
        query.stop()
        job.close(spark)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    inputs = {r["batch_id"]: r["input_rows"] for r in records if "input_rows" in r}
    last = max(inputs)  # the newest batch Spark reported before the stop
    final: dict[int, int] = {}
    for batch_id in sorted(b for b in outputs if b <= last):
        final.update((r["k"], r["n"]) for r in outputs[batch_id].to_pylist())
    assert sum(final.values()) == sum(inputs.values())  # every row the runtime counted is in the state
    if source == "rate":
        assert inputs[0] == 0  # the empty first batch ran and was counted as empty
    else:
        assert set(inputs.values()) == {10}


def test_a_temp_file_left_by_a_kill_during_sparks_first_offsets_write_does_not_block_the_restart(spark, tmp_path):
    """A driver killed while Spark wrote its first offsets entry leaves ``offsets/.0.<uuid>.tmp``; Spark then
    refuses batch 0 (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY) on every restart. Recovery removes it."""
    ckpt = tmp_path / "ckpt"
    (ckpt / "offsets").mkdir(parents=True)
    (ckpt / "offsets" / ".0.0b6d1e1f-2f5e-4a55-9c1a-0c6f1d9e2a11.tmp").touch()
    outputs: dict[int, pa.Table] = {}
    job = StatefulJob(
        Aggregation(["k"], [Agg("n", "count", "value")]),
        outputs.__setitem__,
        str(ckpt),
        upstream=lambda df: df.select((F.col("value") % 3).alias("k"), F.col("value")),
        config=MisaConfig.from_mapping({"spark.misa.state.shards": "1"}),
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
    assert not [p.name for p in (ckpt / "offsets").iterdir() if p.name.endswith(".tmp")]
