"""Spark's Python stateful processor (``transformWithStateInPandas``) with its state in misa's store.

A user's :class:`pyspark.sql.streaming.StatefulProcessor` runs unchanged: ``init(handle)`` once, then per batch
``handleInputRows(key, rows, timerValues)`` once per grouping key with the key's rows as an iterator of pandas
DataFrames (keys in no particular order, as Spark's), then ``handleExpiredTimer`` for each timer that fell due;
what they yield is the batch's output. The handle gives value, list and map state (with TTL) and timers, as
Spark's does, but the state lives in the driver's process: a state call is a dictionary lookup or a RocksDB read,
not a message to the JVM's state server.

Before the processor runs, every state variable and the timers of the batch's keys are read in one multi-get (the
batch knows its keys: misa's prefetch of the keys the batch will call); a map is one record per key, each entry
with its own TTL. Writes go to misa's versioned store, so they commit with the batch
(asynchronously in misa's mode) and a restart recovers them.

Time modes, as Spark's: ``None``; ``ProcessingTime`` (timers fire at or before the batch's start time, TTL counts
from it); ``EventTime`` (``event_time`` names the input's timestamp column: rows at or before the late-events
watermark are dropped, timers fire at or before the eviction watermark). TTL: a value past its time is not
returned (a read finds it absent) and is deleted when read or written after that.

State layout (:mod:`misa.state.keys`): ``0xFE v`` ++ state number ++ grouping key -> the pickled value, list or
map (with expiries); ``0xFE w`` ++ time (8 B big-endian, ms) ++ grouping key: timers by time;
``0xFE x`` ++ grouping key: the key's timers.
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from misa.config_forms import parse_seconds
from misa.operators.base import HintSource, KeyPartitioned, OperatorResult, StateReadable, StateStoreSpec, state_table
from misa.operators.group_hints import group_hint_keys
from misa.operators.schema import event_time, key_columns
from misa.operators.watermark import EventTimeWatermark
from misa.parallel.routing import KeyColumns
from misa.state.codec import KeyCodec, distinct_keys, normalize_float_keys
from misa.state.keys import (
    KEY_SPACE_VERSION,
    PROCESSOR_KEY_TIMERS,
    PROCESSOR_STATE,
    PROCESSOR_TIMER,
    prefix_end,
    window_prefix,
)
from misa.state.view import StateView
from prefetch.hints import HintSpec

TIME_MODES = ("None", "ProcessingTime", "EventTime")
INITIAL = "_misa_initial_state"  # marks the initial state's rows among the first batch's
NEVER = 1 << 62  # the expiry of a value without TTL
TIMERS_STORE, TIMER_COLUMN = "$timers", "expiry_timestamp_ms"  # the timers as the state data source shows them
EXPIRY_COLUMN = "ttl_expires_at_ms"


def _plain(values: Sequence[Any]) -> tuple:
    """A state value as Spark hands it back: a tuple of plain Python values (numpy scalars converted)."""
    return tuple(v.item() if isinstance(v, np.generic) else v for v in values)


class _KeyedState:
    """The state of the key being processed: reads through the batch's prefetched values, writes to the view."""

    def __init__(self, view: StateView, now_ms: int):
        self.view = view
        self.now_ms = now_ms
        self.key = b""  # the current grouping key (encoded)
        self.known: dict[bytes, Any] = {}  # state keys read or written this batch -> decoded value (None: absent)

    def state_key(self, number: int) -> bytes:
        return PROCESSOR_STATE + bytes([number]) + self.key

    def read(self, key: bytes) -> Any:
        if key not in self.known:
            self.known[key] = _decode(self.view.get_many([key])[0])
        entry = self.known[key]
        if entry is not None and entry[1] <= self.now_ms:  # past its TTL
            self.write(key, None)
            return None
        return None if entry is None else entry[0]

    def write(self, key: bytes, value: Any, ttl_ms: int | None = None) -> None:
        entry = None if value is None else (value, self.now_ms + ttl_ms if ttl_ms else NEVER)
        self.known[key] = entry
        self.view.put_many([key], [None if entry is None else pickle.dumps(entry, protocol=5)])

    def prefetch(self, keys: list[bytes]) -> None:
        """Read ``keys`` in one multi-get (the batch's value and list states)."""
        missing = [k for k in keys if k not in self.known]
        for key, raw in zip(missing, self.view.get_many(missing)):
            self.known[key] = _decode(raw)


def _decode(raw: bytes | None) -> Any:
    return None if raw is None else pickle.loads(raw)


@dataclass
class ValueState:
    """Spark's ValueState: one tuple per grouping key."""

    state: _KeyedState
    number: int
    ttl_ms: int | None

    def exists(self) -> bool:
        return self.get() is not None

    def get(self) -> tuple | None:
        return self.state.read(self.state.state_key(self.number))

    def update(self, newValue: tuple) -> None:  # noqa: N803 - Spark's parameter names
        self.state.write(self.state.state_key(self.number), _plain(newValue), self.ttl_ms)

    def clear(self) -> None:
        self.state.write(self.state.state_key(self.number), None)


@dataclass
class ListState:
    """Spark's ListState: a list of tuples per grouping key."""

    state: _KeyedState
    number: int
    ttl_ms: int | None

    def exists(self) -> bool:
        return bool(self._items())

    def get(self) -> Iterator[tuple]:
        return iter(list(self._items()))

    def put(self, newState: list[tuple]) -> None:  # noqa: N803
        self.state.write(self.state.state_key(self.number), [_plain(v) for v in newState] or None, self.ttl_ms)

    def appendValue(self, newState: tuple) -> None:  # noqa: N802, N803
        self.put([*self._items(), newState])

    def appendList(self, newState: list[tuple]) -> None:  # noqa: N802, N803
        self.put([*self._items(), *newState])

    def clear(self) -> None:
        self.state.write(self.state.state_key(self.number), None)

    def _items(self) -> list[tuple]:
        return self.state.read(self.state.state_key(self.number)) or []


@dataclass
class MapState:
    """Spark's MapState: a map of tuples to tuples per grouping key (stored as one record per key, each entry
    with its own TTL, so that a key's map is one read, prefetched with its other state)."""

    state: _KeyedState
    number: int
    ttl_ms: int | None

    def _entries(self) -> dict[tuple, tuple[tuple, int]]:
        """The live entries (user key -> (value, expiry)); expired ones are dropped (and the map rewritten)."""
        entries = self.state.read(self.state.state_key(self.number)) or {}
        live = {k: e for k, e in entries.items() if e[1] > self.state.now_ms}
        if len(live) != len(entries):
            self._write(live)
        return live

    def _write(self, entries: dict[tuple, tuple[tuple, int]]) -> None:
        self.state.write(self.state.state_key(self.number), entries or None)

    def exists(self) -> bool:
        return bool(self._entries())

    def getValue(self, key: tuple) -> tuple | None:  # noqa: N802
        entry = self._entries().get(_plain(key))
        return None if entry is None else entry[0]

    def containsKey(self, key: tuple) -> bool:  # noqa: N802
        return _plain(key) in self._entries()

    def updateValue(self, key: tuple, value: tuple) -> None:  # noqa: N802
        entries = self._entries()
        entries[_plain(key)] = (_plain(value), self.state.now_ms + self.ttl_ms if self.ttl_ms else NEVER)
        self._write(entries)

    def removeKey(self, key: tuple) -> None:  # noqa: N802
        entries = self._entries()
        if entries.pop(_plain(key), None) is not None:
            self._write(entries)

    def iterator(self) -> Iterator[tuple[tuple, tuple]]:
        return iter([(k, e[0]) for k, e in self._entries().items()])

    def keys(self) -> Iterator[tuple]:
        return iter(list(self._entries()))

    def values(self) -> Iterator[tuple]:
        return iter([e[0] for e in self._entries().values()])

    def clear(self) -> None:
        self._write({})


class MisaProcessorHandle(StatefulProcessorHandle):
    """The handle a processor's ``init`` gets: its state variables and timers live in misa's store."""

    def __init__(self, state: _KeyedState):  # noqa: D107 - Spark's handle's base takes an API client
        self._state = state
        self.variables: dict[str, ValueState | ListState | MapState] = {}
        self.schemas: dict[str, tuple[Any, ...]] = {}  # each variable's schemas as init gave them (map: key, value)

    def _variable(self, kind: type, name: str, ttl_ms: int | None, *schemas: Any) -> Any:
        if name not in self.variables:
            if len(self.variables) >= 255:
                raise ValueError("a processor may have at most 255 state variables")
            self.variables[name] = kind(self._state, len(self.variables) + 1, ttl_ms)
            self.schemas[name] = schemas
        return self.variables[name]

    def getValueState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> Any:  # noqa: N802, N803
        return self._variable(ValueState, stateName, ttlDurationMs, schema)

    def getListState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> Any:  # noqa: N802, N803
        return self._variable(ListState, stateName, ttlDurationMs, schema)

    def getMapState(  # noqa: N802
        self,
        stateName: str,
        userKeySchema: Any,
        valueSchema: Any,
        ttlDurationMs: int | None = None,  # noqa: N803
    ) -> Any:
        return self._variable(MapState, stateName, ttlDurationMs, userKeySchema, valueSchema)

    def registerTimer(self, expiryTimestampMs: int) -> None:  # noqa: N802, N803
        timers = self._timers()
        if expiryTimestampMs not in timers:
            self._set_timers(sorted([*timers, int(expiryTimestampMs)]))
            self._state.view.put_many([_timer_key(expiryTimestampMs, self._state.key)], [b"\x01"])

    def deleteTimer(self, expiryTimestampMs: int) -> None:  # noqa: N802, N803
        timers = self._timers()
        if expiryTimestampMs in timers:
            self._set_timers([t for t in timers if t != expiryTimestampMs])
            self._state.view.put_many([_timer_key(expiryTimestampMs, self._state.key)], [None])

    def listTimers(self) -> Iterator[int]:  # noqa: N802
        return iter(self._timers())

    def deleteIfExists(self, stateName: str) -> None:  # noqa: N802, N803
        variable = self.variables.get(stateName)
        if variable is not None:
            variable.clear()

    def _timers(self) -> list[int]:
        key = PROCESSOR_KEY_TIMERS + self._state.key
        if key not in self._state.known:
            self._state.known[key] = _decode(self._state.view.get_many([key])[0])
        return list(self._state.known[key] or [])

    def _set_timers(self, timers: list[int]) -> None:
        key = PROCESSOR_KEY_TIMERS + self._state.key
        self._state.known[key] = timers or None
        self._state.view.put_many([key], [pickle.dumps(timers, protocol=5) if timers else None])


@dataclass(frozen=True)
class StateVariable:
    """A processor's state variable as ``init`` declares it: its kind and schemas (Arrow), for reading its rows."""

    name: str
    kind: str  # value, list or map
    value: pa.Schema
    user_key: pa.Schema | None = None  # a map's

    def columns(self, group: Sequence[pa.Field]) -> tuple[pa.StructType, pa.StructType]:
        """The ``key`` and ``value`` struct types of the variable's rows."""
        key = [*group, *([pa.field("user_key", pa.struct(list(self.user_key)))] if self.user_key is not None else [])]
        return pa.struct(key), pa.struct([*self.value, pa.field(EXPIRY_COLUMN, pa.int64())])

    def rows(self, group: Sequence[pa.Field], groups: list[pa.Array], entries: list[Any]) -> pa.Table:
        """The rows of the variable's stored ``entries`` (pickled as the handle writes them), one per grouping key
        ``groups`` (per column) holds."""
        owners, user_keys, values, expiries = [], [], [], []
        for owner, (held, expiry) in enumerate(entries):
            if self.kind == "value":
                items = [(None, held, expiry)]
            elif self.kind == "list":
                items = [(None, element, expiry) for element in held]
            else:
                items = [(k, v, e) for k, (v, e) in held.items()]
            for user_key, value, at in items:
                owners.append(owner)
                user_keys.append(user_key)
                values.append(value)
                expiries.append(None if at >= NEVER else at)
        taken = pa.array(owners, pa.int64())
        key_type, value_type = self.columns(group)
        keys = {f.name: column.take(taken) for f, column in zip(group, groups)}
        if self.user_key is not None:
            keys["user_key"] = _structs(user_keys, key_type.field("user_key").type)
        value_columns = _structs(values, pa.struct(list(self.value))).flatten()
        out = dict(zip(self.value.names, value_columns)) | {EXPIRY_COLUMN: pa.array(expiries, pa.int64())}
        return state_table(keys, out, len(owners))


def _structs(tuples: list[tuple], struct: pa.StructType) -> pa.StructArray:
    """Tuples (a state value or a map's user key) as a struct array of ``struct``'s fields."""
    names = [f.name for f in struct]
    return pa.array([dict(zip(names, t)) for t in tuples], struct)


def _variables_of(processor: StatefulProcessor) -> list[StateVariable]:
    """The processor's state variables: its ``init`` run once against a handle that only records them."""
    handle = MisaProcessorHandle(_KeyedState(None, 0))  # type: ignore[arg-type] - init declares, it reads nothing
    processor.init(handle)
    kinds = {ValueState: "value", ListState: "list", MapState: "map"}
    out = []
    for name, variable in handle.variables.items():
        schemas = [to_arrow_schema(_struct_type(s), timezone="UTC") for s in handle.schemas[name]]
        out.append(StateVariable(name, kinds[type(variable)], schemas[-1], schemas[0] if len(schemas) > 1 else None))
    return out


def _struct_type(schema: T.StructType | str) -> T.StructType:
    """A state schema as ``init`` gives it (a StructType or a DDL string; this runs on the driver)."""
    return schema if isinstance(schema, T.StructType) else T._parse_datatype_string(schema)  # type: ignore[return-value]


def _timer_key(at_ms: int, group_key: bytes) -> bytes:
    return PROCESSOR_TIMER + window_prefix(at_ms) + group_key


@dataclass
class StatefulProcessorOperator(HintSource, KeyPartitioned, StateReadable):
    """Runs ``processor`` over the rows of each ``group_by`` key, as ``transformWithStateInPandas`` does."""

    processor: StatefulProcessor
    group_by: Sequence[str]
    output_schema: T.StructType | str
    time_mode: str = "None"
    event_time: str | None = None  # EventTime mode: the input's timestamp column (withWatermark's)
    watermark_delay: str | None = None  # EventTime mode: Spark's withWatermark delay
    clock: Callable[[], float] = time.time  # the batch's processing time (seconds); tests give their own
    initial_state: DataFrame | None = None  # rows for handleInitialState, grouped by the same columns (batch 0)
    key_columns: Sequence[str] | None = None  # the columns of the key the processor gets, when not ``group_by``
    watermark: EventTimeWatermark = field(init=False)
    _initialized: bool = field(default=False, init=False, repr=False)
    _codec: KeyCodec | None = field(default=None, init=False, repr=False)
    _handle: MisaProcessorHandle | None = field(default=None, init=False, repr=False)
    _state: _KeyedState | None = field(default=None, init=False, repr=False)
    _variables: list[StateVariable] | None = field(default=None, init=False, repr=False)  # learnt at start

    def __post_init__(self) -> None:
        if self.time_mode not in TIME_MODES:
            raise ValueError(f"time_mode {self.time_mode!r}: use one of {', '.join(TIME_MODES)} (Spark's timeMode)")
        if self.time_mode == "EventTime" and not (self.event_time and self.watermark_delay is not None):
            raise ValueError("EventTime mode needs event_time and watermark_delay (withWatermark's column and delay)")
        if isinstance(self.output_schema, str):
            self.output_schema = T._parse_datatype_string(self.output_schema)  # type: ignore[assignment]
        self.watermark = EventTimeWatermark(int(parse_seconds(self.watermark_delay or "0s") * 1000))

    def __getstate__(self) -> dict[str, Any]:  # worker processes get the processor, not this process's state
        return {**self.__dict__, "_handle": None, "_state": None, "initial_state": None}

    # ------------------------------------------------------------------ at start
    def signature(self, schema: T.StructType) -> dict[str, Any]:
        """Resolve the grouping (and event-time) columns; the processor's class names its state."""
        if self.event_time:
            event_time(schema, self.event_time, f"the processor's event_time {self.event_time!r}")
        processor = type(self.processor)
        groups = to_arrow_schema(T.StructType([schema[c] for c in self.group_by]))
        self._codec = KeyCodec(list(groups), windowed=False)  # timers due after a restart name their keys with it
        self._variables = _variables_of(self.processor)
        return {
            "operator": "StatefulProcessor",
            "processor": f"{processor.__module__}.{processor.__qualname__}",
            "group_columns": key_columns(schema, self.group_by, f"the processor's grouping {list(self.group_by)}"),
            "output": self.output_schema.simpleString(),  # type: ignore[union-attr]
            "time_mode": self.time_mode,
            "key_space": KEY_SPACE_VERSION,
        }

    # ------------------------------------------------------------------ Spark side
    def deltas(self, batch: DataFrame) -> DataFrame:
        """The batch's rows, in the order Spark reads them; the first batch's also carry the initial state's rows
        (marked), which reach the partitions of their keys as the input rows do."""
        if self.initial_state is None or self._initialized:
            return batch
        state_columns = [F.col(c).alias(INITIAL + c) for c in self.initial_state.columns if c not in self.group_by]
        initial = self.initial_state.select(*self.group_by, *state_columns, F.lit(True).alias(INITIAL))
        self._initialized = True  # on the driver too: its copy runs no apply() with worker processes
        return batch.withColumn(INITIAL, F.lit(False)).unionByName(initial, allowMissingColumns=True)

    # ------------------------------------------------------------------ driver side
    def apply(self, deltas: pa.Table, state: StateView) -> OperatorResult:
        """Call the processor for each key of the batch, then for each timer due; its rows are the output."""
        now_ms = int(self.clock() * 1000)
        handle = self._bind(state, now_ms)
        late, evict = self.watermark.begin_batch()
        result = OperatorResult(self._arrow_output().empty_table())
        if self.event_time and deltas.num_rows:  # the watermark is kept whenever the input has an event time
            times = pc.cast(deltas[self.event_time], pa.timestamp("us")).cast(pa.int64())
            self.watermark.observe(pc.max(times).as_py())
            if self.time_mode == "EventTime":  # late rows are dropped in EventTime mode only
                on_time = pc.fill_null(pc.greater(times, late), True)
                result.late_rows = deltas.num_rows - int(pc.sum(on_time).as_py() or 0)
                deltas = deltas.filter(on_time)
        values = TimerValues(*self._times(now_ms, evict))
        if INITIAL in deltas.column_names:  # the first batch's rows of the initial state: their columns are prefixed
            initial = pc.fill_null(deltas[INITIAL], False)
            prefixed = [c for c in deltas.column_names if c.startswith(INITIAL)]
            rows = deltas.filter(initial).select([*self.group_by, *(c for c in prefixed if c != INITIAL)])
            names = [c.removeprefix(INITIAL) for c in rows.column_names]
            self._initial_rows(rows.rename_columns(names), handle, values)
            deltas = deltas.filter(pc.invert(initial)).drop_columns(prefixed)
        self._initialized = True
        outputs = self._input_rows(deltas, handle, values) + self._expired(state, handle, values, now_ms, evict)
        frames = [f for f in outputs if len(f)]
        if frames:
            result.output = self._output_table(frames)
        result.state_reads = len(self._state.known) if self._state is not None else 0
        return result

    def no_data_batch(self, state: StateView) -> OperatorResult:
        """The batch Spark runs without data when the watermark moved: fire the event-time timers it made due."""
        empty = OperatorResult(self._arrow_output().empty_table())
        if self.time_mode != "EventTime":
            return empty
        now_ms = int(self.clock() * 1000)
        advanced = self.watermark.advance()
        if advanced is None:
            return empty
        handle = self._bind(state, now_ms)
        values = TimerValues(*self._times(now_ms, advanced))
        frames = [f for f in self._expired(state, handle, values, now_ms, advanced) if len(f)]
        if frames:
            empty.output = self._output_table(frames)
        return empty

    def spark_runs_no_data_batches(self) -> bool:
        """Batches without data fire event-time timers (processing-time timers fire in data batches only)."""
        return self.time_mode == "EventTime"

    def partition_key_reader(self) -> KeyColumns:
        return KeyColumns(tuple(self.group_by))

    def event_watermark(self) -> EventTimeWatermark | None:
        return self.watermark if self.event_time else None

    def hint_spec(self) -> HintSpec:
        return HintSpec(tuple(self.group_by))

    def hint_keys(self, hints: pa.Table) -> tuple[list[bytes], np.ndarray]:
        """Each hint row's key's state variables and timers, as the batch reads them before calling the processor
        (none before ``init`` has named the variables, in the first batch)."""
        if self._handle is None:
            return [], np.zeros(0, np.int64)
        prefixes = [PROCESSOR_STATE + bytes([v.number]) for v in list(self._handle.variables.values())]
        return group_hint_keys(hints, self.group_by, [*prefixes, PROCESSOR_KEY_TIMERS])

    def _bind(self, view: StateView, now_ms: int) -> MisaProcessorHandle:
        """The handle, its state bound to this batch's view (``init`` runs once, on the first batch)."""
        if self._state is None or self._handle is None:
            self._state = _KeyedState(view, now_ms)
            self._handle = MisaProcessorHandle(self._state)
            self.processor.init(self._handle)
        self._state.view, self._state.now_ms, self._state.known = view, now_ms, {}
        return self._handle

    def _times(self, now_ms: int, evict_us: int) -> tuple[int, int]:
        """The batch's processing time and watermark (ms) as its TimerValues give them (-1: not in this mode)."""
        processing = now_ms if self.time_mode == "ProcessingTime" else -1
        return processing, evict_us // 1000 if self.time_mode == "EventTime" else -1

    def _arrow_output(self) -> pa.Schema:
        """The output's Arrow schema."""
        return to_arrow_schema(self.output_schema)

    def _output_table(self, frames: list[pd.DataFrame]) -> pa.Table:
        """The rows the processor yielded (non-empty frames) as the output schema's table."""
        return pa.Table.from_pandas(
            pd.concat(frames, ignore_index=True), schema=self._arrow_output(), preserve_index=False
        )

    def _frames(self, rows: pa.Table, bounds: np.ndarray) -> list[pd.DataFrame]:
        """Input rows sorted by key as the pandas DataFrames the processor gets, one per key (its rows from
        ``bounds[i]`` to ``bounds[i + 1]``)."""
        frame = rows.to_pandas()
        return [frame.iloc[bounds[i] : bounds[i + 1]].reset_index(drop=True) for i in range(len(bounds) - 1)]

    def grouping_columns(self) -> list[str]:
        """The columns whose values make the key the processor gets: ``group_by``, or the key columns that
        ``group_by`` holds the texts of (:mod:`misa.query.key_text`)."""
        return list(self.key_columns if self.key_columns is not None else self.group_by)

    def _groupings(self, keys: pa.Table, count: int) -> list[tuple]:
        """Each of the ``count`` rows of the grouping columns ``keys`` as the key tuple the processor gets."""
        columns = [column.to_pylist() for column in keys.columns]
        return [tuple(column[i] for column in columns) for i in range(count)]

    def _initial_rows(self, rows: pa.Table, handle: MisaProcessorHandle, values: TimerValues) -> None:
        """handleInitialState once per key of the initial state, with its rows."""
        for grouping, part in self._by_key(rows, handle):
            self.processor.handleInitialState(grouping, part, values)

    def _input_rows(self, rows: pa.Table, handle: MisaProcessorHandle, values: TimerValues) -> list[pd.DataFrame]:
        """handleInputRows once per key of the batch, its rows in input order."""
        outputs: list[pd.DataFrame] = []
        for grouping, part in self._by_key(rows, handle):
            outputs += list(self.processor.handleInputRows(grouping, iter([part]), values) or [])
        return outputs

    def _by_key(self, rows: pa.Table, handle: MisaProcessorHandle) -> Iterator[tuple[tuple, pd.DataFrame]]:
        """Each key's grouping values and rows (in input order), its state bound and prefetched with the batch's."""
        if not rows.num_rows:
            return
        assert self._state is not None
        normalized = normalize_float_keys(rows.select(list(self.group_by)), list(self.group_by))
        if self._codec is None:  # an operator used without start()'s signature (tests)
            self._codec = KeyCodec([normalized.schema.field(c) for c in self.group_by], windowed=False)
        keys, key_of_row = distinct_keys(
            self._codec.encode(None, [normalized[c].combine_chunks() for c in self.group_by], rows.num_rows)
        )
        numbers = [v.number for v in handle.variables.values()]
        stored = [PROCESSOR_STATE + bytes([n]) + k for k in keys for n in numbers]
        self._state.prefetch(stored + [PROCESSOR_KEY_TIMERS + k for k in keys])
        order = np.argsort(key_of_row, kind="stable")
        bounds = np.searchsorted(key_of_row[order], np.arange(len(keys) + 1))
        frames = self._frames(rows.take(pa.array(order)), bounds)
        firsts = pa.array(order[bounds[:-1]])
        groupings = self._groupings(rows.select(self.grouping_columns()).take(firsts), len(keys))
        for i, key in enumerate(keys):
            self._state.key = key
            yield groupings[i], frames[i]

    def _expired(
        self, view: StateView, handle: MisaProcessorHandle, values: TimerValues, now_ms: int, evict_us: int
    ) -> list[pd.DataFrame]:
        """handleExpiredTimer for each timer due (processing time: the batch's start; event time: the watermark),
        each deleted before its call."""
        if self.time_mode == "None":
            return []
        due_ms = now_ms if self.time_mode == "ProcessingTime" else evict_us // 1000
        begin, end = PROCESSOR_TIMER + window_prefix(0), PROCESSOR_TIMER + window_prefix(max(due_ms, -1) + 1)
        outputs: list[pd.DataFrame] = []
        for timer_key, _ in view.scan(begin, end):
            at_ms = int.from_bytes(timer_key[len(PROCESSOR_TIMER) : len(PROCESSOR_TIMER) + 8], "big")
            group_key = timer_key[len(PROCESSOR_TIMER) + 8 :]
            assert self._state is not None and self._codec is not None
            self._state.key = group_key
            handle.deleteTimer(at_ms)
            names = [f.name for f in self._codec.fields]
            grouping = self._groupings(pa.table(self._codec.decode([group_key])[1], names=names), 1)[0]
            outputs += list(self.processor.handleExpiredTimer(grouping, values, ExpiredTimerInfo(at_ms)) or [])
        return outputs

    # ------------------------------------------------------------------ versions
    def metadata(self) -> dict[str, Any]:
        return {**self.watermark.metadata(), "initialized": self._initialized}

    def restore(self, metadata: dict[str, Any]) -> None:
        self.watermark.restore(metadata)
        self._initialized = bool(metadata.get("initialized", False))

    # ------------------------------------------------------------------ the state as rows
    def state_stores(self) -> list[StateStoreSpec]:
        """A store per state variable (named as ``init`` named it, Spark's state variable name), in the order ``init``
        created them, then ``$timers``: rows keyed by the grouping columns (a map's by its user key too), a list's
        and a map's one row per element, each value with its TTL's expiry (``ttl_expires_at_ms``, null: none)."""
        assert self._codec is not None and self._variables is not None, "the operator was recorded before its start"
        stores = []
        for number, variable in enumerate(self._variables, start=1):
            begin = PROCESSOR_STATE + bytes([number])
            key, value = variable.columns(self._codec.fields)
            stores.append(StateStoreSpec(variable.name, begin, prefix_end(begin), key, value))
        timers = pa.struct([pa.field(TIMER_COLUMN, pa.int64())])
        end = prefix_end(PROCESSOR_TIMER)
        return [*stores, StateStoreSpec(TIMERS_STORE, PROCESSOR_TIMER, end, pa.struct(self._codec.fields), timers)]

    def state_rows(self, store: str, keys: list[bytes], values: list[bytes]) -> pa.Table:
        assert self._codec is not None and self._variables is not None
        if store == TIMERS_STORE:
            skip = len(PROCESSOR_TIMER) + 8
            times = [int.from_bytes(k[len(PROCESSOR_TIMER) : skip], "big") for k in keys]
            _, columns = self._codec.decode([k[skip:] for k in keys])
            names = [f.name for f in self._codec.fields]
            return state_table(dict(zip(names, columns)), {TIMER_COLUMN: pa.array(times, pa.int64())}, len(keys))
        variable = next(v for v in self._variables if v.name == store)
        _, groups = self._codec.decode([k[len(PROCESSOR_STATE) + 1 :] for k in keys])
        return variable.rows(self._codec.fields, groups, [pickle.loads(v) for v in values])
