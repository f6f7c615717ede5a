"""The job API: a stateful foreachBatch job over a streaming DataFrame.

::

    job = StatefulJob(operator, sink, checkpoint_location="/data/cm2/ckpt",
                      upstream=lambda df: df.where("event_type = 1"), config=MisaConfig.from_spark_conf(conf))
    query = job.start(spark, stream_df, trigger={"processingTime": "3 seconds"})
    query.awaitTermination(); job.close()

``start`` reconciles the state with Spark's checkpoint (recovery) before the query starts; the
runtime supplies the foreachBatch function.

Optional parts: ``hint_stages`` (candidate stages for keyed-prefetch hints, earliest first; the
default is ``upstream``), and ``bad_records`` (sets malformed input records aside per batch).
"""
from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from checkpoint import CorruptCheckpointError, failpoints
from checkpoint.location import parse, spark_location
from prefetch.cache import StateCache

from .commit import CommitController
from .commit_buffer import StateView
from .config import ConfigError, MisaConfig
from .gc_pause import gc_paused
from .metrics import BatchMetrics, summary_line
from .operators import StatefulOperator
from .prefetching import BatchHints, Stage, supports_hints
from .recovery import reconcile
from .state_store import StateStore
from .switch_interval import switch_interval

log = logging.getLogger(__name__)
Sink = Callable[[int, pa.Table], None]


class BadRecords(Protocol):
    """Splits a batch's malformed records off: writes them aside for ``batch_id``, returns the good rows."""

    def split(self, batch: DataFrame, batch_id: int) -> tuple[DataFrame, int, int]:
        """The batch's good rows, how many bad records were set aside (idempotent per batch id), and how
        many records the batch has (Spark's own count repeats for every job that reads the batch)."""


class StatefulJob:
    """Runs ``operator`` over each micro-batch with state in RocksDB and the configured commit mode."""

    def __init__(
        self,
        operator: StatefulOperator,
        sink: Sink,
        checkpoint_location: str,
        *,
        upstream: Callable[[DataFrame], DataFrame] | None = None,
        hint_stages: Sequence[Stage] | None = None,
        bad_records: BadRecords | None = None,
        config: MisaConfig | None = None,
        state_dir: str | None = None,
        dfs_url: str | None = None,
        metrics_path: str | None = None,
        echo: Callable[[str], None] | None = print,
    ):
        self.config = config or MisaConfig()
        self.operator = operator
        self.sink = sink
        self.upstream = upstream
        self.bad_records = bad_records
        self.checkpoint_location = parse(checkpoint_location)
        self.store = StateStore(
            self.config,
            state_dir or self.config.state_dir or self._default_state_dir(),
            dfs_url or self.config.dfs_url or self.checkpoint_location.child("misa-state").url,
        )
        self.view = StateView(self.store, StateCache(self.config.cache_max_bytes, self.config.cache_policy))
        self.hints: BatchHints | None = None
        if self.config.prefetch_enabled and supports_hints(operator):
            manager = self.view.enable_prefetch(self.config.prefetch_threads, self.config.prefetch_chunk_keys)
            stages = list(hint_stages or [upstream or (lambda df: df)])
            self.hints = BatchHints(self.config, operator, stages, manager)  # type: ignore[arg-type]
        self.controller = CommitController(self.store, self.view)
        self.metrics = BatchMetrics(metrics_path, self.controller.mode,
                                    (lambda r: echo(summary_line(r))) if echo else None)
        self.version = self.store.version
        self._listener: Any = None
        self._running = ExitStack()  # what start() changed in the process, undone by close()

    def _default_state_dir(self) -> Path:
        """``CHECKPOINT/misa-local`` for a checkpoint location on this machine; elsewhere there is no default."""
        if self.checkpoint_location.local is None:
            raise ConfigError(
                f"spark.misa.state.dir is not set and the checkpoint location {self.checkpoint_location} is not on "
                f"this machine: give a local directory for the working state (spark.misa.state.dir or --state-dir)")
        return self.checkpoint_location.local / "misa-local"

    def start(self, spark: SparkSession, stream: DataFrame, trigger: dict[str, Any],
              query_name: str | None = None) -> StreamingQuery:
        """Recover, then start the streaming query with this job as its foreachBatch function."""
        self._load(reconcile(self.store, self.checkpoint_location))
        self._running.enter_context(switch_interval(self.config.python_switch_interval_s))
        self._listener = self.metrics.listener()
        spark.streams.addListener(self._listener)
        writer = stream.writeStream.foreachBatch(self.run_batch).option(
            "checkpointLocation", spark_location(self.checkpoint_location))
        if query_name:
            writer = writer.queryName(query_name)
        return writer.trigger(**trigger).start()

    def _load(self, version: int) -> None:
        restored = self.store.load(version)
        self.operator.restore(restored.metadata if restored else {})
        self.view.reset()  # discard anything a failed attempt left behind
        self.version = version

    def _rewind(self, version: int) -> None:
        """Go back to ``version`` inside the running query: newer versions are forgotten (markers on
        both levels first) before the replay rebuilds them, never overwritten while they count."""
        log.warning("batch %d replayed; reloading state version %d", version + 1, version)
        self.controller.drain()
        problems = self.store.restore_problems(version)
        if problems:
            raise CorruptCheckpointError(f"batch {version + 1} is replayed but version {version} cannot be "
                                         f"restored: {'; '.join(problems)}")
        self.store.forget_after(version)
        failpoints.hit("replay.after_forget")
        self._load(version)

    def run_batch(self, batch: DataFrame, batch_id: int) -> None:
        """The foreachBatch function: returns only after ack 2 of batch_id - 1.

        The batch is cached for the batch's Spark jobs (the count or quarantine, the hint job and the
        deltas), so its input is read and parsed once.
        """
        cached = batch.persist()
        try:
            self._run_batch(cached, batch_id)
        finally:
            cached.unpersist()

    def _run_batch(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        if batch_id <= self.version:  # a replay: rebuild from the version before it
            self._rewind(batch_id - 1)
        counts: dict[str, int] = {}
        if self.bad_records is not None:  # this job also fills the cache
            batch, counts["bad_records"], counts["input_rows"] = self.bad_records.split(batch, batch_id)
        else:
            counts["input_rows"] = batch.count()
        hint_job = self.hints.start(batch) if self.hints else None
        upstream = self.upstream(batch) if self.upstream else batch
        deltas = self.operator.deltas(upstream).toArrow()
        computed = time.monotonic()
        hints = hint_job.result() if hint_job else None
        hinted = time.monotonic()
        self.view.take_read_s()
        with gc_paused():
            result = self.operator.apply(deltas, self.view)
        applied = time.monotonic()
        self.sink(batch_id, result.output)
        sunk = time.monotonic()
        self.controller.commit(self.view.freeze(batch_id), self.operator.metadata())
        committed = time.monotonic()
        ack_wait = self.controller.wait_durable(batch_id - 1)
        self.version = batch_id
        read_s = self.view.take_read_s()
        self.metrics.add(batch_id, {
            "output_rows": result.output.num_rows,
            "late_rows": result.late_rows,
            "dropped_rows": result.dropped_rows,
            **counts,
            "state_keys": self.store.approximate_keys(),
            "cache": self.view.cache.stats.take(),
            "prefetch": self._prefetch_record(hints),
            "phases": {
                "compute_s": computed - started,
                "hint_wait_s": hinted - computed,
                "state_read_s": read_s,
                "state_apply_s": applied - hinted - read_s,
                "sink_s": sunk - applied,
                "commit_inline_s": committed - sunk,
                "ack_wait_s": ack_wait,
            },
            "state_reads": result.state_reads,
            "batch_s": time.monotonic() - started,
        }, self.controller.finished())

    def _prefetch_record(self, hints: dict[str, Any] | None) -> dict[str, Any] | None:
        """The batch's hint and prefetch statistics; moves the adaptive lookahead."""
        if self.hints is None or self.view.prefetcher is None:
            return None
        stats = self.view.prefetcher.take_stats()
        return {**(hints or {}), **stats.as_dict(), "next_stage": self.hints.end_batch(stats)}

    def close(self, spark: SparkSession | None = None) -> None:
        """Wait for every commit to be durable, then release the state (and the metrics listener)."""
        try:
            self.controller.drain()
        finally:
            if spark is not None and self._listener is not None:
                self.metrics.wait_reported()
                spark.streams.removeListener(self._listener)
            self.controller.close()
            if self.hints is not None:
                self.hints.close()
            self._running.close()
            self.view.close()
            self.store.close()
