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
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from checkpoint.exceptions import CorruptCheckpointError
from common import failpoints
from common.location import Location, spark_location
from misa.config import STATE_FOLDER, MisaConfig
from misa.config_keys import CommitMode
from misa.exceptions import CommitFailedError, ConfigError, RecoveryError
from misa.hosts.hints import HostHints
from misa.hosts.output import HostRows
from misa.hosts.placement import is_partitioned, on_executors, partitioned_store, state_partitions
from misa.io.dataframe_sink import FrameSink
from misa.obs.metrics import BatchListener, BatchMetrics, summary_line
from misa.obs.query_progress import MisaStreamingQuery, state_operator
from misa.obs.records import BatchPhases, BatchRecord, BatchReport, CommitStatus
from misa.operators.base import (
    HintSource,
    OperatorResult,
    StatefulOperator,
    runs_no_data_batches,
    watermark_moves,
)
from misa.parallel.partitioned import (
    PartitionedCommit,
    PartitionedHints,
    PartitionedOperator,
    PartitionedView,
    RoutedDeltas,
)
from misa.runtime.batch_cache import attach_prefetcher, new_view
from misa.runtime.batch_hints import BatchHints, DataFrameStage, HintSession
from misa.runtime.commit import CommitController
from misa.runtime.compat import check_compatible
from misa.runtime.hadoop_fs import hadoop_local_path, resolve_location
from misa.runtime.interrupt import StopOnInterrupt
from misa.runtime.job_descriptions import describe_jobs
from misa.runtime.next_input import NextInput, without_driver_reads
from misa.runtime.no_data_batches import NoDataBatches, SparkWatermark, has_watermark, no_data_batches_enabled
from misa.runtime.process import gc_paused, nothing_paused
from misa.runtime.recovery import batch_gap_message, reconcile, require_fresh
from misa.runtime.spark_log import SparkCheckpointLog
from misa.runtime.spark_mirror import SparkLogMirror, forget_mirror, spark_checkpoint_uri
from misa.runtime.spark_plan import planned_as_stateful
from misa.state.store import EMPTY_VERSION, StateStore
from misa.state.version import BatchVersion
from misa.state_source.operator_record import record_operator
from misa.state_source.sources import register_state_sources
from prefetch.auto import PROBE, AutoPolicy, AutoPrefetch, Sample

log = logging.getLogger(__name__)
Sink = Callable[[int, pa.Table], None]
_INPUT_ROWS, _BAD_ROWS = "input_rows", "bad_records"


class BadRecordFilter(Protocol):
    """Sets a batch's malformed records aside: counted while the batch's delta job runs, written only when present."""

    def good(self, batch: DataFrame) -> DataFrame:
        """The batch's good rows."""

    def bad_count(self) -> Column:
        """An aggregate expression counting the batch's bad records (observed during the delta job)."""

    def write_aside(self, batch: DataFrame, batch_id: int, bad: int) -> None:
        """Write the batch's ``bad`` bad records aside, idempotent per batch id (none: clear an earlier attempt's)."""


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
        self.sink = sink
        self.upstream = upstream
        self.bad_records = bad_records
        self.checkpoint_location = resolve_location(checkpoint_location)  # where Spark puts it
        state_dir = state_dir or self.config.state_dir or self._default_state_dir()
        dfs_url = dfs_url or self.config.dfs_url or self.checkpoint_location.child(STATE_FOLDER).url
        self.dfs_url = dfs_url
        self.processes = state_partitions(self.config, state_dir, dfs_url)
        self.on_executors = on_executors(self.config)
        self.partitioned = is_partitioned(self.config, dfs_url, self.processes)
        if self.partitioned:
            self.store: Any = partitioned_store(self.config, operator, state_dir, dfs_url, self.processes)
            self.view: Any = PartitionedView(self.store.pool)
        else:
            self.store = StateStore(self.config, state_dir, dfs_url)
            self.view = new_view(self.store, self.config, operator)
        self.checkpoints = self.store.checkpoints
        self.hints: BatchHints | None = None
        self.auto: AutoPrefetch | None = None  # with prefetching auto: chooses on or off per batch
        if self.config.prefetching != "false" and isinstance(operator, HintSource):
            auto = self.config.prefetching == "auto"
            stages = list(hint_stages or [upstream or (lambda df: df)])
            if self.partitioned:  # each worker prefetches its partition's keys
                self.view.enable_prefetch(active=not auto)
                target = PartitionedHints(operator, self.store.pool)  # type: ignore[arg-type]
                if self.on_executors:  # the hint rows go from Spark's tasks to the hosts; the driver reads no input
                    target = HostHints(operator, self.store.pool)  # type: ignore[arg-type]
                    next_input = next_input and without_driver_reads(next_input)
                self.hints = BatchHints(self.config, operator, stages, None, None, next_input, target)
            else:
                manager = attach_prefetcher(
                    self.view,
                    self.config.prefetch_threads,
                    self.config.prefetch_chunk_keys,
                    self.config.cache_max_bytes,
                    active=not auto,
                )
                self.hints = BatchHints(self.config, operator, stages, manager, self.view, next_input)
            policy = AutoPolicy(
                min_read_share=self.config.prefetch_auto_min_read_share,
                min_device_bytes=self.config.prefetch_auto_min_device_read_bytes,
                patience=self.config.prefetch_auto_patience,
            )
            self.auto = AutoPrefetch(policy) if auto else None
        elif self.config.prefetching == "true" and callable(getattr(operator, "hint_keys", None)):
            log.warning(
                "%s has hint methods but does not declare misa.HintSource: it runs without prefetching "
                "(subclass HintSource to prefetch its state keys)",
                type(operator).__name__,
            )
        self.spark_checkpoint, self.mirror = self._spark_checkpoint()
        self.no_data = NoDataBatches(
            self.store.root / "spark-no-data-batch.json", self.spark_checkpoint, self.checkpoint_location
        )
        self._spark_watermark: SparkWatermark | None = None  # the running query's, when its stream has withWatermark
        self._follows_spark = False  # whether the running query's stream has withWatermark (known before it starts)
        self._query_started = threading.Event()
        self._query: StreamingQuery | None = None  # Spark's query of the last start, stopped by close
        self._requested = EMPTY_VERSION  # the batch after which this run requested a batch without data
        self._no_data_batches = False  # whether Spark would run batches without data for the operator (at start)
        self._spark_moved: bool | None = None  # whether Spark's watermark moves after the running batch, once read
        self._skipped_batches = 0  # 1 when the stateful query never runs Spark's batch 0; sink ids are Spark's less it
        self._output_schema: pa.Schema | None = None  # the columns of the operator's last output that had some
        if self.partitioned:
            self.controller: Any = PartitionedCommit(self.store, self.config.commit_mode, self.mirror)
            self._merger: Any = PartitionedOperator(operator, self.store, self.controller, self.view)
        else:
            self.controller = CommitController(
                self.store,
                self.config.commit_mode,
                self.mirror,
                heartbeat_timeout_s=self.config.commit_heartbeat_timeout_s,
                max_restarts=self.config.commit_max_restarts,
            )
            self._merger = operator
        if self.mirror is not None:
            self.metrics.add_listener(self._mirror_reported)
        self.version = self.store.version
        self._listener: Any = None
        self._interrupt: StopOnInterrupt | None = None  # Ctrl-C stops the query (unless the entry point handles it)
        self._started = False
        self._awaiting_first_batch = False
        self._state_phase = gc_paused if pause_gc else nothing_paused
        self.batch_running = threading.Lock()  # held during a batch: a stop on Ctrl-C waits for it to end

    def _spark_checkpoint(self) -> tuple[Location, SparkLogMirror | None]:
        """Where Spark writes its own checkpoint, and the mirror that copies it to the checkpoint location: with
        ``spark.misa.checkpoint.mirrorSparkLog``, a local copy under the state dir (nocommit, which never
        recovers, keeps it local without a mirror); else the checkpoint location itself."""
        if not self.config.mirror_spark_log:
            return self.checkpoint_location, None
        mirror = SparkLogMirror(
            self.store.root, self.checkpoint_location, self.config.retry_policy(), self.config.upload_threads
        )
        return mirror.local, None if self.config.commit_mode == CommitMode.NOCOMMIT else mirror

    def _mirror_reported(self, report: BatchReport, progress: Any) -> None:
        """Spark reported a batch, so its commit entry is in the local log: mirror it now (in the background), not
        only with the next version's upload, which an idle query never makes."""
        self.controller.mirror_spark_log()

    def _default_state_dir(self) -> Path:
        """``CHECKPOINT/misa-local`` for a checkpoint location on this machine; elsewhere there is no default."""
        if self.checkpoint_location.local is None:
            raise ConfigError(
                f"spark.misa.state.dir is not set and the checkpoint location {self.checkpoint_location} is not on "
                f"this machine: give a local directory for the working state (spark.misa.state.dir or --state-dir)"
            )
        return self.checkpoint_location.local / "misa-local"

    def start(
        self, spark: SparkSession, stream: DataFrame, trigger: dict[str, Any], query_name: str | None = None
    ) -> StreamingQuery:
        """Resolve the operator against ``stream`` through the upstream, claim the state for this query,
        recover and check the state's operator signature, then start the streaming query with this job as
        its foreachBatch function. Calling it again (after the query failed) is a full restart: what the
        failed run left in memory (commits, hints, the cache) is dropped first."""
        if self._started:
            self._drop_failed_run(spark)
        self._started = True
        self.store.operator = self._resolve(stream)
        query_id = SparkCheckpointLog(self.checkpoint_location).query_id()
        self.metrics.serve(query_name or query_id)
        self.store.claim(query_id)
        record_operator(self.dfs_url, self.operator, self.store.operator, self.config.retry_policy())  # for the readers
        register_state_sources(spark)
        if self.mirror is not None and self.mirror.prepare(self.checkpoints.check_owner):
            self.checkpoints.forget_local_only()  # newer local versions went with the local copy Spark's log replaced
        if not self.config.mirror_spark_log:
            forget_mirror(self.checkpoint_location)
        if self.controller.mode == CommitMode.NOCOMMIT:
            require_fresh(self.store, self.spark_checkpoint)
        # loads the version Spark continues from
        reconcile(self.store, self.spark_checkpoint, self.config.recovery_allow_previous)
        if self.hints is not None:
            self.hints.follow_spark_log(self.spark_checkpoint)
        self._adopt_loaded()
        self._awaiting_first_batch = True
        self._query_started.clear()
        self._requested = EMPTY_VERSION
        self._skipped_batches = int(self.no_data.first_batch_skipped())
        self._listener = self.metrics.listener()
        spark.streams.addListener(self._listener)
        checkpoint = (
            spark_checkpoint_uri(self.spark_checkpoint)
            if self.spark_checkpoint is not self.checkpoint_location
            else spark_location(self.checkpoint_location)
        )
        self._check_spark_folder(spark, checkpoint)
        requesting = self.no_data.attach(spark, stream)
        writer = requesting.writeStream.foreachBatch(self.run_batch).option("checkpointLocation", checkpoint)
        if query_name:
            writer = writer.queryName(query_name)
        if self._interrupt is None and not StopOnInterrupt.active():
            self._interrupt = StopOnInterrupt(spark).__enter__()
        self._follows_spark = has_watermark(stream)
        with planned_as_stateful(spark):
            query = writer.trigger(**trigger).start()
        self._query = query
        self._spark_watermark = SparkWatermark(query) if self._follows_spark else None
        self._no_data_batches = runs_no_data_batches(self.operator) and no_data_batches_enabled(spark)
        self._query_started.set()
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
        return state_operator(report, self._operator_name, self.processes, self.config.state_shards)

    @property
    def _operator_name(self) -> str:
        return str((self.store.operator or {}).get("operator", type(self.operator).__name__))

    def _check_spark_folder(self, spark: SparkSession, option: str) -> None:
        """Refuse a ``checkpointLocation`` that Hadoop would read as another folder than the one recovery reads."""
        expected = self.spark_checkpoint.local
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
        rows = self._good(stream)
        return self.operator.signature((self.upstream(rows) if self.upstream else rows).schema)

    def _drop_failed_run(self, spark: SparkSession) -> None:
        """Forget the previous run's in-memory work, as a new driver process would: its commit tasks (a
        failed one included) and their pending buffers go; the state is reloaded by recovery."""
        log.warning("start() called again: dropping the previous run's pending commits before recovery")
        try:
            self.controller.close()
        except CommitFailedError as exc:
            log.warning("the previous run's commit failed: %s", exc)
        self.controller = self.controller.renewed()
        if self._listener is not None:
            spark.streams.removeListener(self._listener)
            self._listener = None

    def _load(self, version: int) -> None:
        self.store.load(version)
        self._adopt_loaded()

    def _adopt_loaded(self) -> None:
        """Continue from the version just loaded into the store (refused if an incompatible operator wrote it):
        its operator metadata, no stale cache or hints."""
        if self.store.operator is not None and self.store.version != EMPTY_VERSION:
            check_compatible(self.store.loaded_operator, self.store.operator, self.store.version, self.store.locations)
        self.operator.restore(self.store.metadata)
        if self.hints is not None:
            self.hints.drop_ahead()
        self.view.reset()  # discard anything a failed attempt left behind
        self.version = self.store.version
        self.controller.loaded(self.version)

    def _rewind(self, version: int) -> None:
        """Go back to ``version`` inside the running query: newer versions are forgotten (markers on
        both levels first) before the replay rebuilds them, never overwritten while they count."""
        log.warning("batch %d replayed; reloading state version %d", version + 1, version)
        self.controller.drain()
        problems = self.store.restore_problems(version)
        if problems:
            raise CorruptCheckpointError(
                f"batch {version + 1} is replayed but version {version} cannot be restored: {'; '.join(problems)}"
            )
        self.checkpoints.forget_after(version)
        failpoints.hit("replay.after_forget")
        self._load(version)

    def run_batch(self, batch: DataFrame, batch_id: int) -> None:
        """The foreachBatch function: returns only after ack 2 of batch_id - 1.

        The batch's input is read by one Spark job, the delta job, which also counts the records and
        the bad ones (Spark's ``observe``); a second job reads it only to write bad records aside, when
        there are some. With hints extracted in the batch (none found ahead), the hint job reads the batch
        too, so its hint session persists it for both.
        """
        with self.batch_running:
            started = time.monotonic()
            first = self._awaiting_first_batch
            self._check_continuity(batch_id)
            if batch_id == 0:
                self._skipped_batches = int(self.no_data.skips_first_batch())
            skipped = batch_id == 0 and self._skipped_batches == 1
            asked = first or self._requested == batch_id - 1
            no_data = asked and self.no_data.is_no_data_batch(batch_id)
            describe_jobs(batch, f"misa batch {batch_id}: the deltas of {self._operator_name} for misa's state phase")
            if no_data or skipped:
                with HintSession(batch) as session:
                    self._run_batch(session, batch_id, started, no_data=True, skipped=skipped)
            else:
                with self._hint_session(batch) as session:
                    self._run_batch(session, batch_id, started)
            if not (no_data or skipped):  # Spark's batch without data moves no watermark: it never asks for another
                self._request_no_data_batch(batch_id)

    def _hint_session(self, batch: DataFrame) -> HintSession:
        """The batch's hint session: it starts the batch's hints (none without prefetching)."""
        if self.hints is None:
            return HintSession(batch)
        return self.hints.begin(batch, self._good, on=self._prefetching(), next_on=self._prefetching)

    def _run_batch(
        self, session: HintSession, batch_id: int, started: float, no_data: bool = False, skipped: bool = False
    ) -> None:
        """The batch's phases in order (after a rewind on replay): compute, merge, sink, commit, wait for ack 2;
        leaving ``session`` then starts the next batch's hints ahead. A batch without data (``no_data``) computes
        nothing and runs the operator's ``no_data_batch`` as its state phase; one the stateful query does not run
        (``skipped``: the first, planned for the request source alone) runs no operator and no sink, and commits
        the state as it is. The sink sees the stateful query's batch ids."""
        phases = BatchPhases()
        clock = _PhaseClock(started)
        deltas, record = None, BatchRecord(input_rows=0, without_data=True)
        if not no_data:
            batch = session.rows
            counted, observation = self._observed(batch, batch_id)
            good = self._good(counted)
            frame = self.operator.deltas(self.upstream(good) if self.upstream else good)
            deltas = self._merger.send(frame) if self.on_executors else frame.toArrow()
            record = self._input_record(batch, batch_id - self._skipped_batches, observation, deltas.num_rows)
            record.deltas = deltas.num_rows
        phases.compute_s = clock.lap()
        session.wait()
        if not no_data:  # every job reading the batch ran (its hints' too)
            self._spark_moved = self._spark_watermark_moves()
        phases.hint_wait_s = clock.lap()
        result = OperatorResult(pa.table({})) if skipped else self._merge(deltas)
        reads = self.view.take_reads()
        phases.state_read_s, record.state_device_read_bytes = reads.seconds, reads.device_bytes
        phases.state_apply_s = clock.lap() - phases.state_read_s
        if not skipped:
            describe_jobs(session.rows, f"misa batch {batch_id}: the output of misa's state phase to the sink")
            self._deliver(batch_id - self._skipped_batches, self._typed(result.output), session.rows)
        phases.sink_s = clock.lap()
        frozen = self.view.freeze(batch_id)
        if isinstance(frozen, BatchVersion):  # worker processes freeze their own: not counted here
            deleted = list(frozen.buffer.changes.values()).count(None)
            record.state_deletes = deleted + len(frozen.buffer.range_deletes)
            record.state_writes = len(frozen.buffer.changes) - deleted
        self.controller.commit(frozen, self.operator.metadata())
        phases.commit_inline_s = clock.lap()
        phases.ack_wait_s = self.controller.wait_durable(batch_id - 1)
        self.version = batch_id
        record.output_rows, record.late_rows = result.output.num_rows, result.late_rows
        record.dropped_rows, record.state_reads = result.dropped_rows, result.state_reads
        record.state_keys, record.state_bytes = self.store.approximate_keys(), self.store.approximate_bytes()
        record.sst_bytes = self.store.sst_bytes()
        record.cache = self.view.take_cache_stats()
        record.prefetch = session.finish()
        record.phases, record.batch_s = phases, time.monotonic() - started
        record.prefetch_auto = None if no_data else self._choose_prefetching(record, session.on)
        commits = tuple(self.controller.finished())
        self.metrics.report(BatchReport(batch_id, record, commits, self.controller.status()))

    def _deliver(self, batch_id: int, output: pa.Table | HostRows, batch: DataFrame) -> None:
        """Hand the batch's output to the sink: rows still on the state hosts go as a DataFrame read from them to a
        sink that writes DataFrames, else as a table fetched by the driver."""
        if isinstance(output, HostRows):
            if isinstance(self.sink, FrameSink) and output.num_columns:
                self.sink.write_frame(batch_id, output.frame(batch.sparkSession))
                return
            output = output.table()
        self.sink(batch_id, output)

    def _typed(self, output: pa.Table | HostRows) -> pa.Table | HostRows:
        """The operator's output, as the empty table of the last output's columns when it has none (a batch without
        data of an operator that had no rows to shape it)."""
        if output.num_columns:
            self._output_schema = output.schema
        elif self._output_schema is not None:
            return self._output_schema.empty_table()
        return output

    def _check_continuity(self, batch_id: int) -> None:
        """Batch ``batch_id`` must follow the state's version: a replay rebuilds from the version before it;
        a gap fails the batch before anything is written. At the query's first batch this driver's claim
        is checked again (a driver started after it supersedes it), and a version another driver made
        durable since recovery is loaded when it is exactly the one this batch follows."""
        first, self._awaiting_first_batch = self._awaiting_first_batch, False
        if first:
            self.checkpoints.check_owner()
        if batch_id <= self.version:  # a replay: rebuild from the version before it
            self._rewind(batch_id - 1)
            return
        if batch_id == self.version + 1:
            return
        durable = self.checkpoints.newest_durable()
        if first and durable == batch_id - 1 and not self.store.restore_problems(durable):
            log.warning("version %d became durable after recovery; continuing from it", durable)
            self._load(durable)
            return
        raise RecoveryError(batch_gap_message(batch_id, self.version, self.checkpoint_location, self.store))

    def _good(self, rows: DataFrame) -> DataFrame:
        """``rows`` without their bad records."""
        return self.bad_records.good(rows) if self.bad_records else rows

    def _observed(self, batch: DataFrame, batch_id: int) -> tuple[DataFrame, Observation]:
        """The batch with its record count (and bad-record count) observed by whichever job reads it first."""
        observation = Observation(f"misa_input_{batch_id}_{time.monotonic_ns()}")
        return batch.observe(observation, *self._counts()), observation

    def _counts(self) -> list[Column]:
        """The batch's record count (and bad-record count), as aggregate expressions."""
        counts = [F.count(F.lit(1)).alias(_INPUT_ROWS)]
        if self.bad_records is not None:
            counts.append(self.bad_records.bad_count().alias(_BAD_ROWS))
        return counts

    def _input_record(self, batch: DataFrame, batch_id: int, observation: Observation, deltas: int) -> BatchRecord:
        """The batch's record, started with its observed counts; bad records are written aside here, under
        ``batch_id`` as the sink numbers the batch.

        Spark leaves the observation unfilled when the delta job's plan is cut short: a batch without rows
        is pruned to an empty relation, and rows that yield no deltas leave a shuffle empty, after which
        adaptive execution skips the stages that would report it (reading it then fails). So a batch
        that yielded no deltas is counted by one more small Spark job, only for such batches."""
        counts = batch.agg(*self._counts()).first().asDict() if deltas == 0 else observation.get
        if self.bad_records is None:
            return BatchRecord(input_rows=int(counts[_INPUT_ROWS]))
        bad = int(counts.get(_BAD_ROWS) or 0)
        self.bad_records.write_aside(batch, batch_id, bad)
        return BatchRecord(input_rows=int(counts[_INPUT_ROWS]), bad_records=bad)

    def _merge(self, deltas: pa.Table | RoutedDeltas | None) -> OperatorResult:
        """The driver's state phase: the operator merges the deltas into the state, or runs the batch without data
        (``deltas`` None)."""
        self.view.take_reads()  # reads before this phase (none expected) are not the batch's
        self._follow_spark_watermark()
        with self._state_phase():
            if deltas is None:
                return self._merger.no_data_batch(self.view)
            return self._merger.apply(deltas, self.view)

    def _request_no_data_batch(self, batch_id: int) -> None:
        """After batch ``batch_id``: ask Spark's trigger for a batch without data when Spark, running the operator
        itself, would run one once a trigger finds no input (:mod:`misa.runtime.no_data_batches`)."""
        if self._no_data_batches and self._watermark_moved():
            self.no_data.request(batch_id)
            self._requested = batch_id

    def _watermark_moved(self) -> bool:
        """Whether the next batch's watermark is ahead of this batch's: Spark's, when the stream has withWatermark,
        else the operator's own (its watermark_delay)."""
        moved, self._spark_moved = self._spark_moved, None
        if moved is not None:
            return moved
        if self.partitioned:
            return self._merger.watermark_moves()
        return watermark_moves(self.operator)

    def _spark_watermark_moves(self) -> bool | None:
        """Whether Spark's watermark moves after the running data batch (None: the stream has no withWatermark, or
        Spark runs no batches without data for the operator). Read once the jobs reading the batch ran (its
        watermark nodes saw every row: the deltas', the count's, the hints'), before its state phase: the commit
        thread is then idle, so the Py4J calls wait for no one (after the batch they waited on its RocksDB writes)."""
        spark_watermark = self._running_spark_watermark() if self._no_data_batches else None
        return spark_watermark.moved() if spark_watermark is not None else None

    def _follow_spark_watermark(self) -> None:
        """When the stream has withWatermark, the operator's watermark for the batch is the one Spark planned it
        with: Spark's counts every row its withWatermark node saw, also those a join with a static table or a
        filter below the operator drops before misa sees them."""
        if not self._follows_spark:
            return
        spark_watermark = self._running_spark_watermark()
        assert spark_watermark is not None
        if self.partitioned:
            self._merger.follow_watermark(spark_watermark.batch_us())
            return
        get = getattr(self.operator, "event_watermark", None)
        watermark = get() if callable(get) else None
        if watermark is not None:
            watermark.follow(spark_watermark.batch_us())

    def _running_spark_watermark(self) -> SparkWatermark | None:
        """The running query's Spark watermark (None: its stream has no withWatermark), once the query started."""
        if not self._query_started.wait(timeout=60):
            raise RuntimeError("the streaming query did not finish starting within 60 s of its first batch")
        return self._spark_watermark

    def _prefetching(self) -> bool:
        """Whether the batch about to run (or running) prefetches."""
        return self.hints is not None and self.view.prefetcher is not None

    def _choose_prefetching(self, record: BatchRecord, on: bool) -> dict[str, Any] | None:
        """With prefetching auto: measure the batch (``on``: it prefetched), turn prefetching on or off for the
        next one; the choice."""
        if self.auto is None:
            return None
        p = record.phases
        times = (p.compute_s, p.hint_wait_s, p.state_read_s, p.state_apply_s)
        sample = Sample(on, record.input_rows, record.batch_s, *times, device_bytes=record.state_device_read_bytes)
        choice = self.auto.observe(sample)
        self.view.set_prefetching(self.auto.on)
        self.hints.hold_ahead(self.auto.state.phase == PROBE)  # type: ignore[union-attr]
        return choice

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


class _PhaseClock:
    """Seconds since the previous lap, for the batch's phases."""

    def __init__(self, started: float):
        self._last = started

    def lap(self) -> float:
        now = time.monotonic()
        elapsed, self._last = now - self._last, now
        return elapsed
