"""One micro-batch through the runtime, the foreachBatch function's work: its phases in order (compute the deltas,
wait for the hints, merge into the state, hand the output to the sink, commit, wait for the previous version's
ack 2), and the batch's record to the metrics.

A batch without data computes nothing and runs the operator's ``no_data_batch`` as its state phase; the first
batch the stateful query does not run (planned for the request source alone) runs no operator and no sink and
commits the state as it is. The sink sees the stateful query's batch ids.
"""

from __future__ import annotations

import time
from typing import Any, Callable, ContextManager

import pyarrow as pa
from pyspark.sql import DataFrame

from misa.hosts.output import HostRows
from misa.io.dataframe_sink import FrameSink
from misa.io.spread import SpreadSink
from misa.obs.metrics import BatchMetrics
from misa.obs.records import BatchPhases, BatchRecord, BatchReport
from misa.operators.base import OperatorResult
from misa.operators.schema import nullable_fields
from misa.parallel.partitioned import RoutedDeltas
from misa.runtime.batch_hints import HintSession
from misa.runtime.batch_input import BatchInput
from misa.runtime.continuity import StateContinuity
from misa.runtime.job_descriptions import describe_jobs
from misa.runtime.job_parts import JobParts
from misa.runtime.watermark_sync import WatermarkSync
from misa.state.version import BatchVersion
from prefetch.auto import PROBE, Sample

Sink = Callable[[int, pa.Table], None]


class BatchLoop:
    """Runs each batch over ``parts`` (read at each batch: a restart renews their controller): the operator's
    deltas of the ``upstream`` rows of the batch's good input, merged into the state, written to ``sink``, committed
    at the position ``continuity`` keeps, in step with Spark's watermark through ``sync``; each batch's record to
    ``metrics``. ``state_phase`` is the context the state phase runs in (Python's collector paused or not)."""

    def __init__(
        self,
        parts: JobParts,
        continuity: StateContinuity,
        sync: WatermarkSync,
        batch_input: BatchInput,
        sink: Sink,
        upstream: Callable[[DataFrame], DataFrame] | None,
        metrics: BatchMetrics,
        state_phase: Callable[[], ContextManager[Any]],
    ):
        self.parts = parts
        self.continuity = continuity
        self.sync = sync
        self.input = batch_input
        self.sink = sink
        self.upstream = upstream
        self.metrics = metrics
        self._state_phase = state_phase
        self.skipped_batches = 0  # 1 when the stateful query never runs Spark's batch 0; sink ids are Spark's less it
        self._output_schema: pa.Schema | None = None  # the columns of the operator's last output that had some

    def starting(self) -> None:
        """A query starts: whether an earlier run found Spark's batch 0 not the stateful query's."""
        self.skipped_batches = int(self.parts.no_data.first_batch_skipped())

    def run(self, batch: DataFrame, batch_id: int) -> None:
        """Run Spark's batch ``batch_id`` of ``batch``'s rows; returns only after ack 2 of batch_id - 1."""
        started = time.monotonic()
        first = self.continuity.check(batch_id)
        if batch_id == 0:
            self.skipped_batches = int(self.parts.no_data.skips_first_batch())
        skipped = batch_id == 0 and self.skipped_batches == 1
        no_data = self.sync.without_data(batch_id, first)
        describe_jobs(batch, f"misa batch {batch_id}: the deltas of {self.parts.operator_name} for misa's state phase")
        if no_data or skipped:
            with HintSession(batch) as session:
                self._run(session, batch_id, started, no_data=True, skipped=skipped)
        else:
            with self._hint_session(batch) as session:
                self._run(session, batch_id, started)
        if not (no_data or skipped):  # Spark's batch without data moves no watermark: it never asks for another
            self.sync.after_batch(batch_id)

    def _hint_session(self, batch: DataFrame) -> HintSession:
        """The batch's hint session: it starts the batch's hints (none without prefetching)."""
        if self.parts.hints is None:
            return HintSession(batch)
        return self.parts.hints.begin(batch, self.input.good, on=self._prefetching(), next_on=self._prefetching)

    def _run(
        self, session: HintSession, batch_id: int, started: float, no_data: bool = False, skipped: bool = False
    ) -> None:
        """The batch's phases in order (after a rewind on replay): compute, merge, sink, commit, wait for ack 2;
        leaving ``session`` then starts the next batch's hints ahead. A batch without data (``no_data``) computes
        nothing and runs the operator's ``no_data_batch`` as its state phase; one the stateful query does not run
        (``skipped``: the first, planned for the request source alone) runs no operator and no sink, and commits
        the state as it is. The sink sees the stateful query's batch ids."""
        parts = self.parts
        phases = BatchPhases()
        clock = _PhaseClock(started)
        deltas, record = None, BatchRecord(input_rows=0, without_data=True)
        if not no_data:
            batch = session.rows
            counted, observation = self.input.observed(batch, batch_id)
            good = self.input.good(counted)
            frame = nullable_fields(parts.operator.deltas(self.upstream(good) if self.upstream else good))
            deltas = parts.merger.send(frame) if parts.on_executors else frame.toArrow()
            record = self.input.record(batch, batch_id - self.skipped_batches, observation, deltas.num_rows)
            record.deltas = deltas.num_rows
        phases.compute_s = clock.lap()
        session.wait()
        if not no_data:  # every job reading the batch ran (its hints' too)
            self.sync.read_spark_moved()
        phases.hint_wait_s = clock.lap()
        result = OperatorResult(pa.table({})) if skipped else self._merge(deltas)
        reads = parts.view.take_reads()
        phases.state_read_s, record.state_device_read_bytes = reads.seconds, reads.device_bytes
        phases.state_apply_s = clock.lap() - phases.state_read_s
        if not skipped:
            describe_jobs(session.rows, f"misa batch {batch_id}: the output of misa's state phase to the sink")
            self._deliver(batch_id - self.skipped_batches, self._typed(result.output), session.rows)
        phases.sink_s = clock.lap()
        frozen = parts.view.freeze(batch_id)
        if isinstance(frozen, BatchVersion):  # worker processes freeze their own: not counted here
            deleted = list(frozen.buffer.changes.values()).count(None)
            record.state_deletes = deleted + len(frozen.buffer.range_deletes)
            record.state_writes = len(frozen.buffer.changes) - deleted
        parts.controller.commit(frozen, parts.operator.metadata())
        phases.commit_inline_s = clock.lap()
        phases.ack_wait_s = parts.controller.wait_durable(batch_id - 1)
        self.continuity.committed(batch_id)
        record.output_rows, record.late_rows = result.output.num_rows, result.late_rows
        record.dropped_rows, record.state_reads = result.dropped_rows, result.state_reads
        record.state_keys, record.state_bytes = parts.store.approximate_keys(), parts.store.approximate_bytes()
        record.sst_bytes = parts.store.sst_bytes()
        record.cache = parts.view.take_cache_stats()
        record.prefetch = session.finish()
        record.phases, record.batch_s = phases, time.monotonic() - started
        record.prefetch_auto = None if no_data else self._choose_prefetching(record, session.on)
        commits = tuple(parts.controller.finished())
        self.metrics.report(BatchReport(batch_id, record, commits, parts.controller.status()))

    def _merge(self, deltas: pa.Table | RoutedDeltas | None) -> OperatorResult:
        """The driver's state phase: the operator merges the deltas into the state, or runs the batch without data
        (``deltas`` None)."""
        view = self.parts.view
        view.take_reads()  # reads before this phase (none expected) are not the batch's
        self.sync.follow()
        with self._state_phase():
            if deltas is None:
                return self.parts.merger.no_data_batch(view)
            return self.parts.merger.apply(deltas, view)

    def _deliver(self, batch_id: int, output: pa.Table | HostRows, batch: DataFrame) -> None:
        """Hand the batch's output to the sink: rows still on the state hosts (unless they are few) are written by
        the hosts for a sink that lets them, go as a DataFrame read from them to a sink that writes DataFrames, else
        as a table fetched by the driver; a host lost meanwhile is replaced and the output written again (the sinks
        replace a batch's output by its id)."""
        while isinstance(output, HostRows):
            try:
                large = output.num_columns and not output.by_driver
                if large and isinstance(self.sink, SpreadSink) and self.sink.write_spread(batch_id, output):
                    return
                if large and isinstance(self.sink, FrameSink):
                    self.sink.write_frame(batch_id, output.frame(batch.sparkSession))
                    return
                output = output.table()
            except Exception:
                again = output.recovered() if output.recovered else None
                if again is None:  # no host was lost: the sink's own failure
                    raise
                output = again  # a lost host's partition made its output again on its new host: write it all again
        self.sink(batch_id, output)

    def _typed(self, output: pa.Table | HostRows) -> pa.Table | HostRows:
        """The operator's output, as the empty table of the last output's columns when it has none (a batch without
        data of an operator that had no rows to shape it)."""
        if output.num_columns:
            self._output_schema = output.schema
        elif self._output_schema is not None:
            return self._output_schema.empty_table()
        return output

    def _prefetching(self) -> bool:
        """Whether the batch about to run (or running) prefetches."""
        return self.parts.hints is not None and self.parts.view.prefetcher is not None

    def _choose_prefetching(self, record: BatchRecord, on: bool) -> dict[str, Any] | None:
        """With prefetching auto: measure the batch (``on``: it prefetched), turn prefetching on or off for the
        next one; the choice."""
        auto = self.parts.auto
        if auto is None:
            return None
        p = record.phases
        times = (p.compute_s, p.hint_wait_s, p.state_read_s, p.state_apply_s)
        sample = Sample(on, record.input_rows, record.batch_s, *times, device_bytes=record.state_device_read_bytes)
        choice = auto.observe(sample)
        self.parts.view.set_prefetching(auto.on)
        self.parts.hints.hold_ahead(auto.state.phase == PROBE)  # type: ignore[union-attr]
        return choice


class _PhaseClock:
    """Seconds since the previous lap, for the batch's phases."""

    def __init__(self, started: float):
        self._last = started

    def lap(self) -> float:
        now = time.monotonic()
        elapsed, self._last = now - self._last, now
        return elapsed
