"""A Count-Min sketch with small saturating counters and aging, and a vectorized key hash.

The sketch finds very hot keys, which the stateful operator's cache holds anyway, so that the hint
extractor does not prefetch them (as the SaturatingCMS of Keyed Prefetching). It works on arrays of
64-bit key hashes: one hash gives every row's counter index by double hashing. Counters saturate at
the maximum of their dtype (never wrap) and are halved after every ``aging_records`` records, so
keys that stop arriving cool down.
"""

from __future__ import annotations

import copy
from typing import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

_HASH_KEY = "misa-prefetch-01"  # 16 characters: pandas' SipHash key, fixed so hashes agree across processes
_SEED = np.uint64(0x243F6A8885A308D3)
_NULL = np.uint64(0x9E3779B97F4A7C15)  # the hash of a null value
_PRIME = np.uint64(0x100000001B3)


class CountMinSketch:
    """``depth`` rows of ``width`` saturating counters; a key is hot when all its counters exceed ``threshold``."""

    def __init__(
        self,
        depth: int = 4,
        width: int = 65536,
        *,
        threshold: int = 64,
        aging_records: int = 100_000,
        dtype: type | np.dtype = np.uint8,
    ):
        dtype = np.dtype(dtype)
        if dtype.kind != "u":
            raise ValueError(f"dtype must be an unsigned integer type, not {dtype}")
        max_count = int(np.iinfo(dtype).max)
        if depth < 1:
            raise ValueError(f"depth must be at least 1, not {depth}")
        if width < 1:
            raise ValueError(f"width must be at least 1, not {width}")
        if not 0 <= threshold < max_count:
            raise ValueError(f"threshold must be in [0, {max_count}) for {dtype} counters, not {threshold}")
        if aging_records < 1:
            raise ValueError(f"aging_records must be at least 1, not {aging_records}")
        self.depth = int(depth)
        self.width = 1 << (int(width) - 1).bit_length()  # rounded up to a power of two
        self.threshold = int(threshold)
        self.aging_records = int(aging_records)
        self.max_count = max_count
        self.table = np.zeros((self.depth, self.width), dtype)
        self.records = 0  # records added since the last aging

    def _cells(self, hashes: np.ndarray) -> np.ndarray:
        """Flat counter indices, shape (depth, n): row i uses (h1 + i*h2) mod width, h2 odd."""
        h1 = hashes & np.uint64(0xFFFFFFFF)
        h2 = (hashes >> np.uint64(32)) | np.uint64(1)
        rows = np.arange(self.depth, dtype=np.uint64)[:, None]
        cols = (h1 + rows * h2) & np.uint64(self.width - 1)
        return (cols + rows * np.uint64(self.width)).astype(np.intp)

    def add(self, hashes: np.ndarray, counts: np.ndarray | None = None) -> None:
        """Count ``counts[j]`` records (1 each when omitted) of key hash ``hashes[j]``, then age if due."""
        hashes = _as_hashes(hashes)
        if counts is None:
            weights, total = None, len(hashes)
        else:
            counts = np.asarray(counts, np.int64)
            if counts.shape != hashes.shape:
                raise ValueError(f"counts must have the shape of hashes {hashes.shape}, not {counts.shape}")
            if (counts < 0).any():
                raise ValueError("counts must not be negative")
            weights, total = np.broadcast_to(counts, (self.depth, len(hashes))).ravel(), int(counts.sum())
        added = np.bincount(self._cells(hashes).ravel(), weights, minlength=self.table.size)
        summed = self.table.astype(np.int64) + added.reshape(self.table.shape).astype(np.int64)
        self.table = np.minimum(summed, self.max_count).astype(self.table.dtype)
        self.records += total
        agings, self.records = divmod(self.records, self.aging_records)
        for _ in range(min(agings, self.table.dtype.itemsize * 8)):
            self.table >>= 1

    def estimate(self, hashes: np.ndarray) -> np.ndarray:
        """Estimated (never under-counted, unless saturated or aged) record counts of the key hashes."""
        return self.table.ravel()[self._cells(_as_hashes(hashes))].min(axis=0)

    def is_hot(self, hashes: np.ndarray) -> np.ndarray:
        """True for key hashes whose counters all exceed the threshold."""
        return self.estimate(hashes) > self.threshold

    def copy(self) -> CountMinSketch:
        """An independent snapshot."""
        clone = copy.copy(self)
        clone.table = self.table.copy()
        return clone


def _as_hashes(hashes: np.ndarray) -> np.ndarray:
    hashes = np.asarray(hashes)
    if hashes.dtype == np.int64:
        return hashes.view(np.uint64)
    if hashes.dtype != np.uint64:
        raise ValueError(f"hashes must be uint64 (or their int64 view), not {hashes.dtype}")
    return hashes


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer over a uint64 array (wrapping arithmetic)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _hash_column(column: pa.Array) -> np.ndarray:
    """uint64 hash of each value; nulls get one fixed hash."""
    if pa.types.is_boolean(column.type):
        column = column.cast(pa.int8())
    if pa.types.is_integer(column.type):
        values = column.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64).view(np.uint64)
        nulls = column.is_null().to_numpy(zero_copy_only=False)
        return np.where(nulls, _NULL, _mix64(values))
    # Other types (strings, binary, floats, ...): hash each distinct value once, then gather.
    encoded = column.dictionary_encode()
    distinct = pd.util.hash_array(
        encoded.dictionary.to_numpy(zero_copy_only=False), hash_key=_HASH_KEY, categorize=False
    )
    indices = encoded.indices.fill_null(len(encoded.dictionary)).to_numpy(zero_copy_only=False)
    return np.append(distinct.astype(np.uint64), _NULL)[indices]


def hash_keys(columns: Sequence[pa.Array | pa.ChunkedArray], rows: int | None = None) -> np.ndarray:
    """Deterministic uint64 hash of each row of the key ``columns`` (same in every process).

    Integer and boolean columns hash by value whatever their width; strings by their UTF-8 bytes; nulls are a
    value of their own. The combination depends on column order. With no columns (a state without group
    columns) each of ``rows`` rows has the one key, and one hash.
    """
    if not columns:
        if rows is None:
            raise ValueError("with no key columns, give the number of rows")
        return np.full(rows, _SEED, np.uint64)
    arrays = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
    lengths = {len(a) for a in arrays}
    if len(lengths) != 1:
        raise ValueError(f"columns must all have the same length, not {sorted(lengths)}")
    result = np.full(lengths.pop(), _SEED, np.uint64)
    for array in arrays:
        result = _mix64(result * _PRIME + _hash_column(array))
    return result
