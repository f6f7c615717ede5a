"""Keyed prefetching in the runtime: hints from a stage before the stateful one, on a side thread.

For each batch, :meth:`BatchHints.start` runs a Spark job (``mapInArrow`` over the chosen hint
stage) on its own thread while the batch's deltas are computed. Its rows are the batch's distinct
state keys with their latest event time; keys the Count-Min sketch finds hot are counted but not
hinted (they stay cached anyway). The rest go to the prefetch manager. After the batch,
:meth:`BatchHints.end_batch` lets the adaptive lookahead move to a later stage when too many
prefetches were never read.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Protocol, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from misa.config import MisaConfig
from prefetch.hints import HINT_COUNT, HINT_HASH, HINT_HOT, HINT_WINDOW_END, HintSpec, hint_frame
from prefetch.lookahead import LookaheadSelector
from prefetch.manager import PrefetchManager, PrefetchStats
from prefetch.sketch import CountMinSketch

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

    def start(self, batch: DataFrame) -> Future:
        """Start extracting the hints of ``batch``; the future gives the hint phase's record."""
        stage = self.selector.current
        rows = self.stages[stage](batch)
        hint_input = getattr(self.operator, "hint_input", None)
        frame = hint_frame(hint_input(rows) if hint_input else rows, self.operator.hint_spec(), self.sketch.copy())
        return self._thread.submit(self._extract, frame, stage)

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
