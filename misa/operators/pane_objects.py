"""Object aggregates over sliding windows: their states kept per pane and combined into each window's.

A sliding window's value is combined from its panes (:mod:`misa.operators.panes`); an object aggregate
(:mod:`misa.operators.object_aggs`) can be kept per pane when combining its panes' states gives the state of the
window's rows whatever the panes' order, as Spark computes it over the window's rows:

* ``min`` / ``max`` of strings, booleans and decimals, ``sum`` / ``avg`` of decimals (exact sums; a sum past its
  precision stays an overflow), ``approx_count_distinct`` (its registers' maximum);
* ``max_by`` / ``min_by``: the value at the greatest (least) ordering. On a tie Spark takes the later row (its
  update and its merge of the stored state with a batch both keep the earlier one only when strictly greater), so a
  pane's state carries the number of the batch that set it (:meth:`PaneObjects.stamped`): across panes the later
  batch's wins a tie, and within one batch the later pane's.

The rest are refused over sliding windows (:func:`pane_refusal`): first, last and any_value are of the window's
first (last) row in Spark's reading order, and collect_list / collect_set of its rows in that order, which panes
lose.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from misa.operators.extremum_by import BY_FUNCTIONS, merge_by, same_ordering
from misa.operators.object_aggs import ObjectValues, object_pane_reason

PANE_FUNCTIONS = ("min", "max", "sum", "avg", "approx_count_distinct", *BY_FUNCTIONS)


def pane_refusal(function: str) -> str | None:
    """Why an object aggregate ``function`` does not run over sliding windows (None: it does)."""
    return None if function in PANE_FUNCTIONS else object_pane_reason(function)


class PaneObjects:
    """The object states of panes (one list of the aggregates' states per pane), merged as :class:`ObjectValues`
    merges them, max_by's and min_by's stamped with their batch."""

    def __init__(self, values: ObjectValues):
        self.values = values
        self._by = [a.function in BY_FUNCTIONS for a in values.aggs]

    def stamped(self, states: list[list[Any]], batch: int) -> list[list[Any]]:
        """A batch's pane states, max_by's and min_by's ``[value, ordering]`` as ``[value, ordering, batch]``."""
        return [[[*s, batch] if by else s for s, by in zip(row, self._by)] for row in states]

    def plain(self, states: list[list[Any]]) -> list[list[Any]]:
        """Window states without their stamps, as :meth:`ObjectValues.columns` reads them."""
        return [[s[:2] if by else s for s, by in zip(row, self._by)] for row in states]

    def merge_one(self, a: list[Any], b: list[Any]) -> list[Any]:
        """Pane (or window) states ``a`` and ``b``: ``b`` of the later batch, or of the later pane."""
        merged = []
        for agg, by, x, y in zip(self.values.aggs, self._by, a, b):
            if by:
                merged.append(_merge_stamped(agg.function, x, y))
            else:
                merged.append(agg.merge(x, y, self.values.limit))
        return merged

    def fold(self, states: Sequence[list[Any]], starts: np.ndarray) -> list[list[Any]]:
        """The states of the segments of ``states`` beginning at ``starts`` (each non-empty), in order."""
        ends = [*starts.tolist()[1:], len(states)]
        folded = []
        for begin, end in zip(starts.tolist(), ends):
            state = states[begin]
            for row in range(begin + 1, end):
                state = self.merge_one(state, states[row])
            folded.append(state)
        return folded


def _merge_stamped(function: str, a: list[Any], b: list[Any]) -> list[Any]:
    """max_by's (min_by's) stamped states: the greater (lesser) ordering; on a tie, the later batch's (``b`` when of
    the same batch)."""
    if a[1] is not None and b[1] is not None and same_ordering(a[1], b[1]):
        return a if a[2] > b[2] else b
    return merge_by(function, a, b)
