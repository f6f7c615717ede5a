"""first / last / collect_list / collect_set over sliding windows: each pane keeps its rows' values stamped with
their place in Spark's reading order, so that a window's value, combined from its panes, is of its rows in that order.

Spark expands each row into its windows and aggregates each window's rows in the order it reads them: a batch's
rows partition by partition, each partition's in order (its partial aggregates merged in partition order), and the
stored state before the batch (its merge of a group's state with the batch's). misa gives each row of a batch its
place as ``monotonically_increasing_id()`` (the partition, then the row in it: the same order), and keeps per pane
items ``(batch, place, value)`` in that order:

* first / last (any_value): the item of the first (last) row; ignoring nulls, of the first (last) non-null value;
* collect_list: the items of the non-null values;
* collect_set: the item of each distinct non-null value's first row (a window's set in first-seen order, as over
  tumbling windows), values as Spark's set keeps them: -0.0 as 0.0, every NaN one.

A window's items are its panes' merged in stamp order. The batch is misa's count of the aggregation's batches
(:class:`misa.operators.aggregation.Aggregation` keeps it with each version).
"""

from __future__ import annotations

import heapq
from typing import Any, Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F

from misa.operators.object_aggs import FIRST, LAST, check_collect_limit
from misa.operators.set_values import set_key, set_value

COLLECT = ("collect_list", "collect_set")
ORDER_FUNCTIONS = (*FIRST, *LAST, *COLLECT)
PLACE = "_misa_place"  # the column of a row's place in its batch (monotonically_increasing_id)
Item = tuple[int, int, Any]  # (batch, place, value)


def place_column() -> Column:
    """A row's place in Spark's reading order of its batch."""
    return F.monotonically_increasing_id()


def order_partial(function: str, column: Column, place: Column) -> list[Column]:
    """A pane's partial over a batch's rows: the value (collect: the non-null values, in Spark's order), then its
    place (collect: the places of those values, in the same order: both lists are of the same rows)."""
    if function in COLLECT:
        return [F.collect_list(column), F.collect_list(F.when(column.isNotNull(), place))]
    if function.endswith("_ignore_nulls"):
        place = F.when(column.isNotNull(), place)
    if function in FIRST:
        return [F.min_by(column, place), F.min(place)]
    return [F.max_by(column, place), F.max(place)]


def delta_items(function: str, value: Any, place: Any, batch: int) -> list[Item]:
    """The items of a pane's partial (:func:`order_partial`) in ``batch``, in stamp order."""
    if function in COLLECT:
        if len(value) != len(place):
            raise ValueError(f"{function}: {len(value)} values but {len(place)} places in a pane's partial")
        items = sorted(((batch, p, v) for p, v in zip(place, value)), key=_stamp)
        return _first_of_each(items) if function == "collect_set" else items
    return [] if place is None else [(batch, place, value)]


def merge_items(function: str, name: str, a: list[Item], b: list[Item], limit: int) -> list[Item]:
    """The items of two panes' (or windows') rows together, in stamp order."""
    if function in FIRST + LAST:
        both = a + b
        if not both:
            return []
        return [min(both, key=_stamp) if function in FIRST else max(both, key=_stamp)]
    merged = list(heapq.merge(a, b, key=_stamp))
    if function == "collect_set":
        merged = _first_of_each(merged)
    check_collect_limit(function, name, len(merged), limit)
    return merged


def plain_state(function: str, items: list[Item]) -> list[Any]:
    """The state :class:`misa.operators.object_aggs.ObjectAgg` reads of the items: ``[value, count]``."""
    if function in COLLECT:
        return [[v for _, _, v in items], len(items)]
    return [items[0][2] if items else None, len(items)]


def _stamp(item: Item) -> tuple[int, int]:
    return item[0], item[1]


def _first_of_each(items: Sequence[Item]) -> list[Item]:
    """Each distinct value's first item, its value as Spark's collect_set keeps it
    (:func:`~misa.operators.set_values.set_value`)."""
    seen: set[Any] = set()
    kept = []
    for batch, place, value in items:
        key = set_key(value)
        if key not in seen:
            seen.add(key)
            kept.append((batch, place, set_value(value)))
    return kept
