"""Spark's stream-stream inner join (``left.join(right, condition)`` of two streams) on misa's state.

The two inputs come as one stream (:func:`misa.query.job` unions them): per row ``_side`` (0 left, 1 right),
the equi-join keys ``_k0, _k1, ...`` (each side's key expressions of the condition, of equal types) and the
row itself as a struct, ``_l`` or ``_r`` (the other is null). The rest of the condition (the event-time bounds,
any other predicate) is not evaluated here: the caller filters the output with it, which for an inner join
gives the same rows. What this operator does is Spark's ``StreamingSymmetricHashJoinExec``, batch by batch:

* a row with a null in one of the side's ``strict_keys`` (the keys Spark infers a not-null filter for: null-intolerant
  expressions of the side's columns, unless the side is an outer join's preserved one) or in one of its ``not_null``
  fields (the filters Spark's optimizer infers from the condition and runs below ``withWatermark``) joins nothing and
  does not move the watermark: dropped and counted in ``dropped_rows``; a null in another key (``concat(a.k, '')``) is
  a key value like any, and matches the other side's null, as in Spark's join (it groups keys by their bytes);
* each side with an event-time column (the one its ``withWatermark`` marked) drops rows at or before the
  late-events watermark (``late_rows``), unless Spark's optimizer prunes that column below the join (nothing
  reads it: Spark's join judges a side's rows by the event-time column its input carries, ``drops_late``); the
  global watermark is the minimum of the sides' (Spark's default policy,
  :class:`~misa.operators.watermark.InputsWatermark`; a side without rows yet counts as 0, as in Spark), a row
  without event time counting as 0 there, and it moves in a batch without data too;
* the batch's left rows join the right rows stored by earlier batches, then are stored; its right rows join
  the stored left rows (this batch's too), then are stored: each matching pair is output once, in the batch
  of the later of its two rows, whatever the order of arrival;
* Spark's state watermarks: when a join key is the watermarked event time (``key_time``: its position), both
  sides' rows whose key time is at or before the eviction watermark are evicted; otherwise a side with an event
  time and a ``state_offset_ms`` (Spark's ``StreamingJoinHelper.getStateValueWatermark`` of the condition, minus
  the watermark) evicts rows whose event time is at or before the watermark plus the offset. A row that one of
  these would evict is stored all the same on the left (this batch's right rows join it before eviction) and
  not at all on the right, as in Spark. Without either, a side keeps every row (as Spark does).

State: ``0xFE j ++ side ++ key`` -> the key's stored rows of that side, packed as columns by
:class:`~misa.state.record_codec.RecordCodec` behind ``0x01`` (each row's time in µs or null, then the row's fields;
the older layout, a pickled list, is still read); ``0xFE J ++ side ++ time ++ key`` -> a timer per (side, eviction
time, key), so eviction reads only the keys due. The timer of a key's latest time holds :data:`WHOLE` when every row
of the key has a time: when it is due, the key's rows all go and are not read. A batch's rows are matched, stored and
evicted as columns for all its keys at once. Output: the left row's fields then the right row's, named ``l0, l1,
...``, ``r0, r1, ...``.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from misa.exceptions import AnalysisError
from misa.operators.base import HintSource, KeyPartitioned, OperatorResult, StateReadable, StateStoreSpec, state_table
from misa.operators.group_hints import group_hint_keys
from misa.operators.row_lists import append_rows, matches
from misa.operators.schema import schema_from_text, schema_text
from misa.operators.watermark import InputsWatermark
from misa.parallel.routing import KeyColumns
from misa.state.codec import KeyCodec, distinct_keys, normalize_float_keys
from misa.state.keys import JOIN_ROWS, JOIN_TIMER, KEY_SPACE_VERSION, joined, key_tails, prefix_end, prefixed
from misa.state.record_codec import RecordCodec
from misa.state.view import StateView
from prefetch.hints import HintSpec

SIDE, ROW_COLUMNS, PREFIXES = "_side", ("_l", "_r"), ("l", "r")
SIDE_BYTES = (b"L", b"R")
TIME_BIAS = 1 << 63  # timer times are stored as unsigned big-endian: times before 1970 sort first too
TIME = "_t"  # a stored row's time (µs), its state watermark's measure
MATCHED = "_m"  # an outer or semi join's stored row: whether it has matched a row of the other side
ROW_TYPES = "row_types"  # metadata: the sides' row types, an Arrow schema
WHOLE = b"\x01"  # a timer's value: its time is its key's latest and every row of the key has a time
NO_TIME = np.iinfo(np.int64).min
COLUMNS, PICKLED = b"\x01", b"\x80"  # the first byte of a record of this layout; of the older, pickled one


@dataclass(frozen=True)
class JoinSide:
    """One input of the join: its watermarked event-time field (and delay), the fields a null in which drops a
    row before the watermark, and the offset of its state watermark from the eviction watermark."""

    event_time: str | None = None
    delay_ms: int = 0
    not_null: tuple[str, ...] = ()
    state_offset_ms: int | None = None
    strict_keys: tuple[int, ...] | None = None  # the keys a null in which drops the row (None: all of them)
    drops_late: bool = True  # False: Spark's optimizer prunes the event time below the join, which then drops none


@dataclass
class StreamJoin(HintSource, KeyPartitioned, StateReadable):
    """Spark's inner join of two streams on ``keys`` equi-join keys (see the module's docstring)."""

    keys: int
    left: JoinSide
    right: JoinSide
    key_time: int | None = None  # the join key that is the watermarked event time, if one is
    policy: str = "min"  # spark.sql.streaming.multipleWatermarkPolicy
    one_watermark: bool = False  # both sides read one withWatermark node (one stream split by filters)
    watermark: InputsWatermark = field(init=False)
    _codec: KeyCodec | None = field(default=None, init=False, repr=False)
    _row_types: tuple[pa.StructType, pa.StructType] | None = field(default=None, init=False, repr=False)
    _records: tuple[RecordCodec, RecordCodec] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.keys < 1:
            raise ValueError("a stream-stream join needs an equality of the two sides (Spark's too)")
        if self.policy not in ("min", "max"):
            raise ValueError(f"spark.sql.streaming.multipleWatermarkPolicy {self.policy!r}: min or max")
        delays = tuple(side.delay_ms if side.event_time is not None else None for side in (self.left, self.right))
        nodes = (0, 0) if self.one_watermark else ()
        self.watermark = InputsWatermark(delays, self.policy, nodes)  # a side without withWatermark never counts

    @property
    def key_columns(self) -> list[str]:
        return [f"_k{i}" for i in range(self.keys)]

    @property
    def sides(self) -> tuple[JoinSide, JoinSide]:
        return self.left, self.right

    # ------------------------------------------------------------------ at start
    @property
    def emitting(self) -> tuple[bool, bool]:
        """Per side, whether its rows evicted unmatched come out (padded with nulls): an outer join's."""
        return False, False

    @property
    def output_sides(self) -> tuple[int, ...]:
        """The sides whose fields make the output's rows."""
        return 0, 1

    @property
    def flagged(self) -> bool:
        """Whether stored rows carry a matched flag (:data:`MATCHED`)."""
        return False

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
    def _begin(
        self, deltas: pa.Table, result: OperatorResult
    ) -> tuple[int, list[bytes], list[tuple[pa.Table, np.ndarray]]]:
        """A batch's start, shared by the joins: the eviction watermark, the distinct keys of both sides' usable rows
        (null-keyed and late ones dropped and counted in ``result``), and per side its rows in stored form with each
        row's index into those keys."""
        self._set_row_types(deltas.schema.field("_l").type, deltas.schema.field("_r").type)
        late, evict = self.watermark.begin_batch()
        usable = self._batch_rows(deltas, late, result)
        keys, key_of_row = distinct_keys(self._keys(usable[0]) + self._keys(usable[1]))
        groups = np.split(key_of_row, [usable[0].num_rows])
        return evict, keys, [(self._stored_form(usable[i], i), groups[i]) for i in range(2)]

    def apply(self, deltas: pa.Table, state: StateView) -> OperatorResult:
        """Drop null-keyed and late rows, join each side's rows with the other side's stored rows, store them, then
        evict what the eviction watermark allows; for all keys at once, as columns."""
        result = OperatorResult(self._empty())
        evict, keys, new = self._begin(deltas, result)
        stored = self._read(state, keys)
        result.state_reads = 2 * len(keys)
        every_left = (pa.concat_tables([stored[0][0], new[0][0]]), np.concatenate([stored[0][1], new[0][1]]))
        pairs = [matches(*new[0], *stored[1]), matches(*new[1], *every_left)[::-1]]
        bounds = self._bounds(evict)
        if bounds[1] is not None:  # left rows are stored: the right's meet them first; right rows it evicts are not
            right, group = new[1]
            kept = _after(right[TIME], bounds[1])
            new[1] = (right.filter(pa.array(kept)), group[kept])
        for index in (0, 1):
            append_rows(state, JOIN_ROWS + SIDE_BYTES[index], self._records[index], keys, stored[index], new[index])
            if bounds[index] is not None:
                self._set_timers(state, index, keys, stored[index], new[index])
        self._evict(state, bounds)
        result.output = self._output(pairs)
        return result

    def no_data_batch(self, state: StateView) -> OperatorResult:
        """The batch Spark runs without data when the watermark moved: evicts when a side has a state watermark. It
        moves the watermark without one too (below another operation, for which Spark ran the batch): the next data
        batch judges late rows by it, and the operation above takes it as its input watermark."""
        if self.watermark.advance() is not None and self._bounds(0) != (None, None) and self._records is not None:
            return OperatorResult(self._output(self._evict(state, self._bounds(self.watermark.at_us))))
        return OperatorResult(self._empty())

    def spark_runs_no_data_batches(self) -> bool:
        """Spark's join runs batches without data only when a side's state has a watermark to evict by."""
        return self._bounds(0) != (None, None)

    def partition_key_reader(self) -> KeyColumns:
        """The join keys (:func:`~misa.parallel.routing.partition_of_rows` compares floats as Spark does)."""
        return KeyColumns(tuple(self.key_columns))

    def event_watermark(self) -> InputsWatermark:
        return self.watermark

    def output_watermark(self, input_us: int) -> int:
        """Spark's ``produceOutputWatermark`` of the join for an input watermark (µs): the least of its sides' state
        watermarks and the input's, the lower bound of the event times of the rows it may still output (a stateful
        operation reading its output takes it as its input watermark: :mod:`misa.operators.chain`)."""
        return min([bound for bound in self._bounds(input_us) if bound is not None] + [input_us])

    def hint_spec(self) -> HintSpec:
        return HintSpec(tuple(self.key_columns))

    def hint_keys(self, hints: pa.Table) -> tuple[list[bytes], np.ndarray]:
        """Both sides' row lists of the hint rows' keys (a row of either side reads both)."""
        return group_hint_keys(hints, self.key_columns, [JOIN_ROWS + side for side in SIDE_BYTES])

    def hint_key_reader(self) -> KeyColumns:
        return self.partition_key_reader()

    # ------------------------------------------------------------------ the batch's rows
    def _batch_rows(self, deltas: pa.Table, late: int, result: OperatorResult) -> list[pa.Table]:
        """Each side's rows of the batch that join (:meth:`_usable`), counting those dropped in ``result``."""
        usable = []
        for index, side in enumerate(self.sides):
            rows = deltas.filter(pc.equal(deltas[SIDE], index))
            on_time, dropped, late_rows = self._usable(rows, index, side, late)
            result.dropped_rows += dropped
            result.late_rows += late_rows
            usable.append(on_time)
        return usable

    def _usable(self, rows: pa.Table, index: int, side: JoinSide, late: int) -> tuple[pa.Table, int, int]:
        """The side's rows that join: without nulls in the keys and ``not_null`` fields (these are dropped before the
        watermark sees them), and not late (when the side ``drops_late``); with the counts of both kinds dropped."""
        struct = rows[ROW_COLUMNS[index]].combine_chunks() if rows.num_rows else None
        strict = range(self.keys) if side.strict_keys is None else side.strict_keys
        nulls = [rows[self.key_columns[i]].is_null() for i in strict]
        nulls += [pc.struct_field(struct, name).is_null() for name in side.not_null] if struct is not None else []
        valid = pc.invert(_any(nulls, rows.num_rows))
        kept = rows.filter(valid)
        times = self._times_us(kept, index)
        if side.event_time is None or not kept.num_rows:
            return kept, rows.num_rows - kept.num_rows, 0
        self.watermark.observe_input(index, int(np.nan_to_num(times, nan=0).max()))
        if not side.drops_late:
            return kept, rows.num_rows - kept.num_rows, 0
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

    def _stored_form(self, rows: pa.Table, index: int) -> pa.Table:
        """The side's rows as stored: the time its state watermark is compared with (the key's event time or the
        row's own, µs; null: none), then the row's fields."""
        assert self._records is not None
        if self.key_time is not None:
            time = pc.cast(rows[f"_k{self.key_time}"], pa.timestamp("us")).cast(pa.int64())
        elif (name := self.sides[index].event_time) is not None and rows.num_rows:
            time = pc.cast(pc.struct_field(rows[ROW_COLUMNS[index]].combine_chunks(), name), pa.timestamp("us"))
        else:
            time = pa.nulls(rows.num_rows, pa.int64())
        struct = rows[ROW_COLUMNS[index]].combine_chunks() if rows.num_rows else None
        row_type = self._row_types[index]  # type: ignore[index]
        fields = struct.flatten() if struct is not None else [pa.array([], f.type) for f in row_type]
        flags = [pa.array(np.zeros(rows.num_rows, bool))] if self.flagged else []
        return pa.Table.from_arrays([time.cast(pa.int64()), *fields, *flags], schema=self._records[index].schema)

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
    def _read(self, state: StateView, keys: list[bytes]) -> list[tuple[pa.Table, np.ndarray]]:
        """Each side's stored rows of ``keys``, with each row's index in ``keys``."""
        assert self._records is not None
        records = state.get_many(prefixed(JOIN_ROWS + SIDE_BYTES[0], keys) + prefixed(JOIN_ROWS + SIDE_BYTES[1], keys))
        return [self._decode(i, records[i * len(keys) : (i + 1) * len(keys)]) for i in (0, 1)]

    def _decode(self, index: int, records: list[bytes | None]) -> tuple[pa.Table, np.ndarray]:
        """The rows of a side's ``records`` and each one's record; records of the older pickled layout are read too."""
        assert self._records is not None
        legacy = [i for i, r in enumerate(records) if r is not None and r[:1] == PICKLED]
        if legacy:
            records = list(records)
            for i in legacy:
                records[i] = self._from_pickled(index, records[i])  # type: ignore[arg-type]
        return self._records[index].decode(records)

    def _from_pickled(self, index: int, record: bytes) -> bytes | None:
        """A record of the older layout (a pickled list of (time, row values)) in this one."""
        assert self._records is not None and self._row_types is not None
        rows = pickle.loads(record)
        schema = self._records[index].schema
        table = pa.Table.from_pylist([dict(zip(schema.names, (t, *row))) for t, row in rows], schema=schema)
        return self._records[index].encode(table, np.array([len(rows)]))[0] if rows else None

    def _set_timers(
        self,
        state: StateView,
        index: int,
        keys: list[bytes],
        stored: tuple[pa.Table, np.ndarray],
        new: tuple[pa.Table, np.ndarray],
    ) -> None:
        """An eviction timer per distinct (time, key) of the side's new stored rows that have a time; the timer of
        each changed key's latest time marks, when none of its rows lacks a time, that all its rows go with it
        (:data:`WHOLE`); the key's previous latest timer, if earlier, no longer does."""
        rows, group = new
        if not rows.num_rows:
            return
        old_latest, old_untimed = _latest(*stored, len(keys))
        new_latest, new_untimed = _latest(rows, group, len(keys))
        latest, untimed = np.maximum(old_latest, new_latest), old_untimed | new_untimed
        times = rows[TIME].combine_chunks()
        timed = times.is_valid().to_numpy(zero_copy_only=False)
        changed = np.unique(group)
        superseded = changed[(old_latest[changed] > NO_TIME) & (latest[changed] > old_latest[changed])]
        marked = changed[latest[changed] > NO_TIME]
        times_us = np.concatenate(
            [times.to_numpy(zero_copy_only=False)[timed], old_latest[superseded], latest[marked]]
        ).astype(np.int64)
        owners = np.concatenate([group[timed], superseded, marked])
        values = [b""] * (int(timed.sum()) + len(superseded))  # the latest timers last: theirs is the value kept
        values += [b"" if u else WHOLE for u in untimed[marked].tolist()]
        timers = joined(JOIN_TIMER + SIDE_BYTES[index], _biased(times_us), [keys[g] for g in owners])
        state.put_many(timers, values)

    def _evict(self, state: StateView, bounds: tuple[int | None, int | None]) -> list[tuple[pa.Table, pa.Table]]:
        """Delete each side's rows at or before its bound: the keys come from the timers due. A key whose latest
        timer is due (and has no row without a time) goes whole, unread; the others' rows are read and filtered.
        An :attr:`emitting` side's rows are all read: those it evicts unmatched are returned, padded with nulls."""
        assert self._records is not None
        padded = []
        for index, bound in enumerate(bounds):
            if bound is None:
                continue
            begin, end = JOIN_TIMER + SIDE_BYTES[index], _timer(index, bound + 1, b"")
            due = state.scan(begin, end)
            if not due:
                continue
            timers, marks = pa.array([k for k, _ in due], pa.binary()), pa.array([v for _, v in due], pa.binary())
            tails = key_tails(timers, len(JOIN_TIMER) + 9)
            whole = pc.unique(tails.filter(pc.equal(marks, pa.scalar(WHOLE, pa.binary()))))
            whole = whole.slice(0, 0) if self.emitting[index] else whole
            partly = pc.unique(tails.filter(pc.invert(pc.is_in(tails, whole))))
            state.put_many(prefixed(JOIN_ROWS + SIDE_BYTES[index], whole.to_pylist()), [None] * len(whole))
            keys = partly.to_pylist()
            records = prefixed(JOIN_ROWS + SIDE_BYTES[index], keys)
            rows, owner = self._decode(index, state.get_many(records))
            kept = _after(rows[TIME], bound)
            counts = np.bincount(owner[kept], minlength=len(keys))
            values = self._records[index].encode(rows.filter(pa.array(kept)), counts)
            state.put_many(records, [v if c else None for v, c in zip(values, counts.tolist())])
            state.delete_range(begin, end)
            if self.emitting[index]:
                unmatched = ~kept & ~rows[MATCHED].to_numpy(zero_copy_only=False).astype(bool)
                padded.append(self._padded(index, rows.filter(pa.array(unmatched))))
        return padded

    def _padded(self, index: int, rows: pa.Table) -> tuple[pa.Table, pa.Table]:
        """``rows`` of side ``index`` paired with rows of nulls of the other side."""
        assert self._records is not None
        other = self._records[1 - index].schema
        nulls = pa.table([pa.nulls(rows.num_rows, f.type) for f in other], schema=other)
        return (rows, nulls) if index == 0 else (nulls, rows)

    # ------------------------------------------------------------------ output
    def _empty(self) -> pa.Table:
        if self._row_types is None:
            return pa.table({})
        return self._output([])

    def _output(self, pairs: list[tuple[pa.Table, pa.Table]]) -> pa.Table:
        """Rows of the left row's fields then the right row's (``pairs``: aligned stored-form rows)."""
        assert self._row_types is not None
        columns, names = [], []
        for side in self.output_sides:
            prefix, row_type = PREFIXES[side], self._row_types[side]
            for i in range(row_type.num_fields):
                parts = [pair[side].column(i + 1) for pair in pairs]
                chunks = [c for part in parts for c in part.chunks]
                columns.append(pa.chunked_array(chunks, type=row_type.field(i).type))
                names.append(f"{prefix}{i}")
        return pa.table(columns, names=names)

    # ------------------------------------------------------------------ versions
    def metadata(self) -> dict[str, Any]:
        """The watermarks, the sides' row types (a batch without data evicts before any row was seen) and the join
        keys' types (a reader of the state decodes the keys with them)."""
        if self._row_types is None:
            return self.watermark.metadata()
        fields = [pa.field(c, t) for c, t in zip(ROW_COLUMNS, self._row_types)]
        fields += self._codec.fields if self._codec is not None else []
        return self.watermark.metadata() | {ROW_TYPES: schema_text(pa.schema(fields))}

    def restore(self, metadata: dict[str, Any]) -> None:
        self.watermark.restore(metadata)
        if ROW_TYPES in metadata:
            rows = schema_from_text(metadata[ROW_TYPES])
            self._set_row_types(rows.field(ROW_COLUMNS[0]).type, rows.field(ROW_COLUMNS[1]).type)
            if set(self.key_columns) <= set(rows.names):
                self._codec = KeyCodec([rows.field(c) for c in self.key_columns], windowed=False)

    # ------------------------------------------------------------------ the state as rows
    def state_stores(self) -> list[StateStoreSpec]:
        """A store per side (Spark's ``joinSide``), ``left`` first: a row per stored row, keyed by the join keys
        (``k0, k1, ...``), with the row's fields and its time (µs, the one its state watermark evicts by)."""
        known = self._row_types is not None and self._codec is not None
        return [
            StateStoreSpec.of(name, begin, prefix_end(begin), self.state_rows(name, [], []) if known else None)
            for name, begin in zip(("left", "right"), (JOIN_ROWS + side for side in SIDE_BYTES))
        ]

    def state_rows(self, store: str, keys: list[bytes], values: list[bytes]) -> pa.Table:
        assert self._codec is not None and self._row_types is not None, "state entries, but no types to decode them"
        index = ("left", "right").index(store)
        rows, group = self._decode(index, list(values))
        skip = len(JOIN_ROWS) + 1
        _, columns = self._codec.decode(key_tails(pa.array(keys, pa.binary()), skip).to_pylist())
        taken = pa.array(group, pa.int64())
        key_columns = {f"k{i}": c.take(taken) for i, c in enumerate(columns)}
        row_type = self._row_types[index]
        value_columns = {row_type.field(i).name: rows.column(i + 1) for i in range(row_type.num_fields)}
        return state_table(key_columns, value_columns | {"time_us": rows.column(0)}, rows.num_rows)

    def _set_row_types(self, left: pa.StructType, right: pa.StructType) -> None:
        if self._row_types != (left, right):
            self._row_types = (left, right)
            self._records = (stored_rows(left, self.flagged), stored_rows(right, self.flagged))


def _timer(index: int, time_us: int, key: bytes) -> bytes:
    return JOIN_TIMER + SIDE_BYTES[index] + (int(time_us) + TIME_BIAS).to_bytes(8, "big") + key


def _any(masks: list[pa.Array | pa.ChunkedArray], rows: int) -> pa.Array:
    found = pa.array(np.zeros(rows, bool))
    for mask in masks:
        found = pc.or_(found, mask)
    return found


def _biased(times_us: np.ndarray) -> np.ndarray:
    """Times as int64 whose big-endian bytes are those of the unsigned ``time + TIME_BIAS`` (:func:`_timer`'s)."""
    return (times_us.astype(np.int64).view(np.uint64) ^ np.uint64(TIME_BIAS)).view(np.int64)


def stored_rows(row_type: pa.StructType, flagged: bool = False) -> RecordCodec:
    """The codec of a side's stored rows: the time, then the row's fields (``f0, f1, ...``), then (``flagged``)
    whether the row has matched (:data:`MATCHED`)."""
    fields = [pa.field(TIME, pa.int64())] + [
        pa.field(f"f{i}", row_type.field(i).type) for i in range(row_type.num_fields)
    ]
    return RecordCodec(fields + ([pa.field(MATCHED, pa.bool_())] if flagged else []), marker=COLUMNS)


def _after(times: pa.ChunkedArray, bound: int) -> np.ndarray:
    """Which rows a state watermark at ``bound`` keeps: those without a time or with a time after it."""
    after = pc.fill_null(pc.greater(times, pa.scalar(bound, pa.int64())), True)
    return after.to_numpy(zero_copy_only=False).astype(bool)


def _latest(rows: pa.Table, group: np.ndarray, keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Per key, the latest time of its ``rows`` (:data:`NO_TIME`: none) and whether one of them has no time."""
    latest = np.full(keys, NO_TIME, np.int64)
    untimed = np.zeros(keys, bool)
    if rows.num_rows:
        times = rows[TIME].combine_chunks()
        untimed[group[times.is_null().to_numpy(zero_copy_only=False)]] = True
        per_key = pd.Series(pc.fill_null(times, NO_TIME).to_numpy(zero_copy_only=False)).groupby(group).max()
        latest[per_key.index.to_numpy()] = per_key.to_numpy()
    return latest, untimed
