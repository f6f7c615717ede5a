"""Spark's stream-stream inner join (``left.join(right, condition)`` of two streams) on misa's state.

The two inputs come as one stream (:func:`misa.query.job` unions them): per row ``_side`` (0 left, 1 right),
the equi-join keys ``_k0, _k1, ...`` (each side's key expressions of the condition, of equal types) and the
row itself as a struct, ``_l`` or ``_r`` (the other is null). The rest of the condition (the event-time bounds,
any other predicate) is not evaluated here: the caller filters the output with it, which for an inner join
gives the same rows. What this operator does is Spark's ``StreamingSymmetricHashJoinExec``, batch by batch:

* a row with a null key, or a null in one of the side's ``not_null`` fields (the filters Spark's optimizer
  infers from the condition and runs below ``withWatermark``), joins nothing and does not move the watermark:
  dropped and counted in ``dropped_rows``;
* each side with an event-time column (the one its ``withWatermark`` marked) drops rows at or before the
  late-events watermark (``late_rows``); the global watermark is the minimum of the sides' (Spark's default
  policy, :class:`~misa.operators.watermark.InputsWatermark`; a side without rows yet counts as 0, as in Spark),
  a row without event time counting as 0 there;
* the batch's left rows join the right rows stored by earlier batches, then are stored; its right rows join
  the stored left rows (this batch's too), then are stored: each matching pair is output once, in the batch
  of the later of its two rows, whatever the order of arrival;
* Spark's state watermarks: when a join key is the watermarked event time (``key_time``: its position), both
  sides' rows whose key time is at or before the eviction watermark are evicted; otherwise a side with an event
  time and a ``state_offset_ms`` (Spark's ``StreamingJoinHelper.getStateValueWatermark`` of the condition, minus
  the watermark) evicts rows whose event time is at or before the watermark plus the offset. A row that one of
  these would evict is stored all the same on the left (this batch's right rows join it before eviction) and
  not at all on the right, as in Spark. Without either, a side keeps every row (as Spark does).

State: ``0xFE j ++ side ++ key`` -> the key's stored rows of that side (pickled: event time in µs or None, the
row's values); ``0xFE J ++ side ++ time ++ key`` -> a timer per (side, eviction time, key), so eviction reads
only the keys due. Output: the left row's fields then the right row's, named ``l0, l1, ...``, ``r0, r1, ...``.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from misa.exceptions import AnalysisError
from misa.operators.base import HintSource, KeyPartitioned, OperatorResult
from misa.operators.group_hints import group_hint_keys
from misa.operators.watermark import InputsWatermark
from misa.state.codec import KeyCodec, normalize_float_keys
from misa.state.keys import JOIN_ROWS, JOIN_TIMER, KEY_SPACE_VERSION
from misa.state.view import StateView
from prefetch.hints import HintSpec

SIDE, ROW_COLUMNS, PREFIXES = "_side", ("_l", "_r"), ("l", "r")
SIDE_BYTES = (b"L", b"R")
TIME_BIAS = 1 << 63  # timer times are stored as unsigned big-endian: times before 1970 sort first too


@dataclass(frozen=True)
class JoinSide:
    """One input of the join: its watermarked event-time field (and delay), the fields a null in which drops a
    row before the watermark, and the offset of its state watermark from the eviction watermark."""

    event_time: str | None = None
    delay_ms: int = 0
    not_null: tuple[str, ...] = ()
    state_offset_ms: int | None = None


@dataclass
class StreamJoin(HintSource, KeyPartitioned):
    """Spark's inner join of two streams on ``keys`` equi-join keys (see the module's docstring)."""

    keys: int
    left: JoinSide
    right: JoinSide
    key_time: int | None = None  # the join key that is the watermarked event time, if one is
    policy: str = "min"  # spark.sql.streaming.multipleWatermarkPolicy
    watermark: InputsWatermark = field(init=False)
    _codec: KeyCodec | None = field(default=None, init=False, repr=False)
    _row_types: tuple[pa.StructType, pa.StructType] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.keys < 1:
            raise ValueError("a stream-stream join needs an equality of the two sides (Spark's too)")
        if self.policy not in ("min", "max"):
            raise ValueError(f"spark.sql.streaming.multipleWatermarkPolicy {self.policy!r}: min or max")
        delays = tuple(side.delay_ms if side.event_time is not None else None for side in (self.left, self.right))
        self.watermark = InputsWatermark(delays, self.policy)  # a side without withWatermark never counts

    @property
    def key_columns(self) -> list[str]:
        return [f"_k{i}" for i in range(self.keys)]

    @property
    def sides(self) -> tuple[JoinSide, JoinSide]:
        return self.left, self.right

    # ------------------------------------------------------------------ at start
    def signature(self, schema: T.StructType) -> dict[str, Any]:
        """The input has the side, the keys and both rows (structs holding each side's event time)."""
        names = schema.fieldNames()
        for column in [SIDE, *self.key_columns, *ROW_COLUMNS]:
            if column not in names:
                raise AnalysisError(f"the stream join's input has no column {column!r} (columns: {names})")
        for side, column in zip(self.sides, ROW_COLUMNS):
            fields = schema[column].dataType.fieldNames()  # type: ignore[attr-defined]
            for name in [side.event_time] if side.event_time else []:
                if name not in fields:
                    raise AnalysisError(f"the stream join's {column} has no event-time field {name!r}")
        return {
            "operator": "StreamJoin",
            "keys": [str(schema[c].dataType) for c in self.key_columns],
            "rows": [str(schema[c].dataType) for c in ROW_COLUMNS],
            "key_time": self.key_time,
            "state_offsets_ms": [s.state_offset_ms for s in self.sides],
            "key_space": KEY_SPACE_VERSION,
        }

    # ------------------------------------------------------------------ Spark side
    def deltas(self, batch: DataFrame) -> DataFrame:
        """The batch's rows, as the union of both sides."""
        return batch

    # ------------------------------------------------------------------ driver side
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

    def no_data_batch(self, state: StateView) -> OperatorResult:
        """The batch Spark runs without data when the watermark moved and a side has a state watermark: evicts."""
        if self._bounds(0) != (None, None) and self.watermark.advance() is not None:
            self._evict(state, self._bounds(self.watermark.at_us))
        return OperatorResult(self._empty())

    def spark_runs_no_data_batches(self) -> bool:
        """Spark's join runs batches without data only when a side's state has a watermark to evict by."""
        return self._bounds(0) != (None, None)

    def partition_keys(self, deltas: pa.Table) -> list[pa.Array | pa.ChunkedArray]:
        rows = normalize_float_keys(deltas.select(self.key_columns), self.key_columns)
        return [rows[c] for c in self.key_columns]

    def event_watermark(self) -> InputsWatermark:
        return self.watermark

    def hint_spec(self) -> HintSpec:
        return HintSpec(tuple(self.key_columns))

    def hint_keys(self, hints: pa.Table) -> tuple[list[bytes], np.ndarray]:
        """Both sides' row lists of the hint rows' keys (a row of either side reads both)."""
        return group_hint_keys(hints, self.key_columns, [JOIN_ROWS + side for side in SIDE_BYTES])

    def hint_partition_keys(self, hints: pa.Table) -> list[pa.Array | pa.ChunkedArray]:
        return self.partition_keys(hints)

    # ------------------------------------------------------------------ the batch's rows
    def _usable(self, rows: pa.Table, index: int, side: JoinSide, late: int) -> tuple[pa.Table, int, int]:
        """The side's rows that join: without nulls in the keys and ``not_null`` fields (these are dropped before the
        watermark sees them), and not late; with the counts of both kinds dropped."""
        struct = rows[ROW_COLUMNS[index]].combine_chunks() if rows.num_rows else None
        nulls = [rows[c].is_null() for c in self.key_columns]
        nulls += [pc.struct_field(struct, name).is_null() for name in side.not_null] if struct is not None else []
        valid = pc.invert(_any(nulls, rows.num_rows))
        kept = rows.filter(valid)
        times = self._times_us(kept, index)
        if side.event_time is None or not kept.num_rows:
            return kept, rows.num_rows - kept.num_rows, 0
        self.watermark.observe_input(index, int(np.nan_to_num(times, nan=0).max()))
        on_time = ~(times <= late)  # a row without event time (NaN) is not late, as in Spark
        return kept.filter(pa.array(on_time)), rows.num_rows - kept.num_rows, int((~on_time).sum())

    def _times_us(self, rows: pa.Table, index: int) -> np.ndarray:
        """The side's event times in µs as floats (NaN: none)."""
        name = self.sides[index].event_time
        if name is None or not rows.num_rows:
            return np.full(rows.num_rows, np.nan)
        column = pc.struct_field(rows[ROW_COLUMNS[index]].combine_chunks(), name)
        micros = pc.cast(column, pa.timestamp("us")).cast(pa.int64())
        return micros.to_numpy(zero_copy_only=False).astype(np.float64)

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

    def _keys(self, rows: pa.Table) -> list[bytes]:
        rows = normalize_float_keys(rows.select(self.key_columns), self.key_columns)
        if self._codec is None:
            self._codec = KeyCodec([rows.schema.field(c) for c in self.key_columns], windowed=False)
        return self._codec.encode(None, [rows[c].combine_chunks() for c in self.key_columns], rows.num_rows)

    # ------------------------------------------------------------------ state watermarks
    def _bounds(self, watermark_us: int) -> tuple[int | None, int | None]:
        """Per side, the time (µs) at or before which its rows are evicted (None: kept for good)."""
        if self.key_time is not None:
            return watermark_us, watermark_us
        other_marked = (self.right.event_time is not None, self.left.event_time is not None)
        return tuple(  # type: ignore[return-value]
            watermark_us + side.state_offset_ms * 1000
            if side.event_time is not None and side.state_offset_ms is not None and marked
            else None
            for side, marked in zip(self.sides, other_marked)
        )

    # ------------------------------------------------------------------ state
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

    # ------------------------------------------------------------------ output
    def _empty(self) -> pa.Table:
        if self._row_types is None:
            return pa.table({})
        return self._output([])

    def _output(self, pairs: list[tuple[tuple, tuple]]) -> pa.Table:
        assert self._row_types is not None
        columns, names = [], []
        for side, (prefix, row_type) in enumerate(zip(PREFIXES, self._row_types)):
            for i in range(row_type.num_fields):
                columns.append(pa.array([p[side][i] for p in pairs], type=row_type.field(i).type))
                names.append(f"{prefix}{i}")
        return pa.table(columns, names=names)

    # ------------------------------------------------------------------ versions
    def metadata(self) -> dict[str, Any]:
        return self.watermark.metadata()

    def restore(self, metadata: dict[str, Any]) -> None:
        self.watermark.restore(metadata)


def _timer(index: int, time_us: int, key: bytes) -> bytes:
    return JOIN_TIMER + SIDE_BYTES[index] + (int(time_us) + TIME_BIAS).to_bytes(8, "big") + key


def _any(masks: list[pa.Array | pa.ChunkedArray], rows: int) -> pa.Array:
    found = pa.array(np.zeros(rows, bool))
    for mask in masks:
        found = pc.or_(found, mask)
    return found
