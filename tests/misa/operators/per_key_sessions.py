"""The per-key session windows code that :mod:`misa.operators.session_records` replaced (the operator up to
2026-11-28, pickled records), kept as the tests' reference: the same operator with its merge, eviction and output
done per group and per session in Python."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from misa.operators.aggregation import OUTPUT_WINDOW, AggValues
from misa.operators.session_records import Sessions
from misa.operators.sessions import END, START, SessionAggregation
from misa.state.codec import distinct_keys, normalize_float_keys
from misa.state.keys import SESSION_RECORD, SESSION_TIMER, joined, prefixed, window_prefix
from misa.state.view import StateView


@dataclass
class Session:
    """One session of a group: [start, end) in microseconds and its aggregate states."""

    start: int
    end: int
    cells: np.ndarray
    objects: list[Any]


class PerKeySessionAggregation(SessionAggregation):
    """:class:`SessionAggregation` with the per-key merge, eviction and output it had before."""

    def _merge(self, deltas: pa.Table, values: AggValues, state: StateView) -> int:
        """Fold the deltas' row sessions into their groups' records; the number of groups read."""
        rows = normalize_float_keys(deltas, list(self.group_by))
        assert self._codec is not None
        group_keys, key_of_row = distinct_keys(
            self._codec.encode(None, [rows[c].combine_chunks() for c in self.group_by], rows.num_rows)
        )
        cells = values.delta_states(rows)
        objects = values.objects.delta_states(rows) if values.objects else [[] for _ in range(rows.num_rows)]
        starts, ends = rows[START].to_numpy(), rows[END].to_numpy()
        new: list[list[Session]] = [[] for _ in group_keys]
        for r, key in enumerate(key_of_row.tolist()):
            new[key].append(Session(int(starts[r]), int(ends[r]), cells[r], objects[r]))
        records = state.get_many(prefixed(SESSION_RECORD, group_keys))
        timers_out, timers_in, written = [], [], []
        for key, record, sessions in zip(group_keys, records, new):
            old_timer, stored = _decode(record)
            merged = _merged(sorted(stored + sessions, key=lambda s: s.start), values)
            written.append(_encode(merged))
            if old_timer is not None:
                timers_out.append((old_timer, key))
            timers_in.append((min(s.end for s in merged), key))
        state.put_many(prefixed(SESSION_RECORD, group_keys), written)
        _set_timers(state, timers_out, timers_in)
        return len(group_keys)

    def _evict(
        self, state: StateView, values: AggValues, previous: int, watermark: int
    ) -> tuple[list[bytes], list[Session]]:
        """Forget the sessions ending at or before ``watermark``; they and their group keys, for append output."""
        if watermark <= previous:
            return [], []
        begin, end = SESSION_TIMER + window_prefix(0), SESSION_TIMER + window_prefix(watermark + 1)
        due = state.scan(begin, end)
        if not due:
            return [], []
        group_keys = sorted({k[len(SESSION_TIMER) + 8 :] for k, _ in due})
        state.delete_range(begin, end)
        records = state.get_many(prefixed(SESSION_RECORD, group_keys))
        closed_keys, closed, written, timers = [], [], [], []
        for key, record in zip(group_keys, records):
            _, sessions = _decode(record)
            open_ = [s for s in sessions if s.end > watermark]
            for s in sessions:
                if s.end <= watermark:
                    closed_keys.append(key)
                    closed.append(s)
            written.append(_encode(open_) if open_ else None)
            if open_:
                timers.append((min(s.end for s in open_), key))
        state.put_many(prefixed(SESSION_RECORD, group_keys), written)
        _set_timers(state, [], timers)
        return closed_keys, closed

    def _everything(self, state: StateView, values: AggValues | None = None) -> tuple[list[bytes], list[Session]]:
        """Every group's sessions (complete output)."""
        keys, sessions = [], []
        for key, record in state.scan(SESSION_RECORD, SESSION_RECORD + b"\xff"):
            for s in _decode(record)[1]:
                keys.append(key[len(SESSION_RECORD) :])
                sessions.append(s)
        return keys, sessions

    def _output(self, group_keys: list[bytes], sessions: list[Session], values: AggValues) -> pa.Table:
        """Rows of (session start, end, group columns, aggregates)."""
        if isinstance(sessions, Sessions):  # the operator's empty output at the start of a batch
            group_keys, sessions = [], []
        window = [
            pa.array([s.start for s in sessions], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            pa.array([s.end for s in sessions], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        ]
        if self._codec is not None and group_keys:
            _, columns = self._codec.decode(group_keys)
        else:
            types = {f.name: f.type for f in self._last_schema} if self._last_schema is not None else {}
            columns = [pa.array([], types.get(c, pa.null())) for c in self.group_by]
        cells = np.array([s.cells for s in sessions], np.int64).reshape(len(sessions), values.states.width)
        aggregates = values.columns(cells, [s.objects for s in sessions])
        return pa.table(dict(zip([*OUTPUT_WINDOW, *self.group_by], window + list(columns))) | aggregates)


def _merged(sessions: list[Session], values: AggValues) -> list[Session]:
    """Sessions sorted by start, those that overlap or touch merged (states folded in start order)."""
    out: list[Session] = []
    for s in sessions:
        if out and s.start <= out[-1].end:
            last = out[-1]
            cells = values.states.merge(last.cells[None, :], s.cells[None, :])[0]
            objects = values.objects.merge_one(last.objects, s.objects) if values.objects else []
            out[-1] = Session(last.start, max(last.end, s.end), cells, objects)
        else:
            out.append(s)
    return out


def _decode(record: bytes | None) -> tuple[int | None, list[Session]]:
    if record is None:
        return None, []
    timer, rows = pickle.loads(record)
    return timer, [Session(start, end, np.frombuffer(cells, np.int64), objects) for start, end, cells, objects in rows]


def _encode(sessions: list[Session]) -> bytes:
    timer = min(s.end for s in sessions)
    rows = [(s.start, s.end, np.asarray(s.cells, np.int64).tobytes(), s.objects) for s in sessions]
    return pickle.dumps((timer, rows), protocol=5)


def _set_timers(state: StateView, remove: list[tuple[int, bytes]], add: list[tuple[int, bytes]]) -> None:
    """Delete the timers ``remove`` and write ``add`` ((time, group key) pairs)."""
    if remove:
        times, keys = zip(*remove)
        state.put_many(joined(SESSION_TIMER, np.array(times, np.int64), list(keys)), [None] * len(remove))
    if add:
        times, keys = zip(*add)
        state.put_many(joined(SESSION_TIMER, np.array(times, np.int64), list(keys)), [b"\x01"] * len(add))
