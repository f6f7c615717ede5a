"""The per-key decoding of group keys that :meth:`misa.state.codec.KeyCodec.decode` replaced with a decoding per
column; the tests compare the two."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

from misa.state.codec import WINDOW_END_DTYPE, KeyCodec, _from_int64, _is_fixed


def decode_per_key(codec: KeyCodec, keys: list[bytes]) -> tuple[np.ndarray | None, list[pa.Array]]:
    """Window ends (or None) and the group columns of ``keys``, one key at a time."""
    ends, values = [], [[] for _ in codec.fields]
    for key in keys:
        pos = 0
        if codec.windowed:
            ends.append(int.from_bytes(key[:8], "big"))
            pos = 8
        for i, f in enumerate(codec.fields):
            value, pos = _decode_value(f, key, pos)
            values[i].append(value)
    cols = [_column(f, v) for f, v in zip(codec.fields, values)]
    return (np.array(ends, dtype=WINDOW_END_DTYPE).astype(np.int64) if codec.windowed else None), cols


def _decode_value(field: pa.Field, key: bytes, pos: int) -> tuple[object, int]:
    """One column's value at ``pos`` (a fixed-width one as its int64, None when null) and where the next begins."""
    if key[pos] == 1:
        return None, pos + 1
    if _is_fixed(field.type):
        return struct.unpack_from(">q", key, pos + 1)[0], pos + 9
    (length,) = struct.unpack_from(">I", key, pos + 1)
    return key[pos + 5 : pos + 5 + length].decode(), pos + 5 + length


def _column(field: pa.Field, values: list) -> pa.Array:
    """The decoded values of one column as an array of its type."""
    if not _is_fixed(field.type):
        return pa.array(values, type=field.type)
    nulls = np.array([v is None for v in values], bool)
    return _from_int64(np.array([0 if v is None else v for v in values], np.int64), nulls, field.type)
