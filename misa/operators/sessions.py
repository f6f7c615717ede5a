"""Session windows with Spark's semantics (``groupBy(session_window(event_time, gap), ...)``).

Each input row opens a session ``[event time, event time + gap)`` (the gap fixed, or per row); sessions of
one group that overlap or touch merge into one, within a batch, across batches and with the sessions in
state. As in Spark:

* output is ``append`` (a session is emitted once, when its end is at or before the eviction watermark)
  or ``complete`` (every session, each batch, none evicted); Spark refuses ``update``;
* a row whose own session ends at or before the late-events watermark is late (dropped, counted), in
  complete output too (unlike Spark's time-window aggregation, whose complete output takes late rows).

The input carries each row's session as a struct column of ``start`` and ``end`` timestamps, as Spark's
analyzer computes it for ``session_window`` (:func:`misa.from_query` keeps that step in the source).

State layout (:mod:`misa.state.keys`): per group key one record ``0xFE s`` ++ group key holding the
group's open sessions (start, end, aggregate states; :mod:`misa.operators.session_records`), and a timer
``0xFE S`` ++ earliest session end ++ group key holding a copy of that record, so eviction reads the groups with a
session due in one range scan, without a look-up per group (timers of an older layout hold ``0x01``: their groups'
records are read). A batch's
records are read, merged and written as columns, for all its groups at once.
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
from misa.exceptions import AnalysisError
from misa.operators import session_records
from misa.operators.aggregation import DELTA_SCHEMA, NO_WATERMARK, OUTPUT_WINDOW, Agg, AggValues
from misa.operators.base import (
    DEFAULT_STORE,
    ROWS,
    HintSource,
    KeyPartitioned,
    OperatorResult,
    StateReadable,
    StateStoreSpec,
    max_event_measures,
    observe_deltas,
    state_table,
)
from misa.operators.group_hints import group_hint_keys
from misa.operators.object_aggs import MERGE_ORDERED, merge_ordered
from misa.operators.schema import column_type, event_time, key_columns, schema_from_text, schema_text, typed
from misa.operators.session_records import Sessions, earliest_ends, merge_overlapping
from misa.operators.watermark import EventTimeWatermark, InputsWatermark, WatermarkInputs, inputs_signature
from misa.parallel.routing import KeyColumns
from misa.state.codec import KeyCodec, distinct_keys, normalize_float_keys
from misa.state.keys import (
    KEY_SPACE_VERSION,
    SESSION_RECORD,
    SESSION_TIMER,
    joined,
    key_tails,
    prefix_end,
    prefixed,
    window_prefix,
)
from misa.state.view import StateView
from prefetch.hints import HintSpec

START, END = "_session_start", "_session_end"
TIMER_ONLY = b"\x01"  # the value of a timer of the older layout, which held no record


@dataclass
class SessionAggregation(HintSource, KeyPartitioned, StateReadable):
    """Aggregation per (session, group); ``session`` names the input's struct column of start and end."""

    group_by: Sequence[str]
    aggs: Sequence[Agg]
    session: str
    event_time: str
    watermark_delay: str | None = "0s"  # None: no watermark (complete output only)
    output_mode: str = "append"
    collect_max_items: int = 10_000
    watermark_inputs: WatermarkInputs | None = None  # a union of watermarked streams: Spark's global watermark
    watermark: EventTimeWatermark | InputsWatermark = field(init=False)
    _codec: KeyCodec | None = field(default=None, init=False, repr=False)
    _ansi: bool = field(default=False, init=False, repr=False)
    _last_schema: pa.Schema | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.output_mode not in ("append", "complete"):
            raise ValueError(
                f"output mode {self.output_mode!r}: session windows run in append or complete output (as in Spark)"
            )
        if self.output_mode == "append" and self.watermark_delay is None:
            raise ValueError("append output of session windows needs watermark_delay (Spark's withWatermark)")
        if ordered := merge_ordered(self.aggs):
            raise ValueError(
                f"{ordered} over session windows: Spark merges sessions' {MERGE_ORDERED[ordered]} in its own order "
                "of buffers, which misa does not follow: a time window instead"
            )
        delay_ms = int(parse_seconds(self.watermark_delay or "0s") * 1000)
        self.watermark = self.watermark_inputs.watermark() if self.watermark_inputs else EventTimeWatermark(delay_ms)

    @property
    def _evicts(self) -> bool:
        return self.watermark_delay is not None and self.output_mode == "append"

    # ------------------------------------------------------------------ at start
    def signature(self, schema: T.StructType) -> dict[str, Any]:
        """Resolve the group, session, event-time and aggregate columns against the input's schema."""
        session = column_type(schema, self.session, f"the session column {self.session!r}")
        if not isinstance(session, T.StructType) or [f.name for f in session.fields] != ["start", "end"]:
            raise AnalysisError(
                f'[DATATYPE_MISMATCH] the session column "{self.session}" has type {session.simpleString()}; it '
                "must be session_window's struct<start: timestamp, end: timestamp>"
            )
        event_time(schema, self.event_time, f"the session aggregation's event_time {self.event_time!r}")
        aggregations = []
        for agg in self.aggs:
            if agg.column == "*":
                aggregations.append(f"{agg.name}=count(*)")
                continue
            dtype = column_type(schema, agg.column, str(agg))
            agg.check_input(dtype)
            aggregations.append(f"{agg.name}={agg.function}({typed(agg.column, dtype)})")
        return {
            "operator": "SessionAggregation",
            "group_columns": key_columns(schema, self.group_by, f"the session aggregation's group_by {self.group_by}"),
            "aggregations": aggregations,
            "lateness": self.watermark_delay,
            "output_mode": self.output_mode,
            "key_space": KEY_SPACE_VERSION,
        } | inputs_signature(self.watermark_inputs)

    # ------------------------------------------------------------------ Spark side
    def deltas(self, batch: DataFrame) -> DataFrame:
        """Partial aggregates per (group, row session) of the batch: of each row when every aggregate has a partial
        of one row (the driver's merge folds rows of one session as it folds sessions: no shuffle in Spark), else
        grouped by Spark."""
        self._ansi = str(batch.sparkSession.conf.get("spark.sql.ansi.enabled")).lower() == "true"
        types = {f.name: f.dataType for f in batch.schema.fields}
        session = F.col(self.session)
        starts = [F.unix_micros(session["start"]).alias(START), F.unix_micros(session["end"]).alias(END)]
        keys = [F.col(c) for c in self.group_by]
        per_row = [agg.row_partials(i, types.get(agg.column)) for i, agg in enumerate(self.aggs)]
        if all(p is not None for p in per_row):
            measures = [
                F.lit(1).cast("bigint").alias(ROWS),
                *max_event_measures(self.event_time, self.watermark_inputs, True),
            ]
            return batch.select(*keys, *starts, *measures, *[c for p in per_row for c in p or ()])
        measures = [F.count(F.lit(1)).alias(ROWS), *max_event_measures(self.event_time, self.watermark_inputs)]
        for i, agg in enumerate(self.aggs):
            measures += agg.partials(i, types.get(agg.column))
        return batch.groupBy(*keys, *starts).agg(*measures)

    # ------------------------------------------------------------------ driver side
    def apply(self, deltas: pa.Table, state: StateView) -> OperatorResult:
        """Merge the batch's row sessions into each group's sessions; emit what the watermark closes."""
        values = AggValues.of(self.aggs, deltas.schema, self._ansi, self.collect_max_items)
        self._last_schema = deltas.schema
        if self._codec is None:  # from the deltas' schema, empty or not: complete output decodes every group
            self._codec = KeyCodec([deltas.schema.field(c) for c in self.group_by], windowed=False)
        result = OperatorResult(self._output(*_no_sessions(values), values))
        late, evict = self.watermark.begin_batch()
        if self.watermark_delay is None:
            late = NO_WATERMARK
        if not self._evicts:
            evict = late
        if deltas.num_rows:
            observe_deltas(self.watermark, self.watermark_inputs, deltas)
            on_time = pc.greater(deltas[END], late)
            result.late_rows = int(pc.sum(pc.filter(deltas[ROWS], pc.invert(on_time))).as_py() or 0)
            deltas = deltas.filter(on_time)
        if deltas.num_rows:
            result.state_reads = self._merge(deltas, values, state)
        closed = self._evict(state, values, late, evict)
        if self.output_mode == "append":
            result.output = self._output(*closed, values)
        else:
            result.output = self._output(*self._everything(state, values), values)
        return result

    def no_data_batch(self, state: StateView) -> OperatorResult:
        """The batch Spark runs without data when the watermark moved: emit and forget the sessions it closes."""
        if self._last_schema is None or not self._evicts:
            return OperatorResult(pa.table({}))
        values = AggValues.of(self.aggs, self._last_schema, self._ansi, self.collect_max_items)
        previous = self.watermark.at_us
        advanced = self.watermark.advance()
        closed = self._evict(state, values, previous, advanced if advanced is not None else previous)
        return OperatorResult(self._output(*closed, values))

    def spark_runs_no_data_batches(self) -> bool:
        """Spark's session windows run batches without data in append output with a watermark, not in complete."""
        return self.output_mode != "complete" and self.watermark_delay is not None

    def partition_key_reader(self) -> KeyColumns:
        return KeyColumns(tuple(self.group_by))

    def event_watermark(self) -> EventTimeWatermark | InputsWatermark | None:
        return self.watermark

    def hint_spec(self) -> HintSpec:
        return HintSpec(tuple(self.group_by), self.event_time)

    def hint_keys(self, hints: pa.Table) -> tuple[list[bytes], np.ndarray]:
        """The session records of the hint rows' groups (the batch reads each group's record)."""
        return group_hint_keys(hints, self.group_by, [SESSION_RECORD])

    def _merge(self, deltas: pa.Table, values: AggValues, state: StateView) -> int:
        """Fold the deltas' row sessions into their groups' records, for all groups at once; the groups read."""
        rows = normalize_float_keys(deltas, list(self.group_by))
        assert self._codec is not None
        group_keys, key_of_row = distinct_keys(
            self._codec.encode(None, [rows[c].combine_chunks() for c in self.group_by], rows.num_rows)
        )
        width, with_objects = values.states.width, bool(values.objects)
        objects = values.objects.delta_states(rows) if with_objects else None
        new = Sessions(key_of_row, rows[START].to_numpy(), rows[END].to_numpy(), values.delta_states(rows), objects)
        records = prefixed(SESSION_RECORD, group_keys)
        stored = session_records.decode(state.get_many(records), width, with_objects)
        merged = merge_overlapping(Sessions.concat([stored, new], width, with_objects), values.states, values.objects)
        encoded = session_records.encode(merged, len(group_keys))
        state.put_many(records, encoded)
        keys = np.array(group_keys, dtype=object)
        old_groups, old_timers = earliest_ends(stored)
        new_groups, new_timers = earliest_ends(merged)
        _set_timers(state, old_timers, keys[old_groups], [None] * len(old_groups))
        _set_timers(state, new_timers, keys[new_groups], [encoded[g] for g in new_groups.tolist()])
        return len(group_keys)

    def _evict(self, state: StateView, values: AggValues, previous: int, watermark: int) -> tuple[np.ndarray, Sessions]:
        """Forget the sessions ending at or before ``watermark``; they and each one's group key, for append output."""
        nothing = _no_sessions(values)
        if watermark <= previous:
            return nothing
        begin, end = SESSION_TIMER + window_prefix(0), SESSION_TIMER + window_prefix(watermark + 1)
        due = state.scan(begin, end)
        if not due:
            return nothing
        group_keys, carried = _due_groups(due)
        state.delete_range(begin, end)
        records = prefixed(SESSION_RECORD, group_keys)
        unread = [i for i, record in enumerate(carried) if record == TIMER_ONLY]
        if unread:  # timers of the older layout hold no record: read those groups'
            for i, record in zip(unread, state.get_many([records[i] for i in unread])):
                carried[i] = record
        stored = session_records.decode(carried, values.states.width, bool(values.objects))
        closing = stored.end <= watermark
        still_open = stored.take(~closing)
        encoded = session_records.encode(still_open, len(group_keys))
        state.put_many(records, encoded)
        open_groups, timers_left = earliest_ends(still_open)
        _set_timers(state, timers_left, group_keys[open_groups], [encoded[g] for g in open_groups.tolist()])
        closed = stored.take(closing)
        return group_keys[closed.group], closed

    def _everything(self, state: StateView, values: AggValues) -> tuple[np.ndarray, Sessions]:
        """Every group's sessions (complete output), each with its group key."""
        scanned = state.scan(SESSION_RECORD, SESSION_RECORD + b"\xff")
        if not scanned:
            return _no_sessions(values)
        keys, records = [k for k, _ in scanned], [v for _, v in scanned]
        sessions = session_records.decode(records, values.states.width, bool(values.objects))
        group_keys = key_tails(pa.array(keys, pa.binary()), len(SESSION_RECORD)).to_numpy(zero_copy_only=False)
        return group_keys[sessions.group], sessions

    def _output(self, group_keys: np.ndarray, sessions: Sessions, values: AggValues) -> pa.Table:
        """Rows of (session start, end, group columns, aggregates), a session each (``group_keys``: its group's)."""
        window = [pa.array(sessions.start, pa.int64()), pa.array(sessions.end, pa.int64())]
        window = [w.cast(pa.timestamp("us", tz="UTC")) for w in window]
        if self._codec is not None and len(group_keys):
            _, columns = self._codec.decode(list(group_keys))
        else:
            types = {f.name: f.type for f in self._last_schema} if self._last_schema is not None else {}
            columns = [pa.array([], types.get(c, pa.null())) for c in self.group_by]
        cells = sessions.cells.reshape(len(sessions), values.states.width)
        aggregates = values.columns(cells, sessions.objects or [])  # objects: read only with object aggregates
        return pa.table(dict(zip([*OUTPUT_WINDOW, *self.group_by], window + list(columns))) | aggregates)

    # ------------------------------------------------------------------ versions
    def metadata(self) -> dict[str, Any]:
        """The watermark and the deltas' schema (a batch without data right after a restart, and a reader of the
        state, decode with it)."""
        schema = {DELTA_SCHEMA: schema_text(self._last_schema)} if self._last_schema is not None else {}
        return self.watermark.metadata() | schema

    def restore(self, metadata: dict[str, Any]) -> None:
        self.watermark.restore(metadata)
        if DELTA_SCHEMA in metadata:
            self._last_schema = schema_from_text(metadata[DELTA_SCHEMA])
            self._codec = KeyCodec([self._last_schema.field(c) for c in self.group_by], windowed=False)

    # ------------------------------------------------------------------ the state as rows
    def state_stores(self) -> list[StateStoreSpec]:
        """One store: a row per open session, keyed by the group columns and Spark's ``session_window`` struct, with
        each aggregate's value as the output shows it."""
        rows = self.state_rows(DEFAULT_STORE, [], []) if self._last_schema is not None else None
        return [StateStoreSpec.of(DEFAULT_STORE, SESSION_RECORD, prefix_end(SESSION_RECORD), rows)]

    def state_rows(self, store: str, keys: list[bytes], values: list[bytes]) -> pa.Table:
        assert self._last_schema is not None, "state entries, but no deltas' schema to decode them with"
        aggs = AggValues.of(self.aggs, self._last_schema, self._ansi, self.collect_max_items)
        sessions = session_records.decode(values, aggs.states.width, bool(aggs.objects))
        group_keys = key_tails(pa.array(keys, pa.binary()), len(SESSION_RECORD)).to_numpy(zero_copy_only=False)
        output = self._output(group_keys[sessions.group], sessions, aggs)
        window = pa.StructArray.from_arrays([output[c].combine_chunks() for c in OUTPUT_WINDOW], ["start", "end"])
        key_columns = {c: output[c] for c in self.group_by} | {"session_window": window}
        return state_table(key_columns, {a.name: output[a.name] for a in self.aggs}, output.num_rows)


def _no_sessions(values: AggValues) -> tuple[np.ndarray, Sessions]:
    """No sessions and no group keys (an output or an eviction of nothing)."""
    return np.zeros(0, object), Sessions.empty(values.states.width, bool(values.objects))


def _set_timers(state: StateView, times: np.ndarray, group_keys: np.ndarray, values: list[bytes | None]) -> None:
    """Write the timers of ``group_keys`` at ``times``, each holding its group's record (None: delete it)."""
    if len(group_keys):
        state.put_many(joined(SESSION_TIMER, times, list(group_keys)), values)


def _due_groups(due: list[tuple[bytes, bytes]]) -> tuple[np.ndarray, list[bytes]]:
    """The groups of the timers ``due``, in key order, and the record each timer holds."""
    timers, carried = [k for k, _ in due], [v for _, v in due]  # two passes: cheaper than zip(*due) on many
    tails = key_tails(pa.array(timers, pa.binary()), len(SESSION_TIMER) + 8)
    order = pc.sort_indices(tails).to_numpy()
    group_keys = tails.take(pa.array(order)).to_numpy(zero_copy_only=False)
    return group_keys, [carried[i] for i in order.tolist()]
