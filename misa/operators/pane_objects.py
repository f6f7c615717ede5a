"""Object aggregates over sliding windows: their states kept per pane and combined into each window's.

A sliding window's value is combined from its panes (:mod:`misa.operators.panes`); an object aggregate
(:mod:`misa.operators.object_aggs`) is kept per pane in a state whose panes combine into the state of the window's
rows, as Spark computes it over them:

* ``min`` / ``max`` of strings, booleans and decimals, ``sum`` / ``avg`` of decimals (exact sums; a sum past its
  precision stays an overflow), ``approx_count_distinct`` (its registers' maximum): whatever the panes' order;
* ``max_by`` / ``min_by``: the value at the greatest (least) ordering. On a tie Spark takes the later row (its
  update and its merge of the stored state with a batch both keep the earlier one only when strictly greater), so a
  pane's state carries the number of the batch that set it: across panes the later batch's wins a tie, and within
  one batch the later pane's;
* ``first`` / ``last`` (and ``any_value``), ``collect_list`` / ``collect_set``: of the window's rows in Spark's
  reading order, each pane's values stamped with their batch and place in it (:mod:`misa.operators.pane_order`).

Every object aggregate misa computes runs over sliding windows.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from misa.operators.extremum_by import BY_FUNCTIONS, merge_by, same_ordering
from misa.operators.object_aggs import ObjectValues
from misa.operators.pane_order import ORDER_FUNCTIONS, delta_items, merge_items, plain_state

BY, ORDER = "by", "order"  # the kinds of pane states kept apart from ObjectValues' own


class PaneObjects:
    """The object states of panes (one list of the aggregates' states per pane), merged as :class:`ObjectValues`
    merges them; max_by's and min_by's stamped with their batch, first's, last's and collect's as stamped items."""

    def __init__(self, values: ObjectValues):
        self.values = values
        self._kinds = [
            BY if a.function in BY_FUNCTIONS else ORDER if a.function in ORDER_FUNCTIONS else "" for a in values.aggs
        ]

    def delta_states(self, deltas: pa.Table, batch: int) -> list[list[Any]]:
        """A batch's pane states (:meth:`stamped`), first's, last's and collect's places read from ``_r{i}``."""
        aggs = self.values.aggs
        places = {i: deltas[f"_r{a.index}"].to_pylist() for i, a in enumerate(aggs) if self._kinds[i] == ORDER}
        return self.stamped(self.values.delta_states(deltas), batch, places)

    def stamped(
        self, states: list[list[Any]], batch: int, places: dict[int, list[Any]] | None = None
    ) -> list[list[Any]]:
        """A batch's pane states as :class:`ObjectValues` gives them, stamped with ``batch``: max_by's and min_by's
        ``[value, ordering]`` as ``[value, ordering, batch]``, first's, last's and collect's as their items (with
        their places: ``places[i]`` per pane, of aggregate ``i``)."""
        places = places or {}
        return [
            [self._stamped(i, s, places[i][row] if i in places else None, batch) for i, s in enumerate(states[row])]
            for row in range(len(states))
        ]

    def _stamped(self, i: int, state: Any, place: Any, batch: int) -> Any:
        kind = self._kinds[i]
        if kind == BY:
            return [*state, batch]
        if kind == ORDER:
            return delta_items(self.values.aggs[i].function, state[0], place, batch)
        return state

    def plain(self, states: list[list[Any]]) -> list[list[Any]]:
        """Window states as :meth:`ObjectValues.columns` reads them."""
        return [[self._plain(i, s) for i, s in enumerate(row)] for row in states]

    def _plain(self, i: int, state: Any) -> Any:
        kind = self._kinds[i]
        if kind == BY:
            return state[:2]
        if kind == ORDER:
            return plain_state(self.values.aggs[i].function, state)
        return state

    def merge_one(self, a: list[Any], b: list[Any]) -> list[Any]:
        """Pane (or window) states ``a`` and ``b``: ``b`` of the later batch, or of the later pane."""
        merged = []
        for agg, kind, x, y in zip(self.values.aggs, self._kinds, a, b):
            if kind == BY:
                merged.append(_merge_stamped(agg.function, x, y))
            elif kind == ORDER:
                merged.append(merge_items(agg.function, agg.name, x, y, self.values.limit))
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
