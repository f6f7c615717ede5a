"""Byte layouts of keyed and window state (DESIGN section 6), encoded and decoded with NumPy.

Keys (the whole key space: :mod:`misa.state.keys`): for window state ``window_end (8 B
big-endian) ++ group key``, so all windows ending by a time form one key range; for keyed state,
the group key alone. A group key is, per column, a null
flag byte and then 8 bytes big-endian for integers, booleans, dates (days), timestamps (their unit,
Spark's: microseconds) and floats (float64 bits, -0.0 and NaN normalized as Spark groups them), or a
4-byte length and UTF-8 for strings.
Values of incremental aggregates (:class:`AggStates`) are, per aggregate, its value as 8 bytes (an
int64, or a float64 for floating aggregates) and its count of non-null inputs (int64), little-endian; a moments
aggregate (stddev, variance, skewness, kurtosis, covariance, correlation) has further float64 cells
(:mod:`misa.state.moment_folds`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from misa.exceptions import AggregateOverflowError
from misa.state.keys import split_fixed
from misa.state.moment_folds import EXTRA_CELLS, fold_moments
from misa.state.record_codec import index_ranges, utf8_parts

WINDOW_END_DTYPE = np.dtype(">u8")  # a key's window end: big-endian, so keys sort by it
AGG_CELLS = 2  # per aggregate: value, count
CELL = np.dtype("<i8")
INT64 = np.iinfo(np.int64)


def is_key_type(t: pa.DataType) -> bool:
    """Whether a column of Arrow type ``t`` can be part of a group key (:class:`KeyCodec`)."""
    return _is_string(t) or _is_fixed(t)


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_fixed(t: pa.DataType) -> bool:
    """Kept in a key as 8 bytes: integers, booleans, dates (days), timestamps (their unit), floats (bits)."""
    return any(
        check(t) for check in (pa.types.is_integer, pa.types.is_boolean, pa.types.is_date32, pa.types.is_timestamp)
    ) or (pa.types.is_floating(t) and not pa.types.is_float16(t))


def _to_int64(column: pa.Array) -> np.ndarray:
    """A fixed-width key column as int64 (nulls: 0). Floats are normalized as Spark groups them (-0.0 is
    0.0, every NaN one NaN), then kept as their exact float64 bits."""
    t = column.type
    if pa.types.is_floating(t):
        x = column.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)
        return (np.where(np.isnan(x), np.nan, x) + 0.0).view(np.int64)
    if pa.types.is_timestamp(t):
        column = column.view(pa.int64())
    elif pa.types.is_date32(t):
        column = column.view(pa.int32())
    elif pa.types.is_boolean(t):
        column = column.cast(pa.int8())
    return column.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)


def normalize_float_keys(rows: pa.Table, keys: Sequence[str]) -> pa.Table:
    """``rows`` with float key columns normalized as Spark normalizes join and group keys (-0.0 is 0.0, every NaN
    one NaN), so that values Spark takes as equal compare equal (and match the keys stored in state)."""
    for c in keys:
        column = rows[c].combine_chunks()
        if pa.types.is_floating(column.type) and not pa.types.is_float16(column.type):
            x = column.to_numpy(zero_copy_only=False).astype(column.type.to_pandas_dtype())
            normal = pa.array(np.where(np.isnan(x), np.nan, x) + 0.0, mask=column.is_null().to_numpy(False))
            rows = rows.set_column(rows.schema.get_field_index(c), rows.schema.field(c), normal.cast(column.type))
    return rows


def _from_int64(values: np.ndarray, nulls: np.ndarray, t: pa.DataType) -> pa.Array:
    """The column of type ``t`` that :func:`_to_int64` made ``values`` from."""
    if pa.types.is_floating(t):
        return pa.array(values.view(np.float64), mask=nulls).cast(t)
    if pa.types.is_timestamp(t):
        return pa.array(values, mask=nulls).view(t)
    if pa.types.is_date32(t):
        return pa.array(values.astype(np.int32), mask=nulls).view(t)
    return pa.array(values, mask=nulls).cast(t)


class KeyCodec:
    """Encodes group columns with an optional window end into state keys.

    Key columns: integers, booleans, dates, timestamps, floats and doubles (8 bytes each, see
    :func:`_to_int64`) and strings; other types (decimals, binary, nested types) are refused.
    """

    def __init__(self, schema: Sequence[pa.Field], windowed: bool):
        self.fields = list(schema)
        self.windowed = windowed
        for f in self.fields:
            if not is_key_type(f.type):
                raise TypeError(
                    f"group column {f.name} has type {f.type}; key columns may be integers, booleans, dates, "
                    "timestamps, floats, doubles and strings: cast it in the upstream"
                )
        self.fixed = all(_is_fixed(f.type) for f in self.fields)
        parts = [("we", WINDOW_END_DTYPE)] if windowed else []
        for i, _ in enumerate(self.fields):
            parts += [(f"n{i}", "u1"), (f"v{i}", ">i8")]
        self._dtype = np.dtype(parts)

    def encode(
        self, window_end_us: np.ndarray | None, columns: Sequence[pa.Array], rows: int | None = None
    ) -> list[bytes]:
        """The keys of each row; ``rows`` is needed only without columns and windows (every row has the one key)."""
        n = len(columns[0]) if columns else len(window_end_us) if window_end_us is not None else rows
        if n is None:
            raise ValueError("keys without group columns or windows: give the number of rows")
        if not self.fields and not self.windowed:
            return [b""] * n  # the one key of a state without group columns
        if self.fixed:
            rows = np.zeros(n, dtype=self._dtype)
            if self.windowed:
                rows["we"] = window_end_us
            for i, col in enumerate(columns):
                rows[f"n{i}"] = col.is_null().to_numpy(zero_copy_only=False)
                rows[f"v{i}"] = _to_int64(col)
            return split_fixed(rows.tobytes(), self._dtype.itemsize, n)
        parts = [_variable_parts(col) for col in columns]
        if self.windowed:
            ends = np.asarray(window_end_us).astype(WINDOW_END_DTYPE).tobytes()
            ends_array = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8), n, [None, pa.py_buffer(ends)])
            parts.insert(0, ends_array.cast(pa.large_binary()))
        if len(parts) == 1:
            return parts[0].to_pylist()
        return pc.binary_join_element_wise(*parts, pa.scalar(b"", pa.large_binary())).to_pylist()

    def decode(self, keys: Sequence[bytes]) -> tuple[np.ndarray | None, list[pa.Array]]:
        """Window ends (or None) and the group columns of ``keys``."""
        if not self.fields and not self.windowed:
            return None, []
        if self.fixed:
            rows = np.frombuffer(b"".join(keys), dtype=self._dtype)
            cols = [
                _from_int64(rows[f"v{i}"].astype(np.int64), rows[f"n{i}"].astype(bool), f.type)
                for i, f in enumerate(self.fields)
            ]
            return (rows["we"].astype(np.int64) if self.windowed else None), cols
        binary = pa.array(keys, pa.large_binary())
        n = len(binary)
        data = binary.buffers()[2]
        buffer = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
        position = np.frombuffer(binary.buffers()[1], np.int64)[binary.offset : binary.offset + n].copy()
        ends = None
        if self.windowed:
            ends = _gather(buffer, position, WINDOW_END_DTYPE).astype(np.int64)
            position = position + 8
        cols = []
        for f in self.fields:  # a column at a time, for every key: a null flag, then the value
            nulls = buffer[position] == 1
            valid = np.flatnonzero(~nulls)
            if _is_fixed(f.type):
                values = np.zeros(n, np.int64)
                values[valid] = _gather(buffer, position[valid] + 1, np.dtype(">i8"))
                cols.append(_from_int64(values, nulls, f.type))
                position = position + np.where(nulls, 1, 9)
                continue
            lengths = np.zeros(n, np.int64)
            lengths[valid] = _gather(buffer, position[valid] + 1, np.dtype(">u4"))
            chars = buffer[index_ranges(position[valid] + 5, lengths[valid])]
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            validity = pa.py_buffer(np.packbits(~nulls, bitorder="little"))
            strings = pa.Array.from_buffers(
                pa.large_string(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(chars.copy())]
            )
            cols.append(strings.cast(f.type))
            position = position + np.where(nulls, 1, 5 + lengths)
        return ends, cols


def _gather(buffer: np.ndarray, positions: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The values of ``dtype`` that start at ``positions`` of ``buffer`` (unaligned)."""
    return buffer[positions[:, None] + np.arange(dtype.itemsize)].view(dtype).ravel()


def _variable_parts(column: pa.Array) -> pa.Array:
    """Each row's part of a key with strings, as a binary column: a null flag, then 8 bytes big-endian or a 4-byte
    big-endian length and UTF-8 (a null is the flag alone); built per column, not per row."""
    n = len(column)
    if _is_fixed(column.type):
        nulls = column.is_null().to_numpy(zero_copy_only=False)
        lengths = np.where(nulls, 0, 8)
        body = _to_int64(column).astype(">i8").view(np.uint8)
        body_starts = np.arange(n, dtype=np.int64) * 8
    else:
        body, body_starts, lengths, nulls = utf8_parts(column)
        lengths = np.where(nulls, 0, lengths + 4)
    sizes = 1 + lengths
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    buffer = np.empty(int(offsets[-1]), np.uint8)
    buffer[offsets[:-1]] = nulls
    valid = np.flatnonzero(~nulls)
    position = offsets[valid] + 1
    if not _is_fixed(column.type):
        length_bytes = (lengths[valid] - 4).astype(">u4").view(np.uint8).reshape(-1, 4)
        buffer[position[:, None] + np.arange(4)] = length_bytes
        position = position + 4
    chars = lengths[valid] - (0 if _is_fixed(column.type) else 4)
    buffer[index_ranges(position, chars)] = body[index_ranges(body_starts[valid], chars)]
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(buffer)])


@dataclass(frozen=True)
class Fold:
    """How one aggregate's value folds: ``op`` (sum, min or max; and, or, xor: bitwise, of integers; product, of
    doubles) over int64 or (``floating``) float64 values, or moments (:data:`~misa.state.moment_folds.EXTRA_CELLS`:
    float64 mean, count and further cells).

    ``name`` is the aggregate's output column, for error messages.
    """

    name: str
    op: str
    floating: bool

    @property
    def cells(self) -> int:
        """The aggregate's cells in a state: value and count (and the further cells of moments)."""
        return AGG_CELLS + EXTRA_CELLS.get(self.op, 0)

    @property
    def identity(self) -> int | float:
        """The value of no rows: ``x`` folded with it is ``x`` (float min: NaN, the top of Spark's order)."""
        if self.floating:
            return (
                0.0 if self.op in EXTRA_CELLS else {"sum": 0.0, "min": np.nan, "max": -np.inf, "product": 1.0}[self.op]
            )
        return {"sum": 0, "min": INT64.max, "max": INT64.min, "and": -1, "or": 0, "xor": 0}[self.op]

    def reduce(self, values: np.ndarray, starts: np.ndarray, ansi: bool) -> np.ndarray:
        """The fold of each segment of ``values`` beginning at ``starts`` (int64, or float64 when floating).

        Integer sums wrap around as Spark's do, or raise :class:`AggregateOverflowError` under ANSI mode.
        Spark orders NaN above every double: min skips NaN unless all are NaN, max is NaN if one is.
        """
        if self.op == "sum" and not self.floating and ansi:
            _check_sum(values, starts, self.name)
        ufunc = {"sum": np.add, "min": np.fmin if self.floating else np.minimum, "max": np.maximum}.get(self.op)
        ufunc = (
            ufunc
            or {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor, "product": np.multiply}[self.op]
        )
        return ufunc.reduceat(values, starts)


def _check_sum(values: np.ndarray, starts: np.ndarray, name: str) -> None:
    """Raise if the exact sum of a segment leaves the int64 range (its high 32 bits, with carries, overflow)."""
    high = np.add.reduceat(values >> 32, starts) + (np.add.reduceat(values & 0xFFFFFFFF, starts) >> 32)
    if ((high < -(2**31)) | (high >= 2**31)).any():
        raise AggregateOverflowError(
            f"[ARITHMETIC_OVERFLOW] long overflow in sum {name}, as Spark raises with spark.sql.ansi.enabled=true; "
            "set spark.sql.ansi.enabled=false to let integer sums wrap around, or sum the column cast to double"
        )


@dataclass(frozen=True)
class AggStates:
    """Aggregate states as int64 arrays of shape (rows, cells): each aggregate's value (int64, or the bits of a
    float64) then its count of non-null inputs (then a moments aggregate's further cells); stored as little-endian
    8-byte cells.

    ``ansi``: integer sums raise on overflow (the session's ``spark.sql.ansi.enabled``) instead of wrapping.
    """

    folds: tuple[Fold, ...]
    ansi: bool = False

    @cached_property
    def offsets(self) -> list[int]:
        """Each aggregate's first cell."""
        return np.cumsum([0, *(f.cells for f in self.folds)])[:-1].tolist()

    @property
    def width(self) -> int:
        return sum(f.cells for f in self.folds)

    def identity(self, rows: int) -> np.ndarray:
        """``rows`` states of no input rows."""
        one = np.zeros(self.width, np.int64)
        for at, fold in zip(self.offsets, self.folds):
            one[at] = np.array(fold.identity, np.float64 if fold.floating else np.int64).view(np.int64)
        return np.tile(one, (rows, 1))

    def decode(self, values: Sequence[bytes | None]) -> np.ndarray:
        """Stored states; absent rows (None) are identities."""
        empty = self.identity(1).astype(CELL).tobytes()
        raw = b"".join(v if v is not None else empty for v in values)
        return np.frombuffer(raw, dtype=CELL).astype(np.int64, copy=False).reshape(len(values), self.width)

    def encode(self, states: np.ndarray) -> list[bytes]:
        return split_fixed(np.ascontiguousarray(states, dtype=CELL).tobytes(), self.width * CELL.itemsize, len(states))

    def value(self, states: np.ndarray, i: int) -> np.ndarray:
        """Aggregate ``i``'s values: int64, or float64 for a floating aggregate (central moments: the mean)."""
        column = np.ascontiguousarray(states[:, self.offsets[i]])
        return column.view(np.float64) if self.folds[i].floating else column

    def count(self, states: np.ndarray, i: int) -> np.ndarray:
        """Aggregate ``i``'s counts of non-null inputs."""
        return states[:, self.offsets[i] + 1]

    def moments(self, states: np.ndarray, i: int) -> np.ndarray:
        """Moments aggregate ``i``'s further cells (rows, cells) as float64 (:mod:`misa.state.moment_folds`)."""
        at = self.offsets[i] + AGG_CELLS
        return np.ascontiguousarray(states[:, at : self.offsets[i] + self.folds[i].cells]).view(np.float64)

    def reduce(self, states: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """The states of the row segments beginning at ``starts`` (each non-empty): counts add, values fold."""
        if not len(starts) or not self.width:
            return self.identity(len(starts))
        out = np.empty((len(starts), self.width), np.int64)
        for i, (at, fold) in enumerate(zip(self.offsets, self.folds)):
            if fold.op in EXTRA_CELLS:
                out[:, at : at + fold.cells] = fold_moments(fold.op, states[:, at : at + fold.cells], starts)
                continue
            out[:, at + 1] = np.add.reduceat(states[:, at + 1], starts)
            folded = fold.reduce(self.value(states, i), starts, self.ansi)
            out[:, at] = folded.view(np.int64) if fold.floating else folded
        return out

    def per_key(self, states: np.ndarray, key_of_row: np.ndarray, keys: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows' states folded per key ``0..keys-1`` (each the key of some row), and each key's first row."""
        order = np.argsort(key_of_row, kind="stable")
        starts = np.searchsorted(key_of_row[order], np.arange(keys))
        return self.reduce(states[order], starts), order[starts]

    def merge(self, old: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """Row ``r`` of ``old`` folded with row ``r`` of ``delta``."""
        if not self.width:
            return self.identity(len(old))
        pairs = np.stack([old, delta], axis=1).reshape(-1, self.width)
        return self.reduce(pairs, np.arange(0, len(pairs), 2))


def distinct_keys(keys: Sequence[bytes]) -> tuple[list[bytes], np.ndarray]:
    """The distinct keys in first-seen order, and each key's index among them (hashed in Arrow, not per key in
    Python)."""
    if not len(keys):
        return [], np.zeros(0, np.int64)
    encoded = pa.array(keys, pa.large_binary()).dictionary_encode()
    return encoded.dictionary.to_pylist(), encoded.indices.to_numpy().astype(np.int64)


def latest_per_key(key_of_row: np.ndarray, keys: int, times: np.ndarray) -> np.ndarray:
    """Each key's latest time among its rows' ``times`` (``key_of_row``: as :func:`distinct_keys` gives it)."""
    latest = np.full(keys, np.iinfo(np.int64).min)
    np.maximum.at(latest, key_of_row, times)
    return latest
