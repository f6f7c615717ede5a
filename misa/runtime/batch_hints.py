"""Keyed prefetching in the runtime: hints from a stage before the stateful one, on a side thread.

For each batch, :meth:`BatchHints.start` runs a Spark job (``mapInArrow`` over the chosen hint
stage) on its own thread while the batch's deltas are computed. Its rows are the batch's distinct
state keys with their latest event time; keys the Count-Min sketch finds hot are counted but not
hinted (they stay cached anyway). The rest go to the prefetch manager. After the batch,
:meth:`BatchHints.end_batch` lets the adaptive lookahead move to a later stage when too many
prefetches were never read.

When the job can read its next batch's input ahead (:mod:`misa.runtime.next_input`),
:meth:`BatchHints.start_next` runs the same extraction over it right after a batch, while the
driver waits for the next trigger and the executors are idle; the next batch then finds its keys
warm and skips its own hint job. When nothing has arrived yet the next batch extracts its own
hints, and the record says why (``next_unavailable``).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Protocol, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from misa.config import MisaConfig
from misa.runtime.next_input import NextInput
from prefetch.hints import HINT_COUNT, HINT_HASH, HINT_HOT, HINT_WINDOW_END, HintSpec, hint_frame
from prefetch.lookahead import LookaheadSelector
from prefetch.manager import PrefetchManager, PrefetchStats
from prefetch.sketch import CountMinSketch

log = logging.getLogger(__name__)
Stage = Callable[[DataFrame], DataFrame]


class HintSource(Protocol):
    """An operator whose state keys can be named from upstream rows before it runs."""

    def hint_spec(self) -> HintSpec:
        """Which columns make the state key (and the windows, if any)."""

    def hint_keys(self, hints: pa.Table) -> tuple[list[bytes], np.ndarray]:
        """State keys and hint timestamps of hint rows; keys the operator will not read are left out.

        An operator whose key is not a column of the upstream rows also has ``hint_input(rows)``: the
        rows projected to the columns its :meth:`hint_spec` names."""


def supports_hints(operator: object) -> bool:
    return callable(getattr(operator, "hint_spec", None)) and callable(getattr(operator, "hint_keys", None))


class BatchHints:
    """Extracts each batch's hints from one of ``stages`` (earliest first) and hands them to ``manager``."""

    def __init__(self, config: MisaConfig, operator: HintSource, stages: Sequence[Stage], manager: PrefetchManager):
        if not stages:
            raise ValueError("at least one hint stage is needed")
        self.operator = operator
        self.stages = list(stages)
        self.manager = manager
        self.sketch = CountMinSketch(
            config.prefetch_sketch_depth,
            config.prefetch_sketch_width,
            threshold=config.prefetch_hot_threshold,
            aging_records=config.prefetch_aging_records,
        )
        self.selector = LookaheadSelector(len(stages), config.prefetch_wasted_ratio)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="misa-hints")
        self._ahead: Future | None = None  # the next batch's hints, extracted between batches

    def start(self, batch: DataFrame) -> Future:
        """Start extracting the hints of ``batch``; the future gives the hint phase's record.

        If its hints were extracted ahead (:meth:`start_next`) and found its input, that extraction's
        future is returned instead (it may still run): the batch's rows are not read twice."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and not (ahead.done() and ahead.result().get("next_unavailable")):
            return ahead
        stage = self.selector.current
        frame = self._frame(batch, stage)
        record = {"next_unavailable": ahead.result()["next_unavailable"]} if ahead is not None else {}
        return self._thread.submit(lambda: {**record, **self._extract(frame, stage)})

    def start_next(self, source: NextInput, good: Stage) -> None:
        """Between batches: extract the hints of the next batch's arrived input (``good`` drops its bad
        records, as the batch will) and prefetch them."""
        self._ahead = self._thread.submit(self._extract_ahead, source, good, self.selector.current)

    def drop_ahead(self) -> None:
        """Forget the hints extracted ahead (the state was reloaded: the next batch is a replay)."""
        self._ahead = None

    def _extract_ahead(self, source: NextInput, good: Stage, stage: int) -> dict[str, Any]:
        started = time.monotonic()
        peek = source.peek()
        if peek.frame is None:
            return {"stage": stage, "next_unavailable": peek.reason, "extract_s": time.monotonic() - started}
        try:
            record = self._extract(self._frame(good(peek.frame), stage), stage)
        except Exception:  # noqa: BLE001 (a file gone or unreadable ahead: the batch then extracts its own hints)
            log.warning("the next batch's hints could not be extracted ahead; it extracts its own", exc_info=True)
            return {"stage": stage, "next_unavailable": "failed", "extract_s": time.monotonic() - started}
        return {**record, "next_files": len(peek.files), "extract_s": time.monotonic() - started}

    def _frame(self, rows: DataFrame, stage: int) -> DataFrame:
        """The hint job of ``rows`` from hint stage ``stage``."""
        rows = self.stages[stage](rows)
        hint_input = getattr(self.operator, "hint_input", None)
        return hint_frame(hint_input(rows) if hint_input else rows, self.operator.hint_spec(), self.sketch.copy())

    def _extract(self, frame: DataFrame, stage: int) -> dict[str, Any]:
        started = time.monotonic()
        table = frame.toArrow()
        self._count(table)
        hot = table[HINT_HOT]
        hints = table.filter(pc.invert(hot))
        keys, ts = self.operator.hint_keys(hints)
        self.manager.hint(keys, ts)
        return {
            "stage": stage,
            "rows": table.num_rows,
            "hot_skipped": int(pc.sum(hot).as_py() or 0),
            "hinted": len(keys),
            "extract_s": time.monotonic() - started,
        }

    def _count(self, table: pa.Table) -> None:
        """Add the batch's records per key to the sketch (a key's windows overlap: take the largest)."""
        if not table.num_rows:
            return
        by_window = [HINT_HASH] + ([HINT_WINDOW_END] if HINT_WINDOW_END in table.column_names else [])
        per_window = table.group_by(by_window).aggregate([(HINT_COUNT, "sum")])
        per_key = per_window.group_by(HINT_HASH).aggregate([(f"{HINT_COUNT}_sum", "max")])
        hashes = per_key[HINT_HASH].to_numpy().view(np.uint64)
        self.sketch.add(hashes, per_key[f"{HINT_COUNT}_sum_max"].to_numpy())

    def end_batch(self, stats: PrefetchStats) -> int:
        """Feed the batch's prefetch outcome to the adaptive lookahead; returns the next batch's stage."""
        return self.selector.observe(stats.prefetched, stats.wasted_prefetches)

    def close(self) -> None:
        self._thread.shutdown(wait=True)
