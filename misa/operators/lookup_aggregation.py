"""Aggregation grouped by a looked-up column, the lookup served by the state (YSB's ad -> campaign join).

Spark pre-aggregates each batch per (window, key) with the aggregation's functions. On the driver
each distinct key is mapped to its value through the state (:class:`~misa.state.view.StateView`:
the cache, pending commit buffers, RocksDB); only keys the state does not hold yet go to the
external ``lookup`` (for Redis one MGET per batch), and its answers are written into the state, so
from then on they come from the cache, and after a restart from the checkpointed state. Rows of a
key that neither knows are dropped and counted (``missing_rows``, kept with each version's metadata
and logged per batch). The rows, now keyed by value, are handed to the
:class:`~misa.operators.aggregation.Aggregation`, which folds the rows of one (window, value) together,
merges them into its window state and emits them.

Mapping entries are stored under ``0xff "lookup:" key_column 0x00 key``: window keys begin with an
8-byte big-endian window end below 2**63, so window scans and range deletes never reach them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from misa.operators.aggregation import Aggregation
from misa.operators.base import (
    MAX_EVENT,
    ROWS,
    HintSource,
    MemoryResident,
    OperatorResult,
    StateReadable,
    StateStoreSpec,
    state_table,
)
from misa.operators.schema import column_of
from misa.operators.watermark import EventTimeWatermark
from misa.state.keys import key_tails, lookup_prefix, prefix_end
from misa.state.memory_tier import MemorySpace
from misa.state.view import StateView
from prefetch.hints import HINT_TS, HintSpec, no_hints

log = logging.getLogger(__name__)
Lookup = Callable[[Sequence[str]], Sequence[str | None]]
MISSING_EXAMPLES = 3  # missing keys named in a batch's warning
LOOKUP_STORE = "lookup"  # the store of the looked-up values


@dataclass
class LookupAggregation(HintSource, StateReadable, MemoryResident):
    """``aggregation`` (grouped by one value column) over rows whose value is looked up from ``key_column``.

    ``lookup`` answers the keys the state does not hold: their values in order, None when unknown.
    """

    key_column: str
    aggregation: Aggregation
    lookup: Lookup
    missing_rows: int = field(default=0, init=False)  # input rows dropped for an unknown key, over all versions
    lookups: int = field(default=0, init=False)  # keys sent to ``lookup`` by this process

    def __post_init__(self) -> None:
        if len(self.aggregation.group_by) != 1:
            raise ValueError(
                f"the aggregation must group by exactly one column (the looked-up value), "
                f"not {list(self.aggregation.group_by)}"
            )
        self.value_column = self.aggregation.group_by[0]
        self._prefix = lookup_prefix(self.key_column)

    # ------------------------------------------------------------------ at start
    def signature(self, schema: T.StructType) -> dict[str, Any]:
        """The key column must be a string; the aggregation is resolved with its group column as the
        looked-up (string) value."""
        key = column_of(schema, self.key_column, "the lookup aggregation's key_column", (T.StringType,), "a lookup key")
        others = [f for f in schema.fields if f.name != self.value_column]
        with_value = T.StructType([*others, T.StructField(self.value_column, T.StringType())])
        return {**self.aggregation.signature(with_value), "operator": "LookupAggregation", "lookup_key": key}

    # ------------------------------------------------------------------ Spark side
    def deltas(self, batch: DataFrame) -> DataFrame:
        """Per (window, key) partial aggregates: the aggregation's deltas grouped by the key column."""
        return self.aggregation.deltas(batch, group_by=[self.key_column])

    # ------------------------------------------------------------------ driver side
    def apply(self, deltas: pa.Table, state: StateView) -> OperatorResult:
        """Look the batch's keys up, drop and count rows of unknown keys, merge the rest per (window, value)."""
        keys = deltas[self.key_column].combine_chunks()
        distinct = pc.unique(keys.drop_null())
        values = pa.array(self._values(distinct, self._key_times(deltas, distinct), state), pa.string())
        looked_up = pc.take(values, pc.index_in(keys, value_set=distinct))
        known = pc.is_valid(looked_up)
        missing = deltas.filter(pc.invert(known))
        enriched = deltas.drop_columns([self.key_column]).append_column(self.value_column, looked_up).filter(known)
        result = self.aggregation.apply(enriched, state)
        result.state_reads += len(distinct)
        result.dropped_rows += self._count_missing(missing) if missing.num_rows else 0
        return result

    def no_data_batch(self, state: StateView) -> OperatorResult:
        """Spark's batch without data: the aggregation's."""
        return self.aggregation.no_data_batch(state)

    def spark_runs_no_data_batches(self) -> bool:
        return self.aggregation.spark_runs_no_data_batches()

    def event_watermark(self) -> EventTimeWatermark | None:
        return self.aggregation.event_watermark()

    # ------------------------------------------------------------------ prefetch hints
    def hint_spec(self) -> HintSpec:
        """A row names its looked-up value by ``key_column`` (its event time: the aggregation's)."""
        return HintSpec((self.key_column,), self.aggregation.event_time)

    def hint_keys(self, hints: pa.Table) -> tuple[list[bytes], np.ndarray]:
        """The state entries of the hinted keys' values (the aggregation's keys need the values first)."""
        hints = hints.filter(pc.is_valid(hints[self.key_column])) if hints.num_rows else hints
        if not hints.num_rows:
            return no_hints()
        return self._state_keys(hints[self.key_column].combine_chunks()), hints[HINT_TS].to_numpy()

    def _state_keys(self, keys: pa.Array) -> list[bytes]:
        """The state keys of the looked-up values of ``keys`` (strings), joined per column."""
        binary = keys.cast(pa.string()).cast(pa.binary())
        return pc.binary_join_element_wise(pa.scalar(self._prefix), binary, pa.scalar(b"")).to_pylist()

    def _values(self, keys: pa.Array, ts: list[int], state: StateView) -> list[str | None]:
        """The values of ``keys`` (event times ``ts``): from the state, else from the lookup, then stored."""
        state_keys = self._state_keys(keys)
        stored = pa.array(state.get_many(state_keys, ts), pa.binary()).cast(pa.string())
        absent = np.flatnonzero(stored.is_null().to_numpy(zero_copy_only=False)).tolist()
        found: list[str | None] = stored.to_pylist()
        if absent:
            answers = self.lookup(keys.take(pa.array(absent, pa.int64())).to_pylist())
            self.lookups += len(absent)
            new = [(i, a) for i, a in zip(absent, answers) if a is not None]
            state.put_many([state_keys[i] for i, _ in new], [a.encode() for _, a in new])
            for i, answer in new:
                found[i] = answer
        return found

    def _key_times(self, deltas: pa.Table, distinct: pa.Array) -> list[int]:
        """Each distinct key's latest event time (us) in the batch, the cache's timestamp for its entry."""
        if self.aggregation.event_time is None or not len(distinct):
            return [0] * len(distinct)
        latest = deltas.group_by(self.key_column).aggregate([(MAX_EVENT, "max")])
        order = pc.index_in(distinct, value_set=latest[self.key_column])
        return pc.take(latest[f"{MAX_EVENT}_max"], order).to_pylist()

    def _count_missing(self, missing: pa.Table) -> int:
        """Count and log the input rows of keys without a value; returns how many."""
        rows = int(pc.sum(missing[ROWS]).as_py())
        self.missing_rows += rows
        unknown = pc.unique(missing[self.key_column]).to_pylist()
        log.warning(
            "%d input row(s) dropped: %d %s value(s) unknown to the state and the lookup (e.g. %s); "
            "%d rows dropped so far",
            rows,
            len(unknown),
            self.key_column,
            unknown[:MISSING_EXAMPLES],
            self.missing_rows,
        )
        return rows

    def memory_spaces(self) -> list[MemorySpace]:
        """The looked-up values (every batch reads those of its keys, and a key's value is written once), and the
        aggregation's own."""
        return [MemorySpace(self._prefix, prefix_end(self._prefix)), *self.aggregation.memory_spaces()]

    # ------------------------------------------------------------------ versions
    def metadata(self) -> dict[str, Any]:
        return {**self.aggregation.metadata(), "missing_rows": self.missing_rows}

    def restore(self, metadata: dict[str, Any]) -> None:
        self.aggregation.restore(metadata)
        self.missing_rows = int(metadata.get("missing_rows", 0))

    # ------------------------------------------------------------------ the state as rows
    def state_stores(self) -> list[StateStoreSpec]:
        """The aggregation's store (its windows and groups, the main one), then :data:`LOOKUP_STORE`: a row per
        looked-up key (``key_column``) with its value (the aggregation's group column)."""
        lookups = StateStoreSpec.of(
            LOOKUP_STORE, self._prefix, prefix_end(self._prefix), self.state_rows(LOOKUP_STORE, [], [])
        )
        return [*self.aggregation.state_stores(), lookups]

    def state_rows(self, store: str, keys: list[bytes], values: list[bytes]) -> pa.Table:
        if store != LOOKUP_STORE:
            return self.aggregation.state_rows(store, keys, values)
        looked_up = key_tails(pa.array(keys, pa.binary()), len(self._prefix)).cast(pa.string())
        found = pa.array(values, pa.binary()).cast(pa.string())
        return state_table({self.key_column: looked_up}, {self.value_column: found}, len(keys))
