"""Spark's left outer, right outer, full outer and left semi joins of two streams on misa's state.

:class:`OuterStreamJoin` is :class:`~misa.operators.stream_join.StreamJoin` (its input, state watermarks, eviction
timers and output columns) with Spark's ``StreamingSymmetricHashJoinExec`` for these join types, batch by batch:

* a pair matches when it has equal keys and the rest of the condition holds (``condition``, evaluated here on the
  pairs, :mod:`~misa.operators.pair_condition`); each stored row carries whether it has matched yet;
* the batch's left rows meet the stored right rows, then are stored; its right rows meet the stored left rows
  (this batch's too), then are stored unless their side's state watermark evicts them in this batch, which an outer
  side's unmatched row it stores all the same;
* a left semi join runs its right rows first (Spark 4.3, SPARK-55973): they meet the left rows stored by earlier
  batches (each one that matches for the first time is output once, alone), then are stored unless their state
  watermark evicts them in this batch; the left rows then meet the stored right rows (this batch's kept ones too),
  and one that matches is output once and not stored. A same-batch pair whose right row is evicted at once is thus
  no match, as in Spark;
* eviction (in batches with or without data) outputs the preserved sides' rows it evicts that never matched, with
  nulls for the other side's fields; a preserved side keeps rows with null keys (they match nothing but come out).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import types as T

from misa.operators.base import OperatorResult
from misa.operators.pair_condition import Condition, holds
from misa.operators.row_lists import pair_indices, put_lists
from misa.operators.stream_join import JOIN_ROWS, MATCHED, SIDE_BYTES, TIME, StreamJoin, _after
from misa.state.view import StateView

JOIN_TYPES = ("left_outer", "right_outer", "full_outer", "left_semi")
Rows = tuple[pa.Table, np.ndarray]  # stored-form rows and each one's key index
Stored = tuple[Rows, Rows, Rows]  # a side's stored rows, its new rows to store, and every row it keeps


@dataclass
class OuterStreamJoin(StreamJoin):
    """Spark's ``join_type`` join of two streams (see the module's docstring)."""

    join_type: str = "left_outer"
    condition: Condition | None = None  # the condition but the key equalities (None: true)

    def __post_init__(self) -> None:
        if self.join_type not in JOIN_TYPES:
            raise ValueError(f"join type {self.join_type!r}: one of {', '.join(JOIN_TYPES)}")
        super().__post_init__()

    @property
    def emitting(self) -> tuple[bool, bool]:
        return self.join_type in ("left_outer", "full_outer"), self.join_type in ("right_outer", "full_outer")

    @property
    def output_sides(self) -> tuple[int, ...]:
        return (0,) if self.join_type == "left_semi" else (0, 1)

    @property
    def flagged(self) -> bool:
        return True

    def signature(self, schema: T.StructType) -> dict[str, Any]:
        return super().signature(schema) | {"join_type": self.join_type}

    def apply(self, deltas: pa.Table, state: StateView) -> OperatorResult:
        """Match each side's rows with the other side's stored rows, store them with their matched flags, then
        evict, outputting the preserved sides' evicted rows that never matched."""
        if self.join_type == "left_semi":
            return self._apply_semi(deltas, state)
        result = OperatorResult(self._empty())
        evict, keys, (left, right) = self._begin(deltas, result)
        stored_left, stored_right = self._read(state, keys)
        result.state_reads = 2 * len(keys)
        left_found, right_hit, left_pairs = self._match(left, stored_right, 0)
        left, right_state = _flagged(left, left_found), _flagged(stored_right, right_hit)
        every_left = _concat(stored_left, left)
        right_found, left_hit, right_pairs = self._match(right, every_left, 1)
        every_left, right = _flagged(every_left, left_hit), _flagged(right, right_found)
        bounds = self._bounds(evict)
        if bounds[1] is not None:  # a right row its bound evicts now: stored only if an outer side's and unmatched
            right = _subset(right, _after(right[0][TIME], bounds[1]) | (self.emitting[1] & ~right_found))
        every_right = _concat(right_state, right)
        self._store(state, keys, bounds, ((stored_left, left, every_left), (stored_right, right, every_right)))
        result.output = self._output([left_pairs, right_pairs] + self._evict(state, bounds))
        return result

    def _apply_semi(self, deltas: pa.Table, state: StateView) -> OperatorResult:
        """A left semi join's batch, in Spark 4.3's order (SPARK-55973): the right rows first, then the left rows.

        The right rows meet the left rows stored by earlier batches: each of these that matches for the first time
        comes out once (flagged, it is not output again). The right rows are then stored, but those their state
        watermark evicts in this batch (Spark does not store them: this batch's left rows do not meet them). The left
        rows meet the stored right rows (this batch's too): one that matches comes out once and is not stored."""
        result = OperatorResult(self._empty())
        evict, keys, (left, right) = self._begin(deltas, result)
        stored_left, stored_right = self._read(state, keys)
        result.state_reads = 2 * len(keys)
        _, left_hit, _ = self._match(right, stored_left, 1, skip_matched=True)
        earlier = stored_left[0].take(pa.array(np.unique(left_hit), pa.int64()))
        every_left = _flagged(stored_left, left_hit)
        bounds = self._bounds(evict)
        if bounds[1] is not None:
            right = _subset(right, _after(right[0][TIME], bounds[1]))
        every_right = _concat(stored_right, right)
        left_found, _, _ = self._match(left, every_right, 0)
        now = left[0].filter(pa.array(left_found))
        left = _subset(left, ~left_found)
        every_left = _concat(every_left, left)
        self._store(state, keys, bounds, ((stored_left, left, every_left), (stored_right, right, every_right)))
        result.output = self._output([(earlier, earlier), (now, now)] + self._evict(state, bounds))
        return result

    def _store(
        self, state: StateView, keys: list[bytes], bounds: tuple[int | None, int | None], sides: tuple[Stored, Stored]
    ) -> None:
        """Write each side's lists whose rows changed and the timers of its new rows (``sides``: per side its stored
        rows, its new rows to store, and every row it keeps, the stored ones' flags updated, then the new ones)."""
        assert self._records is not None
        for index, (stored, new, every) in enumerate(sides):
            touched = _changed(stored, every, new)
            put_lists(state, JOIN_ROWS + SIDE_BYTES[index], self._records[index], keys, every, touched)
            if bounds[index] is not None:
                self._set_timers(state, index, keys, stored, new)

    def _match(
        self, rows: Rows, other: Rows, side: int, skip_matched: bool = False
    ) -> tuple[np.ndarray, np.ndarray, tuple[pa.Table, pa.Table]]:
        """Pairs of ``rows`` (of ``side``) with ``other``'s rows that match: which of ``rows`` found one, the indices
        of ``other``'s rows that did, and the pairs as (left, right) tables (``skip_matched``: ``other``'s rows
        matched before are left out)."""
        mine, theirs = pair_indices(rows[1], other[1])
        if skip_matched and len(theirs):
            fresh = ~other[0][MATCHED].to_numpy(zero_copy_only=False).astype(bool)[theirs]
            mine, theirs = mine[fresh], theirs[fresh]
        ordered = (rows[0].take(pa.array(mine)), other[0].take(pa.array(theirs)))
        pair = ordered if side == 0 else ordered[::-1]
        hit = holds(self.condition, pair) if self.condition is not None else np.ones(len(mine), bool)
        found = np.zeros(rows[0].num_rows, bool)
        found[mine[hit]] = True
        return found, theirs[hit], (pair[0].filter(pa.array(hit)), pair[1].filter(pa.array(hit)))


def _flagged(rows: Rows, hit: np.ndarray) -> Rows:
    """``rows`` with the matched flag set on those ``hit`` (a mask or indices)."""
    table, group = rows
    flags = table[MATCHED].to_numpy(zero_copy_only=False).astype(bool).copy()
    flags[hit] = True
    return table.set_column(table.schema.get_field_index(MATCHED), MATCHED, pa.array(flags)), group


def _subset(rows: Rows, mask: np.ndarray) -> Rows:
    return rows[0].filter(pa.array(mask)), rows[1][mask]


def _concat(a: Rows, b: Rows) -> Rows:
    return pa.concat_tables([a[0], b[0]]), np.concatenate([a[1], b[1]])


def _changed(stored: Rows, every: Rows, new: Rows) -> np.ndarray:
    """The keys whose rows changed: those with ``new`` rows or a row whose matched flag was set (``every``:
    ``stored``'s rows, flags updated, then ``new``'s)."""
    count = stored[0].num_rows
    was = stored[0][MATCHED].to_numpy(zero_copy_only=False).astype(bool)
    now = every[0][MATCHED].to_numpy(zero_copy_only=False).astype(bool)[:count]
    return np.unique(np.concatenate([stored[1][now != was], new[1]]))
