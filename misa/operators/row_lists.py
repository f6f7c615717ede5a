"""Lists of rows per state key, as columns: pairs of rows of the same key, and appending a batch's rows to the stored
lists of their keys (the joins' state; values packed by :class:`misa.state.record_codec.RecordCodec`)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

from misa.state.keys import prefixed
from misa.state.record_codec import RecordCodec
from misa.state.view import StateView


def pair_indices(a_group: np.ndarray, b_group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of rows of ``a`` and ``b`` in the same group, as two aligned arrays of row indices (``a``'s rows
    in order, each one's partners in ``b``'s order)."""
    order = np.argsort(b_group, kind="stable")
    lo = np.searchsorted(b_group[order], a_group, "left")
    counts = np.searchsorted(b_group[order], a_group, "right") - lo
    a_rows = np.repeat(np.arange(len(a_group)), counts)
    b_rows = order[np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))]
    return a_rows.astype(np.int64), b_rows.astype(np.int64)


def matches(a: pa.Table, a_group: np.ndarray, b: pa.Table, b_group: np.ndarray) -> tuple[pa.Table, pa.Table]:
    """Every pair of rows of ``a`` and ``b`` in the same group, as two aligned tables (:func:`pair_indices`)."""
    a_rows, b_rows = pair_indices(a_group, b_group)
    return a.take(pa.array(a_rows, pa.int64())), b.take(pa.array(b_rows, pa.int64()))


def append_rows(
    state: StateView,
    prefix: bytes,
    records: RecordCodec,
    keys: Sequence[bytes],
    stored: tuple[pa.Table, np.ndarray],
    new: tuple[pa.Table, np.ndarray],
) -> None:
    """Write the lists of the keys with new rows (``new``: rows and each one's index in ``keys``): their ``stored``
    rows, then the new ones, in order."""
    (old, old_group), (rows, group) = stored, new
    if not rows.num_rows:
        return
    rows = pa.concat_tables([old, rows.cast(old.schema)])
    put_lists(state, prefix, records, keys, (rows, np.concatenate([old_group, group])), np.unique(new[1]))


def put_lists(
    state: StateView,
    prefix: bytes,
    records: RecordCodec,
    keys: Sequence[bytes],
    rows: tuple[pa.Table, np.ndarray],
    touched: np.ndarray,
) -> None:
    """Write the whole lists of the ``touched`` keys (indices in ``keys``) from ``rows`` (rows and each one's index
    in ``keys``), in order; a touched key without rows is deleted."""
    table, group = rows
    if not len(touched):
        return
    keep = np.isin(group, touched)
    table, group = table.filter(pa.array(keep)), group[keep]
    order = np.argsort(group, kind="stable")
    counts = np.bincount(group, minlength=len(keys))[touched]
    values = records.encode(table.take(pa.array(order, pa.int64())), counts)
    state.put_many(prefixed(prefix, [keys[g] for g in touched]), [v if c else None for v, c in zip(values, counts)])
