"""Lists of records (integer and string columns) packed into state values, and back, with NumPy.

A value holds the records of one state key, in order::

    count (u32) | length of each record (u32 each) | the records

and a record is ``int64 per integer column | null flag (u8) per column | byte length (u32) per
string column | the strings' UTF-8 bytes, in column order``; all numbers little-endian. The
lengths up front let :meth:`RecordCodec.decode` find every record of every value at once (no walk
from record to record), and encoding is deterministic, so equal records give equal bytes.
"""

from __future__ import annotations

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
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    array = array.cast(pa.large_string())
    nulls = array.is_null().to_numpy(zero_copy_only=False)
    _, offsets, data = array.buffers()
    offsets = np.frombuffer(offsets, dtype=np.int64)[array.offset : array.offset + len(array) + 1]
    chars = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    return chars, offsets[:-1], np.where(nulls, 0, np.diff(offsets)), nulls


class RecordCodec:
    """Packs records of ``fields`` (integer and string types) into values, one list of records per value."""

    def __init__(self, fields: Sequence[pa.Field]):
        self.fields = list(fields)
        for f in self.fields:
            if not (pa.types.is_integer(f.type) or pa.types.is_string(f.type) or pa.types.is_large_string(f.type)):
                raise TypeError(f"column {f.name} has type {f.type}; records hold integer and string columns only")
        self.names = [f.name for f in self.fields]
        self._ints = [f for f in self.fields if pa.types.is_integer(f.type)]
        self._strs = [f for f in self.fields if not pa.types.is_integer(f.type)]
        self._fixed = np.dtype(
            [(f"i{i}", "<i8") for i in range(len(self._ints))]
            + [(f"n{i}", "u1") for i in range(len(self.fields))]
            + [(f"l{i}", "<u4") for i in range(len(self._strs))]
        )
        self.schema = pa.schema(self.fields)

    def encode(self, rows: pa.Table, counts: np.ndarray) -> list[bytes]:
        """One value per group: group ``g`` holds the next ``counts[g]`` of ``rows`` (rows in group order)."""
        counts = np.asarray(counts, dtype=np.int64)
        n, width = rows.num_rows, self._fixed.itemsize
        if counts.sum() != n:
            raise ValueError(f"group counts add up to {counts.sum()}, but there are {n} rows")
        fixed = np.zeros(n, dtype=self._fixed)
        for i, f in enumerate(self._ints):
            column = rows[f.name].combine_chunks()
            fixed[f"i{i}"] = column.fill_null(0).to_numpy(zero_copy_only=False)
            fixed[f"n{self.names.index(f.name)}"] = column.is_null().to_numpy(zero_copy_only=False)
        strings = [utf8_parts(rows[f.name]) for f in self._strs]
        for i, (f, (_, _, lengths, nulls)) in enumerate(zip(self._strs, strings)):
            fixed[f"l{i}"] = lengths
            fixed[f"n{self.names.index(f.name)}"] = nulls
        record_bytes = width + sum((s[2] for s in strings), np.zeros(n, np.int64))
        first_row = exclusive_cumsum(counts)
        before = exclusive_cumsum(record_bytes)  # record bytes before each row, over all groups
        in_group = np.concatenate([before, [record_bytes.sum()]])
        value_bytes = 4 + 4 * counts + in_group[first_row + counts] - in_group[first_row]
        value_start = exclusive_cumsum(value_bytes)
        buffer = np.zeros(int(value_bytes.sum()), dtype=np.uint8)
        _put_u32(buffer, value_start, counts)
        index = np.arange(n) - np.repeat(first_row, counts)  # each row's place in its group
        _put_u32(buffer, np.repeat(value_start + 4, counts) + 4 * index, record_bytes)
        group = np.repeat(np.arange(len(counts)), counts)
        record_start = (value_start + 4 + 4 * counts - in_group[first_row])[group] + before
        buffer[record_start[:, None] + np.arange(width)] = fixed.view(np.uint8).reshape(n, width)
        position = record_start + width
        for chars, starts, lengths, _ in strings:
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
        position = record_start + width
        for i, f in enumerate(self._strs):
            lengths = fixed[f"l{i}"].astype(np.int64)
            nulls = fixed[f"n{self.names.index(f.name)}"].astype(bool)
            chars = buffer[index_ranges(position, lengths)]
            string_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            validity = np.packbits(~nulls, bitorder="little")
            columns[f.name] = pa.Array.from_buffers(
                pa.large_string(),
                len(owner),
                [pa.py_buffer(validity), pa.py_buffer(string_offsets), pa.py_buffer(chars)],
            ).cast(f.type)
            position = position + lengths
        return pa.table([columns[name] for name in self.names], schema=self.schema), owner
