"""Keyed prefetching in the runtime: hints from a stage before the stateful one, on a side thread.

Each batch has one :class:`HintSession` (:meth:`BatchHints.begin`), which runs a Spark job
(``mapInArrow`` over the chosen hint stage) on its own thread while the batch's deltas are computed.
Its rows are the batch's distinct state keys with their latest event time; keys the Count-Min sketch
finds hot are counted but not hinted (they stay cached anyway). The rest go to the prefetch manager.
After the batch, :meth:`HintSession.finish` lets the adaptive lookahead move to a later stage when too
many prefetches were never read.

When the job can read its next batch's input ahead (:mod:`misa.runtime.next_input`), a
:class:`HintSession` whose batch ended runs the same extraction over it until the next one starts,
file by file as they arrive, while the driver waits for the trigger and the executors are idle; the
next batch then finds its keys warm and skips its own hint job (files that arrive after the last
look are read on a miss). Where the source reads the files' hint rows itself (``hint_rows`` of
:class:`~misa.runtime.next_input.FileSourcePeek`), their keys are extracted on the driver with no
Spark job at all (``reader: driver`` in the record). When nothing arrived in time, the source cannot be peeked, or
:class:`~prefetch.lookahead.HintTiming` chose in-batch hints (ahead's prefetches were mostly wasted
or late and in-batch hints measured clearly better), the batch extracts its own hints
and the record says why (``next_unavailable``).

Timer-driven reads: with each extraction, the operator names the keys its timers will read at the
watermark the rows' latest event time gives (:meth:`HintSource.due_keys`, read from the state: in
append mode, the sliding windows' records that close), and they are prefetched too (``due_hinted``).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from common.location import Location
from misa.config import MisaConfig
from misa.operators.base import HintSource
from misa.runtime.hint_target import BatchHintLog, FrameHintTarget, HintCounts, HintTarget, LocalHints
from misa.runtime.next_input import NextInput, Peek
from misa.state.view import StateView
from prefetch.hints import (
    HINT_HOT,
    HINT_TS,
    extract_partition,
    hint_arrow_schema,
    hint_frame,
    key_counts,
)
from prefetch.lookahead import AHEAD, IN_BATCH, HintTiming, LookaheadSelector
from prefetch.manager import PrefetchManager, PrefetchStats
from prefetch.sketch import CountMinSketch

log = logging.getLogger(__name__)
DRIVER, SPARK, BOTH = "driver", "spark", "driver and spark"
"""Where a batch's hint rows were read: on the driver with Arrow (the source's ``hint_rows``), by a Spark hint job."""
DataFrameStage = Callable[[DataFrame], DataFrame]  # a stage before the stateful one: the batch's DataFrame up to it


class BatchHints:
    """Extracts each batch's hints from one of ``stages`` (earliest first) and hands them to ``manager``;
    with ``next_input`` (and ``spark.misa.prefetch.nextBatch``), ahead of the batch from its arrived input
    while the driver waits for the trigger.

    The query calls :meth:`follow_spark_log` at start, :meth:`drop_ahead` when it reloads the state and
    :meth:`close` at the end; each batch runs in one :meth:`begin` session (:class:`HintSession`)."""

    POLL_S = 0.2
    """Between batches: how often the next batch's input is looked at for newly arrived files."""

    def __init__(
        self,
        config: MisaConfig,
        operator: HintSource,
        stages: Sequence[DataFrameStage],
        manager: PrefetchManager | None,
        state: StateView | None,
        next_input: NextInput | None = None,
        target: HintTarget | None = None,
    ):
        if not stages:
            raise ValueError("at least one hint stage is needed")
        self.operator = operator
        self.stages = list(stages)
        # where the hint rows go: this process's manager, the operator's timers reading ``state``; or ``target``
        self.target: HintTarget = target or LocalHints(operator, manager, state)  # type: ignore[arg-type]
        self.next_input = next_input if config.prefetch_next_batch else None
        self._never_ahead = "source not peekable" if next_input is None else "spark.misa.prefetch.nextBatch=false"
        self.sketch = CountMinSketch(
            config.prefetch_sketch_depth,
            config.prefetch_sketch_width,
            threshold=config.prefetch_hot_threshold,
            aging_records=config.prefetch_aging_records,
        )
        self.selector = LookaheadSelector(len(stages), config.prefetch_wasted_ratio)
        self.timing = HintTiming(config.prefetch_wasted_ratio)
        self._wasted_ratio = config.prefetch_wasted_ratio
        self._held = False  # while prefetching=auto probes: hints ahead, the timing not adapted
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="misa-hints")
        self._ahead: Future | None = None  # the next batch's hints, extracted between batches
        self._stop_ahead = threading.Event()
        self._ahead_files = 0  # files of the next batch hinted so far
        self._session: HintSession | None = None  # the running batch's

    def follow_spark_log(self, checkpoint: Location) -> None:
        """The query's Spark checkpoint (the copy Spark writes): the next input is what its log has not assigned."""
        if self.next_input is not None:
            self.next_input.follow(checkpoint)

    def begin(
        self, batch: DataFrame, good: DataFrameStage, on: bool, next_on: Callable[[], bool] = lambda: False
    ) -> HintSession:
        """The hint session of ``batch``, which prefetches if ``on``; ``good`` drops bad records (from the batch's
        rows and from the next batch's input read ahead); ``next_on``, asked when the batch ends, whether the next
        batch prefetches. Raises if the previous batch's session is still open."""
        if self._session is not None:
            raise RuntimeError("a batch's hint session began before the previous one was closed")
        self._session = HintSession(batch, self, good, on, next_on)
        return self._session

    def _ended(self, session: HintSession) -> None:
        """``session`` was closed: the next batch may begin."""
        if self._session is session:
            self._session = None

    def hold_ahead(self, hold: bool) -> None:
        """While ``hold`` (prefetching ``auto`` probing whether prefetching pays), hints come from ahead and the
        hint timing does not adapt: a probe measures prefetching as it runs where it pays, and its first
        batches (a cold cache after batches without prefetching) say nothing about where hints should come
        from. A hold starts the timing afresh: what it measured before the batches without prefetching is stale."""
        if hold and not self._held:
            self.timing = HintTiming(self._wasted_ratio)
        self._held = hold

    def _ahead_found(self) -> bool:
        """Whether the next batch's hints come from its input read ahead (so it needs no hint job)."""
        return self._ahead is not None and self._ahead_files > 0

    def _start(self, batch: DataFrame) -> Future:
        """Stop extracting ahead and start the hints of ``batch``; the future gives the hint phase's record.

        If hints were extracted ahead (:meth:`_start_next`) and found input, the batch's rows are not
        read again: the future gives the ahead extraction's record once it ends (it finishes the file
        it is at). Otherwise a hint job over ``batch`` runs, and the record says why (``next_unavailable``)."""
        ahead, self._ahead = self._ahead, None
        self._stop_ahead.set()
        stage = self.selector.current

        def after_ahead() -> dict[str, Any]:
            found = ahead.result() if ahead is not None else {"next_unavailable": self._not_ahead_reason()}
            if not found.get("next_unavailable"):
                return found
            in_batch = self._extract(self._frame(batch, stage), stage, BatchHintLog())
            return {"source": IN_BATCH, "next_unavailable": found["next_unavailable"], **in_batch}

        return self._thread.submit(after_ahead)  # one thread: it runs when the ahead extraction has ended

    def _not_ahead_reason(self) -> str:
        if self.next_input is None:
            return self._never_ahead
        return "in-batch hints chosen" if self.timing.current == IN_BATCH else "no extraction ahead"

    def _start_next(self, good: DataFrameStage) -> None:
        """Between batches, until :meth:`_start`: extract the hints of the next batch's input as its files
        arrive (``good`` drops their bad records, as the batch will) and prefetch them."""
        if self.next_input is None or self.timing.current != AHEAD:
            return
        self._stop_ahead = threading.Event()
        self._ahead_files = 0
        self._ahead = self._thread.submit(self._extract_ahead, good, self.selector.current, self._stop_ahead)

    def drop_ahead(self) -> None:
        """Stop and forget the hints extracted ahead (the state was reloaded: the next batch is a replay)."""
        self._stop_ahead.set()
        self._ahead = None

    def _extract_ahead(self, good: DataFrameStage, stage: int, stop: threading.Event) -> dict[str, Any]:
        """Extract each newly arrived file's hints until ``stop``, or until Spark has planned the next batch (its
        files are then known to the source's log, and newer files belong to the batch after it); the sum of
        their records."""
        assert self.next_input is not None
        started = time.monotonic()
        seen: set[str] = set()
        total = dict(source=AHEAD, stage=stage, rows=0, hot_skipped=0, hinted=0, over_capacity=0, due_hinted=0)
        reason = "no new files"
        hinted = BatchHintLog()  # what the files before hinted for this batch
        readers: set[str] = set()  # where the files' hint rows were read: DRIVER, SPARK
        planned: int | None = None  # the newest batch planned when the first look was taken
        while True:  # at least one look, however soon the batch starts
            peek = self.next_input.peek(frozenset(seen))
            planned = peek.planned if planned is None else planned
            if peek.planned > planned:  # Spark planned the next batch: files not seen yet are the one after
                break
            if peek.hint_rows is not None or peek.frame is not None:
                try:
                    found = self._extract_ahead_rows(peek, good, stage, hinted)
                except Exception:  # noqa: BLE001 (a file gone or unreadable ahead: its keys are read on a miss)
                    log.warning("the next batch's hints could not be extracted ahead", exc_info=True)
                    reason = "failed"
                    break
                seen.update(peek.files)
                self._ahead_files = len(seen)
                for name in ("rows", "hot_skipped", "hinted", "over_capacity", "due_hinted"):
                    total[name] += found[name]
                readers.add(found["reader"])
                total["stage"] = found["stage"]
            elif not seen:
                reason = peek.reason
            if stop.wait(self.POLL_S):
                break
        if not seen:
            return {"stage": stage, "next_unavailable": reason, "extract_s": time.monotonic() - started}
        reader = readers.pop() if len(readers) == 1 else BOTH
        return {**total, "reader": reader, "next_files": len(seen), "extract_s": time.monotonic() - started}

    def _extract_ahead_rows(self, peek: Peek, good: DataFrameStage, stage: int, hinted: BatchHintLog) -> dict[str, Any]:
        """Hint the keys of the files ``peek`` found: from their hint rows on the driver when the source read them
        so (through the job's last hint stage), else with a hint job over their rows from hint stage ``stage``
        (``good`` drops their bad records)."""
        if peek.hint_rows is None:
            assert peek.frame is not None
            return self._extract(self._frame(good(peek.frame), stage), stage, hinted)
        started = time.monotonic()
        spec = self.operator.hint_spec()
        batches = list(extract_partition(iter(peek.hint_rows.to_batches()), spec, self.sketch))
        table = pa.Table.from_batches(batches, schema=hint_arrow_schema(peek.hint_rows.schema, spec))
        return {**self._hint_table(table, len(self.stages) - 1, hinted, started), "reader": DRIVER}

    def _frame(self, rows: DataFrame, stage: int) -> DataFrame:
        """The hint job of ``rows`` from hint stage ``stage``."""
        rows = self.operator.hint_input(self.stages[stage](rows))
        return hint_frame(rows, self.operator.hint_spec(), self.sketch.copy())

    def _extract(self, frame: DataFrame, stage: int, hinted: BatchHintLog | None = None) -> dict[str, Any]:
        """Run the hint job ``frame`` (from hint stage ``stage``) and hint its keys, then the keys due at the
        watermark its rows give; ``hinted``: what earlier extractions for the same batch hinted (updated)."""
        started = time.monotonic()
        if isinstance(self.target, FrameHintTarget):
            return {**self._hint_sent(frame, stage, hinted, started), "reader": SPARK}
        return {**self._hint_table(frame.toArrow(), stage, hinted, started), "reader": SPARK}

    def _hint_sent(self, frame: DataFrame, stage: int, hinted: BatchHintLog | None, started: float) -> dict[str, Any]:
        """Hint the keys of the hint job ``frame``, its rows sent by its tasks to the hosts that own their keys."""
        assert isinstance(self.target, FrameHintTarget)
        sent = self.target.hint_frame(frame, BatchHintLog() if hinted is None else hinted)
        self.sketch.add(sent.key_hashes, sent.key_records)
        return self._record(stage, sent.rows, sent.hot, sent.counts, started)

    def _hint_table(self, table: pa.Table, stage: int, hinted: BatchHintLog | None, started: float) -> dict[str, Any]:
        """Hint the keys of the hint rows ``table``, then the keys due at the watermark its rows give."""
        hinted = BatchHintLog() if hinted is None else hinted
        self._count(table)
        hot = table[HINT_HOT]
        latest = pc.max(table[HINT_TS]).as_py() if table.num_rows else None
        counts = self.target.hint_rows(table.filter(pc.invert(hot)), latest, hinted)
        return self._record(stage, table.num_rows, int(pc.sum(hot).as_py() or 0), counts, started)

    @staticmethod
    def _record(stage: int, rows: int, hot: int, counts: HintCounts, started: float) -> dict[str, Any]:
        """An extraction's record: its stage, hint rows, hot rows skipped, what the rest hinted and its time."""
        return {
            "source": IN_BATCH,
            "stage": stage,
            "rows": rows,
            "hot_skipped": hot,
            "hinted": counts.hinted,
            "over_capacity": counts.over_capacity,
            "due_hinted": counts.due_hinted,
            "extract_s": time.monotonic() - started,
        }

    def _count(self, table: pa.Table) -> None:
        """Add the batch's records per key to the sketch."""
        self.sketch.add(*key_counts(table))

    def _end_batch(self, source: str, stats: PrefetchStats) -> dict[str, Any]:
        """Feed the outcome of the batch's hints (from ``source``) to the adaptive lookahead: the next batch's
        stage and hint source."""
        timing = AHEAD
        if not self._held:
            timing = self.timing.observe(
                source, stats.prefetched, stats.wasted_prefetches, stats.prefetch_hits, stats.late_hints
            )
        return {"next_stage": self.selector.observe(stats.prefetched, stats.wasted_prefetches), "next_source": timing}

    def close(self) -> None:
        self._stop_ahead.set()
        self._thread.shutdown(wait=True)


class HintSession:
    """One batch's hints, from before the batch reads its input until the driver waits for the next trigger.

    Made by :meth:`BatchHints.begin` (``HintSession(batch)``: a job without hints) and used as a context manager
    around the batch: the block is the batch. At the start, the hints were either found ahead (the next batch's
    input read between batches) or a hint job over the batch starts now; then :attr:`rows` is the batch
    persisted, since the hint job and the delta job both read it. Inside the block the batch calls :meth:`wait`
    before its state phase and :meth:`finish` after its merge (the batch's prefetch record), in that order (a call
    out of order raises :class:`RuntimeError`). Leaving the block unpersists the batch and, if the batch ended
    (no exception) and the next batch prefetches, starts extracting the next batch's hints from its input as it
    arrives, while the driver waits for the trigger.
    """

    _ORDER = ("begin", "wait", "finish")

    def __init__(
        self,
        batch: DataFrame,
        hints: BatchHints | None = None,
        good: DataFrameStage | None = None,
        on: bool = False,
        next_on: Callable[[], bool] = lambda: False,
    ):
        prefetching = hints if on else None  # the batch's hints, when it prefetches
        self.on = prefetching is not None
        """Whether the batch prefetches."""
        self.ahead = prefetching is not None and prefetching._ahead_found()
        """Whether the batch's hints were found ahead (its rows are then read once, by the delta job)."""
        self._hints, self._good, self._next_on = hints, good or (lambda rows: rows), next_on
        self._persisted = self.on and not self.ahead
        self.rows = batch.persist() if self._persisted else batch
        """The batch's rows, for the job to read."""
        self._job = prefetching._start(self._good(self.rows)) if prefetching is not None else None
        self._found: dict[str, Any] | None = None
        self._step = "begin"

    def wait(self) -> None:
        """Wait until the batch's hints are all with the prefetch manager (before the state phase reads)."""
        self._advance("wait")
        self._found = self._job.result() if self._job is not None else None

    def finish(self) -> dict[str, Any] | None:
        """The batch's prefetch record (None when it did not prefetch): the hint phase's figures, the prefetch
        statistics and the adaptive lookahead's choice for the next batch (its hint stage and source)."""
        self._advance("finish")
        if self._found is None or self._hints is None:
            return None
        stats = self._hints.target.take_stats()
        return {**self._found, **stats.as_dict(), **self._hints._end_batch(self._found.get("source", ""), stats)}

    def close(self, ended: bool = False) -> None:
        """End the session (idempotent): unpersist the batch if it was persisted; if the batch ``ended`` (it was
        finished, nothing raised) and the next batch prefetches, extract the next batch's hints from its input as
        it arrives, until the next session begins."""
        if self._step == "closed":
            return
        finished, self._step = self._step == "finish", "closed"
        if self._hints is not None:
            self._hints._ended(self)
        if self._persisted:
            self.rows.unpersist()
        if ended and finished and self._hints is not None and self._next_on():
            self._hints._start_next(self._good)

    def _advance(self, call: str) -> None:
        """Move to ``call``, which must follow the previous call."""
        if self._step == "closed" or self._ORDER.index(call) != self._ORDER.index(self._step) + 1:
            raise RuntimeError(f"hint session: {call}() after {self._step}(); the order is {', '.join(self._ORDER)}")
        self._step = call

    def __enter__(self) -> HintSession:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.close(ended=exc_type is None)
