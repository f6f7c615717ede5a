"""The stream-stream join's per-key code that :class:`misa.operators.stream_join.StreamJoin`'s columnar state replaced:
each key's rows of a side pickled in one record, matched, stored and evicted row by row in Python. The tests compare
the columnar operator with it (test_stream_join.py)."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pyarrow.compute as pc

from misa.operators.base import OperatorResult
from misa.operators.stream_join import PREFIXES, ROW_COLUMNS, SIDE, SIDE_BYTES, StreamJoin, _timer
from misa.state.keys import JOIN_ROWS, JOIN_TIMER
from misa.state.view import StateView


class PerKeyStreamJoin(StreamJoin):
    """:class:`StreamJoin` with the per-key state code it had before its state became columns."""

    def apply(self, deltas: pa.Table, state: StateView) -> OperatorResult:
        """Drop null-keyed and late rows, join each side's rows with the other side's stored rows, store them, then
        evict what the eviction watermark allows."""
        self._row_types = (deltas.schema.field("_l").type, deltas.schema.field("_r").type)
        late, evict = self.watermark.begin_batch()
        result = OperatorResult(self._empty())
        batch: list[tuple[list[bytes], list[int | None], list[tuple]]] = []
        for index, side in enumerate(self.sides):
            rows = deltas.filter(pc.equal(deltas[SIDE], index))
            on_time, dropped, late_rows = self._usable(rows, index, side, late)
            result.dropped_rows += dropped
            result.late_rows += late_rows
            values = [tuple(r.values()) for r in on_time[ROW_COLUMNS[index]].to_pylist()]
            batch.append((self._keys(on_time), self._times(on_time, index), values))
        keys = sorted({k for side_keys, _, _ in batch for k in side_keys})
        stored = self._read(state, keys)
        result.state_reads = 2 * len(keys)
        pairs: list[tuple[tuple, tuple]] = []
        changed: set[tuple[int, bytes]] = set()
        timers: set[bytes] = set()  # the new rows' eviction timers (the stored rows' exist)
        bounds = self._bounds(evict)
        for index, (side_keys, times, values) in enumerate(batch):
            other = 1 - index
            for key, t, row in zip(side_keys, times, values):
                for _, partner in stored[other].get(key, ()):
                    pairs.append((row, partner) if index == 0 else (partner, row))
                bound = bounds[index] if index == 1 else None  # left rows are stored: the right's meet them first
                if bound is None or t is None or t > bound:
                    stored[index].setdefault(key, []).append((t, row))
                    changed.add((index, key))
                    if bounds[index] is not None and t is not None:
                        timers.add(_timer(index, t, key))
        self._write(state, stored, changed, timers)
        self._evict(state, bounds)
        result.output = self._output(pairs)
        return result

    def _read(self, state: StateView, keys: list[bytes]) -> tuple[dict[bytes, list], dict[bytes, list]]:
        records = state.get_many([JOIN_ROWS + s + k for s in SIDE_BYTES for k in keys])
        left, right = records[: len(keys)], records[len(keys) :]
        return (
            {k: pickle.loads(v) for k, v in zip(keys, left) if v is not None},
            {k: pickle.loads(v) for k, v in zip(keys, right) if v is not None},
        )

    def _write(
        self, state: StateView, stored: tuple[dict, dict], changed: set[tuple[int, bytes]], timers: set[bytes]
    ) -> None:
        """Store the changed (side, key) row lists and their new rows' eviction timers."""
        order = sorted(changed)
        records = [pickle.dumps(stored[i][k]) for i, k in order]
        state.put_many([JOIN_ROWS + SIDE_BYTES[i] + k for i, k in order], records)
        state.put_many(sorted(timers), [b""] * len(timers))

    def _evict(self, state: StateView, bounds: tuple[int | None, int | None]) -> None:
        """Delete each side's rows at or before its bound: the keys come from the timers due."""
        for index, bound in enumerate(bounds):
            if bound is None:
                continue
            begin, end = JOIN_TIMER + SIDE_BYTES[index], _timer(index, bound + 1, b"")
            due = state.scan(begin, end)
            if not due:
                continue
            keys = sorted({k[len(JOIN_TIMER) + 9 :] for k, _ in due})
            records = state.get_many([JOIN_ROWS + SIDE_BYTES[index] + k for k in keys])
            updates = []
            for record in records:
                rows = [] if record is None else [r for r in pickle.loads(record) if r[0] is None or r[0] > bound]
                updates.append(pickle.dumps(rows) if rows else None)
            state.put_many([JOIN_ROWS + SIDE_BYTES[index] + k for k in keys], updates)
            state.delete_range(begin, end)

    def _output(self, pairs: list[tuple[tuple, tuple]]) -> pa.Table:
        assert self._row_types is not None
        columns, names = [], []
        for side, (prefix, row_type) in enumerate(zip(PREFIXES, self._row_types)):
            for i in range(row_type.num_fields):
                columns.append(pa.array([p[side][i] for p in pairs], type=row_type.field(i).type))
                names.append(f"{prefix}{i}")
        return pa.table(columns, names=names)

    def _times(self, rows: pa.Table, index: int) -> list[int | None]:
        """Per row, the time its state watermark is compared with: the key's event time, or the row's own."""
        if self.key_time is not None:
            column = pc.cast(rows[f"_k{self.key_time}"], pa.timestamp("us")).cast(pa.int64())
            return column.to_pylist()
        name = self.sides[index].event_time
        if name is None:
            return [None] * rows.num_rows
        column = pc.struct_field(rows[ROW_COLUMNS[index]].combine_chunks(), name)
        return pc.cast(column, pa.timestamp("us")).cast(pa.int64()).to_pylist()

    def no_data_batch(self, state: StateView) -> OperatorResult:
        if self._bounds(0) != (None, None) and self.watermark.advance() is not None:
            self._evict(state, self._bounds(self.watermark.at_us))
        return OperatorResult(self._empty())
