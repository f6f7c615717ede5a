"""The job API: a stateful foreachBatch job over a streaming DataFrame.

::

    job = StatefulJob(operator, sink, checkpoint_location="/data/cm2/ckpt",
                      upstream=lambda df: df.where("event_type = 1"), config=MisaConfig.from_spark_conf(conf))
    query = job.start(spark, stream_df, trigger={"processingTime": "3 seconds"})
    query.awaitTermination(); job.close()

``start`` resolves the operator against the upstream's schema (a missing column or a type the
operator cannot use fails here, before anything runs), reconciles the state with Spark's checkpoint
(recovery) and refuses state written by an incompatible definition of the operator
(:mod:`misa.runtime.compat`), all before the query starts; the runtime supplies the foreachBatch
function.

Optional parts: ``hint_stages`` (candidate stages for keyed-prefetch hints, earliest first; the
default is ``upstream``), ``next_input`` (the source's input read ahead, :mod:`misa.runtime.next_input`:
with prefetching the next batch's keys are prefetched between batches), ``bad_records`` (sets
malformed input records aside per batch) and ``pause_gc`` (pause Python's collector in the state
phase: a process-wide setting, see :mod:`misa.runtime.process`, so it is off unless the entry
point asks for it).

The job's parts, each in its module: what it runs on, wired once for the configuration
(:mod:`misa.runtime.job_parts`), the state version kept continuous with Spark's batches
(:mod:`misa.runtime.continuity`), one batch's phases (:mod:`misa.runtime.batch_loop`), its input and bad
records (:mod:`misa.runtime.batch_input`), and Spark's watermark and batches without data
(:mod:`misa.runtime.watermark_sync`). This class starts, restarts and closes them.
"""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from common.location import Location, spark_location
from misa.config import MisaConfig
from misa.config_keys import CommitMode
from misa.exceptions import CommitFailedError, ConfigError
from misa.obs.metrics import BatchListener, BatchMetrics, summary_line
from misa.obs.query_progress import MisaStreamingQuery, state_operator
from misa.obs.records import BatchReport, CommitStatus
from misa.operators.base import StatefulOperator
from misa.runtime.batch_hints import BatchHints, DataFrameStage
from misa.runtime.batch_input import BadRecordFilter, BatchInput
from misa.runtime.batch_loop import BatchLoop, Sink
from misa.runtime.continuity import StateContinuity
from misa.runtime.hadoop_fs import hadoop_local_path, resolve_location
from misa.runtime.interrupt import StopOnInterrupt
from misa.runtime.job_parts import JobParts, build_parts
from misa.runtime.next_input import NextInput
from misa.runtime.process import gc_paused, nothing_paused
from misa.runtime.recovery import reconcile, require_fresh
from misa.runtime.spark_log import SparkCheckpointLog
from misa.runtime.spark_mirror import SparkLogMirror, forget_mirror, spark_checkpoint_uri
from misa.runtime.spark_plan import planned_as_stateful
from misa.runtime.watermark_sync import WatermarkSync
from misa.state_source.operator_record import record_operator
from misa.state_source.sources import register_state_sources

log = logging.getLogger(__name__)


class StatefulJob:
    """Runs ``operator`` over each micro-batch with state in RocksDB and the configured commit mode."""

    def __init__(
        self,
        operator: StatefulOperator,
        sink: Sink,
        checkpoint_location: str,
        *,
        upstream: Callable[[DataFrame], DataFrame] | None = None,
        hint_stages: Sequence[DataFrameStage] | None = None,
        next_input: NextInput | None = None,
        bad_records: BadRecordFilter | None = None,
        config: MisaConfig | None = None,
        state_dir: str | None = None,
        dfs_url: str | None = None,
        metrics_path: str | None = None,
        echo: Callable[[str], None] | None = print,
        pause_gc: bool = False,
    ):
        self.config = config if config is not None else MisaConfig.from_session()  # the active session's
        self.metrics = BatchMetrics(  # first: a missing metrics extra fails before the state is opened
            metrics_path,
            self.config.commit_mode,
            (lambda r: echo(summary_line(r))) if echo else None,
            self.config.metrics_prometheus_port,
        )
        self.operator = operator
        self.upstream = upstream
        self.input = BatchInput(bad_records)
        self.checkpoint_location = resolve_location(checkpoint_location)  # where Spark puts it
        self.parts: JobParts = build_parts(
            self.config,
            operator,
            self.checkpoint_location,
            state_dir=state_dir,
            dfs_url=dfs_url,
            upstream=upstream,
            hint_stages=hint_stages,
            next_input=next_input,
        )
        if self.mirror is not None:
            self.metrics.add_listener(self._mirror_reported)
        self.continuity = StateContinuity(self.parts, self.checkpoint_location)
        self.sync = WatermarkSync(self.parts.no_data, operator, self.parts.merger if self.parts.partitioned else None)
        state_phase = gc_paused if pause_gc else nothing_paused
        self.loop = BatchLoop(
            self.parts, self.continuity, self.sync, self.input, sink, upstream, self.metrics, state_phase
        )
        self._query: StreamingQuery | None = None  # Spark's query of the last start, stopped by close
        self._listener: Any = None
        self._interrupt: StopOnInterrupt | None = None  # Ctrl-C stops the query (unless the entry point handles it)
        self._started = False
        self.batch_running = threading.Lock()  # held during a batch: a stop on Ctrl-C waits for it to end

    # ------------------------------------------------------------------ the parts, as callers read them
    @property
    def store(self) -> Any:
        """The state store (with key partitions: their store face on the driver)."""
        return self.parts.store

    @property
    def view(self) -> Any:
        """The batch's reads and writes of the state."""
        return self.parts.view

    @property
    def checkpoints(self) -> Any:
        """The state's checkpoints: local and DFS levels, ownership."""
        return self.parts.checkpoints

    @property
    def hints(self) -> BatchHints | None:
        """The batch's keyed-prefetch hints (None: no prefetching)."""
        return self.parts.hints

    @property
    def controller(self) -> Any:
        """The commit controller (a new one after each restart)."""
        return self.parts.controller

    @property
    def mirror(self) -> SparkLogMirror | None:
        """What copies Spark's own checkpoint, written locally, to the checkpoint location (None: not mirrored)."""
        return self.parts.mirror

    @property
    def spark_checkpoint(self) -> Location:
        """Where Spark writes its own checkpoint."""
        return self.parts.spark_checkpoint

    @property
    def processes(self) -> int:
        """The state's key partitions."""
        return self.parts.processes

    @property
    def version(self) -> int:
        """The state version the job is at: the last batch committed, or the version loaded."""
        return self.continuity.version

    def _mirror_reported(self, report: BatchReport, progress: Any) -> None:
        """Spark reported a batch, so its commit entry is in the local log: mirror it now (in the background), not
        only with the next version's upload, which an idle query never makes."""
        self.parts.controller.mirror_spark_log()

    # ------------------------------------------------------------------ start and restart
    def start(
        self, spark: SparkSession, stream: DataFrame, trigger: dict[str, Any], query_name: str | None = None
    ) -> StreamingQuery:
        """Resolve the operator against ``stream`` through the upstream, claim the state for this query,
        recover and check the state's operator signature, then start the streaming query with this job as
        its foreachBatch function. Calling it again (after the query failed) is a full restart: what the
        failed run left in memory (commits, hints, the cache) is dropped first."""
        parts, store, checkpoints = self.parts, self.parts.store, self.parts.checkpoints
        if self._started:
            self._drop_failed_run(spark)
        self._started = True
        store.operator = self._resolve(stream)
        query_id = SparkCheckpointLog(self.checkpoint_location).query_id()
        self.metrics.serve(query_name or query_id)
        store.claim(query_id)
        record_operator(parts.dfs_url, self.operator, store.operator, self.config.retry_policy())  # for the readers
        register_state_sources(spark)
        if parts.mirror is not None and parts.mirror.prepare(checkpoints.check_owner):
            checkpoints.forget_local_only()  # newer local versions went with the local copy Spark's log replaced
        if not self.config.mirror_spark_log:
            forget_mirror(self.checkpoint_location)
        if parts.controller.mode == CommitMode.NOCOMMIT:
            require_fresh(store, parts.spark_checkpoint)
        # loads the version Spark continues from
        reconcile(store, parts.spark_checkpoint, self.config.recovery_allow_previous)
        if parts.hints is not None:
            parts.hints.follow_spark_log(parts.spark_checkpoint)
        self.continuity.adopt_loaded()
        self.continuity.expect_first_batch()
        self.sync.reset()
        self.loop.starting()
        self._listener = self.metrics.listener()
        spark.streams.addListener(self._listener)
        checkpoint = (
            spark_checkpoint_uri(parts.spark_checkpoint)
            if parts.spark_checkpoint is not self.checkpoint_location
            else spark_location(self.checkpoint_location)
        )
        self._check_spark_folder(spark, checkpoint)
        requesting = parts.no_data.attach(spark, stream)
        writer = requesting.writeStream.foreachBatch(self.run_batch).option("checkpointLocation", checkpoint)
        if query_name:
            writer = writer.queryName(query_name)
        if self._interrupt is None and not StopOnInterrupt.active():
            self._interrupt = StopOnInterrupt(spark).__enter__()
        self.sync.watch(stream)
        with planned_as_stateful(spark):
            query = writer.trigger(**trigger).start()
        self._query = query
        self.sync.started(spark, query)
        self.metrics.follow(str(query.id))
        query = MisaStreamingQuery(query, self._state_operator)
        if self._interrupt is not None:
            self._interrupt.watch(query, self.batch_running)
        return query

    def _state_operator(self, batch_id: int) -> dict[str, Any] | None:
        """Spark's ``StateOperatorProgress`` of the operator at ``batch_id``, as JSON (None: not reported)."""
        report = self.metrics.recent.get(batch_id)
        if report is None:
            return None
        return state_operator(report, self.parts.operator_name, self.parts.processes, self.config.state_shards)

    def _check_spark_folder(self, spark: SparkSession, option: str) -> None:
        """Refuse a ``checkpointLocation`` that Hadoop would read as another folder than the one recovery reads."""
        expected = self.parts.spark_checkpoint.local
        if expected is None:
            return
        folder = hadoop_local_path(spark, option)
        if folder is not None and Path(folder) != expected.resolve():
            raise ConfigError(
                f"Spark would write its checkpoint to {folder}, not to {expected.resolve()} where misa reads it "
                f"(Hadoop reads {option!r} so): use a checkpoint location without URL escapes (%XX), or a plain path"
            )

    def _resolve(self, stream: DataFrame) -> dict[str, Any]:
        """The operator's signature over the schema of the rows it will be given (Spark analyses the upstream
        on the stream; no query runs)."""
        if not callable(getattr(self.operator, "signature", None)):
            raise TypeError(
                f"{type(self.operator).__name__} has no signature(schema) method, which the StatefulOperator "
                f"protocol requires: it checks the operator's columns at start and records what shapes its state "
                f"(see docs/extending.md, Operators)"
            )
        rows = self.input.good(stream)
        return self.operator.signature((self.upstream(rows) if self.upstream else rows).schema)

    def _drop_failed_run(self, spark: SparkSession) -> None:
        """Forget the previous run's in-memory work, as a new driver process would: its commit tasks (a
        failed one included) and their pending buffers go; the state is reloaded by recovery."""
        log.warning("start() called again: dropping the previous run's pending commits before recovery")
        try:
            self.parts.controller.close()
        except CommitFailedError as exc:
            log.warning("the previous run's commit failed: %s", exc)
        self.parts.controller = self.parts.controller.renewed()
        if self._listener is not None:
            spark.streams.removeListener(self._listener)
            self._listener = None

    # ------------------------------------------------------------------ the batches
    def run_batch(self, batch: DataFrame, batch_id: int) -> None:
        """The foreachBatch function: returns only after ack 2 of batch_id - 1.

        The batch's input is read by one Spark job, the delta job, which also counts the records and
        the bad ones (Spark's ``observe``); a second job reads it only to write bad records aside, when
        there are some. With hints extracted in the batch (none found ahead), the hint job reads the batch
        too, so its hint session persists it for both.
        """
        with self.batch_running:
            self.loop.run(batch, batch_id)

    # ------------------------------------------------------------------ reports
    def last_batch(self) -> BatchReport | None:
        """The latest batch as the runtime saw it when it ended (None before the first): its id, its record
        (rows, phases, state keys and bytes, cache and prefetch counters), the commits that finished during
        it and the commit's status then. Spark's side of the batch is ``query.lastProgress``."""
        return self.metrics.last

    def commit_status(self) -> CommitStatus:
        """Where the commit stands now: versions pending, the newest locally committed and durable version."""
        return self.controller.status()

    def add_listener(self, listener: BatchListener) -> None:
        """Call ``listener(report, progress)`` when Spark reports each batch of this job (from Spark's listener
        bus, as a ``StreamingQueryListener.onQueryProgress``): the runtime's :class:`BatchReport` of the batch
        and Spark's ``StreamingQueryProgress`` of it. Add it before ``start``; its errors are logged."""
        self.metrics.add_listener(listener)

    def settle(self) -> None:
        """What must still succeed after the query ended: wait for every commit to be durable and mirror Spark's
        last log entries to the checkpoint location. Raises what fails (a caller may start the query again, as
        after a failed batch); :meth:`close` settles too."""
        self.controller.drain()
        if self.mirror is not None and self._started:
            self.mirror.sync(self.checkpoints.check_owner)

    def close(self, spark: SparkSession | None = None) -> None:
        """Stop the query if it still runs (a batch running, with or without data, ends first: it reads the state),
        :meth:`settle`, then release the state (and the metrics listener)."""
        try:
            if self._query is not None and self._query.isActive:
                self._query.stop()
            self.settle()
        finally:
            self._end_interrupt()
            if spark is not None and self._listener is not None:
                self.metrics.wait_reported()
                spark.streams.removeListener(self._listener)
            self.controller.close()
            if self.hints is not None:
                self.hints.close()
            self.view.close()
            self.store.close()
            self.metrics.close()

    def _end_interrupt(self) -> None:
        """Give Ctrl-C back; after a stop by Ctrl-C, say in one line where the state is durable."""
        if self._interrupt is None:
            return
        interrupt, self._interrupt = self._interrupt, None
        interrupt.__exit__(None, None, None)
        if interrupt.requested.is_set():
            durable = self.checkpoints.newest_durable()
            state = "no state is durable yet" if durable is None else f"the state is durable up to version {durable}"
            print(f"stopped by Ctrl-C; {state}; restart resumes from there", file=sys.stderr)
