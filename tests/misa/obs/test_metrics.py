"""The per-batch record's Spark side (runs, Spark's state store) and the console's summary line."""

from __future__ import annotations

import json
from types import SimpleNamespace

from misa.obs.metrics import BatchMetrics, spark_state, summary_line
from misa.obs.records import BatchRecord, BatchReport, CommitStatus


def _progress(batch_id: int, operators: list | None = None) -> SimpleNamespace:
    """What Spark's StreamingQueryProgress gives the listener (the fields the record reads)."""
    return SimpleNamespace(
        batchId=batch_id,
        timestamp="2026-01-01T00:00:00.000Z",
        numInputRows=10,
        durationMs={"addBatch": 80, "triggerExecution": 100},
        stateOperators=operators or [],
    )


def _operator(rows: int, memory: int, sst: int | None) -> SimpleNamespace:
    custom = {} if sst is None else {"rocksdbSstFileSize": sst}
    return SimpleNamespace(numRowsTotal=rows, memoryUsedBytes=memory, customMetrics=custom)


def test_the_summary_line_says_the_key_count_is_rocksdbs_estimate():
    record = {"batch_id": 3, "input_rows": 120, "latency_s": 0.5, "state_keys": 75}
    line = summary_line(record)
    assert "state keys ~75 (RocksDB estimate)" in line
    assert line.startswith("batch    3 | rows     120 | latency    500 ms")
    assert "state keys" not in summary_line({"batch_id": 0, "latency_s": 0.1})  # native: no runtime state


def test_spark_state_store_sums_operators_and_skips_rows_spark_does_not_count():
    # the tuned native mode turns trackTotalNumberOfRows off: Spark reports 0 rows, which means "not counted"
    assert spark_state([_operator(0, 3_000, 0), _operator(0, 1_000, 4_096)]) == {
        "spark_state_memory_bytes": 4_000,
        "spark_state_sst_bytes": 4_096,
    }
    assert spark_state([_operator(25, 500, None)]) == {"spark_state_rows": 25, "spark_state_memory_bytes": 500}
    assert spark_state([]) == {}  # the runtime's modes: Spark has no state operator


def test_records_carry_their_run_the_commit_lag_and_sparks_state(tmp_path):
    path = tmp_path / "m.jsonl"
    metrics = BatchMetrics(path, "misa")
    metrics.listener()
    first_run = metrics.run_started
    status = CommitStatus(pending=(0,), last_local=None, last_durable=None)
    metrics.report(BatchReport(0, BatchRecord(input_rows=10, state_keys=5), commit_status=status))
    metrics.on_progress(_progress(0, [_operator(0, 2_048, 1_024)]))
    metrics.listener()  # a restart: the query starts again
    metrics.report(BatchReport(1, BatchRecord(input_rows=10)))
    metrics.on_progress(_progress(1))
    metrics.on_progress(SimpleNamespace(batchId=2, durationMs={"triggerExecution": 5}))  # idle: no record

    first, second = [json.loads(line) for line in path.read_text().splitlines()]
    assert first["run_started"] == first_run and second["run_started"] > first_run
    assert first["commit_status"] == {"pending": [0], "last_local": None, "last_durable": None}
    assert second["commit_status"]["pending"] == []
    assert (first["spark_state_memory_bytes"], first["spark_state_sst_bytes"]) == (2_048, 1_024)
    assert first["latency_s"] == 0.1 and first["state_keys"] == 5
