"""The operator contract: what a stateful operator is to the runtime, its per-batch result, its delta columns.

An operator is one stateful step of a query, driven once per micro-batch by
:class:`misa.job.StatefulJob`. Like Spark's ``StateStore`` trait, the contract says who calls what
and when.

**Required** (:class:`StatefulOperator`, a structural protocol: no base class needed):

* ``signature(schema)``: once per ``start``, before the query runs, with the schema of the operator's input
  (the upstream's output). Raise :class:`misa.exceptions.AnalysisError` for a column it cannot use;
  return a JSON dict of what shapes its state, recorded with each version and compared at the next start.
* ``restore(metadata)``: at ``start`` (``{}`` on a fresh state) and whenever the runtime reloads a version
  (a replayed batch, a version another driver made durable); the operator must forget anything held in
  attributes that the metadata does not give back.
* ``deltas(batch)``: once per batch, on the driver, to build the Spark plan that turns the batch (after the
  upstream) into small per-key deltas; the plan runs on the executors and is collected as Arrow.
* ``apply(deltas, state)``: once per batch, on the driver's main thread, after the deltas are collected:
  merge them into the state (:class:`misa.state.view.StateView`, the only place state lives) and return an
  :class:`OperatorResult` with the batch's output rows for the sink.
* ``metadata()``: after ``apply`` and the sink, when the batch's state version is committed: JSON values
  stored with that version (a watermark).

**Optional, the batch without data** (``no_data_batch(state) -> OperatorResult``): an operator with event-time
state evicts it in ``apply`` with Spark's eviction watermark and judges rows by the late-events watermark
(:mod:`misa.operators.watermark`). Spark runs a batch without data only when its trigger finds no new input and the
watermark moved; the runtime runs one as its own batch, with Spark's batch id, exactly then
(:mod:`misa.runtime.no_data_batches`), calling ``no_data_batch`` instead of ``apply``. An operator whose Spark
counterpart never runs one (complete output) says so with ``spark_runs_no_data_batches() -> False``.

**Optional, keyed-prefetching hints** (:class:`HintSource`, a base class an operator declares): an operator
whose state keys can be named from upstream rows, before it runs, lets the runtime prefetch them
(:mod:`misa.runtime.batch_hints`). Without it the job runs without prefetching. All three methods run on
the driver's hint thread: ``hint_input(rows)`` and ``hint_spec()`` when a hint job is built (per batch, or
per file of the next batch read ahead), ``hint_keys(hints)`` with the job's rows. That is while the batch's
deltas are computed or between batches, never during ``apply``; a reload's ``restore`` may overlap them
(the runtime stops the extraction ahead without waiting for it). A fourth, ``due_keys(state, latest_event_us)``,
names the keys the operator's timers will read at the watermark that events up to ``latest_event_us`` give
(the next batch's, estimated from its hint rows): it is read from the state on the same thread, at the same
times; by default there are none.

**Optional, key partitions** (:class:`KeyPartitioned`, a base class an operator declares): with
``spark.misa.state.processes`` above 1 each worker process runs its own copy of the operator over the deltas of its
key partition (:mod:`misa.parallel`). ``partition_key_reader()`` reads the columns whose values pick a row's
partition: rows that meet the same state must agree on them. An operator with an event-time watermark
returns it from ``event_watermark()``: the workers' watermarks observe the whole batch's latest event time,
not only their partition's, so they stay Spark's. With prefetching, ``hint_key_reader()`` picks the
partition of a hint row the same way (by default its hint key columns), and the worker of that partition names
and prefetches its keys.

**Optional, the memory tier** (:class:`MemoryResident`, a base class an operator declares): ``memory_spaces()``
names the key ranges the operator looks up every batch (:class:`MemorySpace`); the runtime holds each whole in
memory, below the read cache (:mod:`misa.state.memory_tier`), within ``spark.misa.state.memoryTier.maxBytes``.
Called once, when the job's state view is built. A space is deleted key by key, or, when its keys start with their
window's end (``window_bytes``), by whole windows. Keeping a space current costs about a microsecond per change
(a Python dict), against 2 to 8 µs per RocksDB look-up: measure before declaring one
(``misa bench ceiling --conf spark.misa.state.memoryTier.maxBytes=0`` against the default).

Aggregating operators' deltas carry the columns named here: the rows folded into each delta row, their
latest event time and, for windows, the window's bounds or, for sliding windows, the pane's end (all times
in microseconds).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from misa.config_forms import parse_seconds
from misa.operators.watermark import EventTimeWatermark, InputsWatermark, WatermarkInputs
from misa.parallel.routing import KeyColumns, KeysOf
from misa.state.memory_tier import MemorySpace
from misa.state.view import StateView
from prefetch.hints import HintSpec

ROWS, MAX_EVENT, WINDOW_START, WINDOW_END = "_rows", "_max_event_us", "_window_start_us", "_window_end_us"
PANE_END = "_pane_end_us"  # sliding windows: the end of the delta's pane
INPUT_MAX_EVENT = "_max_event_us_{}"  # a union's (WatermarkInputs): the latest event time of an input's rows


def micros(duration: str | None) -> int | None:
    """A duration ("30 seconds", "1s") in microseconds; None stays None."""
    return int(parse_seconds(duration) * 1_000_000) if duration else None


def spark_interval(duration: str) -> str:
    """A duration misa accepts ("30 seconds", "10s", "1.5 min") as an interval Spark's ``window`` parses."""
    return f"{micros(duration)} microseconds"


def max_event_measures(event_time: str, inputs: WatermarkInputs | None, per_row: bool = False) -> list[Column]:
    """The delta columns of a group of rows' latest event time (µs): :data:`MAX_EVENT`, and each watermarked input's
    (:data:`INPUT_MAX_EVENT`) when the stream is a union of several (``inputs``); ``per_row``: each row's, ungrouped."""
    time = F.unix_micros(F.col(event_time))
    latest: Callable[[Column], Column] = (lambda c: c) if per_row else F.max
    measures = [latest(time).alias(MAX_EVENT)]
    if inputs is not None:
        input_of_row = F.col(inputs.column)
        measures += [
            latest(F.when(input_of_row == i, time)).alias(INPUT_MAX_EVENT.format(i)) for i in inputs.watermarked
        ]
    return measures


def observe_deltas(
    watermark: EventTimeWatermark | InputsWatermark, inputs: WatermarkInputs | None, deltas: pa.Table
) -> None:
    """The watermark takes the batch's latest event times from deltas with :func:`max_event_measures`' columns."""
    if inputs is None:
        assert isinstance(watermark, EventTimeWatermark)
        watermark.observe(pc.max(deltas[MAX_EVENT]).as_py())
    else:
        assert isinstance(watermark, InputsWatermark)
        inputs.observe(watermark, {i: pc.max(deltas[INPUT_MAX_EVENT.format(i)]).as_py() for i in inputs.watermarked})


@dataclass
class OperatorResult:
    """What one batch's merge produced."""

    output: pa.Table
    late_rows: int = 0
    state_reads: int = 0
    dropped_rows: int = 0  # input rows the operator could not use (each operator says which); logged too
    closed_windows: int = 0


def runs_no_data_batches(operator: Any) -> bool:
    """Whether Spark's stateful node for ``operator`` runs a batch without data once its watermark moves (its
    ``shouldRunAnotherBatch``): an operator with ``no_data_batch`` does, unless its ``spark_runs_no_data_batches()``
    says otherwise (complete output, for one)."""
    if not callable(getattr(operator, "no_data_batch", None)):
        return False
    says = getattr(operator, "spark_runs_no_data_batches", None)
    return bool(says()) if callable(says) else True


def watermark_moves(operator: Any) -> bool:
    """Whether ``operator``'s own watermark (``event_watermark()``) is ahead for the next batch of the one it last
    evicted with."""
    get = getattr(operator, "event_watermark", None)
    watermark = get() if callable(get) else None
    return watermark is not None and watermark.moves()


class StatefulOperator(Protocol):
    """An operator the runtime drives once per micro-batch (the required part of the contract, see above)."""

    def deltas(self, batch: DataFrame) -> DataFrame:
        """The Spark part: per-key deltas of this batch (runs on the executors)."""

    def apply(self, deltas: pa.Table, state: StateView) -> OperatorResult:
        """The driver part: merge the deltas into state and return the batch's output rows."""

    def signature(self, schema: T.StructType) -> dict[str, Any]:
        """Resolve the operator against the schema of its input (the upstream's output) before the query
        starts: raise :class:`misa.exceptions.AnalysisError` for a missing column or a type it cannot
        use; return its signature, a JSON dict of what shapes its state (kind, key columns and types, ...),
        recorded with each version and compared at start (:mod:`misa.runtime.compat`)."""

    def metadata(self) -> dict[str, Any]:
        """Operator state stored with each version (for example the watermark)."""

    def restore(self, metadata: dict[str, Any]) -> None:
        """Resume from the metadata of a loaded version."""


class HintSource(ABC):
    """The optional hint capability: the operator's state keys named from upstream rows before it runs.

    Declare it as a base class (``class MyOperator(HintSource)``); the runtime checks ``isinstance``."""

    @abstractmethod
    def hint_spec(self) -> HintSpec:
        """Which columns of the hint input make the state key (and the windows, if any)."""

    @abstractmethod
    def hint_keys(self, hints: pa.Table) -> tuple[list[bytes], np.ndarray]:
        """State keys and hint timestamps of hint rows; keys the operator will not read are left out."""

    def hint_input(self, rows: DataFrame) -> DataFrame:
        """The hint stage's rows projected to the columns :meth:`hint_spec` names; by default the rows themselves
        (override it when the key is not a column of the upstream rows)."""
        return rows

    def due_keys(self, state: StateView, latest_event_us: int) -> tuple[list[bytes], np.ndarray]:
        """State keys the operator will read when its timers fall due at the watermark that events up to
        ``latest_event_us`` give, with their timers as hint timestamps (us), known from ``state`` before the batch
        runs; by default none (an operator whose timers read no state, or that has none)."""
        return [], np.zeros(0, np.int64)


class KeyPartitioned(ABC):
    """The optional key-partition capability: the operator's state splits by the values of some delta columns.

    Declare it as a base class; the runtime checks ``isinstance`` before it starts worker processes."""

    @abstractmethod
    def partition_key_reader(self) -> KeysOf:
        """What reads, per delta row, the values that pick its partition (equal for rows that meet the same state;
        no columns: every row is in one partition): a plain value such as :class:`KeyColumns`, pickled to Spark's
        tasks without the operator."""

    def event_watermark(self) -> EventTimeWatermark | InputsWatermark | None:
        """The operator's event-time watermark, kept equal in every partition (None: it has none)."""
        return None

    def hint_key_reader(self) -> KeysOf:
        """What reads, per hint row (:class:`HintSource`), the values that pick the partition whose state it names:
        the same values as :meth:`partition_key_reader` reads from the rows of that state; by default the hint's key
        columns."""
        return KeyColumns(tuple(self.hint_spec().key_columns))  # type: ignore[attr-defined]


DEFAULT_STORE = "default"  # the store a read shows unless it names another (Spark's default storeName)


Columns = dict[str, pa.Array | pa.ChunkedArray]


def state_table(keys: Columns, values: Columns, rows: int) -> pa.Table:
    """``rows`` state rows as the state data source shows them: a ``key`` and a ``value`` struct of these columns."""

    def struct(columns: Columns) -> pa.Array:
        if not columns:
            return pa.array([{}] * rows, pa.struct([]))
        arrays = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns.values()]
        return pa.StructArray.from_arrays(arrays, names=list(columns))

    return pa.table({"key": struct(keys), "value": struct(values)})


@dataclass(frozen=True)
class StateStoreSpec:
    """One store of an operator's state as the state data source shows it (Spark's ``storeName``): the state keys it
    covers (``begin`` <= key < ``end``; None: no end) and the columns of its rows' ``key`` and ``value``."""

    name: str
    begin: bytes
    end: bytes | None
    key: pa.StructType
    value: pa.StructType

    @classmethod
    def of(cls, name: str, begin: bytes, end: bytes | None, rows: pa.Table | None) -> StateStoreSpec:
        """The store whose rows look like ``rows`` (:func:`state_table`'s); None: no batch had rows yet, so there is
        nothing to show and no types to show it with."""
        if rows is None:
            return cls(name, begin, end, pa.struct([]), pa.struct([]))
        return cls(name, begin, end, rows.schema.field("key").type, rows.schema.field("value").type)


class StateReadable(ABC):
    """The optional capability of showing the state as rows (``spark.read.format("misa-state")``).

    Declare it as a base class. The data source loads the operator the job recorded, calls ``restore`` with a
    version's metadata, then these; they run where the state is read (Spark's executors), never in a batch."""

    @abstractmethod
    def state_stores(self) -> list[StateStoreSpec]:
        """The operator's stores, its main one first (the default a read shows)."""

    @abstractmethod
    def state_rows(self, store: str, keys: list[bytes], values: list[bytes]) -> pa.Table:
        """State entries of ``store`` as rows (:func:`state_table`: its spec's ``key`` and ``value`` structs); an entry
        may hold several rows, or none."""


class MemoryResident(ABC):
    """The optional capability of a memory tier: key spaces read by point look-ups every batch, held whole in memory.

    Declare it as a base class; the runtime checks ``isinstance`` when it builds the state view."""

    @abstractmethod
    def memory_spaces(self) -> list[MemorySpace]:
        """Key ranges [begin, end) the operator looks up every batch; a range delete in one without ``window_bytes``
        is applied by scanning the held space, in one with them by dropping whole windows."""
