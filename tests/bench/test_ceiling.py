"""``misa bench ceiling`` and ``misa bench spark-cpu``: the deltas have Spark's columns, the state stays steady, the
phases add up, and Spark's executor CPU is read from the batches of its event log."""

from __future__ import annotations

import argparse
import json

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from bench import ceiling
from bench.ceiling_shapes import SHAPES, shape
from bench.crossover import crossovers, on_executors
from bench.spark_cpu import executor_cpu
from jobs.cluster_monitoring import QUERIES as CM_QUERIES
from jobs.cluster_monitoring import TASK_EVENTS
from jobs.linear_road import QUERIES as LR_QUERIES
from jobs.nexmark import bids_and_auctions
from jobs.schemas import LR_REPORTS, NEXMARK_EVENTS, YSB_EVENTS
from jobs.ysb import views
from misa.config import MisaConfig
from misa.parallel.routing import partition_of_rows, split
from misa.parallel.shared_arrow import share, take

UPSTREAMS = {  # each shape's job input and the job's upstream (the operator's input)
    "cm2-update": (TASK_EVENTS, CM_QUERIES["cm2"].upstream),
    "cm2-append": (TASK_EVENTS, CM_QUERIES["cm2"].upstream),
    "lr2": (LR_REPORTS, LR_QUERIES["lr2"].upstream),
    "q20": (NEXMARK_EVENTS, bids_and_auctions),
    "ysb": (YSB_EVENTS, views),
    "dedup": ("k bigint, t bigint", lambda rows: rows.withColumn("event_time", F.timestamp_millis("t"))),
    "session": ("k bigint, t bigint", lambda rows: _sessions(rows.withColumn("event_time", F.timestamp_millis("t")))),
    "join": ("k bigint, t bigint", lambda rows: _join_sides(rows.withColumn("event_time", F.timestamp_millis("t")))),
}


def _sessions(events: DataFrame) -> DataFrame:
    """The rows with the session struct Spark's analyzer adds for ``session_window(event_time, "5 seconds")``."""
    end = F.col("event_time") + F.expr("INTERVAL 5 SECONDS")
    return events.withColumn("session_window", F.struct(F.col("event_time").alias("start"), end.alias("end")))


def _join_sides(events: DataFrame) -> DataFrame:
    """Both sides of the self-join as from_query unions them (misa.query.job)."""
    sides = [
        events.select(
            F.col("k").alias("_k0"),
            F.struct(F.col("k").alias(f"{p}0"), F.col("event_time").alias(f"{p}1")).alias(f"_{p}"),
        )
        for p in "lr"
    ]
    left = sides[0].select(F.lit(0).alias("_side"), "*", F.lit(None).cast(sides[1].schema["_r"].dataType).alias("_r"))
    right = sides[1].select(F.lit(1).alias("_side"), "*", F.lit(None).cast(sides[0].schema["_l"].dataType).alias("_l"))
    return left.unionByName(right)


def _types(schema: pa.Schema) -> list[tuple[str, pa.DataType]]:
    return [(f.name, f.type) for f in schema]


@pytest.mark.slow  # the bench's own check (16 s of Spark in make test): run with the bench, -m slow
@pytest.mark.parametrize("name", SHAPES)
def test_the_deltas_have_the_columns_spark_gives_the_operator(spark, name: str) -> None:
    bench = shape(name, keys=1000, deltas_per_batch=100)
    events, upstream = UPSTREAMS[name]
    from_spark = bench.operator.deltas(upstream(spark.createDataFrame([], events))).toArrow()
    assert _types(bench.batch(0).schema) == _types(from_spark.schema)


@pytest.mark.parametrize("name", SHAPES)
def test_a_shape_runs_its_operator_over_a_steady_state(tmp_path, name: str) -> None:
    args = argparse.Namespace(warmup=1, batches=3)
    record = ceiling.measure(shape(name, keys=4000, deltas_per_batch=400), MisaConfig(), tmp_path, args)
    assert record["deltas"] > 900
    phases = record["phases_cpu_us_per_delta"]
    assert phases["read"] > 0 and phases["merge"] > 0 and phases["checkpoint"] > 0 and phases["upload"] > 0
    total = sum(phases.values()) + record["unattributed_cpu_us_per_delta"]
    assert total == pytest.approx(record["cpu_us_per_delta"], rel=0.02, abs=0.05)
    assert record["batch_thread_cpu_us_per_delta"] <= record["cpu_us_per_delta"] * 1.05
    if name != "q20":  # q20's auctions never expire: its state grows by the new ones
        assert 0.5 < record["state_keys_after"] / record["state_keys_before"] < 1.6


def test_the_command_prints_a_record_per_shape_and_size(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # a relative --work, as the docs' commands give it
    parser = argparse.ArgumentParser()
    ceiling.add_parser(parser.add_subparsers())
    args = parser.parse_args(
        [
            "ceiling",
            "--shape",
            "lr2",
            "--keys",
            "2000,3000",
            "--deltas",
            "200",
            "--batches",
            "1",
            "--work",
            "scratch",
        ]
    )
    assert args.func(args) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["shape"], r["keys"]) for r in records] == [("lr2", 2000), ("lr2", 3000)]
    args = parser.parse_args(["ceiling", "--shape", "cm3"])
    assert args.func(args) == 2
    assert "--shape cm3" in capsys.readouterr().err


def test_executor_cpu_sums_the_tasks_of_batches_after_the_warmup(tmp_path) -> None:
    log = tmp_path / "eventlog_v2_app" / "events_1_app"
    log.parent.mkdir()
    events = [
        {"Event": "SparkListenerJobStart", "Stage IDs": [0, 1], "Properties": {"streaming.sql.batchId": "0"}},
        {"Event": "SparkListenerJobStart", "Stage IDs": [2], "Properties": {"streaming.sql.batchId": "2"}},
        {"Event": "SparkListenerJobStart", "Stage IDs": [3], "Properties": {}},  # not a batch's job
        {"Event": "SparkListenerTaskEnd", "Stage ID": 1, "Task Metrics": {"Executor CPU Time": 5_000_000_000}},
        {"Event": "SparkListenerTaskEnd", "Stage ID": 2, "Task Metrics": {"Executor CPU Time": 1_500_000_000}},
        {"Event": "SparkListenerTaskEnd", "Stage ID": 2, "Task Metrics": {"Executor CPU Time": 500_000_000}},
        {"Event": "SparkListenerTaskEnd", "Stage ID": 3, "Task Metrics": {"Executor CPU Time": 9_000_000_000}},
    ]
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert executor_cpu(tmp_path, warmup=1) == (2.0, 2)
    assert executor_cpu(tmp_path, warmup=0) == (7.0, 3)


def test_the_crossover_is_the_driver_rate_times_sparks_cpu_per_record() -> None:
    ceiling = [
        {"shape": "lr2", "keys": 1000, "cpu_us_per_delta": 99.0, "batch_thread_cpu_us_per_delta": 99.0},
        {"shape": "lr2", "keys": 10**7, "cpu_us_per_delta": 12.0, "batch_thread_cpu_us_per_delta": 4.0},
    ]
    spark = [
        {"query": "lr2", "mode": "native", "executor_cpu_us_per_record": 80.0},
        {"query": "lr2", "mode": "misa", "executor_cpu_us_per_record": 5.0, "deltas_per_record": 0.5},
        {"query": "cm2", "mode": "native", "executor_cpu_us_per_record": 60.0},  # no ceiling record: left out
    ]
    rows = crossovers(ceiling, spark, [2, 16], keys=None)
    assert [(r["query"], r["driver_cores"], r["state_keys"]) for r in rows] == [("lr2", 2, 10**7), ("lr2", 16, 10**7)]
    two, sixteen = rows
    assert two["records_per_s"] == round(2 * 1e6 / 6.0)  # 2 cores: all threads' 6 us per record bound it
    assert sixteen["records_per_s"] == round(1e6 / 2.0)  # 16 cores: the batch thread's 2 us per record does
    assert sixteen["crossover_executor_cores"] == 40.0 and sixteen["misa_spark_part_executor_cores"] == 2.5


def test_with_the_state_on_the_executors_misa_and_spark_share_the_cluster_cores() -> None:
    """Per record misa spends its Spark part plus the deltas' state phase and transport on the executors: E C cores
    give the rate, unless each host's batch thread is the bound; Spark's store needs rate x its CPU per record."""
    ceiling = [
        {"shape": "lr2", "keys": 10**7, "cpu_us_per_delta": 12.0, "batch_thread_cpu_us_per_delta": 1.0},
        {"shape": "lr2", "keys": 10**6, "partitions": 2, "cpu_us_per_delta": 30.0, "transport_cpu_us_per_delta": 2.0},
    ]
    spark = [
        {"query": "lr2", "mode": "native", "executor_cpu_us_per_record": 80.0},
        {"query": "lr2", "mode": "misa", "executor_cpu_us_per_record": 5.0, "deltas_per_record": 0.5},
    ]
    assert crossovers(ceiling, spark, [2], keys=None)[0]["state_keys"] == 10**7  # a partitions record is no driver's
    [small] = on_executors(ceiling, spark, [2], cores=8, keys=None)
    assert small["misa_cpu_us_per_record"] == 5.0 + 0.5 * (12.0 + 2.0) == 12.0
    assert small["records_per_s"] == round(2 * 8 * 1e6 / 12.0)  # the cores bound it
    assert small["spark_cores_over_misa_cores"] == round(80.0 / 12.0, 2) and small["misa_executor_cores_busy"] == 16.0
    [large] = on_executors(ceiling, spark, [2], cores=32, keys=None)
    assert large["records_per_s"] == round(2 * 1e6 / (0.5 * 1.0))  # each host's batch thread bounds it
    assert large["misa_executor_cores_busy"] == 48.0 < 64 and large["spark_cores_over_misa_cores"] == round(80 / 12, 2)
    assert on_executors(ceiling[:1], spark, [2], cores=8, keys=None) == []  # no transport measured: no row


@pytest.mark.parametrize("name", ["cm2-update", "lr2", "q20"])
def test_the_runtimes_routing_splits_a_shapes_deltas_by_key_without_losing_a_row(name: str) -> None:
    bench = shape(name, keys=500, deltas_per_batch=300)
    batch = bench.batch(0)
    partition = partition_of_rows(bench.operator.partition_key_reader()(batch), batch.num_rows, 3)
    parts = [take(share(part)) for part in split(batch, partition, 3)]
    rows = sorted(map(repr, batch.to_pylist()))
    assert sorted(repr(row) for part in parts for row in part.to_pylist()) == rows
    owner: dict = {}
    for index, part in enumerate(parts):
        for row in part.to_pylist():
            if name == "q20":
                key = row["bid"]["auction"] if row["bid"] else row["auction"]["id"]
            else:
                key = row["job_id" if name.startswith("cm2") else "vid"]
            assert owner.setdefault(key, index) == index  # all rows of a key go to one partition
    assert len(set(owner.values())) == 3
    assert ceiling.routing_cost(bench, 3, 1) > 0


def test_partitions_run_in_their_own_processes_and_count_every_delta(tmp_path) -> None:
    args = argparse.Namespace(warmup=0, batches=1, deltas=400.0, seed=7, partitions=2)
    record = ceiling.measure_partitions("lr2", 2000, MisaConfig(), tmp_path, args)
    assert record["partitions"] == 2 and len(record["per_partition"]) == 2
    assert record["deltas"] == sum(p["deltas"] for p in record["per_partition"]) == 400
    assert {p["keys"] for p in record["per_partition"]} == {1000}
    assert record["routing_cpu_us_per_delta"] > 0 and record["wall_deltas_per_s"] > 0
    assert record["transport_cpu_us_per_delta"] > 0 and record["host_over_worker"] > 0


def test_the_transport_to_the_hosts_delivers_every_delta_to_its_partitions_host(monkeypatch) -> None:
    """The transport the bench measures is the executors placement's: each row in its partition's host's inbox."""
    bench = shape("cm2-update", keys=1000, deltas_per_batch=500)
    taken: list[pa.Table] = []
    original = ceiling.HostTables.take
    monkeypatch.setattr(ceiling.HostTables, "take", lambda self, ref: taken.append(original(self, ref)) or taken[-1])
    sent: list[int] = []
    send = ceiling.send_rows

    def counted(sending, partition, attempt, batches):
        batches = list(batches)
        sent.append(sum(b.num_rows for b in batches))
        return send(sending, partition, attempt, iter(batches))

    monkeypatch.setattr(ceiling, "send_rows", counted)
    assert ceiling.transport_cost(bench, 2, 1) > 0
    assert len(taken) == 2 and sum(t.num_rows for t in taken) == sum(sent) > 400
    for host, table in enumerate(taken):  # every row in its key partition's host
        keys = bench.operator.partition_key_reader()(table)
        assert set(ceiling.partition_of_rows(keys, table.num_rows, 2).tolist()) == {host}
