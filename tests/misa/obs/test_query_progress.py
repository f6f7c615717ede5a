"""misa's state phase in Spark's own progress (``lastProgress``, ``recentProgress``) and in the Spark UI's job
descriptions."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from misa import DataFrameSink, MisaConfig, from_query
from misa.obs.query_progress import OBSERVED


def _job_descriptions(spark) -> list[str]:
    """Every Spark job's description in the application's status store (what the UI lists)."""
    jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None).iterator()
    out = []
    while jobs.hasNext():
        description = jobs.next().description()
        out.append(description.get() if description.isDefined() else "")
    return out


def test_each_batch_reports_misas_operator_in_sparks_progress_and_names_its_jobs(spark, tmp_path: Path):
    (tmp_path / "in").mkdir()
    for f in range(3):
        rows = [{"k": f"u{i % 4}", "v": i} for i in range(f * 10, f * 10 + 10)]
        (tmp_path / "in" / f"{f}.json").write_text("\n".join(map(json.dumps, rows)))
    stream = spark.readStream.schema("k string, v bigint").option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    written: list[int] = []

    def write(df: DataFrame, batch_id: int) -> None:
        df.write.mode("overwrite").parquet(str(tmp_path / "out" / str(batch_id)))
        written.append(batch_id)

    config = MisaConfig.from_mapping({"spark.misa.state.shards": "2"})
    job = from_query(
        stream.groupBy("k").agg(F.sum("v")),
        DataFrameSink(write),
        str(tmp_path / "ckpt"),
        output_mode="update",
        config=config,
        echo=None,
    )
    reports = {}
    job.job.add_listener(lambda report, progress: reports.setdefault(report.batch_id, report))
    try:
        query = job.start(trigger={"availableNow": True})
        query.awaitTermination()
        job.job.settle()
    finally:
        job.close()
    assert isinstance(query, StreamingQuery)
    batches = [p for p in query.recentProgress if "addBatch" in p.durationMs]
    assert [p.batchId for p in batches] == [0, 1, 2] and written == [0, 1, 2]
    for progress in batches:
        (operator,) = progress.stateOperators
        record = reports[progress.batchId].record
        assert operator.operatorName == "misa:Aggregation"
        assert operator.numRowsTotal == record.state_keys  # RocksDB's estimate: it lags the background commit
        assert operator.numRowsUpdated == record.state_writes == 4  # each batch's rows touch all four keys
        assert operator.numShufflePartitions == 1 and operator.numStateStoreInstances == 2
        assert operator.customMetrics["misaStateRowsRead"] == record.state_reads == 4
        assert operator.customMetrics["misaOutputRows"] == 4
        observed = progress.observedMetrics[OBSERVED]
        assert observed.numRowsTotal == operator.numRowsTotal
        durable = reports[progress.batchId].commit_status.last_durable
        assert observed.misaNewestDurableVersion == (-1 if durable is None else durable)
    assert query.lastProgress.batchId == batches[-1].batchId and query.lastProgress.stateOperators
    descriptions = _job_descriptions(spark)
    for batch in range(3):
        assert f"misa batch {batch}: the deltas of Aggregation for misa's state phase" in descriptions
        assert f"misa batch {batch}: the output of misa's state phase to the sink" in descriptions
