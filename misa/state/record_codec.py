"""Lists of records (columns of any Arrow type) packed into state values, and back, with NumPy.

A value holds the records of one state key, in order::

    marker (the codec's, often none) | count (u32) | length of each record (u32 each) | the records

and a record is ``int64 per integer column | the Arrow value's bytes per other fixed-width column (floats,
booleans as one byte, dates, timestamps, durations, decimals) | null flag (u8) per column | byte length (u32) per
variable column | those columns' bytes, in column order``; all numbers little-endian. Variable columns are strings
(UTF-8), binaries (raw), and any other type (nested ones) as each value pickled, the one case decoded per value.
The lengths up front let :meth:`RecordCodec.decode` find every record of every value at once (no walk from record
to record), and encoding is deterministic, so equal records give equal bytes.
"""

from __future__ import annotations

import pickle
from typing import Sequence

import numpy as np
import pyarrow as pa

_U32 = np.dtype("<u4")


def exclusive_cumsum(counts: np.ndarray) -> np.ndarray:
    """``[0, c0, c0 + c1, ...]`` without the total: where each of consecutive runs of ``counts`` begins."""
    out = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=out[1:])
    return out


def index_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenated index ranges ``[starts[i], starts[i] + lengths[i])``."""
    lengths = lengths.astype(np.int64)
    return np.repeat(starts.astype(np.int64) - exclusive_cumsum(lengths), lengths) + np.arange(lengths.sum())


def _put_u32(buffer: np.ndarray, positions: np.ndarray, values: np.ndarray) -> None:
    buffer[positions[:, None] + np.arange(4)] = values.astype(_U32).view(np.uint8).reshape(-1, 4)


def _get_u32(buffer: np.ndarray, positions: np.ndarray) -> np.ndarray:
    return buffer[positions[:, None] + np.arange(4)].view(_U32).ravel().astype(np.int64)


def utf8_parts(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A string column's UTF-8 bytes, each row's start and length in them, and its null mask."""
    return _byte_parts(_combined(column).cast(pa.large_string()))


def _combined(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _byte_parts(array: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A large string or binary array's bytes, each row's start and length in them, and its null mask."""
    nulls = array.is_null().to_numpy(zero_copy_only=False)
    _, offsets, data = array.buffers()
    offsets = np.frombuffer(offsets, dtype=np.int64)[array.offset : array.offset + len(array) + 1]
    chars = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    return chars, offsets[:-1], np.where(nulls, 0, np.diff(offsets)), nulls


INTEGER, RAW, UTF8, BINARY, PICKLED = "integer", "raw", "utf8", "binary", "pickled"  # how a column is kept


def _kind(t: pa.DataType) -> str:
    """How a record keeps a column of type ``t``: integers as int64, other fixed-width values as their bytes, strings
    and binaries as bytes of a length, anything else pickled per value."""
    if pa.types.is_integer(t):
        return INTEGER
    if any(
        check(t)
        for check in (
            pa.types.is_boolean,
            pa.types.is_floating,
            pa.types.is_date,
            pa.types.is_timestamp,
            pa.types.is_time,
            pa.types.is_duration,
            pa.types.is_decimal,
            pa.types.is_fixed_size_binary,
        )
    ):
        return RAW
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return UTF8
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return BINARY
    return PICKLED


def _raw_width(t: pa.DataType) -> int:
    return 1 if pa.types.is_boolean(t) else t.bit_width // 8


def _raw_values(column: pa.Array) -> np.ndarray:
    """A fixed-width column's values as rows of bytes (booleans one byte each; nulls all zero)."""
    width = _raw_width(column.type)
    if pa.types.is_boolean(column.type):
        column = column.cast(pa.int8())
    data = column.buffers()[1]
    if data is None or not len(column):
        return np.zeros((len(column), width), np.uint8)
    raw = np.frombuffer(data, np.uint8)[column.offset * width : (column.offset + len(column)) * width]
    raw = raw.reshape(len(column), width).copy()
    raw[column.is_null().to_numpy(zero_copy_only=False)] = 0
    return raw


def _from_raw(raw: np.ndarray, nulls: np.ndarray, t: pa.DataType) -> pa.Array:
    storage = pa.int8() if pa.types.is_boolean(t) else t
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little"))
    array = pa.Array.from_buffers(storage, len(nulls), [validity, pa.py_buffer(np.ascontiguousarray(raw))])
    return array.cast(t) if storage != t else array


def _variable_parts(column: pa.Array, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A variable column's bytes, each row's start and length in them, and its null mask."""
    if kind == UTF8:
        return _byte_parts(column.cast(pa.large_string()))
    if kind == BINARY:
        return _byte_parts(column.cast(pa.large_binary()))
    pickled = [None if v is None else pickle.dumps(v, protocol=5) for v in column.to_pylist()]
    return _byte_parts(pa.array(pickled, pa.large_binary()))


def _from_variable(chars: np.ndarray, lengths: np.ndarray, nulls: np.ndarray, f: pa.Field, kind: str) -> pa.Array:
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little"))
    storage = pa.large_string() if kind == UTF8 else pa.large_binary()
    array = pa.Array.from_buffers(storage, len(nulls), [validity, pa.py_buffer(offsets), pa.py_buffer(chars)])
    if kind == PICKLED:
        return pa.array([None if v is None else pickle.loads(v) for v in array.to_pylist()], f.type)
    return array.cast(f.type)


class RecordCodec:
    """Packs records of ``fields`` into values, one list of records per value, each value behind ``marker``."""

    def __init__(self, fields: Sequence[pa.Field], marker: bytes = b""):
        self.fields = list(fields)
        self.marker = marker
        self.names = [f.name for f in self.fields]
        kinds = [_kind(f.type) for f in self.fields]
        self._ints = [f for f, k in zip(self.fields, kinds) if k == INTEGER]
        self._raws = [f for f, k in zip(self.fields, kinds) if k == RAW]
        self._vars = [(f, k) for f, k in zip(self.fields, kinds) if k in (UTF8, BINARY, PICKLED)]
        self._fixed = np.dtype(
            [(f"i{i}", "<i8") for i in range(len(self._ints))]
            + [(f"x{i}", f"V{_raw_width(f.type)}") for i, f in enumerate(self._raws)]
            + [(f"n{i}", "u1") for i in range(len(self.fields))]
            + [(f"l{i}", "<u4") for i in range(len(self._vars))]
        )
        self.schema = pa.schema(self.fields)

    def encode(self, rows: pa.Table, counts: np.ndarray) -> list[bytes]:
        """One value per group: group ``g`` holds the next ``counts[g]`` of ``rows`` (rows in group order)."""
        counts = np.asarray(counts, dtype=np.int64)
        n, width, head = rows.num_rows, self._fixed.itemsize, len(self.marker) + 4
        if counts.sum() != n:
            raise ValueError(f"group counts add up to {counts.sum()}, but there are {n} rows")
        fixed = np.zeros(n, dtype=self._fixed)
        for i, f in enumerate(self._ints):
            column = _combined(rows[f.name])
            fixed[f"i{i}"] = column.fill_null(0).to_numpy(zero_copy_only=False)
            fixed[f"n{self.names.index(f.name)}"] = column.is_null().to_numpy(zero_copy_only=False)
        for i, f in enumerate(self._raws):
            column = _combined(rows[f.name])
            fixed[f"x{i}"] = _raw_values(column).view(self._fixed[f"x{i}"]).ravel()
            fixed[f"n{self.names.index(f.name)}"] = column.is_null().to_numpy(zero_copy_only=False)
        variables = [_variable_parts(_combined(rows[f.name]), kind) for f, kind in self._vars]
        for i, ((f, _), (_, _, lengths, nulls)) in enumerate(zip(self._vars, variables)):
            fixed[f"l{i}"] = lengths
            fixed[f"n{self.names.index(f.name)}"] = nulls
        record_bytes = width + sum((v[2] for v in variables), np.zeros(n, np.int64))
        first_row = exclusive_cumsum(counts)
        before = exclusive_cumsum(record_bytes)  # record bytes before each row, over all groups
        in_group = np.concatenate([before, [record_bytes.sum()]])
        value_bytes = head + 4 * counts + in_group[first_row + counts] - in_group[first_row]
        value_start = exclusive_cumsum(value_bytes)
        buffer = np.zeros(int(value_bytes.sum()), dtype=np.uint8)
        if self.marker:
            buffer[value_start[:, None] + np.arange(len(self.marker))] = np.frombuffer(self.marker, np.uint8)
        _put_u32(buffer, value_start + head - 4, counts)
        index = np.arange(n) - np.repeat(first_row, counts)  # each row's place in its group
        _put_u32(buffer, np.repeat(value_start + head, counts) + 4 * index, record_bytes)
        group = np.repeat(np.arange(len(counts)), counts)
        record_start = (value_start + head + 4 * counts - in_group[first_row])[group] + before
        buffer[record_start[:, None] + np.arange(width)] = fixed.view(np.uint8).reshape(n, width)
        position = record_start + width
        for chars, starts, lengths, _ in variables:
            source = index_ranges(starts, lengths)
            buffer[index_ranges(position, lengths)] = chars[source]
            position = position + lengths
        offsets = np.concatenate([[0], np.cumsum(value_bytes)]).astype(np.int64)
        values = pa.Array.from_buffers(
            pa.large_binary(), len(counts), [None, pa.py_buffer(offsets), pa.py_buffer(buffer)]
        )
        return values.to_pylist()

    def decode(self, values: Sequence[bytes | None]) -> tuple[pa.Table, np.ndarray]:
        """The records of ``values`` in order and, per record, the index of its value (None holds none)."""
        array = pa.array(values, pa.large_binary())
        present = np.flatnonzero(array.is_valid().to_numpy(zero_copy_only=False))
        _, offsets, data = array.buffers()
        buffer = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
        starts = np.frombuffer(offsets, dtype=np.int64)[present] if len(present) else np.zeros(0, np.int64)
        starts = starts + len(self.marker)
        counts = _get_u32(buffer, starts)
        owner = np.repeat(present, counts)
        first = np.repeat(exclusive_cumsum(counts), counts)
        index = np.arange(len(owner)) - first
        record_bytes = _get_u32(buffer, np.repeat(starts + 4, counts) + 4 * index)
        before = exclusive_cumsum(record_bytes)
        record_start = np.repeat(starts + 4 + 4 * counts, counts) + before - before[first]
        width = self._fixed.itemsize
        fixed = buffer[record_start[:, None] + np.arange(width)].view(self._fixed).ravel()
        columns: dict[str, pa.Array] = {}
        for i, f in enumerate(self._ints):
            nulls = fixed[f"n{self.names.index(f.name)}"].astype(bool)
            columns[f.name] = pa.array(fixed[f"i{i}"], mask=nulls).cast(f.type)
        for i, f in enumerate(self._raws):
            nulls = fixed[f"n{self.names.index(f.name)}"].astype(bool)
            columns[f.name] = _from_raw(fixed[f"x{i}"].copy().view(np.uint8), nulls, f.type)
        position = record_start + width
        for i, (f, kind) in enumerate(self._vars):
            lengths = fixed[f"l{i}"].astype(np.int64)
            nulls = fixed[f"n{self.names.index(f.name)}"].astype(bool)
            chars = buffer[index_ranges(position, lengths)]
            columns[f.name] = _from_variable(chars, lengths, nulls, f, kind)
            position = position + lengths
        return pa.table([columns[name] for name in self.names], schema=self.schema), owner
