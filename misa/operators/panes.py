"""Sliding windows stored as panes (DESIGN section 6; FlowKV's window-aware layout).

A sliding window of ``size`` every ``slide`` is cut into panes of ``gcd(size, slide)``: an event
updates the one pane it falls in, not the ``size/slide`` windows that contain it, and a window's
value is combined from its panes when it is emitted. Spark's window semantics are kept: windows
start at the start time plus multiples of ``slide`` (``offset_us``; panes start at it plus multiples of
their size) and ``[start, start + size)`` holds an event time ``t`` when ``start <= t < start + size``.

State layout per group key (:mod:`misa.state.keys`):

* the pane record ``PANE_RECORD ++ group key``: an int64 timer, then one row per live pane
  (pane end, aggregate state); read and written once per touched key and batch;
* the timer ``PANE_TIMER ++ timer (8 B big-endian) ++ group key``: when the key must be visited
  at a watermark (update mode: when its last window closes and the record can go; append mode:
  the end of its next window to emit). Closing windows scans the timers up to the watermark and
  range-deletes them.

Arrays here are NumPy: ``keys`` are indices into the batch's distinct group keys, ``ends`` pane
ends in microseconds, ``states`` aggregate states (two int64 cells per aggregate), folded by the
aggregation's :class:`~misa.state.codec.AggStates`. With object aggregates (:mod:`misa.operators.pane_objects`)
each pane row also has a list of their states (``objects``), folded by :class:`PaneObjects`, and a record holds
its row count after the timer and their pickled states after its rows.
"""

from __future__ import annotations

import math
import pickle
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from misa.operators.pane_objects import PaneObjects
from misa.state.codec import AggStates
from misa.state.keys import PANE_RECORD, PANE_TIMER, joined, window_prefix
from misa.state.record_codec import exclusive_cumsum, index_ranges

TIMER = np.dtype("<i8")


@dataclass(frozen=True)
class PaneWindows:
    """The geometry of sliding windows of ``size_us`` every ``slide_us``, starting at ``offset_us`` (Spark's
    startTime, below the slide) plus multiples of the slide, over panes of their gcd."""

    size_us: int
    slide_us: int
    offset_us: int = 0

    @property
    def pane_us(self) -> int:
        return math.gcd(self.size_us, self.slide_us)

    @property
    def pane_offset_us(self) -> int:
        """Where panes start, below their size (panes tile every window)."""
        return self.offset_us % self.pane_us

    def first_window_end(self, pane_ends: np.ndarray) -> np.ndarray:
        """End of the earliest window holding each pane (its start: the first window start >= end - size)."""
        ends = pane_ends - self.offset_us
        return -((self.size_us - ends) // self.slide_us) * self.slide_us + self.size_us + self.offset_us

    def last_window_end(self, pane_ends: np.ndarray) -> np.ndarray:
        """End of the latest window holding each pane (its start is the last window start <= pane start)."""
        starts = pane_ends - self.pane_us - self.offset_us
        return starts // self.slide_us * self.slide_us + self.size_us + self.offset_us

    def last_closed_end(self, watermark_us: int) -> int:
        """The end of the latest window closed at ``watermark_us`` (ending at or before it)."""
        remainder = (self.size_us + self.offset_us) % self.slide_us
        return (watermark_us - remainder) // self.slide_us * self.slide_us + remainder

    def next_window_end(self, watermark_us: int) -> int:
        """The end of the earliest window still open at ``watermark_us`` (ending after it)."""
        return self.last_closed_end(watermark_us) + self.slide_us

    def open_window_ends(self, pane_ends: np.ndarray, watermark_us: int) -> tuple[np.ndarray, np.ndarray]:
        """The first and last end of each pane's windows that end after ``watermark_us`` (first > last: none)."""
        first = np.maximum(self.first_window_end(pane_ends), self.next_window_end(watermark_us))
        return first, self.last_window_end(pane_ends)

    def late_windows(self, pane_ends: np.ndarray, watermark_us: int) -> np.ndarray:
        """How many of each pane's windows end at or before ``watermark_us``."""
        first = self.first_window_end(pane_ends)
        closed_last = np.minimum(self.last_window_end(pane_ends), self.last_closed_end(watermark_us))
        return np.maximum(0, (closed_last - first) // self.slide_us + 1)

    def windows_of(
        self, keys: np.ndarray, first: np.ndarray, last: np.ndarray, through: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Distinct (key, window end) pairs of windows ``first..last`` of each row (ends at most
        ``through``), sorted by (key, end).

        Each row's windows are a run of window ends; the runs of one key are merged first (a sort of
        the rows, not of every (row, window) pair), so each distinct pair is produced once.
        """
        if through is not None:
            last = np.minimum(last, self.last_closed_end(through))
        some = first <= last
        keys, first, last = keys[some], first[some], last[some]
        if not len(keys):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        base = int(first.min())
        span = (int(last.max()) - base) // self.slide_us + 2  # window slots per key, a spare: keys' runs never touch
        lo = keys * span + (first - base) // self.slide_us  # a row's first and last window as one code
        hi = keys * span + (last - base) // self.slide_us
        order = np.argsort(lo, kind="stable")
        lo, hi = lo[order], np.maximum.accumulate(hi[order])  # hi: the furthest any run so far reaches
        starts = np.flatnonzero(np.r_[True, lo[1:] > hi[:-1] + 1])  # a run that neither overlaps nor touches
        run_lo, run_hi = lo[starts], hi[np.r_[starts[1:] - 1, len(lo) - 1]]
        counts = run_hi - run_lo + 1
        codes = np.repeat(run_lo - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        return codes // span, codes % span * self.slide_us + base


def record_keys(group_keys: Sequence[bytes]) -> list[bytes]:
    return joined(PANE_RECORD, None, group_keys)


def timer_keys(timers_us: np.ndarray, group_keys: Sequence[bytes]) -> list[bytes]:
    """The timer key of each group key at its timer (us)."""
    return joined(PANE_TIMER, timers_us, group_keys)


def timer_range(watermark_us: int) -> tuple[bytes, bytes]:
    """The timer keys due at ``watermark_us`` (timers at or before it)."""
    return PANE_TIMER + window_prefix(0), PANE_TIMER + window_prefix(watermark_us + 1)


def group_key_of_timer(key: bytes) -> bytes:
    return key[len(PANE_TIMER) + 8 :]


def timer_of(key: bytes) -> int:
    """The timer (us) of a timer key."""
    return int.from_bytes(key[len(PANE_TIMER) : len(PANE_TIMER) + 8], "big")


@dataclass
class Panes:
    """Pane rows sorted by (key, end): ``keys`` index the batch's distinct group keys."""

    keys: np.ndarray
    ends: np.ndarray
    states: np.ndarray
    objects: list[list[Any]] | None = None  # per row, its object aggregates' states (None: there are none)

    @classmethod
    def empty(cls, cells: int, objects: bool = False) -> Panes:
        return cls(
            np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, cells), np.int64), [] if objects else None
        )

    def take(self, rows: np.ndarray) -> Panes:
        objects = None if self.objects is None else [self.objects[i] for i in rows.tolist()]
        return Panes(self.keys[rows], self.ends[rows], self.states[rows], objects)


class PaneRecords:
    """Encodes and decodes pane records: an int64 timer, then rows of (pane end, aggregate state cells); with
    ``objects``, an int64 row count after the timer and the rows' pickled object states after them."""

    def __init__(self, cells: int, objects: bool = False):
        self.cells = cells
        self.objects = objects
        self.row = np.dtype([("end", "<i8"), ("state", "<i8", (self.cells,))])
        self.header = TIMER.itemsize * (2 if objects else 1)

    def decode(self, values: Sequence[bytes | None]) -> tuple[np.ndarray, Panes]:
        """The timers (-1 where there is no record) and the pane rows of ``values``, in key order."""
        array = pa.array(values, pa.large_binary())
        n, width = len(array), self.row.itemsize
        timers = np.full(n, -1, np.int64)
        present = np.flatnonzero(array.is_valid().to_numpy(zero_copy_only=False))
        if not len(present):
            return timers, Panes.empty(self.cells, self.objects)
        _, offsets, data = array.buffers()
        buffer = np.frombuffer(data, np.uint8)
        starts = np.frombuffer(offsets, np.int64)[array.offset : array.offset + n + 1]
        lengths = np.diff(starts)[present]
        starts = starts[present]
        timers[present] = buffer[starts[:, None] + np.arange(TIMER.itemsize)].view(TIMER).ravel()
        counts = np.zeros(n, np.int64)
        if self.objects:
            counts[present] = buffer[starts[:, None] + TIMER.itemsize + np.arange(TIMER.itemsize)].view(TIMER).ravel()
        else:
            counts[present] = (lengths - TIMER.itemsize) // width
        rows = buffer[index_ranges(starts + self.header, counts[present] * width)].view(self.row)
        states = rows["state"].reshape(len(rows), self.cells).astype(np.int64, copy=False)
        objects = None
        if self.objects:
            tails = zip((starts + self.header + counts[present] * width).tolist(), (starts + lengths).tolist())
            objects = [state for begin, end in tails for state in pickle.loads(buffer[begin:end].tobytes())]
        return timers, Panes(np.repeat(np.arange(n), counts), rows["end"].astype(np.int64), states, objects)

    def encode(self, keys: int, timers: np.ndarray, panes: Panes) -> list[bytes | None]:
        """One record per key index below ``keys`` (None for a key without panes: delete it)."""
        rows = np.empty(len(panes.ends), self.row)
        rows["end"], rows["state"] = panes.ends, panes.states
        counts = np.bincount(panes.keys, minlength=keys)
        if self.objects:
            return self._encode_objects(timers, panes, rows, counts)
        sizes = np.where(counts > 0, TIMER.itemsize + counts * self.row.itemsize, 0)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        buffer = np.empty(int(offsets[-1]), np.uint8)
        present = np.flatnonzero(counts)
        buffer[offsets[present][:, None] + np.arange(TIMER.itemsize)] = (
            timers[present].astype(TIMER).view(np.uint8).reshape(-1, TIMER.itemsize)
        )
        in_key = np.arange(len(panes.keys)) - exclusive_cumsum(counts)[panes.keys]  # panes are sorted by key
        row_starts = offsets[panes.keys] + TIMER.itemsize + in_key * self.row.itemsize
        buffer[row_starts[:, None] + np.arange(self.row.itemsize)] = rows.view(np.uint8).reshape(-1, self.row.itemsize)
        validity = pa.py_buffer(np.packbits(counts > 0, bitorder="little"))
        records = pa.Array.from_buffers(
            pa.large_binary(), keys, [validity, pa.py_buffer(offsets), pa.py_buffer(buffer)]
        )
        return records.to_pylist()

    def _encode_objects(
        self, timers: np.ndarray, panes: Panes, rows: np.ndarray, counts: np.ndarray
    ) -> list[bytes | None]:
        """Records with object states, one by one (their states are pickled per record anyway)."""
        assert panes.objects is not None
        records: list[bytes | None] = [None] * len(counts)
        begin = 0
        for key in np.flatnonzero(counts).tolist():  # panes are sorted by key
            end = begin + int(counts[key])
            head = np.array([timers[key], counts[key]], TIMER).tobytes()
            records[key] = head + rows[begin:end].tobytes() + pickle.dumps(panes.objects[begin:end], protocol=5)
            begin = end
        return records


def fold(panes: Panes, aggs: AggStates, objects: PaneObjects | None = None) -> Panes:
    """Panes sorted by (key, end) with the rows of one (key, end) merged into one, in their order."""
    order = np.lexsort((panes.ends, panes.keys))
    panes = panes.take(order)
    if not len(order):
        return panes
    new = np.ones(len(order), bool)
    new[1:] = (panes.keys[1:] != panes.keys[:-1]) | (panes.ends[1:] != panes.ends[:-1])
    starts = np.flatnonzero(new)
    folded = None if panes.objects is None or objects is None else objects.fold(panes.objects, starts)
    return Panes(panes.keys[starts], panes.ends[starts], aggs.reduce(panes.states, starts), folded)


def window_states(
    panes: Panes,
    windows: PaneWindows,
    keys: np.ndarray,
    ends: np.ndarray,
    aggs: AggStates,
    objects: PaneObjects | None = None,
) -> tuple[np.ndarray, list[list[Any]] | None]:
    """The aggregate state of each window (``keys[i]``, ending at ``ends[i]``): its panes combined in order (and
    their object states, when ``panes`` have them).

    ``panes`` are sorted by (key, end) and every window holds at least one of them.
    """
    with_objects = panes.objects is not None and objects is not None
    if not len(keys):
        return aggs.identity(0), [] if with_objects else None
    pane = windows.pane_us
    base = min(int(panes.ends.min()), int(ends.min())) - windows.size_us
    span = (max(int(panes.ends.max()), int(ends.max())) - base) // pane + 1
    position = panes.keys * span + (panes.ends - base) // pane
    lo = np.searchsorted(position, keys * span + (ends - windows.size_us + pane - base) // pane, "left")
    hi = np.searchsorted(position, keys * span + (ends - base) // pane, "right")
    counts = hi - lo
    starts = np.cumsum(counts) - counts
    rows = np.arange(int(counts.sum())) - np.repeat(starts - lo, counts)
    if not with_objects:
        return aggs.reduce(panes.states[rows], starts), None
    assert panes.objects is not None and objects is not None
    return aggs.reduce(panes.states[rows], starts), objects.fold([panes.objects[i] for i in rows.tolist()], starts)
