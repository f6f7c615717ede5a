"""Windowed stream self-join: each row joined with the same key's rows of the preceding interval.

::

    IntervalJoin(["vid"], event_time="event_time", payload=["time", "spd", "seg"], interval="30 seconds",
                 watermark_delay="10s")

For every pair of rows (r, p) with equal keys and ``r.t - interval <= p.t < r.t`` (``t``: the event
time) the output holds one row: the key columns, then for each payload column ``c`` the value of
r as ``c`` and the value of p as ``prev_c``. A pair is emitted once, in the batch of the later
arriving of its two rows, whatever the order of arrival; rows of one batch join each other. These
are the semantics of Spark's stream-stream inner join with the same condition and watermarks,
which ``--mode native`` runs as the reference.

State (DESIGN section 6, FlowKV's aligned layout): key = ``bucket_end (8 B big-endian) ++ group
key``, where the bucket ending at b holds the key's rows with event time in ``[b - interval, b)``;
value = those rows as packed fixed-width records (event time in microseconds, then per payload
column an int64 and a null flag), decoded with NumPy. A row at t reads the buckets of t and of
``t - interval`` (its partners p), and of ``t + interval`` only when rows newer than t were seen
before (out-of-order arrival: it may be the p of a stored r), then appends itself to its bucket.
The first two are also named one stage early as prefetch hints (:meth:`hint_keys`).

Watermarks (Spark's, :mod:`misa.operators.watermark`): the eviction watermark is the maximum event time
(ms) of earlier batches minus ``watermark_delay``; it starts at 0. A row at or before the late-events
watermark (the one the previous batch evicted with) is late: counted in ``late_rows`` and dropped
(neither joined nor stored), as Spark drops it; so is a row without event time, which can join
nothing. A row with a null key joins nothing and does not move the watermark (Spark filters it below
``withWatermark``): counted in ``dropped_rows``. Keys are compared as Spark compares them (-0.0 is 0.0,
NaN equals NaN). After each batch, buckets whose rows are all at or before ``watermark - interval`` are
deleted with one range delete: no row that is not late can join them any more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from misa.config_forms import parse_seconds
from misa.operators.aggregation import DELTA_SCHEMA
from misa.operators.base import (
    DEFAULT_STORE,
    HintSource,
    KeyPartitioned,
    MemoryResident,
    OperatorResult,
    StateReadable,
    StateStoreSpec,
    state_table,
)
from misa.operators.schema import INTEGERS, column_of, duration, event_time, key_columns, schema_from_text, schema_text
from misa.operators.watermark import EventTimeWatermark
from misa.parallel.routing import KeyColumns
from misa.state.codec import KeyCodec, normalize_float_keys
from misa.state.keys import KEY_SPACE_VERSION, WINDOW_PREFIX_BYTES, window_prefix
from misa.state.memory_tier import MemorySpace
from misa.state.view import StateView
from prefetch.hints import HINT_TS, HINT_WINDOW_END, HintSpec, no_hints

EVENT_US = "_event_us"
PREV = "prev_"
_OTHER = "_o"  # prefix of the candidate partner's columns during the join
_STORED = "_stored"


@dataclass
class IntervalJoin(HintSource, KeyPartitioned, StateReadable, MemoryResident):
    """Self-join of a stream on ``keys`` where the partner is at most ``interval`` older."""

    keys: Sequence[str]
    event_time: str  # a timestamp column
    payload: Sequence[str]  # integer columns carried into the output (as c and prev_c)
    interval: str = "30 seconds"
    watermark_delay: str = "0s"
    watermark: EventTimeWatermark = field(init=False)
    _codec: KeyCodec | None = field(default=None, init=False, repr=False)
    _schema: pa.Schema | None = field(default=None, init=False, repr=False)  # the deltas' (keys, event time, payload)

    def __post_init__(self) -> None:
        if not self.keys:
            raise ValueError("an interval join needs at least one key column")
        self.interval_us = int(parse_seconds(self.interval) * 1_000_000)
        if self.interval_us <= 0:
            raise ValueError(f"join interval {self.interval!r} must be positive")
        self.delay_ms = int(parse_seconds(self.watermark_delay) * 1000)
        self.watermark = EventTimeWatermark(self.delay_ms)
        names = list(self.keys) + self.output_payload_columns()
        clashes = sorted({n for n in names if names.count(n) > 1})
        if clashes:
            raise ValueError(f"interval join: output column names {clashes} clash; rename key or payload columns")
        self._record = np.dtype(
            [("t", "<i8")]
            + [(f"v{i}", "<i8") for i in range(len(self.payload))]
            + [(f"n{i}", "u1") for i in range(len(self.payload))]
        )

    def output_payload_columns(self) -> list[str]:
        """The output's columns after the keys: ``c, prev_c`` for each payload column ``c``."""
        return [name for c in self.payload for name in (c, PREV + c)]

    # ------------------------------------------------------------------ at start
    def signature(self, schema: T.StructType) -> dict[str, Any]:
        """Resolve against the input's schema: keys of key types, a timestamp event time, integer payload."""
        event_time(schema, self.event_time, f"the interval join's event_time {self.event_time!r}")
        payload = [
            column_of(schema, c, "the interval join's payload", INTEGERS, "a payload column") for c in self.payload
        ]
        return {
            "operator": "IntervalJoin",
            "keys": key_columns(schema, self.keys, f"the interval join's keys {list(self.keys)}"),
            "payload": payload,
            "interval": duration(self.interval),
            "lateness": duration(self.watermark_delay),
            "key_space": KEY_SPACE_VERSION,
        }

    # ------------------------------------------------------------------ Spark side
    def deltas(self, batch: DataFrame) -> DataFrame:
        """The batch's rows: keys, event time in microseconds, payload."""
        return batch.select(*self.keys, F.unix_micros(F.col(self.event_time)).alias(EVENT_US), *self.payload)

    # ------------------------------------------------------------------ driver side
    def apply(self, deltas: pa.Table, state: StateView) -> OperatorResult:
        """A data batch: rows at or before the late-events watermark are dropped, the rest joined and stored; then
        buckets no row after the eviction watermark can join are deleted (:mod:`.watermark`). Rows with a null key
        join nothing and, as Spark's optimizer filters them below the watermark, do not move it."""
        self._check(deltas.schema)
        deltas = normalize_float_keys(deltas.select([*self.keys, EVENT_US, *self.payload]), self.keys)
        self._schema = deltas.schema
        if self._codec is None:
            self._codec = KeyCodec([deltas.schema.field(c) for c in self.keys], windowed=True)
        result = OperatorResult(self._empty_output(deltas.schema))
        late_us, evict_us = self.watermark.begin_batch()
        keyed = deltas.filter(_no_null(deltas, self.keys)) if deltas.num_rows else deltas
        result.dropped_rows = deltas.num_rows - keyed.num_rows
        if keyed.num_rows:
            seen_before = self.watermark.max_event_us
            rows = keyed.filter(pc.fill_null(pc.greater(keyed[EVENT_US], late_us), False))
            result.late_rows = keyed.num_rows - rows.num_rows
            if rows.num_rows:
                result.output, result.state_reads = self._join(rows, state, seen_before)
            self.watermark.observe(pc.max(keyed[EVENT_US]).as_py())
        self._expire(state, evict_us)
        return result

    def partition_key_reader(self) -> KeyColumns:
        """Rows join rows of their key only: the keys pick the partition."""
        return KeyColumns(tuple(self.keys))

    def event_watermark(self) -> EventTimeWatermark | None:
        return self.watermark

    def no_data_batch(self, state: StateView) -> OperatorResult:
        """The batch Spark runs without data when the trigger finds no new input: delete the buckets the batches so
        far expired."""
        advanced = self.watermark.advance()
        if advanced is not None:
            self._expire(state, advanced)
        return OperatorResult(self._empty_output(self._schema) if self._schema is not None else pa.table({}))

    def _check(self, schema: pa.Schema) -> None:
        missing = [c for c in [*self.keys, EVENT_US, *self.payload] if c not in schema.names]
        if missing:
            raise KeyError(f"interval join: deltas lack columns {missing}")
        for c in self.payload:
            if not pa.types.is_integer(schema.field(c).type):
                raise TypeError(
                    f"interval join: payload column {c} has type {schema.field(c).type}; "
                    "only integer columns are supported"
                )

    # ------------------------------------------------------------------ prefetch hints
    def hint_spec(self) -> HintSpec:
        """The state key's columns; buckets are tumbling windows of the interval."""
        return HintSpec(tuple(self.keys), self.event_time, self.interval_us, self.interval_us)

    def hint_keys(self, hints: pa.Table) -> tuple[list[bytes], np.ndarray]:
        """The buckets hint rows will read (their own and the one before), leaving out late rows."""
        hints = hints.filter(pc.greater(hints[HINT_TS], self.watermark.at_us))
        if not hints.num_rows:
            return no_hints()
        if self._codec is None:
            self._codec = KeyCodec([hints.schema.field(c) for c in self.keys], windowed=True)
        ends, ts = hints[HINT_WINDOW_END].to_numpy(), hints[HINT_TS].to_numpy()
        keys = self._bucket_keys(ends, hints) + self._bucket_keys(ends - self.interval_us, hints)
        return keys, np.concatenate([ts, ts])

    def _bucket_keys(self, ends: np.ndarray, rows: pa.Table) -> list[bytes]:
        assert self._codec is not None
        return self._codec.encode(ends, [rows[c].combine_chunks() for c in self.keys])

    def _join(self, rows: pa.Table, state: StateView, seen_before: int | None) -> tuple[pa.Table, int]:
        """Join ``rows`` with each other and the stored rows, append them to state; (output, reads)."""
        t = rows[EVENT_US].to_numpy()
        own_end = (t // self.interval_us + 1) * self.interval_us
        own = self._bucket_keys(own_end, rows)
        reads, read_ts = own + self._bucket_keys(own_end - self.interval_us, rows), [t, t]
        later = own_end <= seen_before if seen_before is not None else np.zeros(len(t), bool)
        if later.any():
            newer = rows.filter(pa.array(later))
            reads += self._bucket_keys(own_end[later] + self.interval_us, newer)
            read_ts.append(t[later])
        distinct = (
            pa.table({"k": pa.array(reads, pa.binary()), "ts": np.concatenate(read_ts)})
            .group_by("k")
            .aggregate([("ts", "max")])
        )
        keys = distinct["k"].combine_chunks()
        values = pa.array(state.get_many(keys.to_pylist(), distinct["ts_max"].to_numpy().tolist()), pa.large_binary())
        present = values.is_valid()
        output = self._pairs(rows, self._decode_rows(keys.filter(present), values.filter(present)))
        self._append(rows, own, keys, values, state)
        return output, len(keys)

    def _decode_rows(self, keys: pa.Array, values: pa.Array) -> pa.Table:
        """The stored rows of bucket ``keys`` with (non-null) packed ``values``, as a table shaped like the deltas."""
        return self._bucket_rows(keys, values)[1]

    def _bucket_rows(self, keys: pa.Array, values: pa.Array) -> tuple[np.ndarray, pa.Table]:
        """:meth:`_decode_rows` with each row's bucket end (payload as int64)."""
        assert self._codec is not None
        offsets = np.frombuffer(values.buffers()[1], np.int64)[values.offset : values.offset + len(values) + 1]
        data = values.buffers()[2]
        raw = np.frombuffer(data, np.uint8)[offsets[0] : offsets[-1]] if data is not None else np.zeros(0, np.uint8)
        records = raw.view(self._record)
        counts = np.diff(offsets) // self._record.itemsize
        ends, key_columns = self._codec.decode(keys.to_pylist())
        owner = np.repeat(np.arange(len(keys)), counts)
        taken = pa.array(owner)
        columns = {c: col.take(taken) for c, col in zip(self.keys, key_columns)}
        columns[EVENT_US] = pa.array(records["t"])
        for i, c in enumerate(self.payload):
            columns[c] = pa.array(records[f"v{i}"], mask=records[f"n{i}"].astype(bool))
        assert ends is not None
        return ends[owner], pa.table(columns)

    def _pairs(self, rows: pa.Table, stored: pa.Table) -> pa.Table:
        """Every joining pair between the batch's rows and (stored rows + the batch's rows)."""
        stored = stored.cast(rows.schema) if stored.num_rows else rows.schema.empty_table()
        others = pa.concat_tables(
            [
                stored.append_column(_STORED, pa.array(np.ones(stored.num_rows, bool))),
                rows.append_column(_STORED, pa.array(np.zeros(rows.num_rows, bool))),
            ]
        )
        others = others.rename_columns([c if c in self.keys else _OTHER + c for c in others.column_names])
        candidates = rows.join(others, keys=list(self.keys), join_type="inner")
        t, other_t = candidates[EVENT_US], candidates[_OTHER + EVENT_US]
        # the batch's row is r and the other row (stored or of this batch) is p
        as_r = pc.and_(pc.greater_equal(other_t, pc.subtract(t, self.interval_us)), pc.less(other_t, t))
        # a stored row is r and the batch's row is p (the stored row arrived first but is newer)
        as_p = pc.and_(
            candidates[_OTHER + _STORED],
            pc.and_(pc.greater_equal(t, pc.subtract(other_t, self.interval_us)), pc.less(t, other_t)),
        )
        return pa.concat_tables(
            [self._output(candidates.filter(as_r), "", _OTHER), self._output(candidates.filter(as_p), _OTHER, "")]
        )

    def _output(self, pairs: pa.Table, r: str, p: str) -> pa.Table:
        columns = {c: pairs[c] for c in self.keys}
        for c in self.payload:
            columns[c], columns[PREV + c] = pairs[r + c], pairs[p + c]
        return pa.table(columns)

    def _empty_output(self, schema: pa.Schema) -> pa.Table:
        fields = [schema.field(c) for c in self.keys]
        for c in self.payload:
            fields += [schema.field(c), schema.field(c).with_name(PREV + c)]
        return pa.schema(fields).empty_table()

    def _append(self, rows: pa.Table, own: list[bytes], keys: pa.Array, values: pa.Array, state: StateView) -> None:
        """Write each touched bucket back: its stored records (``values`` of the read ``keys``, among which every
        bucket of ``own``) followed by the batch's new ones, joined per column."""
        encoded = pa.array(own, pa.binary()).dictionary_encode()
        group, buckets = encoded.indices.to_numpy(), encoded.dictionary
        order = np.argsort(group, kind="stable")
        width = self._record.itemsize
        offsets = np.concatenate([[0], np.cumsum(np.bincount(group, minlength=len(buckets)))]) * width
        records = pa.py_buffer(self._pack(rows.take(pa.array(order))).tobytes())
        new = pa.Array.from_buffers(
            pa.large_binary(), len(buckets), [None, pa.py_buffer(offsets.astype(np.int64)), records]
        )
        old = values.take(pc.index_in(buckets, value_set=keys)).fill_null(pa.scalar(b"", pa.large_binary()))
        state.put_many(
            buckets.to_pylist(), pc.binary_join_element_wise(old, new, pa.scalar(b"", pa.large_binary())).to_pylist()
        )

    def _pack(self, rows: pa.Table) -> np.ndarray:
        records = np.zeros(rows.num_rows, dtype=self._record)
        records["t"] = rows[EVENT_US].to_numpy()
        for i, c in enumerate(self.payload):
            column = rows[c].combine_chunks()
            records[f"n{i}"] = column.is_null().to_numpy(zero_copy_only=False)
            records[f"v{i}"] = column.fill_null(0).to_numpy(zero_copy_only=False)
        return records

    def _expire(self, state: StateView, watermark: int) -> None:
        """Delete the buckets that no row after ``watermark`` can join."""
        limit = watermark - self.interval_us + 1  # buckets ending before it hold only rows <= watermark - interval
        if limit > 0:
            state.delete_range(window_prefix(0), window_prefix(limit))

    def memory_spaces(self) -> list[MemorySpace]:
        """Every bucket: each batch reads its rows' own buckets and the ones before, and the watermark deletes the
        closed ones window by window."""
        return [MemorySpace(window_prefix(0), window_prefix(2**63), WINDOW_PREFIX_BYTES)]

    # ------------------------------------------------------------------ versions
    def metadata(self) -> dict[str, Any]:
        """The watermark and the deltas' schema (a batch without data right after a restart, and a reader of the
        state, use it)."""
        schema = {DELTA_SCHEMA: schema_text(self._schema)} if self._schema is not None else {}
        return self.watermark.metadata() | schema

    def restore(self, metadata: dict[str, Any]) -> None:
        self.watermark.restore(metadata)
        if DELTA_SCHEMA in metadata:
            self._schema = schema_from_text(metadata[DELTA_SCHEMA])
            self._codec = KeyCodec([self._schema.field(c) for c in self.keys], windowed=True)

    # ------------------------------------------------------------------ the state as rows
    def state_stores(self) -> list[StateStoreSpec]:
        """One store: a row per stored row, keyed by the key columns and its ``bucket`` (a struct of start and end,
        like Spark's window), with its event time and payload columns."""
        rows = self.state_rows(DEFAULT_STORE, [], []) if self._schema is not None else None
        return [StateStoreSpec.of(DEFAULT_STORE, b"", None, rows)]

    def state_rows(self, store: str, keys: list[bytes], values: list[bytes]) -> pa.Table:
        assert self._schema is not None, "state entries, but no deltas' schema to decode them with"
        ends, rows = self._bucket_rows(pa.array(keys, pa.binary()), pa.array(values, pa.large_binary()))
        rows = rows.cast(self._schema)
        times = [pa.array(t, pa.int64()).cast(pa.timestamp("us", tz="UTC")) for t in (ends - self.interval_us, ends)]
        key_columns = {c: rows[c] for c in self.keys} | {"bucket": pa.StructArray.from_arrays(times, ["start", "end"])}
        value_columns = {self.event_time: rows[EVENT_US].cast(pa.timestamp("us", tz="UTC"))}
        return state_table(key_columns, value_columns | {c: rows[c] for c in self.payload}, rows.num_rows)


def _no_null(rows: pa.Table, keys: Sequence[str]) -> pa.Array:
    """Rows whose key columns are all set (an inner join's null keys match nothing)."""
    mask = pc.is_valid(rows[keys[0]])
    for c in keys[1:]:
        mask = pc.and_(mask, pc.is_valid(rows[c]))
    return mask
