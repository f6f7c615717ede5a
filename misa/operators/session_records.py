"""Session windows' state as columns: each group's open sessions in one record, read, merged and written for a
whole batch at once with numpy and Arrow, no Python loop per group or per session (but for object aggregates).

A record is ``0x01``, the session count (uint32, little-endian), then per session its start and end (µs) and its
aggregate cells, all int64 little-endian, then the sessions' object aggregate states, pickled, when the
aggregation has some. Records of an older layout (a pickle of ``(timer, [(start, end, cells, objects), ...])``)
are still read; the next write of their group stores the new layout.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from misa.state.codec import AggStates

COLUMNS = 1  # the first byte of a record of this layout (a pickle starts with 0x80)
HEADER = 5  # that byte and the session count
HEADER_PART, ROWS, TAIL = 0, 1, 2  # what each byte of a run of records is


@dataclass
class Sessions:
    """Sessions as columns: each one's group (an index into the batch's group keys), start and end in µs, aggregate
    cells (rows x cells) and, for object aggregates, their states (else None)."""

    group: np.ndarray
    start: np.ndarray
    end: np.ndarray
    cells: np.ndarray
    objects: list[list[Any]] | None = None

    def __len__(self) -> int:
        return len(self.group)

    @staticmethod
    def empty(width: int, with_objects: bool) -> Sessions:
        """No sessions, of ``width`` aggregate cells."""
        none = np.zeros(0, np.int64)
        return Sessions(none, none, none, np.zeros((0, width), np.int64), [] if with_objects else None)

    def take(self, rows: np.ndarray) -> Sessions:
        """The sessions at positions (or where the mask) ``rows``."""
        positions = np.flatnonzero(rows) if rows.dtype == bool else rows
        objects = None if self.objects is None else [self.objects[i] for i in positions.tolist()]
        return Sessions(
            self.group[positions], self.start[positions], self.end[positions], self.cells[positions], objects
        )

    @staticmethod
    def concat(parts: Sequence[Sessions], width: int, with_objects: bool) -> Sessions:
        """``parts`` one after the other."""
        objects = [o for p in parts for o in (p.objects or [])] if with_objects else None
        return Sessions(
            np.concatenate([p.group for p in parts]).astype(np.int64),
            np.concatenate([p.start for p in parts]).astype(np.int64),
            np.concatenate([p.end for p in parts]).astype(np.int64),
            np.concatenate([p.cells.reshape(len(p), width) for p in parts]).astype(np.int64),
            objects,
        )


def decode(records: Sequence[bytes | None], width: int, with_objects: bool) -> Sessions:
    """The sessions in ``records`` (None: a group without sessions), each with its record's position as group."""
    binary = pa.array(records, pa.large_binary())
    legacy = _legacy_positions(binary)
    if len(legacy):
        records = list(records)
        for i in legacy.tolist():
            records[i] = _from_legacy(records[i], width)
        binary = pa.array(records, pa.large_binary())
    present = np.flatnonzero(binary.is_valid().to_numpy(zero_copy_only=False))
    if not len(present):
        return Sessions.empty(width, with_objects)
    offsets = np.frombuffer(binary.buffers()[1], np.int64)[binary.offset : binary.offset + len(binary) + 1]
    begins, ends = offsets[present], offsets[present + 1]
    data = np.frombuffer(binary.buffers()[2], np.uint8)[begins[0] : ends[-1]]  # the present records, one after another
    starts = begins - begins[0]
    counts = data[starts[:, None] + np.arange(1, HEADER)].copy().view("<u4").ravel().astype(np.int64)
    row_bytes = (2 + width) * 8
    parts = _parts(counts * row_bytes, ends - begins - HEADER - counts * row_bytes)
    rows = data[parts == ROWS].view("<i8").reshape(-1, 2 + width).astype(np.int64, copy=False)
    objects = None
    if with_objects:
        tails = (starts + HEADER + counts * row_bytes, ends - begins[0])
        objects = [o for b, e in zip(*(t.tolist() for t in tails)) for o in pickle.loads(data[b:e].tobytes())]
    group = np.repeat(present, counts)
    return Sessions(group, rows[:, 0].copy(), rows[:, 1].copy(), rows[:, 2:].reshape(len(rows), width), objects)


def encode(sessions: Sessions, groups: int) -> list[bytes | None]:
    """One record per group ``0..groups-1`` of its sessions (each group's in start order); None for a group without
    sessions."""
    if len(sessions) and np.any(np.diff(sessions.group) < 0):
        sessions = sessions.take(np.argsort(sessions.group, kind="stable"))
    counts = np.bincount(sessions.group, minlength=groups).astype(np.int64)
    has = counts > 0
    width = sessions.cells.shape[1]
    rows = np.column_stack([sessions.start, sessions.end, sessions.cells]).astype("<i8")
    tails = _object_tails(sessions, counts[has]) if sessions.objects is not None else []
    tail_bytes = np.array([len(t) for t in tails], np.int64) if tails else np.zeros(int(has.sum()), np.int64)
    row_bytes = counts[has] * (2 + width) * 8
    parts = _parts(row_bytes, tail_bytes)
    data = np.empty(len(parts), np.uint8)
    header = np.empty((int(has.sum()), HEADER), np.uint8)
    header[:, 0] = COLUMNS
    header[:, 1:] = counts[has].astype("<u4").view(np.uint8).reshape(-1, 4)
    data[parts == HEADER_PART] = header.ravel()
    data[parts == ROWS] = rows.view(np.uint8).ravel()
    if tails:
        data[parts == TAIL] = np.frombuffer(b"".join(tails), np.uint8)
    sizes = np.zeros(groups, np.int64)
    sizes[has] = HEADER + row_bytes + tail_bytes
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    binary = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), groups, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    return pc.if_else(pa.array(has), binary, pa.scalar(None, pa.large_binary())).to_pylist()


def merge_overlapping(sessions: Sessions, states: AggStates, objects: Any) -> Sessions:
    """Per group, sessions sorted by start, those that overlap or touch merged into one (Spark's session merge): the
    start of the first, the latest end, the states folded in start order (ties: in the order given)."""
    order = np.lexsort((sessions.start, sessions.group))
    s = sessions.take(order)
    if not len(s):
        return s
    latest_end = pd.Series(s.end).groupby(s.group).cummax().to_numpy()
    new_run = np.ones(len(s), bool)
    new_run[1:] = (s.group[1:] != s.group[:-1]) | (s.start[1:] > latest_end[:-1])
    runs = np.flatnonzero(new_run)
    merged_objects = None
    if s.objects is not None:
        merged_objects = objects.per_key(s.objects, np.cumsum(new_run) - 1, len(runs))
    return Sessions(
        s.group[runs],
        s.start[runs],
        np.maximum.reduceat(s.end, runs),
        states.reduce(s.cells, runs),
        merged_objects,
    )


def earliest_ends(sessions: Sessions) -> tuple[np.ndarray, np.ndarray]:
    """The groups that have sessions and each one's earliest session end (``sessions`` sorted by group)."""
    if not len(sessions):
        return sessions.group, sessions.end
    firsts = np.flatnonzero(np.concatenate([[True], sessions.group[1:] != sessions.group[:-1]]))
    return sessions.group[firsts], np.minimum.reduceat(sessions.end, firsts)


def _parts(row_bytes: np.ndarray, tail_bytes: np.ndarray) -> np.ndarray:
    """For records of ``row_bytes`` and ``tail_bytes`` each, one after another: which part each byte is of."""
    lengths = np.column_stack([np.full(len(row_bytes), HEADER), row_bytes, tail_bytes]).ravel()
    return np.repeat(np.tile(np.array([HEADER_PART, ROWS, TAIL], np.int8), len(row_bytes)), lengths)


def _legacy_positions(binary: pa.LargeBinaryArray) -> np.ndarray:
    """The positions of records in the older, pickled layout."""
    first = pc.binary_slice(binary, 0, 1)
    return np.flatnonzero(
        pc.fill_null(pc.equal(first, pa.scalar(b"\x80", pa.large_binary())), False).to_numpy(zero_copy_only=False)
    )


def _from_legacy(record: bytes, width: int) -> bytes:
    """A pickled record in this module's layout."""
    _, rows = pickle.loads(record)
    cells = [np.frombuffer(c, np.int64) for _, _, c, _ in rows] or [np.zeros(0, np.int64)]
    sessions = Sessions(
        np.zeros(len(rows), np.int64),
        np.array([r[0] for r in rows], np.int64),
        np.array([r[1] for r in rows], np.int64),
        np.concatenate(cells).reshape(len(rows), width),
        [r[3] for r in rows] if any(r[3] for r in rows) else None,
    )
    encoded = encode(sessions, 1)[0]
    assert encoded is not None
    return encoded


def _object_tails(sessions: Sessions, counts: np.ndarray) -> list[bytes]:
    """Per group with sessions (``counts`` of them each, in group order), its sessions' object states, pickled."""
    assert sessions.objects is not None
    bounds = np.concatenate([[0], np.cumsum(counts)]).tolist()
    return [pickle.dumps(sessions.objects[b:e], protocol=5) for b, e in zip(bounds, bounds[1:])]
