"""Spark's left outer, right outer, full outer and left semi joins of two streams on misa's state.

:class:`OuterStreamJoin` is :class:`~misa.operators.stream_join.StreamJoin` (its input, state watermarks, eviction
timers and output columns) with Spark's ``StreamingSymmetricHashJoinExec`` for these join types, batch by batch:

* a pair matches when it has equal keys and the rest of the condition holds (``condition``, evaluated here on the
  pairs, :mod:`~misa.operators.pair_condition`); each stored row carries whether it has matched yet;
* the batch's left rows meet the stored right rows, then are stored (a left semi join's left row that matched is
  output once, alone, and not stored); its right rows meet the stored left rows (this batch's too; a left semi
  join's left rows that matched before are skipped and each matched one is output once), then are stored unless
  their side's state watermark evicts them in this batch, which an outer side's unmatched row it stores all the
  same;
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
        result = OperatorResult(self._empty())
        evict, keys, (left, right) = self._begin(deltas, result)
        stored_left, stored_right = self._read(state, keys)
        result.state_reads = 2 * len(keys)
        semi = self.join_type == "left_semi"
        left_found, right_hit, first = self._match(left, stored_right, 0)
        pairs = [first]
        left, right_state = _flagged(left, left_found), _flagged(stored_right, right_hit)
        if semi:  # a left row that matched comes out once and is not stored
            pairs = [(left[0].filter(pa.array(left_found)),) * 2]
            left = _subset(left, ~left_found)
        every_left = _concat(stored_left, left)
        right_found, left_hit, right_pairs = self._match(right, every_left, 1, skip_matched=semi)
        if semi:
            pairs.append((every_left[0].take(pa.array(np.unique(left_hit))),) * 2)
        else:
            pairs.append(right_pairs)
        every_left, right = _flagged(every_left, left_hit), _flagged(right, right_found)
        bounds = self._bounds(evict)
        if bounds[1] is not None:  # a right row its bound evicts now: stored only if an outer side's and unmatched
            right = _subset(right, _after(right[0][TIME], bounds[1]) | (self.emitting[1] & ~right_found))
        every_right = _concat(right_state, right)
        for index, (stored, new, every) in enumerate(
            ((stored_left, left, every_left), (stored_right, right, every_right))
        ):
            touched = _changed(stored, every, new)
            put_lists(state, JOIN_ROWS + SIDE_BYTES[index], self._records[index], keys, every, touched)
            if bounds[index] is not None:
                self._set_timers(state, index, keys, stored, new)
        result.output = self._output(pairs + self._evict(state, bounds))
        return result

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
