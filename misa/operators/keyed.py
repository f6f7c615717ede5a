"""Keyed stateful operators (the NEXMark queries): a lookup join with a bounded side table kept in the
state (Q13), the first n rows per key (Q18's latest bid, Q19's top bids) and a two-input keyed join
(Q20). They follow :class:`misa.operators.base.StatefulOperator`: Spark selects (and for :class:`TopN`
pre-reduces) the batch's rows, and the driver merges them into the state with one ``get_many`` per
batch and kind of key (through the state cache) and one ``put_many``.

Values are lists of records packed by :class:`misa.state.record_codec.RecordCodec`; keys are
:class:`misa.state.codec.KeyCodec` group keys, behind a one-byte prefix naming the kind of entry
(``s``, ``r``, ``l``; none for :class:`TopN`; see :mod:`misa.state.keys`). Rows an operator cannot use
(each operator says which) are dropped, counted in
the batch's result (``dropped_rows``, in the metrics) and over all versions in the metadata, and
logged: never silently lost. Event times (``time_column``, epoch milliseconds) become the cache
timestamps of the keys a batch touches.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import json as pa_json
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from common.location import local_path
from misa.operators.base import (
    DEFAULT_STORE,
    Columns,
    HintSource,
    KeyPartitioned,
    MemoryResident,
    OperatorResult,
    StateReadable,
    StateStoreSpec,
    state_table,
)
from misa.operators.row_lists import append_rows, matches
from misa.operators.schema import (
    INTEGERS,
    RECORD_TYPES,
    column_of,
    column_type,
    key_columns,
    schema_from_text,
    schema_text,
    struct_of,
)
from misa.parallel.routing import EitherSideKey, KeyColumns
from misa.state.codec import KeyCodec
from misa.state.keys import KEY_SPACE_VERSION, RIGHT_ROW, SIDE_ROW, WAITING_LEFT, key_tails, prefix_end, prefixed
from misa.state.memory_tier import MemorySpace
from misa.state.record_codec import RecordCodec
from misa.state.view import StateView
from prefetch.hints import HINT_TS, HintSpec, no_hints

log = logging.getLogger(__name__)
ORDERS = ("ascending", "descending")
_JOIN_KEY, _IS_RIGHT, _HINT_TIME = "_hint_join_key", "_hint_is_right", "_hint_time"  # KeyedJoin's hint input
_RANK = "_rank"
_GROUP = "_group"
ROW_SCHEMA = "row_schema"  # metadata: the rows' Arrow schema (misa.operators.schema.schema_text)
SIDES = ("left", "right")  # KeyedJoin's inputs, as its metadata names their row types


def _group(codec: KeyCodec, columns: Sequence[pa.Array | pa.ChunkedArray]) -> tuple[list[bytes], np.ndarray]:
    """The distinct group keys of the rows (in order of first appearance) and each row's index into them."""
    arrays = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
    if not len(arrays[0]):
        return no_hints()
    encoded = pa.array(codec.encode(None, arrays), pa.binary()).dictionary_encode()
    return encoded.dictionary.to_pylist(), encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)


def _times_us(rows: pa.Table, column: str | None) -> np.ndarray:
    """Each row's event time in microseconds (``column`` in epoch ms; 0 without one or when null)."""
    if column is None:
        return np.zeros(rows.num_rows, np.int64)
    return rows[column].combine_chunks().fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64) * 1000


def _group_max(group: np.ndarray, groups: int, values: np.ndarray) -> list[int]:
    """The largest of ``values`` per group: the cache timestamp of each group's key."""
    out = np.zeros(groups, np.int64)
    np.maximum.at(out, group, values)
    return out.tolist()


def _count_dropped(operator: str, rows: int, reason: str, total: int) -> int:
    """Log ``rows`` dropped for ``reason``; the new total over all versions."""
    if rows:
        total += rows
        log.warning("%s: %d input row(s) dropped: %s; %d dropped so far", operator, rows, reason, total)
    return total


def _check_time(schema: T.StructType, column: str | None, operator: str) -> None:
    """An event-time column (epoch milliseconds), when the operator has one, must be an integer column."""
    if column is not None:
        column_of(schema, column, f"the {operator}'s time_column", INTEGERS, "a time in epoch milliseconds")


def _entry_rows(
    codec: KeyCodec, names: Sequence[str], records: RecordCodec, prefix: bytes, keys: list[bytes], values: list[bytes]
) -> tuple[Columns, pa.Table, np.ndarray]:
    """State entries ``prefix ++ group key`` -> a list of records, a row per record: its group columns (named
    ``names``), the record, and its place in its entry's list (from 0)."""
    rows, owner = records.decode(values)
    _, columns = codec.decode(key_tails(pa.array(keys, pa.binary()), len(prefix)).to_pylist())
    taken = pa.array(owner, pa.int64())
    groups: Columns = {name: c.take(taken) for name, c in zip(names, columns)}
    return groups, rows, np.arange(len(owner)) - np.searchsorted(owner, owner)


def _store(name: str, prefix: bytes, rows: pa.Table | None) -> StateStoreSpec:
    """The store of the entries behind ``prefix`` (one byte, or none: every key), whose rows look like ``rows`` (None:
    not known yet, no batch had rows)."""
    return StateStoreSpec.of(name, prefix, prefix_end(prefix) if prefix else None, rows)


def _struct_rows(column: pa.ChunkedArray) -> pa.Table:
    """The non-null rows of a struct column as a table of its fields."""
    array = column.combine_chunks()
    array = array.filter(array.is_valid())
    return pa.Table.from_arrays(array.flatten(), names=[f.name for f in array.type])


# ---------------------------------------------------------------------------------------------- Q13
@dataclass
class LookupJoin(HintSource, KeyPartitioned, StateReadable):
    """Each row joined with the row of a bounded side table whose key is ``key_column % side_rows`` (Q13).

    The side table (``side_path``, JSON lines with an integer ``side_key`` and a string
    ``side_value``; ``side_rows`` is its row count) is read by the first batch of a fresh state and
    written into the state (keys ``b"s" ++ side key``), so it is checkpointed with every version
    and comes back with it; the metadata says it is loaded. Each batch looks its distinct side keys
    up with one ``get_many`` through the state cache. Output: ``columns`` then ``side_value``. A
    row whose key is null or names no side row is dropped and counted (an inner join).
    """

    key_column: str
    columns: Sequence[str]  # the stream's columns carried into the output (key_column among them)
    side_path: str | Path
    side_key: str = "key"
    side_value: str = "value"
    time_column: str | None = None
    side_rows: int | None = field(default=None, init=False)  # None: the side table is not in the state yet
    dropped_rows: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.key_column not in self.columns:
            raise ValueError(
                f"lookup join: key column {self.key_column!r} must be one of the columns {list(self.columns)}"
            )
        if self.side_value in self.columns:
            raise ValueError(f"lookup join: the side value column {self.side_value!r} clashes with an input column")
        self._codec = KeyCodec([pa.field(self.side_key, pa.int64())], windowed=False)
        self._values = RecordCodec([pa.field(self.side_value, pa.string())])

    def signature(self, schema: T.StructType) -> dict[str, Any]:
        """The columns must exist, the key column be an integer; the state is the side table alone."""
        for c in self.columns:
            column_type(schema, c, f"the lookup join's columns {list(self.columns)}")
        column_of(schema, self.key_column, "the lookup join's key_column", INTEGERS, "a side-table key")
        _check_time(schema, self.time_column, "lookup join")
        return {"operator": "LookupJoin", "key_space": KEY_SPACE_VERSION}

    def deltas(self, batch: DataFrame) -> DataFrame:
        """The batch's rows, the output's columns only."""
        return batch.select(*self.columns)

    def partition_key_reader(self) -> KeyColumns:
        """Every partition holds the whole side table, so any column spreads the rows: the key column."""
        return KeyColumns((self.key_column,))

    def apply(self, deltas: pa.Table, state: StateView) -> OperatorResult:
        if self.side_rows is None:
            self._load(state)
        rows = deltas.select(list(self.columns))
        groups, group = _group(self._codec, [self._side_of(rows[self.key_column].combine_chunks())])
        ts = _group_max(group, len(groups), _times_us(rows, self.time_column))
        found, owner = self._values.decode(state.get_many(prefixed(SIDE_ROW, groups), ts))
        position = np.full(len(groups), -1, np.int64)
        position[owner] = np.arange(len(owner))
        matched = position[group] >= 0
        output = rows.filter(pa.array(matched)).append_column(
            self.side_value, found[self.side_value].take(pa.array(position[group][matched]))
        )
        dropped = rows.num_rows - output.num_rows
        self.dropped_rows = _count_dropped(
            "lookup join", dropped, f"{self.key_column} null or not in the side table", self.dropped_rows
        )
        return OperatorResult(output, state_reads=len(groups), dropped_rows=dropped)

    def hint_spec(self) -> HintSpec:
        """A row names its side row by ``key_column`` (its event time: ``time_column``)."""
        return HintSpec((self.key_column,), self.time_column)

    def hint_keys(self, hints: pa.Table) -> tuple[list[bytes], np.ndarray]:
        """The side rows the hinted keys will look up (none before the side table is in the state)."""
        if self.side_rows is None or not hints.num_rows:
            return no_hints()
        keys = self._codec.encode(None, [self._side_of(hints[self.key_column].combine_chunks())])
        return prefixed(SIDE_ROW, keys), hints[HINT_TS].to_numpy()

    def _side_of(self, keys: pa.Array) -> pa.Array:
        """Each row's side key (SQL's %: the sign of the key; a null key stays null and finds no side row)."""
        assert self.side_rows is not None
        side = np.fmod(keys.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64), self.side_rows)
        return pa.array(side, mask=keys.is_null().to_numpy(zero_copy_only=False))

    def _load(self, state: StateView) -> None:
        """Write the side table into the (fresh) state."""
        path = local_path(self.side_path)
        if not path.is_file():
            raise FileNotFoundError(f"side table {path} is missing: a fresh state loads it in its first batch")
        schema = pa.schema([(self.side_key, pa.int64()), (self.side_value, pa.string())])
        table = pa_json.read_json(
            path, parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        )
        keys = table[self.side_key].combine_chunks()
        if keys.null_count or len(pc.unique(keys)) != len(keys) or not len(keys):
            raise ValueError(
                f"side table {path}: {self.side_key} must be present and unique in each of its "
                f"rows, and there must be rows ({len(keys)} rows, {keys.null_count} without a key)"
            )
        state.put_many(
            prefixed(SIDE_ROW, self._codec.encode(None, [keys])),
            self._values.encode(table.select([self.side_value]), np.ones(len(keys), np.int64)),
        )
        self.side_rows = len(keys)

    def metadata(self) -> dict[str, Any]:
        return {"side_rows": self.side_rows, "dropped_rows": self.dropped_rows}

    def restore(self, metadata: dict[str, Any]) -> None:
        self.side_rows = metadata.get("side_rows")
        self.dropped_rows = int(metadata.get("dropped_rows", 0))

    def state_stores(self) -> list[StateStoreSpec]:
        """One store: the side table, a row per side row (its key and value; their types are fixed)."""
        return [_store(DEFAULT_STORE, SIDE_ROW, self.state_rows(DEFAULT_STORE, [], []))]

    def state_rows(self, store: str, keys: list[bytes], values: list[bytes]) -> pa.Table:
        groups, rows, _ = _entry_rows(self._codec, [self.side_key], self._values, SIDE_ROW, keys, values)
        return state_table(groups, {self.side_value: rows[self.side_value]}, rows.num_rows)


# ---------------------------------------------------------------------------------------- Q18, Q19
@dataclass
class TopN(HintSource, KeyPartitioned, StateReadable):
    """The first ``n`` rows per key of ``keys`` in ``order`` (Q18: the latest bid, n = 1; Q19: the top 10 bids).

    ``order``: (column, "ascending" | "descending") pairs naming every one of ``columns`` (the rows'
    other columns, integer or string), nulls last either way, strings compared as UTF-8 bytes (as
    Spark does). Rows equal in every order column are equal rows, so the result is deterministic.
    State: key -> the key's current first rows in rank order. Output (update, as Spark's update output
    emits every group that had input, changed or not): for each key with rows in the batch, all its first
    rows: ``keys``, ``rank_column`` (1-based, if given), ``columns``. Every row is usable: a null key is a key
    of its own.
    """

    keys: Sequence[str]
    columns: Sequence[str]
    order: Sequence[tuple[str, str]]
    n: int = 1
    rank_column: str | None = None
    time_column: str | None = None
    _codec: KeyCodec | None = field(default=None, init=False, repr=False)
    _records: RecordCodec | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"top n: n must be >= 1 (got {self.n})")
        named = [c for c, _ in self.order]
        wrong = [d for _, d in self.order if d not in ORDERS]
        if wrong or sorted(named) != sorted(self.columns):
            raise ValueError(
                f"top n: order {list(self.order)} must name each of the columns {list(self.columns)} "
                f"once, each {' or '.join(ORDERS)}"
            )

    def signature(self, schema: T.StructType) -> dict[str, Any]:
        """Keys of key types and kept columns of record types (integers, strings); what is kept per key."""
        _check_time(schema, self.time_column, "top n")
        return {
            "operator": "TopN",
            "keys": key_columns(schema, self.keys, f"top n's keys {list(self.keys)}"),
            "columns": [column_of(schema, c, "top n's columns", RECORD_TYPES, "kept in state") for c in self.columns],
            "order": [f"{c} {d}" for c, d in self.order],
            "n": self.n,
            "key_space": KEY_SPACE_VERSION,
        }

    def deltas(self, batch: DataFrame) -> DataFrame:
        """The batch's first ``n`` rows per key (a window over the batch, in the same order)."""
        spark_order = [
            F.col(c).asc_nulls_last() if d == "ascending" else F.col(c).desc_nulls_last() for c, d in self.order
        ]
        window = Window.partitionBy(*self.keys).orderBy(*spark_order)
        return (
            batch.select(*self.keys, *self.columns)
            .withColumn(_RANK, F.row_number().over(window))
            .where(F.col(_RANK) <= self.n)
            .drop(_RANK)
        )

    def partition_key_reader(self) -> KeyColumns:
        """A key's first rows live with the key: its columns pick the partition."""
        return KeyColumns(tuple(self.keys))

    def apply(self, deltas: pa.Table, state: StateView) -> OperatorResult:
        rows = deltas.select([*self.keys, *self.columns])
        if self._codec is None or self._records is None:
            self._set_types(rows.schema)
        assert self._codec is not None and self._records is not None
        keys, group = _group(self._codec, [rows[k] for k in self.keys])
        ts = _group_max(group, len(keys), _times_us(rows, self.time_column))
        old = state.get_many(keys, ts)
        stored, owner = self._records.decode(old)
        candidates = pa.concat_tables([stored, rows.select(self.columns).cast(self._records.schema)])
        kept, kept_group, rank = self._first_rows(candidates, np.concatenate([owner, group]))
        firsts = candidates.take(pa.array(kept, pa.int64()))
        values = self._records.encode(firsts, np.bincount(kept_group, minlength=len(keys)))
        changed = np.fromiter((new != before for new, before in zip(values, old)), bool, len(keys))
        which = np.flatnonzero(changed)
        state.put_many([keys[i] for i in which], [values[i] for i in which])
        first_row = np.unique(group, return_index=True)[1]  # a row of each key, for its key columns
        output = self._output(rows, first_row[kept_group], rank, firsts)
        return OperatorResult(output, state_reads=len(keys))

    def hint_spec(self) -> HintSpec:
        """A row names its key's first rows by ``keys`` (its event time: ``time_column``)."""
        return HintSpec(tuple(self.keys), self.time_column)

    def hint_keys(self, hints: pa.Table) -> tuple[list[bytes], np.ndarray]:
        if not hints.num_rows:
            return no_hints()
        codec = self._codec or KeyCodec([hints.schema.field(k) for k in self.keys], windowed=False)
        return codec.encode(None, [hints[k].combine_chunks() for k in self.keys]), hints[HINT_TS].to_numpy()

    def _first_rows(self, candidates: pa.Table, group: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The first ``n`` candidates of each group in ``order``: their indices, groups and ranks (from 1)."""
        sort_keys, table = [(_GROUP, "ascending")], {_GROUP: pa.array(group, pa.int64())}
        for i, (column, direction) in enumerate(self.order):  # nulls last either way, in any pyarrow
            table[f"_null{i}"], table[f"_value{i}"] = pc.is_null(candidates[column]), candidates[column]
            sort_keys += [(f"_null{i}", "ascending"), (f"_value{i}", direction)]
        order = pc.sort_indices(pa.table(table), sort_keys=sort_keys).to_numpy()
        sorted_group = group[order]
        starts = np.flatnonzero(np.concatenate([[True], sorted_group[1:] != sorted_group[:-1]]))
        rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.append(starts, len(order))))
        kept = rank < self.n
        return order[kept], sorted_group[kept], rank[kept] + 1

    def _output(self, rows: pa.Table, key_rows: np.ndarray, rank: np.ndarray, firsts: pa.Table) -> pa.Table:
        keys = rows.select(list(self.keys)).take(pa.array(key_rows, pa.int64()))
        columns = dict(zip(keys.column_names, keys.columns))
        if self.rank_column:
            columns[self.rank_column] = pa.array(rank, pa.int32())
        columns.update(zip(firsts.column_names, firsts.columns))
        return pa.table(columns)

    def _set_types(self, schema: pa.Schema) -> None:
        """The codecs of the keys and the kept rows, from the rows' ``schema`` (keys, then columns)."""
        self._codec = KeyCodec([schema.field(k) for k in self.keys], windowed=False)
        self._records = RecordCodec([schema.field(c) for c in self.columns])

    def metadata(self) -> dict[str, Any]:
        """The rows' schema (a reader of the state decodes the keys and rows with it)."""
        if self._codec is None or self._records is None:
            return {}
        return {ROW_SCHEMA: schema_text(pa.schema([*self._codec.fields, *self._records.fields]))}

    def restore(self, metadata: dict[str, Any]) -> None:
        if ROW_SCHEMA in metadata:
            self._set_types(schema_from_text(metadata[ROW_SCHEMA]))

    def state_stores(self) -> list[StateStoreSpec]:
        """One store: a row per kept row of each key, keyed by the key columns, with the row as the output shows it
        (its rank, when ``rank_column`` is given, and ``columns``)."""
        known = self._codec is not None and self._records is not None
        return [_store(DEFAULT_STORE, b"", self.state_rows(DEFAULT_STORE, [], []) if known else None)]

    def state_rows(self, store: str, keys: list[bytes], values: list[bytes]) -> pa.Table:
        assert self._codec is not None and self._records is not None, "state entries, but no types to decode them"
        groups, rows, place = _entry_rows(self._codec, self.keys, self._records, b"", keys, values)
        ranks: Columns = {self.rank_column: pa.array(place + 1, pa.int32())} if self.rank_column else {}
        return state_table(groups, ranks | dict(zip(rows.column_names, rows.columns)), rows.num_rows)


# ---------------------------------------------------------------------------------------------- Q20
@dataclass(frozen=True)
class _JoinKeys:
    """A batch's distinct join keys with their cache timestamps, and each right and left row's index into them."""

    keys: list[bytes]
    ts: list[int]
    right_group: np.ndarray
    left_group: np.ndarray


@dataclass
class KeyedJoin(HintSource, KeyPartitioned, StateReadable, MemoryResident):
    """Rows of a left input joined with the right input's row of the same key where that row passes a filter
    (Q20: each bid with its auction, where the auction's category is 10); an inner join on a key that
    is unique on the right, or (``unique_right=False``) Spark's inner stream-stream join on any key.

    Both inputs come in one stream as struct columns ``left`` and ``right`` (a row has one of them).
    State: ``b"r" ++ key`` -> the right row (all right rows: for those failing ``where`` only the key
    and the filter column, so that their left rows are dropped at once); ``b"l" ++ key`` -> the
    left rows waiting for a right row not seen yet (of this batch or earlier), deleted when it comes.
    Each (left, right) pair is output once, in the batch where the later of the two arrives; output
    columns: the left fields, then the right fields but its key, those whose names clash with a left
    field prefixed with ``right_prefix``. Dropped and counted: rows with a null key, and a right row
    whose key is known already (stored, or earlier in the batch's order).

    With ``unique_right=False`` every right row of a key joins, as in Spark's join without a watermark:
    ``b"r" ++ key`` holds the key's right rows that pass ``where`` and ``b"l" ++ key`` every left row of
    the key, both kept for good (the state grows with the input, as Spark's does); each batch outputs its
    new left rows with the key's earlier and new right rows, and its new right rows with the earlier left rows.
    """

    left: str
    left_key: str
    right: str
    right_key: str
    where: tuple[str, Any]  # (right field, value): only right rows with that value join
    right_prefix: str = ""
    time_column: str | None = None  # a field of both inputs
    unique_right: bool = True  # False: repeated right keys join too (Spark's semantics; both sides kept)
    dropped_rows: int = field(default=0, init=False)
    _codec: KeyCodec = field(init=False, repr=False)  # the join key
    _left_records: RecordCodec | None = field(default=None, init=False, repr=False)
    _right_records: RecordCodec | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._codec = KeyCodec([pa.field(self.right_key, pa.int64())], windowed=False)

    def signature(self, schema: T.StructType) -> dict[str, Any]:
        """Both inputs are struct columns of record types (integers, strings) with an integer key; the
        filter column is a field of the right input."""
        sides = {}
        for side, key in ((self.left, self.left_key), (self.right, self.right_key)):
            used_by = f"the keyed join's input {side!r}"
            fields = struct_of(schema, side, used_by)
            column_of(fields, key, used_by, INTEGERS, "a join key")
            _check_time(fields, self.time_column, "keyed join")
            sides[side] = [column_of(fields, f.name, used_by, RECORD_TYPES, "kept in state") for f in fields.fields]
        column_type(struct_of(schema, self.right, "the keyed join's where"), self.where[0], "the keyed join's where")
        return {
            "operator": "KeyedJoin",
            "left": sides[self.left],
            "right": sides[self.right],
            "join_keys": [self.left_key, self.right_key],
            "where": f"{self.where[0]} = {self.where[1]!r}",
            "key_space": KEY_SPACE_VERSION,
        }

    def deltas(self, batch: DataFrame) -> DataFrame:
        """The batch's rows of either input."""
        return batch.where(F.col(self.left).isNotNull() | F.col(self.right).isNotNull()).select(self.left, self.right)

    def partition_key_reader(self) -> EitherSideKey:
        """A left row meets the right row of its key: the join key (the left's or the right's) picks the partition."""
        return EitherSideKey(self.left, self.left_key, self.right, self.right_key)

    def apply(self, deltas: pa.Table, state: StateView) -> OperatorResult:
        """Find each key's right row, join the left rows that have one, keep the others waiting."""
        left, right, null_keys = self._inputs(deltas)
        result = OperatorResult(self._pairs(left.slice(0, 0), right.slice(0, 0)))
        keys = self._join_keys(left, right)
        if not self.unique_right:
            self._count(0, null_keys, result)
            return self._join_every_pair(left, right, keys, state, result)
        catalogue, position, new_right, new_group = self._right_rows(right, keys, state)
        self._count(right.num_rows - len(new_group), null_keys, result)
        matched = position[keys.left_group] >= 0
        joined = self._pairs(
            left.filter(pa.array(matched, pa.bool_())),
            catalogue.take(pa.array(position[keys.left_group][matched], pa.int64())),
        )
        waiting_rows, waiting_groups = self._waiting(
            new_group, left.filter(pa.array(~matched, pa.bool_())), keys.left_group[~matched], keys.keys, keys.ts, state
        )
        released = self._pairs(waiting_rows, catalogue.take(pa.array(position[waiting_groups], pa.int64())))
        result.output = pa.concat_tables([joined, released])
        self._store_right(new_right, new_group, keys, state)
        result.state_reads = len(keys.keys) + len(new_group) + len(np.unique(keys.left_group[~matched]))
        return result

    def _join_every_pair(
        self, left: pa.Table, right: pa.Table, keys: _JoinKeys, state: StateView, result: OperatorResult
    ) -> OperatorResult:
        """Spark's inner join: the batch's left rows with the key's stored and new right rows, the stored left rows
        with the new right rows; then both sides' new rows appended to their keys' lists."""
        assert self._left_records is not None and self._right_records is not None
        column, value = self.where
        passes = pc.fill_null(pc.equal(right[column], value), False).to_numpy(zero_copy_only=False)
        right, right_group = right.filter(pa.array(passes)), keys.right_group[passes]
        old_left, old_left_group = self._left_records.decode(state.get_many(prefixed(WAITING_LEFT, keys.keys), keys.ts))
        old_right, old_right_group = self._right_records.decode(state.get_many(prefixed(RIGHT_ROW, keys.keys), keys.ts))
        every_right = pa.concat_tables([old_right, right.cast(old_right.schema)])
        every_right_group = np.concatenate([old_right_group, right_group])
        pairs = [
            matches(left, keys.left_group, every_right, every_right_group),
            matches(old_left, old_left_group, right.cast(old_right.schema), right_group),
        ]
        result.output = pa.concat_tables([self._pairs(*pair) for pair in pairs])
        append_rows(
            state, WAITING_LEFT, self._left_records, keys.keys, (old_left, old_left_group), (left, keys.left_group)
        )
        append_rows(
            state, RIGHT_ROW, self._right_records, keys.keys, (old_right, old_right_group), (right, right_group)
        )
        result.state_reads = 2 * len(keys.keys)
        return result

    def memory_spaces(self) -> list[MemorySpace]:
        """The right rows of a join on a key unique on the right: every batch looks up its keys' right row, written
        once per key; none when every right row joins (both sides' lists are read and appended each batch)."""
        return [MemorySpace(RIGHT_ROW, prefix_end(RIGHT_ROW))] if self.unique_right else []

    def hint_input(self, rows: DataFrame) -> DataFrame:
        """Upstream rows as hint input: the join key of either side, whether the row is a right row, its time."""
        right = F.col(self.right).isNotNull()
        key = F.when(right, F.col(f"{self.right}.{self.right_key}")).otherwise(F.col(f"{self.left}.{self.left_key}"))
        columns = [key.cast("long").alias(_JOIN_KEY), right.cast("int").alias(_IS_RIGHT)]
        if self.time_column:
            time = F.when(right, F.col(f"{self.right}.{self.time_column}"))
            columns.append(time.otherwise(F.col(f"{self.left}.{self.time_column}")).alias(_HINT_TIME))
        return rows.where(F.col(self.left).isNotNull() | right).select(*columns)

    def hint_spec(self) -> HintSpec:
        """The columns of :meth:`hint_input`."""
        return HintSpec((_JOIN_KEY, _IS_RIGHT), _HINT_TIME if self.time_column else None)

    def hint_key_reader(self) -> KeyColumns:
        """The join key alone, as :meth:`partition_key_reader` takes it (either side's rows of a key meet there)."""
        return KeyColumns((_JOIN_KEY,))

    def hint_keys(self, hints: pa.Table) -> tuple[list[bytes], np.ndarray]:
        """Every key's right row; a right row's key also its waiting left rows (read when it arrives)."""
        if not hints.num_rows:
            return no_hints()
        hints = hints.filter(pc.is_valid(hints[_JOIN_KEY]))
        keys = self._codec.encode(None, [hints[_JOIN_KEY].combine_chunks()])
        right = hints[_IS_RIGHT].to_numpy(zero_copy_only=False).astype(bool)
        ts = hints[HINT_TS].to_numpy()
        waiting = [k for k, r in zip(keys, right) if r]
        return prefixed(RIGHT_ROW, keys) + prefixed(WAITING_LEFT, waiting), np.concatenate([ts, ts[right]])

    def _inputs(self, deltas: pa.Table) -> tuple[pa.Table, pa.Table, int]:
        """The batch's left and right rows with a join key, and how many rows had none."""
        left, right = _struct_rows(deltas[self.left]), _struct_rows(deltas[self.right])
        if self._left_records is None or self._right_records is None:
            self._left_records, self._right_records = RecordCodec(left.schema), RecordCodec(right.schema)
        null_keys = left[self.left_key].null_count + right[self.right_key].null_count
        return (
            left.filter(pc.is_valid(left[self.left_key])),
            right.filter(pc.is_valid(right[self.right_key])),
            null_keys,
        )

    def _join_keys(self, left: pa.Table, right: pa.Table) -> _JoinKeys:
        """The batch's distinct join keys, their cache timestamps, and each right and left row's key."""
        both = right[self.right_key].cast(pa.int64()).chunks + left[self.left_key].cast(pa.int64()).chunks
        keys, group = _group(self._codec, [pa.chunked_array(both, pa.int64())])
        ts = _group_max(
            group, len(keys), np.concatenate([_times_us(right, self.time_column), _times_us(left, self.time_column)])
        )
        return _JoinKeys(keys, ts, group[: right.num_rows], group[right.num_rows :])

    def _right_rows(
        self, right: pa.Table, keys: _JoinKeys, state: StateView
    ) -> tuple[pa.Table, np.ndarray, pa.Table, np.ndarray]:
        """The right row of each key: stored, or new (not stored, and the first of its key in the batch).

        Returns the catalogue of those rows, each key's position in it (-1: none), and the new right
        rows with their keys' groups."""
        assert self._right_records is not None
        known, owner = self._right_records.decode(state.get_many(prefixed(RIGHT_ROW, keys.keys), keys.ts))
        firsts = np.unique(keys.right_group, return_index=True)[1]
        firsts = firsts[np.isin(keys.right_group[firsts], owner, invert=True)]
        new_right, new_group = right.take(pa.array(firsts, pa.int64())), keys.right_group[firsts]
        catalogue = pa.concat_tables([known, new_right.cast(known.schema)])
        position = np.full(len(keys.keys), -1, np.int64)
        position[np.concatenate([owner, new_group])] = np.arange(catalogue.num_rows)
        return catalogue, position, new_right, new_group

    def _store_right(self, new_right: pa.Table, new_group: np.ndarray, keys: _JoinKeys, state: StateView) -> None:
        """Write the batch's new right rows (in their stored form) under their keys."""
        assert self._right_records is not None
        state.put_many(
            prefixed(RIGHT_ROW, [keys.keys[g] for g in new_group]),
            self._right_records.encode(self._stored_form(new_right), np.ones(len(new_group), np.int64)),
        )

    def _count(self, repeated: int, null_keys: int, result: OperatorResult) -> None:
        self.dropped_rows = _count_dropped(
            "keyed join", repeated, f"{self.right} {self.right_key} seen before", self.dropped_rows
        )
        self.dropped_rows = _count_dropped("keyed join", null_keys, "null join key", self.dropped_rows)
        result.dropped_rows = repeated + null_keys

    def _waiting(
        self,
        new_group: np.ndarray,
        unmatched: pa.Table,
        unmatched_group: np.ndarray,
        keys: list[bytes],
        ts: list[int],
        state: StateView,
    ) -> tuple[pa.Table, np.ndarray]:
        """Release the left rows waiting for the new right rows (returned with their keys' groups) and
        delete their lists; append the batch's unmatched left rows to their keys' lists."""
        groups = np.concatenate([new_group, np.unique(unmatched_group)])
        waiting_keys, waiting_ts = prefixed(WAITING_LEFT, [keys[g] for g in groups]), [ts[g] for g in groups]
        waiting = state.get_many(waiting_keys, waiting_ts)
        rows, owner = self._left_records.decode(waiting)
        released = owner < len(new_group)
        gone = [i for i in range(len(new_group)) if waiting[i] is not None]
        state.put_many([waiting_keys[i] for i in gone], [None] * len(gone))
        slot = np.full(len(keys), -1, np.int64)  # each key's place in the waiting lists
        slot[groups] = np.arange(len(groups))
        owners = np.concatenate([owner[~released], slot[unmatched_group]])
        order = np.argsort(owners, kind="stable")  # a key's stored rows first, then the batch's
        appended = pa.concat_tables([rows.filter(pa.array(~released, pa.bool_())), unmatched.cast(rows.schema)])
        counts = np.bincount(owners, minlength=len(groups))
        touched = np.flatnonzero(counts)
        state.put_many(
            [waiting_keys[i] for i in touched],
            self._left_records.encode(appended.take(pa.array(order, pa.int64())), counts[touched]),
        )
        return rows.filter(pa.array(released, pa.bool_())), groups[owner[released]]

    def _stored_form(self, right: pa.Table) -> pa.Table:
        """Right rows as stored: rows failing ``where`` keep only their key and the filter column."""
        column, value = self.where
        passes = pc.fill_null(pc.equal(right[column], value), False)
        return pa.table(
            [
                c if name in (self.right_key, column) else pc.if_else(passes, c, pa.scalar(None, c.type))
                for name, c in zip(right.column_names, right.columns)
            ],
            schema=right.schema,
        )

    def _pairs(self, left: pa.Table, right: pa.Table) -> pa.Table:
        """The output rows of aligned left and right rows whose right row passes ``where``."""
        column, value = self.where
        passes = pc.fill_null(pc.equal(right[column], value), False)
        left, right = left.filter(passes), right.filter(passes)
        columns = dict(zip(left.column_names, left.columns))
        for name, c in zip(right.column_names, right.columns):
            if name != self.right_key:
                columns[self.right_prefix + name if name in columns else name] = c
        return pa.table(columns)

    def metadata(self) -> dict[str, Any]:
        """The dropped rows so far and the inputs' row types (a reader of the state decodes the rows with them)."""
        if self._left_records is None or self._right_records is None:
            return {"dropped_rows": self.dropped_rows}
        sides = [pa.field(s, pa.struct(r.fields)) for s, r in zip(SIDES, (self._left_records, self._right_records))]
        return {"dropped_rows": self.dropped_rows, ROW_SCHEMA: schema_text(pa.schema(sides))}

    def restore(self, metadata: dict[str, Any]) -> None:
        self.dropped_rows = int(metadata.get("dropped_rows", 0))
        if ROW_SCHEMA in metadata:
            left, right = (list(schema_from_text(metadata[ROW_SCHEMA]).field(s).type) for s in SIDES)
            self._left_records, self._right_records = RecordCodec(left), RecordCodec(right)

    # ------------------------------------------------------------------ the state as rows
    def _kinds(self) -> list[tuple[str, bytes, str, RecordCodec | None]]:
        """Per kind of entry (its store, its prefix, the join key's name in its input, its rows' codec): the right
        rows, then the left rows (waiting for their key's right row, or with ``unique_right=False`` every one)."""
        left = "waiting_left" if self.unique_right else "left"
        return [
            ("right", RIGHT_ROW, self.right_key, self._right_records),
            (left, WAITING_LEFT, self.left_key, self._left_records),
        ]

    def state_stores(self) -> list[StateStoreSpec]:
        """A store per kind of entry (:meth:`_kinds`), the right rows first: a row per stored row, keyed by the join
        key, with the row's fields."""
        return [
            _store(name, prefix, self.state_rows(name, [], []) if records is not None else None)
            for name, prefix, _, records in self._kinds()
        ]

    def state_rows(self, store: str, keys: list[bytes], values: list[bytes]) -> pa.Table:
        _, prefix, key, records = next(kind for kind in self._kinds() if kind[0] == store)
        assert records is not None, "state entries, but no row types to decode them with"
        groups, rows, _ = _entry_rows(self._codec, [key], records, prefix, keys, values)
        return state_table(groups, dict(zip(rows.column_names, rows.columns)), rows.num_rows)
