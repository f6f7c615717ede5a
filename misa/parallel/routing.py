"""Which key partition each delta row belongs to, a batch's deltas split by partition, and the partitions' outputs
joined."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

from misa.state.codec import normalize_float_keys
from prefetch.sketch import hash_keys


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
