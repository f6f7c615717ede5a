"""A deduplication on misa with its keys in the memory tier (the default) gives plain Spark's rows through a restart:
the restarted job loads the tier from the state the first run committed, and its batches read through it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from misa import MisaConfig, from_query

SCHEMA = "k string, t bigint, v bigint"


def _write(folder: Path, first: int, files: int) -> None:
    """Files ``first`` .. ``first + files - 1`` of 40 rows over 12 keys, event time advancing 4 s a file."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(first, first + files):
        rows = [{"k": f"u{(f * 7 + i * 5) % 12}", "t": f * 4_000 + i * 50, "v": f * 100 + i} for i in range(40)]
        path = folder / f"part-{f}.json"
        path.write_text("\n".join(json.dumps(r) for r in rows))
        os.utime(path, (1_700_000_000 + f, 1_700_000_000 + f))  # Spark reads files in modification-time order


def _query(spark, folder: Path) -> DataFrame:
    rows = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(folder))
    return rows.withColumn("event_time", F.timestamp_millis("t")).withWatermark("event_time", "6 seconds")


def _deduplicated(rows: DataFrame) -> DataFrame:
    return rows.dropDuplicatesWithinWatermark(["k"]).select("k", "t", "v")


@pytest.mark.slow  # the suite's time
def test_a_restarted_deduplication_reads_its_keys_through_the_memory_tier_and_gives_sparks_rows(spark, tmp_path):
    folder = tmp_path / "input"
    _write(folder, 0, 3)
    got: list[tuple] = []
    reports: list = []

    def run() -> None:
        job = from_query(
            _deduplicated(_query(spark, folder)),
            lambda batch_id, table: got.extend(tuple(r.values()) for r in table.to_pylist()),
            str(tmp_path / "misa"),
            config=MisaConfig.from_mapping({"spark.misa.state.shards": "2"}),
            echo=None,
        )
        job.job.add_listener(lambda report, progress: reports.append(report))
        try:
            job.start({"availableNow": True}).awaitTermination()
        finally:
            job.close()

    run()
    first_run = len(reports)
    _write(folder, 3, 3)
    run()

    expected: list[tuple] = []
    plain = _deduplicated(_query(spark, folder)).writeStream.foreachBatch(
        lambda df, _: expected.extend(tuple(r) for r in df.collect())
    )
    plain.option("checkpointLocation", str(tmp_path / "spark")).trigger(availableNow=True).start().awaitTermination()
    assert sorted(got) == sorted(expected) and len(expected) > 12  # keys come back once their expiry passed

    restarted = [r.record.cache for r in reports[first_run:]]
    assert sum(c.get("memory_loaded", 0) for c in restarted) > 0, "the restart did not load the tier"
    assert sum(c.get("memory_reads", 0) for c in restarted) > 0, "the restarted batches did not read through it"
