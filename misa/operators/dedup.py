"""Streaming deduplication with Spark's semantics: ``dropDuplicates`` and ``dropDuplicatesWithinWatermark``.

Each batch's rows come to the driver in the order Spark reads them; the first row of each key that the state
has not seen is emitted (the whole row) and its key remembered:

* **without a watermark** (``event_time=None``) every key is kept forever, as Spark keeps it;
* **with a watermark on a column not among the keys** (``dropDuplicates(cols)`` over a stream with
  ``withWatermark``; ``event_time_key=False``) a row whose event time is at or before the late-events watermark
  is late (dropped and counted), as Spark's deduplication judges every row by the event-time column of its
  input; keys are kept forever;
* **with the event time among the keys** (``dropDuplicates([..., event_time])`` after ``withWatermark``) a
  row whose event time is at or before the late-events watermark is late (dropped and counted), and a key
  is forgotten once its event time is at or before the eviction watermark; keys are stored behind their
  event time, so eviction is one range delete;
* **within the watermark** (``within_watermark=True``) a key (without the event time) is remembered until
  its first row's event time plus the delay (a first row without event time: the delay after 1970, as Spark
  stores it); late rows are dropped as above. The key's expiry is stored
  with it, and each batch's new keys with their expiries as one record (columns ``expiry`` and ``key``) behind
  the earliest of them (``0xFE D`` ++ earliest expiry ++ its key): eviction scans only the records holding an
  expired key, forgets those keys and writes the rest back as one record. (Older versions kept a timer key per
  key, ``0xFE d`` ++ expiry ++ key; such timers are still evicted.)

The watermarks are Spark's (:mod:`misa.operators.watermark`); the batch's latest event time counts every row,
late ones included, as Spark's ``EventTimeWatermark`` counts them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from misa.config_forms import parse_seconds
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
from misa.operators.group_hints import group_hint_keys
from misa.operators.schema import event_time, key_columns, schema_from_text, schema_text
from misa.operators.watermark import EventTimeWatermark, InputsWatermark, WatermarkInputs, inputs_signature
from misa.parallel.routing import KeyColumns
from misa.state.codec import KeyCodec, distinct_keys, normalize_float_keys
from misa.state.keys import DEDUP_EXPIRIES, DEDUP_EXPIRY, KEY_SPACE_VERSION, joined, split_fixed, window_prefix
from misa.state.memory_tier import MemorySpace
from misa.state.record_codec import RecordCodec
from misa.state.view import StateView
from prefetch.hints import HintSpec

NO_EVENT_TIME = (1 << 63) - 1  # the key time of a row without an event time: never evicted, as in Spark
SEEN = b"\x01"
EXPIRY_RECORD_KEYS = 4096  # keys per expiry record at most
ROW_SCHEMA = "row_schema"  # metadata: the rows' Arrow schema (misa.operators.schema.schema_text)
KEYS_END = DEDUP_EXPIRY[:1]  # the remembered keys sort before the expiry records and timers (0xFE)
EXPIRIES = RecordCodec([pa.field("expiry", pa.int64()), pa.field("key", pa.binary())])  # a record of keys to expire


@dataclass
class Deduplicate(HintSource, KeyPartitioned, StateReadable, MemoryResident):
    """Drops rows whose ``columns`` (and ``event_time``, if ``event_time_key`` and not ``within_watermark``) were
    seen before."""

    columns: Sequence[str]
    event_time: str | None = None  # a timestamp column withWatermark marked
    watermark_delay: str | None = None  # Spark's withWatermark delay; required with event_time
    within_watermark: bool = False
    event_time_key: bool = True  # False: the event time only drops late rows (it is not one of the keys)
    watermark_inputs: WatermarkInputs | None = None  # a union of watermarked streams: Spark's global watermark
    watermark: EventTimeWatermark | InputsWatermark = field(init=False)
    _codec: KeyCodec | None = field(default=None, init=False, repr=False)
    _schema: pa.Schema | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.event_time and self.watermark_delay is None:
            raise ValueError("deduplication by event time needs watermark_delay (Spark's withWatermark delay)")
        if self.within_watermark and not self.event_time:
            raise ValueError("dropDuplicatesWithinWatermark needs event_time, the column withWatermark marked")
        self.delay_us = int(parse_seconds(self.watermark_delay or "0s") * 1_000_000)
        inputs = self.watermark_inputs
        self.watermark = inputs.watermark() if inputs else EventTimeWatermark(self.delay_us // 1000)

    @property
    def _by_time(self) -> bool:
        """Whether the event time is one of the keys (keys are stored behind it and evicted by it)."""
        return bool(self.event_time) and self.event_time_key and not self.within_watermark

    # ------------------------------------------------------------------ at start
    def signature(self, schema: T.StructType) -> dict[str, Any]:
        """Resolve the key columns (and the event time) against the input's schema."""
        if self.event_time:
            event_time(schema, self.event_time, f"the deduplication's event_time {self.event_time!r}")
        keeps_time = self._by_time or self.within_watermark  # the state's keys and expiries depend on the event time
        return {
            "operator": "Deduplicate",
            "key_columns": key_columns(schema, self.columns, f"the deduplication's columns {list(self.columns)}"),
            "event_time": self.event_time if keeps_time else None,
            "within_watermark": self.within_watermark,
            "lateness": self.watermark_delay if keeps_time else None,
            "key_space": KEY_SPACE_VERSION,
        } | inputs_signature(self.watermark_inputs)

    # ------------------------------------------------------------------ Spark side
    def deltas(self, batch: DataFrame) -> DataFrame:
        """The batch's rows, in the order Spark reads them."""
        return batch

    # ------------------------------------------------------------------ driver side
    def apply(self, deltas: pa.Table, state: StateView) -> OperatorResult:
        """Emit each new key's first row; drop late rows and rows of keys seen; evict what the watermark expired."""
        self._schema = deltas.schema
        result = OperatorResult(deltas.slice(0, 0))
        late, evict = self.watermark.begin_batch()
        times = self._event_us(deltas)
        if self.event_time and deltas.num_rows:
            self._observe(deltas, times)
            on_time = times > late
            result.late_rows = int((~on_time).sum())
            deltas, times = deltas.filter(pa.array(on_time)), times[on_time]
        if deltas.num_rows:
            keys, key_of_row = distinct_keys(self._keys(deltas, times))
            first_rows = np.full(len(keys), -1, np.int64)
            first_rows[key_of_row[::-1]] = np.arange(len(key_of_row))[::-1]  # each key's first row
            new = np.array([v is None for v in state.get_many(keys)], bool)
            result.state_reads = len(keys)
            self._remember(state, [k for k, n in zip(keys, new) if n], times[first_rows[new]])
            result.output = deltas.take(pa.array(np.sort(first_rows[new]), pa.int64()))
        self._evict(state, late, evict)
        return result

    def no_data_batch(self, state: StateView) -> OperatorResult:
        """The batch Spark runs without data when the watermark moved: forget the keys it expired."""
        previous = self.watermark.at_us
        advanced = self.watermark.advance() if self.event_time else None
        if advanced is not None:
            self._evict(state, previous, advanced)
        return OperatorResult(self._schema.empty_table() if self._schema is not None else pa.table({}))

    def partition_key_reader(self) -> KeyColumns:
        return KeyColumns(tuple(self.columns))

    def _observe(self, rows: pa.Table, times: np.ndarray) -> None:
        """The watermark takes the batch's latest event time (each input's, for a union of watermarked inputs)."""
        present = times != NO_EVENT_TIME
        if self.watermark_inputs is None:
            assert isinstance(self.watermark, EventTimeWatermark)
            self.watermark.observe(int(times[present].max()) if present.any() else None)
            return
        assert isinstance(self.watermark, InputsWatermark)
        inputs = rows[self.watermark_inputs.column].to_numpy(zero_copy_only=False)
        maxima = {}
        for index in self.watermark_inputs.watermarked:
            mine = present & (inputs == index)
            maxima[index] = int(times[mine].max()) if mine.any() else None
        self.watermark_inputs.observe(self.watermark, maxima)

    # ------------------------------------------------------------------ prefetch hints
    def hint_spec(self) -> HintSpec:
        """The key columns (and the event time, when it is part of the key)."""
        return HintSpec((*self.columns, *([self.event_time] if self._by_time else [])), self.event_time)

    def hint_keys(self, hints: pa.Table) -> tuple[list[bytes], np.ndarray]:
        """The keys the batch will look up: the key columns, behind the event time when it is one of the keys."""
        return group_hint_keys(hints, self.columns, [b""], self._event_us(hints) if self._by_time else None)

    def hint_key_reader(self) -> KeyColumns:
        return KeyColumns(tuple(self.columns))

    def event_watermark(self) -> EventTimeWatermark | InputsWatermark | None:
        return self.watermark if self.event_time else None

    def _event_us(self, rows: pa.Table) -> np.ndarray:
        if not self.event_time:
            return np.zeros(rows.num_rows, np.int64)
        times = pc.cast(rows[self.event_time], pa.timestamp("us")).cast(pa.int64())
        return times.fill_null(NO_EVENT_TIME).to_numpy()

    def _keys(self, rows: pa.Table, times: np.ndarray) -> list[bytes]:
        """Per row, its key: the key columns, behind the event time when it is one of the keys."""
        rows = normalize_float_keys(rows.select(list(self.columns)), self.columns)
        if self._codec is None:
            self._codec = KeyCodec([rows.schema.field(c) for c in self.columns], windowed=self._by_time)
        columns = [rows[c].combine_chunks() for c in self.columns]
        return self._codec.encode(times if self._by_time else None, columns, rows.num_rows)

    def _expiries(self, times: np.ndarray) -> np.ndarray:
        """When keys first seen at ``times`` expire: the event time plus the delay. A key first seen without an event
        time expires at the delay, as Spark stores it (its row's null time slot reads 0), so the first eviction past
        it forgets the key."""
        return np.where(times == NO_EVENT_TIME, 0, times).astype(np.int64) + self.delay_us

    def _remember(self, state: StateView, keys: list[bytes], times: np.ndarray) -> None:
        """Keep the batch's new ``keys``, first seen at ``times`` (within the watermark: with their expiries)."""
        if not self.within_watermark:
            state.put_many(keys, [SEEN] * len(keys))
            return
        expiries = self._expiries(times)
        state.put_many(keys, split_fixed(expiries.astype(">i8").tobytes(), 8, len(keys)))
        self._put_expiries(state, expiries, pa.array(keys, pa.binary()))

    def _evict(self, state: StateView, previous: int, watermark: int) -> None:
        """Forget the keys expired as the eviction watermark moved from ``previous`` to ``watermark``."""
        if not (self._by_time or self.within_watermark) or watermark <= previous:
            return
        if not self.within_watermark:
            state.delete_range(window_prefix(0), window_prefix(watermark + 1))
            return
        expired: list[bytes] = []
        begin, end = DEDUP_EXPIRIES + window_prefix(0), DEDUP_EXPIRIES + window_prefix(watermark + 1)
        records = state.scan(begin, end)
        if records:
            held, _ = EXPIRIES.decode([value for _, value in records])
            due = pc.less_equal(held["expiry"], watermark)
            expired = held["key"].filter(due).to_pylist()
            state.delete_range(begin, end)
            rest = held.filter(pc.invert(due))
            self._put_expiries(state, rest["expiry"].to_numpy(), rest["key"])
        begin, end = DEDUP_EXPIRY + window_prefix(0), DEDUP_EXPIRY + window_prefix(watermark + 1)
        timers = state.scan(begin, end)  # an older version's timers, one per key
        if timers:
            expired += [k[len(DEDUP_EXPIRY) + 8 :] for k, _ in timers]
            state.delete_range(begin, end)
        if expired:
            state.put_many(expired, [None] * len(expired))

    @staticmethod
    def _put_expiries(state: StateView, expiries: np.ndarray, keys: pa.Array | pa.ChunkedArray) -> None:
        """``keys`` and their ``expiries`` in expiry order, as records of at most :data:`EXPIRY_RECORD_KEYS` keys,
        each behind its earliest expiry and that key (so an eviction reads only records holding an expired key, and
        rewrites at most that many keys of each). Keys that never expire (no event time, or an expiry before 1970,
        which the eviction's range never reaches) are left out."""
        expiring = np.flatnonzero((expiries >= 0) & (expiries != NO_EVENT_TIME))
        if not len(expiring):
            return
        order = expiring[np.argsort(expiries[expiring], kind="stable")]
        keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
        held = pa.table({"expiry": expiries[order], "key": keys.take(pa.array(order))})
        firsts = np.arange(0, held.num_rows, EXPIRY_RECORD_KEYS)
        counts = np.diff(np.append(firsts, held.num_rows))
        heads = held.take(pa.array(firsts))
        records = joined(DEDUP_EXPIRIES, heads["expiry"].to_numpy(), heads["key"].to_pylist())
        state.put_many(records, EXPIRIES.encode(held, counts))

    def memory_spaces(self) -> list[MemorySpace]:
        """The remembered keys, which every batch looks up, unless the event time is one of them (then they are
        forgotten by range, window by window)."""
        return [] if self._by_time else [MemorySpace(b"", KEYS_END)]

    # ------------------------------------------------------------------ versions
    def metadata(self) -> dict[str, Any]:
        """The watermark and the rows' schema (a batch without data right after a restart, and a reader of the
        state, use it)."""
        schema = {ROW_SCHEMA: schema_text(self._schema)} if self._schema is not None else {}
        return self.watermark.metadata() | schema

    def restore(self, metadata: dict[str, Any]) -> None:
        self.watermark.restore(metadata)
        if ROW_SCHEMA in metadata:
            self._schema = schema_from_text(metadata[ROW_SCHEMA])

    # ------------------------------------------------------------------ the state as rows
    def state_stores(self) -> list[StateStoreSpec]:
        """One store: a row per remembered key (its columns, and the event time when it is one of the keys); within
        the watermark, with the time the key expires."""
        rows = self.state_rows(DEFAULT_STORE, [], []) if self._schema is not None else None
        return [StateStoreSpec.of(DEFAULT_STORE, b"", KEYS_END, rows)]

    def state_rows(self, store: str, keys: list[bytes], values: list[bytes]) -> pa.Table:
        assert self._schema is not None, "state entries, but no rows' schema to decode them with"
        codec = self._codec or KeyCodec([self._schema.field(c) for c in self.columns], windowed=self._by_time)
        times, columns = codec.decode(keys)
        key_columns = dict(zip(self.columns, columns))
        if self._by_time:
            assert self.event_time is not None and times is not None
            key_columns[self.event_time] = pa.array(times, pa.int64()).cast(self._schema.field(self.event_time).type)
        value_columns = {}
        if self.within_watermark:
            expiries = np.frombuffer(b"".join(values), ">i8").astype(np.int64)
            value_columns["expires_at"] = pa.array(expiries, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
        return state_table(key_columns, value_columns, len(keys))
