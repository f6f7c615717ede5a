"""The per-batch record's Spark side (runs, Spark's state store) and the console's summary line."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from types import SimpleNamespace

from misa.obs.metrics import BatchMetrics, spark_state, summary_line
from misa.obs.records import BatchPhases, BatchRecord, BatchReport, CommitRecord, CommitStatus


def _progress(batch_id: int, operators: list | None = None) -> SimpleNamespace:
    """What Spark's StreamingQueryProgress gives the listener (the fields the record reads)."""
    return SimpleNamespace(
        id="q",
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
    metrics.follow("q")
    metrics.listener()
    metrics.follow("q")
    first_run = metrics.run_started
    status = CommitStatus(pending=(0,), last_local=None, last_durable=None)
    metrics.report(BatchReport(0, BatchRecord(input_rows=10, state_keys=5), commit_status=status))
    metrics.on_progress(_progress(0, [_operator(0, 2_048, 1_024)]))
    metrics.listener()  # a restart: the query starts again
    metrics.follow("q")
    metrics.report(BatchReport(1, BatchRecord(input_rows=10)))
    metrics.on_progress(_progress(1))
    metrics.on_progress(SimpleNamespace(id="q", batchId=2, durationMs={"triggerExecution": 5}))  # idle: no record

    first, second = [json.loads(line) for line in path.read_text().splitlines()]
    assert first["run_started"] == first_run and second["run_started"] > first_run
    assert first["commit_status"] == {"pending": [0], "last_local": None, "last_durable": None}
    assert second["commit_status"]["pending"] == []
    assert (first["spark_state_memory_bytes"], first["spark_state_sst_bytes"]) == (2_048, 1_024)
    assert first["latency_s"] == 0.1 and first["state_keys"] == 5


def test_a_record_is_the_runtimes_batch_record_joined_with_sparks_progress(tmp_path):
    metrics = BatchMetrics(tmp_path / "deep" / "m.jsonl", "misa")  # its folder is made
    metrics.listener()
    metrics.follow("q")
    phases = BatchPhases(compute_s=0.25, state_read_s=0.125)
    batch = BatchRecord(input_rows=7, output_rows=3, bad_records=1, state_keys=5, phases=phases, batch_s=0.5)
    commits = (CommitRecord(version=0, bytes_uploaded=2048), CommitRecord(version=1, restarts=1))
    metrics.report(BatchReport(1, batch, commits, CommitStatus(pending=(1,), last_local=1, last_durable=0)))
    metrics.on_progress(_progress(1, [_operator(4, 100, None)]))
    [record] = [json.loads(line) for line in (tmp_path / "deep" / "m.jsonl").read_text().splitlines()]
    assert record == {
        **batch.as_dict(),
        "commit": dataclasses.asdict(commits[-1]),
        "commits_finished": [0, 1],
        "commit_status": {"pending": [1], "last_local": 1, "last_durable": 0},
        "batch_id": 1,
        "started": 1767225600.0,  # 2026-01-01T00:00:00Z
        "mode": "misa",
        "run_started": metrics.run_started,
        "spark_input_rows": 10,  # Spark's count; the runtime counted 7 records
        "latency_s": 0.1,
        "add_batch_s": 0.08,
        "spark_state_rows": 4,
        "spark_state_memory_bytes": 100,
    }
    assert record["input_rows"] == 7 and record["bad_records"] == 1 and record["phases"]["state_read_s"] == 0.125


def test_without_the_runtimes_side_spark_counts_the_input_and_nothing_is_written_without_a_path():
    echoed: list[dict] = []
    metrics = BatchMetrics(None, "native", echo=echoed.append)
    metrics.follow("q")
    metrics.add(4)  # plain Spark: no record of the runtime's
    metrics.on_progress(_progress(4))
    assert [(r["batch_id"], r["input_rows"], r["spark_input_rows"], r["mode"]) for r in echoed] == [
        (4, 10, 10, "native")
    ]
    assert "phases" not in echoed[0] and "commit" not in echoed[0] and echoed[0]["run_started"] is None


def test_listeners_hear_reported_batches_only_and_a_failing_listener_stops_nothing(tmp_path, caplog):
    metrics = BatchMetrics(tmp_path / "m.jsonl", "misa")
    metrics.follow("q")
    heard: list[tuple[int, int]] = []

    def failing(report, progress):
        raise RuntimeError("listener bug")

    metrics.add_listener(failing)
    metrics.add_listener(lambda report, progress: heard.append((report.batch_id, progress.batchId)))
    metrics.report(BatchReport(0, BatchRecord(input_rows=1)))
    metrics.add(1)  # added, not reported: no listener call
    with caplog.at_level(logging.ERROR, logger="misa.obs.metrics"):
        metrics.on_progress(_progress(0))
        metrics.on_progress(_progress(1))
    assert heard == [(0, 0)] and metrics.last is not None and metrics.last.batch_id == 0
    assert [r.getMessage() for r in caplog.records] == [f"batch listener {failing!r} failed on batch 0"]
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 2


def test_wait_reported_returns_once_spark_reported_every_batch():
    metrics = BatchMetrics(None, "misa")
    metrics.follow("q")
    metrics.add(0)
    started = time.monotonic()
    metrics.wait_reported(timeout_s=0.05)  # batch 0 is still pending: only the timeout ends the wait
    assert time.monotonic() - started >= 0.05
    threading.Timer(0.05, metrics.on_progress, [_progress(0)]).start()
    started = time.monotonic()
    metrics.wait_reported(timeout_s=10)
    assert time.monotonic() - started < 5
    started = time.monotonic()
    metrics.wait_reported(timeout_s=10)  # nothing pending: at once
    assert time.monotonic() - started < 1


def test_the_listener_passes_sparks_progress_events_on(tmp_path):
    metrics = BatchMetrics(tmp_path / "m.jsonl", "misa")
    metrics.follow("q")
    listener = metrics.listener()
    metrics.follow("q")
    listener.onQueryStarted(None)
    listener.onQueryProgress(SimpleNamespace(progress=_progress(9)))
    listener.onQueryIdle(None)
    listener.onQueryTerminated(None)
    assert [json.loads(line)["batch_id"] for line in (tmp_path / "m.jsonl").read_text().splitlines()] == [9]


def test_the_summary_line_shows_the_phases_the_commit_and_late_and_dropped_rows():
    record = {
        "batch_id": 12,
        "input_rows": 3_000,
        "latency_s": 1.234,
        "phases": {"compute_s": 0.5, "state_read_s": 0.25, "state_apply_s": 0.125, "ack_wait_s": 0.002},
        "commit": {"version": 11, "bytes_uploaded": 10 * 1024},
        "late_rows": 4,
        "dropped_rows": 0,
    }
    assert summary_line(record) == (
        "batch   12 | rows    3000 | latency   1234 ms | compute   500 ms | state read   250 ms | "
        "apply   125 ms | ack wait    2 ms | committed v11 (10 KiB up) | late 4"
    )


def test_progress_of_another_query_is_left_out_and_progress_before_the_id_is_known_is_kept(tmp_path):
    metrics = BatchMetrics(tmp_path / "m.jsonl", "misa", None)
    metrics.listener()  # a new run: its query's id is not known yet
    metrics.on_progress(_progress(0))  # before start() returned the query's id
    metrics.on_progress(SimpleNamespace(**{**vars(_progress(0)), "id": "other", "numInputRows": 99}))
    metrics.follow("q")
    metrics.on_progress(SimpleNamespace(**{**vars(_progress(1)), "id": "other", "numInputRows": 99}))
    metrics.on_progress(_progress(1))
    records = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [(r["batch_id"], r["spark_input_rows"]) for r in records] == [(0, 10), (1, 10)]
