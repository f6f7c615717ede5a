"""A sliding-window aggregation's state kept as panes: one read and one write per touched group key and batch.

:class:`PaneState` merges a batch's pane deltas into the pane records (:mod:`misa.operators.panes`),
keeps each record's timer, and at a new watermark visits the due records: append mode emits their
windows that closed, both modes drop panes no open window holds and delete records left empty.
It returns windows as (distinct group key index, window end, aggregate state); the
:class:`~misa.operators.aggregation.Aggregation` turns them into output rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from misa.operators.pane_objects import PaneObjects
from misa.operators.panes import (
    PaneRecords,
    Panes,
    PaneWindows,
    fold,
    group_key_of_timer,
    record_keys,
    timer_keys,
    timer_of,
    timer_range,
    window_states,
)
from misa.state.codec import AggStates, distinct_keys, latest_per_key
from misa.state.keys import PANE_RECORD, prefix_end
from misa.state.view import StateView

RECORDS_END = prefix_end(PANE_RECORD)  # the end of the pane records' key range


@dataclass
class Windows:
    """Windows to emit: ``keys`` index ``group_keys``; ``states`` are their combined aggregate states (``objects``
    their object aggregates' states, when there are some)."""

    group_keys: list[bytes]
    keys: np.ndarray
    ends: np.ndarray
    states: np.ndarray
    objects: list[list[Any]] | None = None


class PaneState:
    """The pane records and timers of one sliding aggregation (its aggregates' state ``cells``; ``append``: emit
    windows when they close)."""

    def __init__(self, windows: PaneWindows, cells: int, append: bool):
        self.windows = windows
        self.records = PaneRecords(cells)
        self.append = append
        self.objects: PaneObjects | None = None

    def configure(self, cells: int, objects: PaneObjects | None) -> None:
        """The aggregates' vectorized ``cells`` and object aggregates, known once their input types are."""
        if (cells, objects is not None) != (self.records.cells, self.records.objects):
            self.records = PaneRecords(cells, objects is not None)
        self.objects = objects

    def _none(self, group_keys: list[bytes], aggs: AggStates) -> Windows:
        """No windows."""
        empty = np.zeros(0, np.int64)
        return Windows(group_keys, empty, empty, aggs.identity(0), [] if self.objects is not None else None)

    def merge(
        self,
        group_keys: list[bytes],
        pane_ends: np.ndarray,
        states: np.ndarray,
        event_us: np.ndarray,
        watermark_us: int,
        state: StateView,
        aggs: AggStates,
        objects: list[list[Any]] | None = None,
    ) -> Windows:
        """Fold the batch's pane deltas (rows of ``group_keys`` with no window closed at ``watermark_us``
        only; ``objects``: their object states) into their records with ``aggs``; in update mode the windows they
        changed, with their new states."""
        distinct, key_of_row = distinct_keys(group_keys)
        ts = latest_per_key(key_of_row, len(distinct), event_us)
        keys = record_keys(distinct)
        old_timers, old = self.records.decode(state.get_many(keys, ts.tolist()))
        delta = Panes(key_of_row, pane_ends, states, objects)
        merged = fold(_concat(old, delta), aggs, self.objects)
        merged = merged.take(np.flatnonzero(self.windows.last_window_end(merged.ends) > watermark_us))
        self._write(state, distinct, old_timers, merged, watermark_us)
        if self.append:  # append mode emits windows when they close, not when they change
            return self._none(distinct, aggs)
        first, last = self.windows.open_window_ends(pane_ends, watermark_us)
        out_keys, out_ends = self.windows.windows_of(key_of_row, first, last)
        return Windows(distinct, out_keys, out_ends, *self._window_states(merged, out_keys, out_ends, aggs))

    def _window_states(
        self, panes: Panes, keys: np.ndarray, ends: np.ndarray, aggs: AggStates
    ) -> tuple[np.ndarray, list[list[Any]] | None]:
        return window_states(panes, self.windows, keys, ends, aggs, self.objects)

    def close(self, previous_us: int, watermark_us: int, state: StateView, aggs: AggStates) -> Windows:
        """Visit the records due at ``watermark_us`` (the watermark moved from ``previous_us``): in append
        mode the windows that closed in between, with their states; drop dead panes and empty records. In
        update mode a record is due only once all its windows closed, so it is deleted without being read."""
        begin, end = timer_range(watermark_us)
        distinct = list(dict.fromkeys(group_key_of_timer(k) for k, _ in state.scan(begin, end)))
        state.delete_range(begin, end)
        none = self._none(distinct, aggs)
        if not distinct:
            return none
        if not self.append:  # a due timer is the key's last window end: every pane is dead, no need to read them
            records = record_keys(distinct)
            state.put_many(records, [None] * len(records))
            return none
        _, panes = self.records.decode(state.get_many(record_keys(distinct)))
        emitted = none
        if self.append:
            first, last = self.windows.open_window_ends(panes.ends, previous_us)
            out_keys, out_ends = self.windows.windows_of(panes.keys, first, last, through=watermark_us)
            emitted = Windows(distinct, out_keys, out_ends, *self._window_states(panes, out_keys, out_ends, aggs))
        live = panes.take(np.flatnonzero(self.windows.last_window_end(panes.ends) > watermark_us))
        self._write(state, distinct, np.full(len(distinct), -1), live, watermark_us)
        return emitted

    def every_window(self, state: StateView, aggs: AggStates) -> Windows:
        """Complete output: every window of every key's panes, with its state (one scan of the records)."""
        records = state.scan(PANE_RECORD, RECORDS_END)
        return self.record_windows([k for k, _ in records], [v for _, v in records], aggs)

    def record_windows(
        self, keys: list[bytes], records: list[bytes], aggs: AggStates, after_us: int | None = None
    ) -> Windows:
        """The windows of pane records (their ``keys``, behind :data:`PANE_RECORD`), with their states: every one, or
        those ending after ``after_us``."""
        distinct = [k[len(PANE_RECORD) :] for k in keys]
        _, panes = self.records.decode(records)
        first = self.windows.first_window_end(panes.ends)
        if after_us is not None:
            first = self.windows.open_window_ends(panes.ends, after_us)[0]
        keys_of, ends = self.windows.windows_of(panes.keys, first, self.windows.last_window_end(panes.ends))
        return Windows(distinct, keys_of, ends, *self._window_states(panes, keys_of, ends, aggs))

    def due_records(self, state: StateView, after_us: int, through_us: int) -> tuple[list[bytes], np.ndarray]:
        """Append mode: the records :meth:`close` will read when the watermark moves from ``after_us`` to
        ``through_us`` (their timers fall in between), with their timers; update mode deletes them unread."""
        if not self.append or through_us <= after_us:
            return [], np.zeros(0, np.int64)
        due = state.scan(timer_range(after_us)[1], timer_range(through_us)[1])  # timers in (after, through]
        timers = {group_key_of_timer(k): timer_of(k) for k, _ in due}  # a key has one timer
        return record_keys(list(timers)), np.fromiter(timers.values(), np.int64, len(timers))

    def _write(
        self,
        state: StateView,
        distinct: list[bytes],
        old_timers: np.ndarray,
        panes: Panes,
        watermark_us: int,
    ) -> None:
        """Write the records of ``distinct`` keys (deleting those without panes) and move changed timers."""
        timers = self._timers(len(distinct), panes, watermark_us)
        changed = np.flatnonzero(timers != old_timers)
        gone, due = changed[old_timers[changed] >= 0], changed[timers[changed] >= 0]
        group_keys = np.array(distinct, dtype=object)
        keys = record_keys(distinct) + timer_keys(old_timers[gone], group_keys[gone].tolist())
        keys += timer_keys(timers[due], group_keys[due].tolist())
        values = self.records.encode(len(distinct), timers, panes) + [None] * len(gone) + [b""] * len(due)
        state.put_many(keys, values)

    def _timers(self, count: int, panes: Panes, watermark_us: int) -> np.ndarray:
        """Each key's timer (-1: no panes): when its last window closes (update mode), or the end of
        its next window to emit (append mode)."""
        timers = np.full(count, -1, np.int64)
        if not len(panes.keys):
            return timers
        starts = np.flatnonzero(np.r_[True, panes.keys[1:] != panes.keys[:-1]])
        if self.append:
            due = np.maximum(self.windows.first_window_end(panes.ends), self.windows.next_window_end(watermark_us))
            timers[panes.keys[starts]] = np.minimum.reduceat(due, starts)
        else:
            timers[panes.keys[starts]] = np.maximum.reduceat(self.windows.last_window_end(panes.ends), starts)
        return timers


def _concat(a: Panes, b: Panes) -> Panes:
    objects = None if a.objects is None or b.objects is None else a.objects + b.objects
    return Panes(np.r_[a.keys, b.keys], np.r_[a.ends, b.ends], np.vstack([a.states, b.states]), objects)
