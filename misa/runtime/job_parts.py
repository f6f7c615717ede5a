"""The parts a :class:`~misa.job.StatefulJob` runs on, wired once for its configuration (:func:`build_parts`).

The state's placement decides most of them: in the driver's own process, the store and the batch's view of it;
as key partitions (worker processes, or state hosts on the executors), their faces on the driver
(:mod:`misa.parallel.partitioned`). Around the state: prefetching (hints and the prefetcher, with prefetching
auto the per-batch choice), where Spark writes its own checkpoint and the mirror that copies it to the checkpoint
location, the requests of batches without data, the commit controller, and what merges the deltas.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from pyspark.sql import DataFrame

from common.location import Location
from misa.config import STATE_FOLDER, MisaConfig
from misa.config_keys import CommitMode
from misa.exceptions import ConfigError
from misa.hosts.hints import HostHints
from misa.hosts.placement import is_partitioned, on_executors, partitioned_store, state_partitions
from misa.operators.base import HintSource, KeyPartitioned, StatefulOperator
from misa.parallel.partitioned import PartitionedCommit, PartitionedHints, PartitionedOperator, PartitionedView
from misa.runtime.batch_cache import attach_prefetcher, new_view
from misa.runtime.batch_hints import BatchHints, DataFrameStage
from misa.runtime.commit import CommitController
from misa.runtime.next_input import NextInput, without_driver_reads
from misa.runtime.no_data_batches import NoDataBatches
from misa.runtime.spark_mirror import SparkLogMirror
from misa.state.store import StateStore
from prefetch.auto import AutoPolicy, AutoPrefetch

log = logging.getLogger(__name__)


@dataclass
class JobParts:
    """What one job runs on. Only ``controller`` changes, on a restart (:meth:`StatefulJob.start` again)."""

    operator: StatefulOperator
    dfs_url: str  # the state's durable copy
    processes: int  # the state's key partitions
    on_executors: bool  # the partitions are state hosts on Spark's executors
    partitioned: bool  # the state runs as key partitions (hosts or worker processes)
    store: Any  # a StateStore, or a partitioned store's face
    view: Any  # the batch's reads and writes of the state
    hints: BatchHints | None  # the batch's keyed-prefetch hints (None: no prefetching)
    auto: AutoPrefetch | None  # with prefetching auto: chooses on or off per batch
    spark_checkpoint: Location  # where Spark writes its own checkpoint
    mirror: SparkLogMirror | None  # copies it to the checkpoint location
    no_data: NoDataBatches  # requests batches without data, and tells them from data batches
    controller: Any  # a CommitController, or the partitions' PartitionedCommit
    merger: Any  # merges a batch's deltas into the state: the operator, or the partitions' PartitionedOperator

    @property
    def checkpoints(self) -> Any:
        """The state's checkpoints (local and DFS levels, ownership)."""
        return self.store.checkpoints

    @property
    def operator_name(self) -> str:
        """The operator's name as its resolved signature records it (its class name before the start)."""
        return str((self.store.operator or {}).get("operator", type(self.operator).__name__))


def build_parts(
    config: MisaConfig,
    operator: StatefulOperator,
    checkpoint_location: Location,
    *,
    state_dir: str | Path | None,
    dfs_url: str | None,
    upstream: Callable[[DataFrame], DataFrame] | None,
    hint_stages: Sequence[DataFrameStage] | None,
    next_input: NextInput | None,
) -> JobParts:
    """The job's parts: the state (its local directory by default ``CHECKPOINT/misa-local``, its durable copy
    ``CHECKPOINT/misa-state``) as the configured placement keeps it, then what works around it."""
    state_dir = state_dir or config.state_dir or _default_state_dir(checkpoint_location)
    dfs_url = dfs_url or config.dfs_url or checkpoint_location.child(STATE_FOLDER).url
    processes = state_partitions(config, state_dir, dfs_url, isinstance(operator, KeyPartitioned))
    executors = on_executors(config)
    partitioned = is_partitioned(config, dfs_url, processes)
    if partitioned:
        store: Any = partitioned_store(config, operator, state_dir, dfs_url, processes)
        view: Any = PartitionedView(store.pool)
    else:
        store = StateStore(config, state_dir, dfs_url)
        view = new_view(store, config, operator)
    stages = list(hint_stages or [upstream or (lambda df: df)])
    hints, auto = _prefetching(config, operator, store, view, stages, next_input, partitioned, executors)
    spark_checkpoint, mirror = _spark_checkpoint(config, store, checkpoint_location)
    no_data = NoDataBatches(store.root / "spark-no-data-batch.json", spark_checkpoint, checkpoint_location)
    if partitioned:
        controller: Any = PartitionedCommit(store, config.commit_mode, mirror)
        merger: Any = PartitionedOperator(operator, store, controller, view)
    else:
        controller = CommitController(
            store,
            config.commit_mode,
            mirror,
            heartbeat_timeout_s=config.commit_heartbeat_timeout_s,
            max_restarts=config.commit_max_restarts,
        )
        merger = operator
    return JobParts(
        operator,
        dfs_url,
        processes,
        executors,
        partitioned,
        store,
        view,
        hints,
        auto,
        spark_checkpoint,
        mirror,
        no_data,
        controller,
        merger,
    )


def _default_state_dir(checkpoint_location: Location) -> Path:
    """``CHECKPOINT/misa-local`` for a checkpoint location on this machine; elsewhere there is no default."""
    if checkpoint_location.local is None:
        raise ConfigError(
            f"spark.misa.state.dir is not set and the checkpoint location {checkpoint_location} is not on "
            f"this machine: give a local directory for the working state (spark.misa.state.dir or --state-dir)"
        )
    return checkpoint_location.local / "misa-local"


def _prefetching(
    config: MisaConfig,
    operator: StatefulOperator,
    store: Any,
    view: Any,
    stages: list[DataFrameStage],
    next_input: NextInput | None,
    partitioned: bool,
    executors: bool,
) -> tuple[BatchHints | None, AutoPrefetch | None]:
    """The batch's hints and, with prefetching auto, what turns them on and off (neither without prefetching or
    for an operator that is no :class:`HintSource`)."""
    if config.prefetching == "false" or not isinstance(operator, HintSource):
        if config.prefetching == "true" and callable(getattr(operator, "hint_keys", None)):
            log.warning(
                "%s has hint methods but does not declare misa.HintSource: it runs without prefetching "
                "(subclass HintSource to prefetch its state keys)",
                type(operator).__name__,
            )
        return None, None
    auto = config.prefetching == "auto"
    if partitioned:  # each worker prefetches its partition's keys
        view.enable_prefetch(active=not auto)
        target = PartitionedHints(operator, store.pool)  # type: ignore[arg-type]
        if executors:  # the hint rows go from Spark's tasks to the hosts; the driver reads no input
            target = HostHints(operator, store.pool)  # type: ignore[arg-type]
            next_input = next_input and without_driver_reads(next_input)
        hints = BatchHints(config, operator, stages, None, None, next_input, target)
    else:
        manager = attach_prefetcher(
            view, config.prefetch_threads, config.prefetch_chunk_keys, config.cache_max_bytes, active=not auto
        )
        hints = BatchHints(config, operator, stages, manager, view, next_input)
    policy = AutoPolicy(
        min_read_share=config.prefetch_auto_min_read_share,
        min_device_bytes=config.prefetch_auto_min_device_read_bytes,
        patience=config.prefetch_auto_patience,
    )
    return hints, AutoPrefetch(policy) if auto else None


def _spark_checkpoint(
    config: MisaConfig, store: Any, checkpoint_location: Location
) -> tuple[Location, SparkLogMirror | None]:
    """Where Spark writes its own checkpoint, and the mirror that copies it to the checkpoint location: with
    ``spark.misa.checkpoint.mirrorSparkLog``, a local copy under the state dir (nocommit, which never
    recovers, keeps it local without a mirror); else the checkpoint location itself."""
    if not config.mirror_spark_log:
        return checkpoint_location, None
    mirror = SparkLogMirror(store.root, checkpoint_location, config.retry_policy(), config.upload_threads)
    return mirror.local, None if config.commit_mode == CommitMode.NOCOMMIT else mirror
