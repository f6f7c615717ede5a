"""The runtime's metrics where Spark users look: the job's Python API, its batch listener, the Prometheus
endpoint, and what reaches Spark's own progress, each read in a real query (local Spark, availableNow)."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from urllib.error import URLError
from urllib.request import urlopen

import pytest
from pyspark.sql import functions as F

from misa.config import MisaConfig
from misa.exceptions import ConfigError
from misa.job import StatefulJob
from misa.obs.records import BATCH_PHASES, CommitStatus
from misa.operators.aggregation import Agg, Aggregation
from services.ports import free_port

ROWS_PER_FILE, KEYS = 30, 5


def _input(spark, path: Path, files: int = 2) -> None:
    """``files`` Parquet files of ROWS_PER_FILE rows over KEYS keys, one batch each."""
    for i in range(files):
        rows = spark.range(i * ROWS_PER_FILE, (i + 1) * ROWS_PER_FILE)
        rows.select((F.col("id") % KEYS).alias("k"), F.col("id").cast("double").alias("x")).coalesce(1).write.mode(
            "append"
        ).parquet(str(path))


def _stream(spark, path: Path):
    return spark.readStream.schema("k long, x double").option("maxFilesPerTrigger", 1).parquet(str(path))


def _job(tmp_path: Path, **conf: str) -> StatefulJob:
    config = MisaConfig.from_mapping({"spark.misa.state.shards": "2", **conf})
    return StatefulJob(
        Aggregation(["k"], [Agg("n", "count", "x")]),
        lambda batch_id, table: None,
        str(tmp_path / "ckpt"),
        config=config,
        metrics_path=str(tmp_path / "metrics.jsonl"),
        echo=None,
    )


@pytest.mark.parametrize("mode", [pytest.param("sync", marks=pytest.mark.slow), "misa"])
def test_last_batch_commit_status_and_listener_in_a_real_query(spark, tmp_path, mode):
    _input(spark, tmp_path / "in")
    job = _job(tmp_path, **{"spark.misa.commit.mode": mode})
    heard: list = []
    job.add_listener(lambda report, progress: heard.append((report, progress)))
    assert job.last_batch() is None
    try:
        stream = _stream(spark, tmp_path / "in").observe("input", F.count(F.lit(1)).alias("rows"))
        query = job.start(spark, stream, {"availableNow": True})
        query.awaitTermination()
        last, running = job.last_batch(), job.commit_status()
    finally:
        job.close(spark)
    assert last is not None and last.batch_id == 1
    assert (last.record.input_rows, last.record.output_rows) == (ROWS_PER_FILE, KEYS)
    assert last.record.state_keys > 0 and last.record.state_bytes > 0
    assert set(vars(last.record.phases)) == {f"{p}" for p in BATCH_PHASES}
    assert last.record.phases.compute_s > 0 and last.record.batch_s >= sum(vars(last.record.phases).values())
    if mode == "sync":  # the whole commit ran inline: nothing pending at the batch's end
        assert last.commit_status == CommitStatus((), 1, 1) and running == CommitStatus((), 1, 1)
        assert [c.version for c in last.commits] == [1]
    else:  # batch 1 waited for ack 2 of version 0; its own commit runs in the background
        assert last.commit_status.last_durable in (0, 1) and set(last.commit_status.pending) <= {1}
        assert set(running.pending) <= {1} and running.last_durable in (0, 1)
    assert job.commit_status() == CommitStatus((), 1, 1)  # close made everything durable
    # the listener heard each batch once, with Spark's progress of the same batch
    assert [(report.batch_id, progress.batchId) for report, progress in heard] == [(0, 0), (1, 1)]
    assert heard[-1][0] is last
    # Spark's progress: the metrics observed on the stream before the runtime, and misa's operator beside them
    observed = query.lastProgress["observedMetrics"]
    assert sorted(observed) == ["input", "misa"] and observed["input"]["rows"] == ROWS_PER_FILE
    assert [op.operatorName for op in query.lastProgress["stateOperators"]] == ["misa:Aggregation"]
    assert observed["misa"]["misaOutputRows"] == KEYS

    restarted = _job(tmp_path, **{"spark.misa.commit.mode": mode})  # no new input: recovery only
    try:
        restarted.start(spark, _stream(spark, tmp_path / "in"), {"availableNow": True}).awaitTermination()
        assert restarted.last_batch() is None
        assert restarted.commit_status() == CommitStatus((), 1, 1)
    finally:
        restarted.close(spark)


def test_a_failing_listener_is_logged_and_the_query_goes_on(spark, tmp_path, caplog):
    _input(spark, tmp_path / "in", files=1)
    job = _job(tmp_path)
    heard: list[int] = []

    def broken(report, progress):
        raise RuntimeError("listener bug")

    job.add_listener(broken)
    job.add_listener(lambda report, progress: heard.append(report.batch_id))
    try:
        job.start(spark, _stream(spark, tmp_path / "in"), {"availableNow": True}).awaitTermination()
    finally:
        job.close(spark)
    assert heard == [0]
    assert "batch listener" in caplog.text and "listener bug" in caplog.text


def _samples(text: str, query: str) -> dict[tuple[str, str], float]:
    """``(sample name, phase label or "")`` -> value for the ``query``'s misa_* samples."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("misa_") and sample.labels.get("query") == query:
                out[sample.name, sample.labels.get("phase", "")] = sample.value
    return out


def test_prometheus_endpoint_serves_the_jobs_own_numbers(spark, tmp_path):
    from prometheus_client import REGISTRY

    _input(spark, tmp_path / "in")
    port = free_port()
    job = _job(tmp_path, **{"spark.misa.metrics.prometheusPort": str(port), "spark.misa.prefetch.enabled": "true"})
    try:
        query = job.start(spark, _stream(spark, tmp_path / "in"), {"availableNow": True}, query_name="prom_q")
        query.awaitTermination()
        with urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            got = _samples(response.read().decode(), "prom_q")
        last = job.last_batch()
    finally:
        job.close(spark)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    total = lambda group, name: sum(r[group].get(name, 0) for r in records)  # noqa: E731

    assert last is not None and len(records) == 2
    assert got["misa_batch_id", ""] == last.batch_id == 1
    assert got["misa_batches_total", ""] == 2
    assert got["misa_input_rows_total", ""] == 2 * ROWS_PER_FILE
    assert got["misa_output_rows_total", ""] == 2 * KEYS
    assert got["misa_state_keys", ""] == last.record.state_keys
    assert got["misa_state_bytes", ""] == last.record.state_bytes > 0
    for phase in BATCH_PHASES:
        assert got["misa_last_batch_phase_seconds", phase[:-2]] == pytest.approx(getattr(last.record.phases, phase))
        assert got["misa_batch_phase_seconds_count", phase[:-2]] == 2
        assert got["misa_batch_phase_seconds_sum", phase[:-2]] == pytest.approx(
            sum(r["phases"][phase] for r in records)
        )
    status = last.commit_status
    assert got["misa_commit_versions_pending", ""] == status.lag
    assert got["misa_commit_last_durable_version", ""] == status.last_durable
    assert got["misa_commit_last_local_version", ""] == status.last_local
    assert got["misa_commits_total", ""] == sum(len(r.get("commits_finished", [])) for r in records)
    for name in ("hits", "misses", "evictions", "prefetched_entries"):
        assert got[f"misa_cache_{name}_total", ""] == total("cache", name)
    for name in ("hints", "prefetched", "prefetch_hits", "wasted_prefetches", "late_hints", "fallback_fetches"):
        assert got[f"misa_prefetch_{name}_total", ""] == total("prefetch", name)
    assert got["misa_prefetch_hints_total", ""] > 0 and got["misa_cache_hits_total", ""] > 0
    # Spark's latency arrives with its progress; close waited for it
    assert REGISTRY.get_sample_value("misa_batch_latency_seconds_count", {"query": "prom_q"}) == 2
    assert REGISTRY.get_sample_value("misa_batch_latency_seconds_sum", {"query": "prom_q"}) == pytest.approx(
        sum(r["latency_s"] for r in records)
    )
    with pytest.raises(URLError):  # the endpoint stopped with the job
        urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)


def test_a_missing_prometheus_extra_fails_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # what an install without the extra has
    with pytest.raises(ConfigError) as err:
        _job(tmp_path, **{"spark.misa.metrics.prometheusPort": "9108"})
    assert str(err.value) == (
        "spark.misa.metrics.prometheusPort=9108 needs the prometheus_client library, which is not installed: "
        "pip install 'misa-pyspark[prometheus]'"
    )
    assert not (tmp_path / "ckpt").exists()  # no state opened


def test_a_busy_prometheus_port_fails_at_start_naming_the_key(spark, tmp_path):
    (tmp_path / "in").mkdir()
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        job = _job(tmp_path, **{"spark.misa.metrics.prometheusPort": str(port)})
        try:
            with pytest.raises(ConfigError, match=rf"^spark\.misa\.metrics\.prometheusPort={port}: cannot serve"):
                job.start(spark, _stream(spark, tmp_path / "in"), {"availableNow": True})
        finally:
            job.close(spark)
    assert spark.streams.active == []


def test_two_jobs_in_one_driver_each_record_only_their_own_batches(spark, tmp_path):
    """Every listener hears every query of the session: each job keeps its query's batches (2 files and 3 files)."""
    jobs, queries = [], []
    for name, files in (("a", 2), ("b", 3)):
        _input(spark, tmp_path / name / "in", files)
        job = _job(tmp_path / name)
        jobs.append(job)
        queries.append(job.start(spark, _stream(spark, tmp_path / name / "in"), {"availableNow": True}))
    try:
        for query in queries:
            query.awaitTermination()
    finally:
        for job in jobs:
            job.close(spark)
    for name, files in (("a", 2), ("b", 3)):
        records = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        assert [r["batch_id"] for r in records] == list(range(files)), name
        assert all(r["input_rows"] == ROWS_PER_FILE and r["output_rows"] == KEYS for r in records), name
