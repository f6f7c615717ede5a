"""The parts of the state workers without Spark: routing, shared memory, the partition layout, merged records,
recovery over partitions that disagree, and a worker's crash."""

import math
import os
import signal
import time
from multiprocessing import shared_memory

import numpy as np
import pyarrow as pa
import pytest
from state_helpers import fill

from misa.config import MisaConfig
from misa.exceptions import ConfigError, StateWorkerError
from misa.job import StatefulJob
from misa.obs.records import CommitRecord
from misa.operators.aggregation import Agg, Aggregation
from misa.operators.lookup_aggregation import LookupAggregation
from misa.parallel.layout import auto_processes, partition_count, partition_locations, record_partitions
from misa.parallel.partitioned import PartitionedStore, merged
from misa.parallel.routing import partition_of_rows, split
from misa.parallel.shared_arrow import share, take
from misa.runtime.recovery import reconcile
from misa.state.store import StateStore


def test_equal_keys_meet_in_one_partition_whatever_their_float_form():
    floats = pa.array([0.0, -0.0, math.nan, -math.nan, 1.5, None, 1.5], pa.float64())
    ints = pa.array([7, 7, 7, 7, 7, None, 7], pa.int64())
    part = partition_of_rows([floats, ints], 7, 5)
    assert part[0] == part[1] and part[2] == part[3] and part[4] == part[6]
    spread = partition_of_rows([pa.array([f"k{i}" for i in range(1000)])], 1000, 4)
    assert sorted(np.bincount(spread, minlength=4)) == sorted(np.bincount(spread)) and min(np.bincount(spread)) > 180
    assert partition_of_rows([], 3, 4).tolist() == [0, 0, 0]  # no key columns: one key


def test_split_keeps_every_row_once_in_its_order():
    table = pa.table({"k": [3, 1, 3, 2, 1], "i": [0, 1, 2, 3, 4]})
    partition = np.array([1, 0, 1, 2, 0])
    parts = split(table, partition, 3)
    assert [p["i"].to_pylist() for p in parts] == [[1, 4], [0, 2], [3]]
    assert [p.num_rows for p in split(table.slice(0, 0), np.zeros(0, np.int64), 2)] == [0, 0]


def test_a_shared_table_comes_back_whole_and_its_segment_is_gone():
    table = pa.table({"s": ["a", None, "ü"], "x": [1.0, 2.0, None]})
    shared = share(table)
    assert take(shared).equals(table)
    with pytest.raises(FileNotFoundError):
        shared_memory.SharedMemory(name=shared.name)


def test_the_partition_count_is_the_states(config, tmp_path):
    state, dfs = tmp_path / "state", f"file://{tmp_path / 'dfs'}"
    two = config.with_values(state_processes=2)
    assert partition_count(two, state, dfs) == 2  # a new state takes the configured count
    record_partitions(dfs, 2)
    assert partition_count(config, state, dfs) == 2  # auto: the state's
    with pytest.raises(ConfigError, match=r"spark.misa.state.processes=3.*written by 2 process"):
        partition_count(config.with_values(state_processes=3), state, dfs)
    one = tmp_path / "one"
    with StateStore(config, one / "state", f"file://{one / 'dfs'}") as store:
        fill(store, 10, seed=1)
        store.checkpoint(0)
        store.checkpoints.upload_and_retain(0)
    assert partition_count(config, one / "state", f"file://{one / 'dfs'}") == 1
    with pytest.raises(ConfigError, match="spark.misa.state.processes=2"):
        partition_count(two, one / "state", f"file://{one / 'dfs'}")


def test_auto_is_the_drivers_cores_less_one_within_the_shard_count(config, monkeypatch):
    for cores, processes in ((16, 3), (3, 2), (2, 1), (1, 1), (None, 1)):  # the config fixture has 3 shards
        monkeypatch.setattr(os, "cpu_count", lambda cores=cores: cores)
        assert auto_processes(config) == processes, cores


def test_a_versions_record_over_partitions_takes_the_slowest_time_and_sums_the_counts():
    a = CommitRecord(4, apply_s=0.5, upload_s=2.0, bytes_uploaded=10, files_uploaded=2, restarts=1)
    b = CommitRecord(4, apply_s=0.7, upload_s=1.0, bytes_uploaded=5, files_uploaded=3)
    assert merged([a, b]) == CommitRecord(4, apply_s=0.7, upload_s=2.0, bytes_uploaded=15, files_uploaded=5, restarts=1)


def _operator() -> Aggregation:
    return Aggregation(["k"], [Agg("n", "count", "x")])


def _versions(config: MisaConfig, state_dir, dfs_url, durable: int, local_only: int | None = None) -> None:
    """A partition's state with versions 0..``durable`` durable (and ``local_only`` committed only locally)."""
    with StateStore(config, state_dir, dfs_url) as store:
        for version in range(durable + 1):
            fill(store, 20, seed=version, start=version * 20)
            store.checkpoint(version)
            store.checkpoints.upload_and_retain(version)
        if local_only is not None:
            fill(store, 20, seed=99, start=999)
            store.checkpoint(local_only)


def _spark_log(ckpt, committed: int) -> None:
    for folder in ("commits", "offsets"):
        (ckpt / folder).mkdir(parents=True, exist_ok=True)
        for batch_id in range(committed + 1):
            (ckpt / folder / str(batch_id)).write_text("v1\n{}")


def test_recovery_loads_the_newest_version_every_partition_holds(config, tmp_path):
    """Partition 0 made version 3 durable, partition 1 only 2 (its 3 is local): Spark committed 3, so both continue
    from 3 (partition 1 uploads its local 3 first). Then partition 1 loses its local 3: Spark replays batch 3 and
    partition 0 rolls back to 2."""
    state, dfs = tmp_path / "state", f"file://{tmp_path / 'dfs'}"
    (p0_dir, p0_dfs), (p1_dir, p1_dfs) = partition_locations(state, dfs, 2)
    _versions(config, p0_dir, p0_dfs, durable=3)
    _versions(config, p1_dir, p1_dfs, durable=2, local_only=3)
    record_partitions(dfs, 2)
    _spark_log(tmp_path / "ckpt", committed=3)
    store = PartitionedStore(config, _operator(), state, dfs, 2)
    try:
        assert reconcile(store, str(tmp_path / "ckpt")) == 3
        assert store.checkpoints.newest_durable() == 3  # partition 1's local 3 was uploaded before recovery
        assert store.approximate_keys() > 0
    finally:
        store.close()
    second = tmp_path / "second"
    (q0_dir, q0_dfs), (q1_dir, q1_dfs) = partition_locations(second / "state", f"file://{second / 'dfs'}", 2)
    _versions(config, q0_dir, q0_dfs, durable=3)
    _versions(config, q1_dir, q1_dfs, durable=2)
    _spark_log(second / "ckpt", committed=3)
    store = PartitionedStore(config, _operator(), second / "state", f"file://{second / 'dfs'}", 2)
    try:
        assert reconcile(store, str(second / "ckpt")) == 2
        assert store.checkpoints.newest_durable() == 2
        assert store.pool.ask("call", "checkpoints", "newest_durable") == [2, 2]  # partition 0's 3 is forgotten
        assert not (second / "ckpt" / "commits" / "3").exists()  # Spark replays batch 3
    finally:
        store.close()


def test_a_killed_worker_fails_the_request_then_a_restart_brings_every_worker_back(config, tmp_path):
    store = PartitionedStore(config, _operator(), tmp_path / "state", f"file://{tmp_path / 'dfs'}", 2)
    try:
        os.kill(store.pool.pids[1], signal.SIGKILL)
        with pytest.raises(StateWorkerError, match=r"state worker 1 .* was killed by SIGKILL while answering"):
            store.approximate_keys()
        with pytest.raises(StateWorkerError):  # and every request after it, until the restart
            store.checkpoints.newest_durable()
        store.pool.restart()
        assert store.checkpoints.newest_durable() is None
        assert all(pid is not None and pid != os.getpid() for pid in store.pool.pids)
    finally:
        store.close()


def test_a_stopped_worker_fails_the_request_within_the_liveness_timeout(config, tmp_path):
    """A worker alive but not answering (SIGSTOP) fails the request once it misses a ping, naming it."""
    config = config.with_values(state_liveness_timeout_s=1.0)
    store = PartitionedStore(config, _operator(), tmp_path / "state", f"file://{tmp_path / 'dfs'}", 2)
    stopped = store.pool.pids[1]
    try:
        os.kill(stopped, signal.SIGSTOP)
        asked = time.monotonic()
        with pytest.raises(StateWorkerError, match=rf"state worker 1 \(pid {stopped}, .* did not answer a liveness"):
            store.approximate_keys()
        assert time.monotonic() - asked < 10
    finally:
        os.kill(stopped, signal.SIGKILL)
        store.close()


def test_an_operator_that_does_not_split_by_key_is_refused_with_the_key_to_set(config, tmp_path):
    """YSB's lookup aggregation looks a key up and aggregates by the value found: no delta column picks its state."""
    operator = LookupAggregation("ad_id", Aggregation(["campaign_id"], [Agg("n", "count", "x")]), lookup=None)
    with pytest.raises(ConfigError, match=r"processes=2, but LookupAggregation .* set spark.misa.state.processes=1"):
        StatefulJob(operator, lambda b, t: None, str(tmp_path / "ckpt"), config=config.with_values(state_processes=2))
    assert not (tmp_path / "ckpt" / "misa-state" / "partitions.json").exists()
