"""Byte layouts of keyed and window state (DESIGN section 6), encoded and decoded with NumPy.

Keys (the whole key space: :mod:`misa.state.keys`): for window state ``window_end (8 B
big-endian) ++ group key``, so all windows ending by a time form one key range; for keyed state,
the group key alone. A group key is, per column, a null
flag byte and then 8 bytes big-endian for integers, or a 4-byte length and UTF-8 for strings.
Values of incremental aggregates are ``float64[sum, count, min, max]`` per aggregated column.
"""

from __future__ import annotations

import struct
from typing import Sequence

import numpy as np
import pyarrow as pa

from misa.state.keys import window_prefix

WINDOW_END = np.dtype(">u8")
AGG_FIELDS = 4  # sum, count, min, max
IDENTITY = np.array([0.0, 0.0, np.inf, -np.inf])


class KeyCodec:
    """Encodes group columns (integers or strings) with an optional window end into state keys."""

    def __init__(self, schema: Sequence[pa.Field], windowed: bool):
        self.fields = list(schema)
        self.windowed = windowed
        for f in self.fields:
            if not (pa.types.is_integer(f.type) or pa.types.is_string(f.type) or pa.types.is_large_string(f.type)):
                raise TypeError(
                    f"group column {f.name} has type {f.type}; only integer and string columns are supported"
                )
        self.fixed = all(pa.types.is_integer(f.type) for f in self.fields)
        parts = [("we", WINDOW_END)] if windowed else []
        for i, _ in enumerate(self.fields):
            parts += [(f"n{i}", "u1"), (f"v{i}", ">i8")]
        self._dtype = np.dtype(parts)

    def encode(self, window_end_us: np.ndarray | None, columns: Sequence[pa.Array]) -> list[bytes]:
        n = len(columns[0]) if columns else len(window_end_us)  # type: ignore[arg-type]
        if self.fixed:
            rows = np.zeros(n, dtype=self._dtype)
            if self.windowed:
                rows["we"] = window_end_us
            for i, col in enumerate(columns):
                nulls = col.is_null().to_numpy(zero_copy_only=False)
                rows[f"n{i}"] = nulls
                rows[f"v{i}"] = col.fill_null(0).to_numpy(zero_copy_only=False)
            raw, width = rows.tobytes(), self._dtype.itemsize
            return [raw[i : i + width] for i in range(0, n * width, width)]
        values = [col.to_pylist() for col in columns]
        prefix = [window_prefix(w) for w in window_end_us] if self.windowed else [b""] * n  # type: ignore[union-attr]
        return [prefix[r] + b"".join(_encode_value(f, v[r]) for f, v in zip(self.fields, values)) for r in range(n)]

    def decode(self, keys: Sequence[bytes]) -> tuple[np.ndarray | None, list[pa.Array]]:
        """Window ends (or None) and the group columns of ``keys``."""
        if self.fixed:
            rows = np.frombuffer(b"".join(keys), dtype=self._dtype)
            cols = [
                pa.array(rows[f"v{i}"].astype(np.int64), mask=rows[f"n{i}"].astype(bool)).cast(f.type)
                for i, f in enumerate(self.fields)
            ]
            return (rows["we"].astype(np.int64) if self.windowed else None), cols
        ends, values = [], [[] for _ in self.fields]
        for key in keys:
            pos = 0
            if self.windowed:
                ends.append(int.from_bytes(key[:8], "big"))
                pos = 8
            for i, f in enumerate(self.fields):
                value, pos = _decode_value(f, key, pos)
                values[i].append(value)
        cols = [pa.array(v, type=f.type) for f, v in zip(self.fields, values)]
        return (np.array(ends, dtype=np.int64) if self.windowed else None), cols


def _encode_value(field: pa.Field, value: object) -> bytes:
    if value is None:
        return b"\x01"
    if pa.types.is_integer(field.type):
        return b"\x00" + struct.pack(">q", value)
    data = str(value).encode()
    return b"\x00" + struct.pack(">I", len(data)) + data


def _decode_value(field: pa.Field, key: bytes, pos: int) -> tuple[object, int]:
    if key[pos] == 1:
        return None, pos + 1
    if pa.types.is_integer(field.type):
        return struct.unpack_from(">q", key, pos + 1)[0], pos + 9
    (length,) = struct.unpack_from(">I", key, pos + 1)
    return key[pos + 5 : pos + 5 + length].decode(), pos + 5 + length


def decode_aggs(values: Sequence[bytes | None], columns: int) -> np.ndarray:
    """Stored aggregate states as a float64 array (rows, columns * 4); absent rows are identities."""
    empty = np.tile(IDENTITY, columns).astype("<f8").tobytes()
    raw = b"".join(v if v is not None else empty for v in values)
    return np.frombuffer(raw, dtype="<f8").reshape(len(values), columns * AGG_FIELDS)


def encode_aggs(states: np.ndarray) -> list[bytes]:
    raw, width = np.ascontiguousarray(states, dtype="<f8").tobytes(), states.shape[1] * 8
    return [raw[i : i + width] for i in range(0, len(raw), width)]


def merge_aggs(old: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Combine aggregate states column-wise: sums and counts add, mins and maxes fold."""
    merged = old + delta
    merged[:, 2::AGG_FIELDS] = np.minimum(old[:, 2::AGG_FIELDS], delta[:, 2::AGG_FIELDS])
    merged[:, 3::AGG_FIELDS] = np.maximum(old[:, 3::AGG_FIELDS], delta[:, 3::AGG_FIELDS])
    return merged
