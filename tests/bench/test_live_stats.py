"""The live benchmark's figures from a run's own records: Spark's file source log, the metrics, the arrivals."""

import argparse
import json

import numpy as np
import pytest

from bench.live import Variant
from bench.live_stats import (
    Arrival,
    after_kill,
    backlog_at,
    batch_ends,
    batch_latency,
    end_to_end,
    file_batches,
    prefetch_per_batch,
    weighted_percentile,
)
from misa.obs.records import PREFETCH_COUNTERS
from prefetch.manager import PrefetchStats


def source_log(checkpoint, batches: dict[int, list[str]], compact_through: int | None = None) -> None:
    """Spark's file source log: entry N lists batch N's files; ``N.compact`` repeats every entry up to N."""
    folder = checkpoint / "sources" / "0"
    folder.mkdir(parents=True)
    for batch, names in batches.items():
        lines = ["v1"] + [json.dumps({"path": f"file:///in/{n}", "timestamp": 0, "batchId": batch}) for n in names]
        if compact_through is not None and batch <= compact_through:
            continue
        (folder / str(batch)).write_text("\n".join(lines))
    if compact_through is not None:
        lines = ["v1"] + [
            json.dumps({"path": f"file:///in/{n}", "timestamp": 0, "batchId": b})
            for b, names in batches.items()
            if b <= compact_through
            for n in names
        ]
        (folder / f"{compact_through}.compact").write_text("\n".join(lines))
    (folder / ".0.crc").write_text("ignored")


def test_each_file_gets_the_batch_that_read_it_from_plain_and_compact_entries(tmp_path):
    source_log(tmp_path, {0: ["a"], 1: ["b", "c"], 2: ["d"]}, compact_through=1)
    assert file_batches(tmp_path) == {"a": 0, "b": 1, "c": 1, "d": 2}
    assert file_batches(tmp_path / "missing") == {}


def test_end_to_end_runs_from_arrival_to_the_end_of_the_batch_and_unfinished_files_count_until_the_stop(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(
        "\n".join(
            json.dumps({"batch_id": b, "started": s, "latency_s": d}) for b, s, d in [(0, 100.0, 1.0), (1, 103.0, 2.5)]
        )
    )
    ends = batch_ends(metrics)
    assert ends == {0: 101.0, 1: 105.5}
    arrivals = [Arrival("a", 99.0, 10), Arrival("b", 100.5, 30), Arrival("c", 104.0, 60)]
    latency, records = end_to_end(arrivals, {"a": 0, "b": 1}, ends, stopped=110.0)
    assert latency.tolist() == [2.0, 5.0, 6.0] and records.tolist() == [10, 30, 60]
    assert weighted_percentile(latency, records, 50) == 6.0  # 60 of the 100 records waited 6 s
    assert weighted_percentile(latency, records, 10) == 2.0
    assert backlog_at(arrivals, {"a": 0, "b": 1}, ends, when=104.5) == (2, 90)  # b's batch ends at 105.5; c waits
    assert backlog_at(arrivals, {"a": 0, "b": 1}, ends, when=100.0) == (1, 10)


def test_weighted_percentile_of_nothing_is_none():
    assert weighted_percentile(np.array([]), np.array([]), 99) is None
    assert weighted_percentile(np.array([1.0, 3.0]), np.array([1.0, 1.0]), 99) == pytest.approx(3.0)


def test_batch_latency_leaves_out_the_warmup_and_takes_the_largest_state_of_either_store(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    records = [
        {"batch_id": 0, "latency_s": 9.0, "state_keys": 99, "spark_state_rows": 999},
        {"batch_id": 1, "latency_s": 1.0, "spark_state_rows": 1_200_000},
        {"batch_id": 2, "latency_s": 3.0, "state_keys": 40, "phases": {"compute_s": 0.5}},
    ]
    metrics.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    stats = batch_latency(metrics, warmup=1)
    assert stats["batches"] == 2 and stats["batch_p50"] == pytest.approx(2.0)
    assert stats["state_keys"] == 40 and stats["spark_state_rows"] == 1_200_000
    assert stats["phases"]["compute_s"] == pytest.approx(0.25)


def test_prefetch_statistics_are_means_per_batch_with_the_hit_weighted_slack_and_the_batches_not_hinted_ahead():
    records = [
        {"prefetch": None},
        {"prefetch": {"prefetched": 10, "prefetch_hits": 8, "late_hints": 2, "slack_s_mean": 1.0, "slack_s_min": 0.5}},
        {"prefetch": {"prefetched": 30, "prefetch_hits": 2, "slack_s_mean": 3.0, "slack_s_min": 0.2,
                      "next_unavailable": "no new files"}},
    ]  # fmt: skip
    stats = prefetch_per_batch(records)
    assert stats["prefetched"] == 20 and stats["prefetch_hits"] == 5 and stats["late_hints"] == 1
    assert stats["slack_s_mean"] == pytest.approx((8 * 1.0 + 2 * 3.0) / 10) and stats["slack_s_min"] == 0.2
    assert stats["not_ahead"] == 1
    assert prefetch_per_batch([{"prefetch": None}, {}]) is None
    every = prefetch_per_batch([{"prefetch": PrefetchStats(hints=4, failed_prefetches=2).as_dict()}])
    assert list(every)[: len(PREFETCH_COUNTERS)] == list(PREFETCH_COUNTERS) and every["failed_prefetches"] == 2


def test_a_variant_is_a_name_and_its_settings_and_a_bad_one_says_the_form():
    assert Variant.parse("pf:spark.misa.prefetch.enabled=true,spark.misa.cache.maxBytes=16m") == Variant(
        "pf", ("spark.misa.prefetch.enabled=true", "spark.misa.cache.maxBytes=16m")
    )
    for bad in ("pf", "pf:", ":a=b", "pf:novalue"):
        with pytest.raises(argparse.ArgumentTypeError, match="NAME:KEY=VALUE"):
            Variant.parse(bad)


def test_the_minute_after_an_executor_kill_takes_the_batches_that_started_in_it(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    batches = [(0, 90.0, 1.0), (1, 100.5, 6.0), (2, 107.0, 2.0), (3, 170.0, 1.0)]  # killed at 100: 1 and 2 count
    metrics.write_text("\n".join(json.dumps({"batch_id": b, "started": s, "latency_s": d}) for b, s, d in batches))
    stats = after_kill(metrics, killed=100.0)
    assert stats["kill_batches"] == 2 and stats["kill_batch_max"] == 6.0
    assert stats["kill_batch_p99"] == pytest.approx(5.96) and stats["kill_first_batch_end_s"] == pytest.approx(6.5)
