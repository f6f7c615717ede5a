"""``misa bench kafka``: its records, latencies, lag, sustained verdict and output check (fast), and a seconds-long
run of every engine on the project's broker (slow)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pyarrow as pa
import pytest

from bench import kafka as bench


def test_every_fifth_record_repeats_the_one_before_it_but_for_its_produce_time():
    a, b = bench.record(3, 100, 10, 111), bench.record(4, 100, 10, 222)
    assert {**a, "p": 0} == {**b, "p": 0} and (a["p"], b["p"]) == (111, 222)
    assert bench.record(5, 100, 10, 0)["t"] == bench.BASE_MS + 50  # event time by position, not by the clock


def _window_rows(starts, users, counts, newest):
    window = pa.StructArray.from_arrays(
        [pa.array(starts, pa.timestamp("us", "UTC")), pa.array([s + 10_000_000 for s in starts], pa.timestamp("us"))],
        ["start", "end"],
    )
    return pa.table({"window": window, "user": users, "n": pa.array(counts, pa.int64()), "newest_p": newest})


def test_latency_is_the_sink_time_minus_the_newest_produce_time_of_a_row():
    deliveries = [
        (1_000.0, _window_rows([0, 0], ["a", "b"], [1, 2], [900, 700])),
        (2_000.0, _window_rows([0], ["a"], [3], [1_950])),
    ]
    assert sorted(bench.latencies(deliveries, ("newest_p",), 0)) == [50, 100, 300]
    assert sorted(bench.latencies(deliveries, ("newest_p",), 800)) == [50, 100]  # warm-up rows left out


def test_final_rows_keep_the_largest_count_per_window_and_key_without_produce_times():
    misa = [(1.0, _window_rows([0, 0], ["a", "b"], [1, 2], [1, 1])), (2.0, _window_rows([0], ["a"], [3], [2]))]
    final = bench.final_rows(misa, "tumbling")
    assert final.column_names == ["n", "user", "window_end", "window_start"]
    assert sorted(final.to_pylist(), key=lambda r: r["user"]) == [
        {"n": 3, "user": "a", "window_end": 10_000, "window_start": 0},
        {"n": 2, "user": "b", "window_end": 10_000, "window_start": 0},
    ]
    # real-time mode's rows come back from its Kafka topic as JSON: window bounds in epoch ms, other int types
    realtime = [(5.0, pa.table({"window_start": [0, 0], "window_end": [10_000, 10_000], "user": ["b", "a"],
                                "n": pa.array([2, 3], pa.int32()), "newest_p": [9, 9]}))]  # fmt: skip
    runs = [bench.Run("tumbling", e, 10, "0 s") for e in ("realtime", "spark")]
    runs[0].final, runs[1].final = bench.final_rows(realtime, "tumbling"), final
    assert bench.check(runs[0], runs[1]).same
    runs[0].final = bench.final_rows(realtime[:1] + [(6.0, _window_rows([0], ["b"], [4], [9]))], "tumbling")
    assert "outputs differ" in bench.check(runs[0], runs[1]).line()


def test_a_run_whose_lag_grows_does_not_sustain_the_rate():
    def sink(lag_at):  # one delivery every 250 ms, its newest record lag_at(x) ms old
        s = bench.Sink(("newest_p",))
        for x in range(0, 20_001, 250):
            s.deliveries.append((float(x), pa.table({"newest_p": [x - lag_at(x)]})))
        return s

    steady, growing = (
        bench.Run("dedup", "misa", 10, "0 s", drained=True),
        bench.Run("dedup", "misa", 10, "0 s", drained=True),
    )
    bench.judge(steady, sink(lambda x: 300), 0, 20_000, 1, 0)
    bench.judge(growing, sink(lambda x: 300 + x // 4), 0, 20_000, 1, 0)
    assert steady.sustained and steady.p50_ms == 300
    assert not growing.sustained and growing.lag_end_ms > growing.lag_mid_ms + 1000


def test_the_cpu_of_this_process_grows_with_its_work():
    before = bench.process_cpu(set())
    sum(i * i for i in range(3_000_000))
    assert bench.process_cpu(set()) > before


@pytest.mark.slow
def test_every_engine_runs_a_tumbling_window_on_a_live_topic(spark, kafka_broker, tmp_path: Path):
    """A few seconds at 20 records/s: each engine drains, misa's and real-time mode's final results
    equal Spark's micro-batch's, and real-time mode's refusal of a session window is quoted."""
    args = argparse.Namespace(
        queries="tumbling", engines="misa,spark,realtime", rates="20", seconds=4.0, warmup=1.0, triggers="0",
        keys=10, partitions=1, work=tmp_path / "kafka",
    )  # fmt: skip
    previous = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "1")  # real-time mode: a slot per source and shuffle partition
    try:
        assert bench.bench(spark, kafka_broker, args, set()) == 0
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", previous)
    text = (tmp_path / "kafka" / "kafka.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| tumbling | 20 |")]
    rows = [row for row in rows if row.split(" | ")[2] in bench.ENGINES]  # not misa's phases
    assert [row.split(" | ")[2] for row in rows] == ["misa", "spark", "realtime"]
    assert all("| 80 |" in row for row in rows), text  # every record produced; whether 4 s sustain it is no test
    assert sum("| equal |" in row for row in rows) == 2, text
    assert "session (update): " in text and "started (not refused)" not in text.split("session (update): ")[1][:40]
