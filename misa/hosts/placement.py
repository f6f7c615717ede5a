"""Choosing the state's processes: the driver's worker processes, or state hosts on Spark's executors."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from common.location import parse
from misa.config import MisaConfig
from misa.exceptions import ConfigError
from misa.hosts.client import HostPool
from misa.hosts.launch import PLACEMENT_KEY
from misa.operators.base import KeyPartitioned, StatefulOperator
from misa.parallel.layout import partition_count, partition_dfs_urls, partitions_file, recorded_partitions
from misa.parallel.partitioned import PartitionedStore
from misa.parallel.pool import worker_copy

EXECUTORS = "executors"


def on_executors(config: MisaConfig) -> bool:
    """Whether the state lives on Spark's executors."""
    return config.state_placement == EXECUTORS


def executor_count(spark: SparkSession) -> int:
    """How many executors the application runs: ``spark.executor.instances``, else those registered (1 in local
    mode, where the driver runs the tasks)."""
    instances = spark.sparkContext.getConf().get("spark.executor.instances")
    if instances:
        return max(1, int(instances))
    registered = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # type: ignore[union-attr]
    return max(1, registered)


def state_partitions(config: MisaConfig, state_dir: str | Path, dfs_url: str, splits: bool = True) -> int:
    """The state's key partition count (:func:`~misa.parallel.layout.partition_count`); on the executors ``auto``
    gives a new state one partition per executor, in the driver's processes one for an operator whose state does
    not split by key (``splits`` False: it is not :class:`~misa.operators.base.KeyPartitioned`). A state the
    driver's own process wrote cannot move to the executors (it has no partitions)."""
    if not on_executors(config):
        return partition_count(config, state_dir, dfs_url, None if splits else 1)
    if partitions_file(dfs_url) is None and recorded_partitions(state_dir, dfs_url) == 1:
        raise ConfigError(
            f"{PLACEMENT_KEY}=executors, but the state at {parse(dfs_url).given} was written in the driver's own "
            f"process (spark.misa.state.processes=1), which has no key partitions to place on executors. Keep "
            f"{PLACEMENT_KEY}=driver for this checkpoint, or start from a new checkpoint location and new state "
            f"locations"
        )
    return partition_count(config, state_dir, dfs_url, executor_count(_session()))


def is_partitioned(config: MisaConfig, dfs_url: str, count: int) -> bool:
    """Whether the state runs as partitions (hosts or worker processes): on the executors, with more than one
    partition, or when the state was written as partitions (one partition on the executors stays one)."""
    return on_executors(config) or count > 1 or partitions_file(dfs_url) is not None


def partitioned_store(
    config: MisaConfig, operator: StatefulOperator, state_dir: str | Path, dfs_url: str, count: int
) -> PartitionedStore:
    """The store face over ``count`` partitions: in worker processes of the driver, or in state hosts on the
    executors."""
    partitionable = _partitionable(operator, count, config)
    pool = None
    if on_executors(config):
        pool = HostPool(_session(), config, partition_dfs_urls(dfs_url, count), worker_copy(partitionable))
    return PartitionedStore(config, partitionable, state_dir, dfs_url, count, pool)


def _session() -> SparkSession:
    spark = SparkSession.getActiveSession()
    if spark is None:
        raise ConfigError(f"{PLACEMENT_KEY}=executors needs a running Spark session when the job is created")
    return spark


def _partitionable(operator: StatefulOperator, count: int, config: MisaConfig) -> KeyPartitioned:
    """``operator``, which must split its state by key to run in ``count`` partitions (or on the executors)."""
    if not isinstance(operator, KeyPartitioned):
        setting = f"{PLACEMENT_KEY}=executors" if on_executors(config) else f"spark.misa.state.processes={count}"
        raise ConfigError(
            f"{setting}, but {type(operator).__name__} does not say how its state splits by key (it does not declare "
            f"misa.operators.base.KeyPartitioned): set spark.misa.state.processes=1 and {PLACEMENT_KEY}=driver for it"
        )
    return operator
