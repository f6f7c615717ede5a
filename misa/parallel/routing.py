"""Which key partition each delta row belongs to, a batch's deltas split by partition, and the partitions' outputs
joined."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from misa.state.codec import normalize_float_keys
from prefetch.sketch import hash_keys

KeysOf = Callable[[pa.Table], Sequence[pa.Array | pa.ChunkedArray]]


@dataclass(frozen=True)
class KeyColumns:
    """Reads a table's key columns, the values that pick each row's partition. A plain value: Spark's tasks get
    it pickled on their own, without the operator (whose state another thread changes meanwhile) and its state."""

    columns: tuple[str, ...]

    def __call__(self, table: pa.Table) -> list[pa.Array | pa.ChunkedArray]:
        return [table[c] for c in self.columns]


@dataclass(frozen=True)
class EitherSideKey:
    """Reads the key of a row that is one of two sides (struct columns ``left`` and ``right``, one of them set):
    the left's field ``left_key``, else the right's field ``right_key``."""

    left: str
    left_key: str
    right: str
    right_key: str

    def __call__(self, table: pa.Table) -> list[pa.Array | pa.ChunkedArray]:
        left = pc.struct_field(table[self.left].combine_chunks(), self.left_key)
        right = pc.struct_field(table[self.right].combine_chunks(), self.right_key)
        return [pc.coalesce(left, right.cast(left.type))]


def partition_of_rows(keys: Sequence[pa.Array | pa.ChunkedArray], rows: int, partitions: int) -> np.ndarray:
    """The partition (0 .. ``partitions`` - 1) of each of ``rows`` rows from the values of its key columns ``keys``:
    a hash that is the same in every process, over keys normalized as Spark compares them (-0.0 is 0.0, one NaN);
    no key columns put every row in partition 0."""
    if not keys:
        return np.zeros(rows, np.int64)
    names = [f"k{i}" for i in range(len(keys))]
    normal = normalize_float_keys(pa.table(dict(zip(names, keys))), names)
    hashes = hash_keys([normal[n] for n in names])
    return (hashes % np.uint64(partitions)).astype(np.int64)


def split(deltas: pa.Table, partition: np.ndarray, partitions: int) -> list[pa.Table]:
    """``deltas`` as one table per partition (``partition``: each row's), rows kept in their order in each."""
    order = np.argsort(partition, kind="stable")
    bounds = np.searchsorted(partition[order], np.arange(partitions + 1))
    ordered = deltas.take(pa.array(order)) if len(order) else deltas
    return [ordered.slice(int(bounds[p]), int(bounds[p + 1] - bounds[p])) for p in range(partitions)]


def concatenated(outputs: list[pa.Table]) -> pa.Table:
    """The partitions' outputs as one table, in partition order (an output without columns has no rows)."""
    rows = [t for t in outputs if t.num_columns]
    return pa.concat_tables([t.cast(rows[0].schema) for t in rows]) if rows else outputs[0]
