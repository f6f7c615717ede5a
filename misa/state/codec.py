"""Byte layouts of keyed and window state (DESIGN section 6), encoded and decoded with NumPy.

Keys (the whole key space: :mod:`misa.state.keys`): for window state ``window_end (8 B
big-endian) ++ group key``, so all windows ending by a time form one key range; for keyed state,
the group key alone. A group key is, per column, a null
flag byte and then 8 bytes big-endian for integers, or a 4-byte length and UTF-8 for strings.
Values of incremental aggregates (:class:`AggStates`) are, per aggregate, its value as 8 bytes (an
int64, or a float64 for floating aggregates) and its count of non-null inputs (int64), little-endian.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa

from misa.state.keys import window_prefix

WINDOW_END = np.dtype(">u8")
AGG_CELLS = 2  # per aggregate: value, count
CELL = np.dtype("<i8")
INT64 = np.iinfo(np.int64)


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


class AggregateOverflowError(ArithmeticError):
    """A sum of integers left the bigint range under ``spark.sql.ansi.enabled`` (Spark's ARITHMETIC_OVERFLOW)."""


@dataclass(frozen=True)
class Fold:
    """How one aggregate's value folds: ``op`` (sum, min or max) over int64 or (``floating``) float64 values.

    ``name`` is the aggregate's output column, for error messages.
    """

    name: str
    op: str
    floating: bool

    @property
    def identity(self) -> int | float:
        """The value of no rows: ``x`` folded with it is ``x`` (float min: NaN, the top of Spark's order)."""
        if self.floating:
            return {"sum": 0.0, "min": np.nan, "max": -np.inf}[self.op]
        return {"sum": 0, "min": INT64.max, "max": INT64.min}[self.op]

    def reduce(self, values: np.ndarray, starts: np.ndarray, ansi: bool) -> np.ndarray:
        """The fold of each segment of ``values`` beginning at ``starts`` (int64, or float64 when floating).

        Integer sums wrap around as Spark's do, or raise :class:`AggregateOverflowError` under ANSI mode.
        Spark orders NaN above every double: min skips NaN unless all are NaN, max is NaN if one is.
        """
        if self.op == "sum" and not self.floating and ansi:
            _check_sum(values, starts, self.name)
        ufunc = {"sum": np.add, "min": np.fmin if self.floating else np.minimum, "max": np.maximum}[self.op]
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
    """Aggregate states as int64 arrays of shape (rows, 2 per aggregate): each aggregate's value (int64,
    or the bits of a float64) then its count of non-null inputs; stored as little-endian 8-byte cells.

    ``ansi``: integer sums raise on overflow (the session's ``spark.sql.ansi.enabled``) instead of wrapping.
    """

    folds: tuple[Fold, ...]
    ansi: bool = False

    @property
    def width(self) -> int:
        return len(self.folds) * AGG_CELLS

    def identity(self, rows: int) -> np.ndarray:
        """``rows`` states of no input rows."""
        one = np.zeros(self.width, np.int64)
        for i, fold in enumerate(self.folds):
            one[i * AGG_CELLS] = np.array(fold.identity, np.float64 if fold.floating else np.int64).view(np.int64)
        return np.tile(one, (rows, 1))

    def decode(self, values: Sequence[bytes | None]) -> np.ndarray:
        """Stored states; absent rows (None) are identities."""
        empty = self.identity(1).astype(CELL).tobytes()
        raw = b"".join(v if v is not None else empty for v in values)
        return np.frombuffer(raw, dtype=CELL).astype(np.int64, copy=False).reshape(len(values), self.width)

    def encode(self, states: np.ndarray) -> list[bytes]:
        raw, width = np.ascontiguousarray(states, dtype=CELL).tobytes(), self.width * CELL.itemsize
        return [raw[i : i + width] for i in range(0, len(raw), width)]

    def value(self, states: np.ndarray, i: int) -> np.ndarray:
        """Aggregate ``i``'s values: int64, or float64 for a floating aggregate."""
        column = np.ascontiguousarray(states[:, i * AGG_CELLS])
        return column.view(np.float64) if self.folds[i].floating else column

    def count(self, states: np.ndarray, i: int) -> np.ndarray:
        """Aggregate ``i``'s counts of non-null inputs."""
        return states[:, i * AGG_CELLS + 1]

    def reduce(self, states: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """The states of the row segments beginning at ``starts`` (each non-empty): counts add, values fold."""
        if not len(starts):
            return self.identity(0)
        out = np.empty((len(starts), self.width), np.int64)
        out[:, 1::AGG_CELLS] = np.add.reduceat(states[:, 1::AGG_CELLS], starts, axis=0)
        for i, fold in enumerate(self.folds):
            folded = fold.reduce(self.value(states, i), starts, self.ansi)
            out[:, i * AGG_CELLS] = folded.view(np.int64) if fold.floating else folded
        return out

    def per_key(self, states: np.ndarray, key_of_row: np.ndarray, keys: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows' states folded per key ``0..keys-1`` (each the key of some row), and each key's first row."""
        order = np.argsort(key_of_row, kind="stable")
        starts = np.searchsorted(key_of_row[order], np.arange(keys))
        return self.reduce(states[order], starts), order[starts]

    def merge(self, old: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """Row ``r`` of ``old`` folded with row ``r`` of ``delta``."""
        pairs = np.stack([old, delta], axis=1).reshape(-1, self.width)
        return self.reduce(pairs, np.arange(0, len(pairs), 2))


def distinct_keys(keys: Sequence[bytes]) -> tuple[list[bytes], np.ndarray]:
    """The distinct keys in first-seen order, and each key's index among them."""
    index: dict[bytes, int] = {}
    rows = np.fromiter((index.setdefault(k, len(index)) for k in keys), np.int64, len(keys))
    return list(index), rows


def latest_per_key(key_of_row: np.ndarray, keys: int, times: np.ndarray) -> np.ndarray:
    """Each key's latest time among its rows' ``times`` (``key_of_row``: as :func:`distinct_keys` gives it)."""
    latest = np.full(keys, np.iinfo(np.int64).min)
    np.maximum.at(latest, key_of_row, times)
    return latest
