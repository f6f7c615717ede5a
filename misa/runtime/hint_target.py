"""Where a batch's hint rows become prefetches: the operator names their state keys, the soonest that fit the cache
are hinted to a prefetch manager, then the keys its timers will read (:class:`LocalHints`, in the process that holds
the state; with worker processes, :class:`misa.parallel.partitioned.PartitionedHints` sends each worker its rows)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame

from misa.operators.base import HintSource
from misa.state.view import StateView
from prefetch.manager import PrefetchManager, PrefetchStats


@dataclass
class BatchHintLog:
    """What the hint extractions of one batch (one in the batch, or one per file read ahead) hinted so far."""

    rows: int = 0  # keys named by the batch's rows
    due: set[bytes] = field(default_factory=set)  # keys the operator's timers will read


@dataclass
class HintCounts:
    """What one extraction's rows hinted: keys named and hinted, named but beyond the cache, timers' keys hinted."""

    hinted: int = 0
    over_capacity: int = 0
    due_hinted: int = 0

    def __add__(self, other: HintCounts) -> HintCounts:
        return HintCounts(
            self.hinted + other.hinted,
            self.over_capacity + other.over_capacity,
            self.due_hinted + other.due_hinted,
        )


@dataclass
class SentHints:
    """What a hint job's rows, sent by its tasks straight to the hosts, did: the rows, the hot ones (counted, not
    hinted), what the rest hinted, and what the driver's Count-Min sketch counts of them
    (:func:`prefetch.hints.key_counts`: key hashes and their records)."""

    rows: int
    hot: int
    counts: HintCounts
    key_hashes: np.ndarray
    key_records: np.ndarray


class HintTarget(Protocol):
    """Takes a batch's hint rows (hot keys left out) and reports the batch's prefetching."""

    def hint_rows(self, hints: pa.Table, latest_event_us: int | None, hinted: BatchHintLog) -> HintCounts:
        """Hint the state keys ``hints`` name, then those the timers read at the watermark ``latest_event_us`` gives."""

    def take_stats(self) -> PrefetchStats:
        """The batch's prefetch counters (they restart)."""


@runtime_checkable
class FrameHintTarget(HintTarget, Protocol):
    """A target whose hint rows go from the hint job's tasks straight to where the state is (the state hosts on
    the executors): the driver never holds them."""

    def hint_frame(self, hints: DataFrame, hinted: BatchHintLog) -> SentHints:
        """Run the hint job ``hints``; its tasks send each row to the host whose state it names, which hints the
        keys of its rows but the hot ones, then those its timers read at the watermark the rows' latest event
        time gives."""


class LocalHints:
    """Hints to this process's prefetch manager, named by ``operator`` over ``state``."""

    def __init__(self, operator: HintSource, manager: PrefetchManager, state: StateView):
        self.operator = operator
        self.manager = manager
        self.state = state

    def hint_rows(self, hints: pa.Table, latest_event_us: int | None, hinted: BatchHintLog) -> HintCounts:
        named, named_ts = self.operator.hint_keys(hints)
        keys, ts = self._within_capacity(named, named_ts, hinted)
        self.manager.hint(keys, ts)
        hinted.rows += len(keys)
        return HintCounts(len(keys), len(named) - len(keys), self._hint_due(latest_event_us, hinted))

    def take_stats(self) -> PrefetchStats:
        return self.manager.take_stats()

    def _within_capacity(
        self, keys: list[bytes], ts: np.ndarray, hinted: BatchHintLog
    ) -> tuple[list[bytes], np.ndarray]:
        """Of ``keys`` (with their hint times ``ts``), the soonest that the state cache holds beside what the batch
        ``hinted`` already (at the mean size of its entries): keys beyond it would be evicted before the batch
        reads them, each prefetch a wasted read (measured on the slow volume: at 19,000 records/s a batch's
        22,000 keys in a 1 MiB cache made the state read 0.71 s against 0.47 s without prefetching)."""
        capacity = self.manager.capacity_entries()
        room = None if capacity is None else max(0, capacity - hinted.rows - len(hinted.due))
        if room is None or len(keys) <= room:
            return keys, ts
        soonest = np.argsort(ts, kind="stable")[:room]
        return [keys[i] for i in soonest], np.asarray(ts)[soonest]

    def _hint_due(self, latest_event_us: int | None, hinted: BatchHintLog) -> int:
        """Hint the keys the operator's timers will read at the watermark the rows' latest event time gives
        (records whose windows close in the batch), those the batch did not hint yet (``hinted``, updated), soonest
        due first, within the cache's capacity; how many."""
        if latest_event_us is None:
            return 0
        due, timers = self.operator.due_keys(self.state, int(latest_event_us))
        new = [i for i, key in enumerate(due) if key not in hinted.due]
        keys, ts = self._within_capacity([due[i] for i in new], np.asarray(timers)[new], hinted)
        self.manager.hint(keys, ts)
        hinted.due.update(keys)
        return len(keys)
