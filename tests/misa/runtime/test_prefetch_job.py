"""Keyed prefetching in a running job: the same output with prefetching on and off, any cache policy.

Two runs of the same input may sum floats in a different order (Spark's partial aggregation), so
values are compared with a relative tolerance of 1e-9; keys and counts exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cm_helpers import assert_same_results, expected_results, run_in_process
from job_helpers import job_args, metrics, results

from jobs import cluster_monitoring
from jobs.gen.cm import generate_cm


@pytest.fixture(scope="module")
def cm_data(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("cm-prefetch-input")
    generate_cm(data, rate=250, seconds=60, seed=5, files_per_second=0.125, jobs=400)
    return data


@pytest.fixture(scope="module")
def without_prefetch(spark, cm_data, tmp_path_factory) -> dict:
    spark.conf.set("spark.misa.prefetch.enabled", "false")
    try:
        return run_in_process(spark, "cm2", "misa", cm_data, tmp_path_factory.mktemp("no-prefetch"))
    finally:
        spark.conf.unset("spark.misa.prefetch.enabled")


@pytest.mark.parametrize("policy", ["tac", *(pytest.param(p, marks=pytest.mark.slow) for p in ("lru", "clock"))])
def test_prefetching_on_and_off_give_identical_output(spark, cm_data, tmp_path, session_conf, without_prefetch, policy):
    session_conf(
        {"spark.misa.prefetch.enabled": "true", "spark.misa.cache.policy": policy, "spark.misa.cache.maxBytes": "64k"}
    )
    assert_same_results(run_in_process(spark, "cm2", "misa", cm_data, tmp_path), without_prefetch)
    records = metrics(tmp_path)
    assert sum(r["prefetch"]["prefetch_hits"] for r in records) > 0
    assert sum(r["cache"]["evictions"] for r in records) > 0  # the small cache really evicted
    # every batch read state, through the prefetch manager: the reads' time is measured and part of the batch's
    assert all(r["state_reads"] > 0 and 0 < r["phases"]["state_read_s"] < r["batch_s"] for r in records)


@pytest.mark.slow  # the suite's time (each Python source adds ~1.5 s to a query's start)
def test_lookahead_moves_to_the_filtered_stage(spark, tmp_path_factory, tmp_path, session_conf):
    """CM2's first hint stage has every event type; with many jobs, each batch's jobs that only other
    event types touch (most of them here) are wasted prefetches, so the lookahead moves to the filter (for
    hint jobs in the batch: read ahead on the driver, the hints come from the job's last stage)."""
    data = tmp_path_factory.mktemp("cm-many-jobs")
    generate_cm(data, rate=250, seconds=40, seed=6, files_per_second=0.125, jobs=20_000)
    reference = run_in_process(spark, "cm2", "misa", data, tmp_path / "no-prefetch")
    session_conf(
        {
            "spark.misa.prefetch.enabled": "true",
            "spark.misa.prefetch.wastedRatioThreshold": "0.1",
            "spark.misa.prefetch.nextBatch": "false",
        }
    )
    assert_same_results(run_in_process(spark, "cm2", "misa", data, tmp_path), reference)
    stages = [r["prefetch"]["stage"] for r in metrics(tmp_path) if r["prefetch"]]
    assert stages[0] == 0 and stages[-1] == 1, stages


@pytest.mark.slow  # the suite's time
def test_the_next_batch_hints_are_extracted_between_batches(spark, cm_data, tmp_path, session_conf, without_prefetch):
    """After the first batch, each batch's keys were prefetched before it started, from its files read
    ahead on the driver (two per batch here); with nextBatch off every batch extracts its own."""
    session_conf({"spark.misa.prefetch.enabled": "true"})
    assert_same_results(run_in_process(spark, "cm2", "misa", cm_data, tmp_path), without_prefetch)
    prefetch = [r["prefetch"] for r in metrics(tmp_path)]
    assert len(prefetch) >= 3 and "next_files" not in prefetch[0]
    assert prefetch[0]["source"] == "in-batch" and prefetch[0]["next_unavailable"] == "no extraction ahead"
    assert [p.get("next_files") for p in prefetch[1:]] == [2] * (len(prefetch) - 1)
    assert {p["source"] for p in prefetch[1:]} == {"ahead"} and {p["next_source"] for p in prefetch} == {"ahead"}
    assert {p["reader"] for p in prefetch[1:]} == {"driver"}  # read with Arrow, no hint job at all
    assert prefetch[0]["reader"] == "spark"  # the first batch's own hint job
    assert sum(p["prefetch_hits"] for p in prefetch[1:]) > 0
    session_conf({"spark.misa.prefetch.nextBatch": "false"})
    run_in_process(spark, "cm2", "misa", cm_data, tmp_path / "same-batch")
    in_batch = [r["prefetch"] for r in metrics(tmp_path / "same-batch")]
    assert not any("next_files" in p for p in in_batch)
    assert {(p["source"], p["next_unavailable"]) for p in in_batch} == {
        ("in-batch", "spark.misa.prefetch.nextBatch=false")
    }


def test_with_the_state_on_the_executors_no_hint_row_passes_the_driver(
    spark, cm_data, tmp_path, session_conf, without_prefetch, monkeypatch
):
    """On the executors every batch's hints, ahead from its files and in the batch, come from hint jobs whose tasks
    send their rows to the state host that owns each key: the driver reads no input file (the job's reader on the
    driver is left out) and holds no hint row; the output is the same. The tasks get the key columns to route by,
    not the operator: pickled while the batch changes the operator's state on another thread, it failed a batch
    with "dictionary changed size during iteration" (seen in CI)."""
    from pyspark import cloudpickle

    import misa.hosts.client
    from misa.parallel.partitioned import PartitionedHints

    monkeypatch.setattr(PartitionedHints, "hint_rows", lambda *a: pytest.fail("hint rows passed the driver"))
    sent_with: list[bytes] = []

    def send_frame(frame, locations, key, keys_of, latest_of=None, **rest):
        sent_with.append(cloudpickle.dumps(keys_of))
        return real_send_frame(frame, locations, key, keys_of, latest_of, **rest)

    real_send_frame = misa.hosts.client.send_frame
    monkeypatch.setattr(misa.hosts.client, "send_frame", send_frame)
    session_conf({"spark.misa.prefetch.enabled": "true", "spark.misa.state.placement": "executors"})
    assert_same_results(run_in_process(spark, "cm2", "misa", cm_data, tmp_path), without_prefetch)
    assert sent_with and not [p for p in sent_with if b"misa.operators" in p]
    prefetch = [r["prefetch"] for r in metrics(tmp_path)]
    assert {p["reader"] for p in prefetch} == {"spark"} and {p["source"] for p in prefetch[1:]} == {"ahead"}
    assert sum(p["hinted"] for p in prefetch) > 0 and sum(p["prefetch_hits"] for p in prefetch) > 0


@pytest.mark.parametrize("api", ["operator", pytest.param("from_query", marks=pytest.mark.slow)])  # the suite's time
def test_with_the_state_on_the_executors_large_batches_rows_pass_neither_the_driver_nor_a_spark_job_to_the_sink(
    spark, cm_data, tmp_path, session_conf, without_prefetch, monkeypatch, api
):
    """Every batch counted as large (``hostDeltasDriverRows`` and ``hostOutputDriverRows`` 0): the deltas go from
    Spark's tasks to the host, and the output never passes the driver: the host writes its Parquet file itself (no
    Spark job reads it), or, through ``from_query``, whose select of ``window.start`` above the aggregation runs in
    Spark, Spark's tasks read it from the host; the output is the same."""
    from misa.hosts.output import HostRows
    from misa.io.sink import ParquetBatchSink

    real_table = HostRows.table

    def fetched(rows: HostRows) -> Any:  # AssertionErrors: pytest.fail's BaseException would hang Spark's callback
        assert not rows.num_rows, "the driver fetched the output"
        return real_table(rows)

    real_frame = HostRows.frame

    def read_by_spark(rows: HostRows, spark: Any) -> Any:
        assert api == "from_query", "a Spark job read the output"
        return real_frame(rows, spark)

    monkeypatch.setattr(HostRows, "table", fetched)
    monkeypatch.setattr(HostRows, "frame", read_by_spark)
    spread: list[int] = []
    real_write_spread = ParquetBatchSink.write_spread
    monkeypatch.setattr(
        ParquetBatchSink, "write_spread", lambda sink, i, rows: spread.append(i) or real_write_spread(sink, i, rows)
    )
    session_conf(
        {
            "spark.misa.state.placement": "executors",
            "spark.misa.state.hostDeltasDriverRows": "0",
            "spark.misa.state.hostOutputDriverRows": "0",
        }
    )
    extra = ["--from-query"] if api == "from_query" else []
    cluster_monitoring.run(spark, cluster_monitoring.parse_args([*job_args("cm2", "misa", cm_data, tmp_path), *extra]))
    assert_same_results(results(cluster_monitoring, "cm2", tmp_path), without_prefetch)
    assert len(spread) >= 2 if api == "operator" else not spread


@pytest.mark.slow  # the suite's time (each Python source adds ~1.5 s to a query's start)
def test_auto_never_probes_reads_served_from_memory(spark, cm_data, tmp_path, session_conf, without_prefetch):
    """Reads count as worth hiding by their share here (minReadShare 0), but the state is in memory: the
    batches' reads fetch nothing from a device, so auto never tries prefetching, and each record says so."""
    session_conf({"spark.misa.prefetch.auto.minReadShare": "0", "spark.misa.prefetch.auto.patience": "1"})
    assert_same_results(run_in_process(spark, "cm2", "misa", cm_data, tmp_path), without_prefetch)
    records = metrics(tmp_path)
    assert all(0 <= r["state_device_read_bytes"] < 256 * 1024 for r in records)
    choices = [r["prefetch_auto"] for r in records]
    assert len(choices) >= 3 and {c["prefetching"] for c in choices} == {"off"}
    assert all(c["reason"].startswith("reads from memory: ") for c in choices)
    assert all(r["prefetch"] is None for r in records)


def test_auto_probes_prefetching_and_records_each_choice(spark, cm_data, tmp_path, session_conf, without_prefetch):
    """Prefetching auto in a real job: reads always count as worth hiding here (minReadShare 0, and no device
    reads needed: the state is in memory), so the first batch starts a probe of two batches with
    prefetching; every record says on or off and why, and the output is the same as without prefetching."""
    session_conf(
        {
            "spark.misa.prefetch.auto.minReadShare": "0",
            "spark.misa.prefetch.auto.minDeviceReadBytes": "0",
            "spark.misa.prefetch.auto.patience": "1",
        }
    )
    assert_same_results(run_in_process(spark, "cm2", "misa", cm_data, tmp_path), without_prefetch)
    records = metrics(tmp_path)
    choices = [r["prefetch_auto"] for r in records]
    assert len(choices) >= 3 and all(c["reason"] for c in choices)
    assert [c["prefetching"] for c in choices[:3]] == ["off", "on", "on"]
    assert choices[0]["next"] == "on" and choices[0]["reason"].startswith("probe: reads ")
    assert choices[1]["reason"] == "probing: 1/2"
    assert choices[2]["reason"].startswith("probe: prefetching ") and choices[2]["ratio"] > 0
    assert records[0]["prefetch"] is None and records[1]["prefetch"]["prefetched"] > 0
    assert all(c["cost_us_per_row"] > 0 and 0 <= c["read_share"] <= 1 for c in choices)


@pytest.mark.slow  # the suite's time
def test_append_mode_prefetches_the_records_its_closing_windows_read(spark, cm_data, tmp_path, session_conf):
    """CM2 in append mode reads, at each new watermark, the record of every key whose windows close: those keys
    come from the state's timers, not the batch's input, and are hinted with it (``due_hinted``); the output
    is the reference's."""
    session_conf({"spark.misa.prefetch.enabled": "true"})
    got = run_in_process(spark, "cm2", "misa", cm_data, tmp_path, output_mode="append")
    assert_same_results(got, expected_results(cm_data, "cm2", "append"))
    prefetch = [r["prefetch"] for r in metrics(tmp_path)]
    assert sum(p["due_hinted"] for p in prefetch) > 0
    assert all(p["due_hinted"] <= p["prefetched"] + p["hints_deduplicated"] + p["hints_renewed"] for p in prefetch)
