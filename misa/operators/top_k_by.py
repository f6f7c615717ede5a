"""``max_by(x, y, k)`` / ``min_by(x, y, k)``: the values of the ``k`` rows of the greatest (least) orderings, as
Spark's ``MaxMinByK`` keeps them.

Spark keeps a heap of ``k`` slots: a row enters while a slot is free, later only when its ordering is strictly better
than the heap's worst (its root), taking the root's slot; a group's stored heap takes the batch's rows in turn (the
stored one first, as Spark's state restore gives them), and the result is the slots sorted by ordering (ties in slot
order). A state here is that heap: ``[values, orderings, heap]`` (``heap``: slot numbers, the root first). A batch's
partial is Spark's own ``max_by`` (``min_by``) of its rows, each value with its ordering; misa's heap takes them in
their order. Rows of a null ordering are skipped; Spark's order: NaN above every double, -0.0 equal to 0.0. Ties at
the ``k``-th place among one batch's rows can keep another row than Spark's, whose choice follows its partial heaps'
slots (Spark documents the function as non-deterministic on ties).
"""

from __future__ import annotations

from typing import Any, Callable

from pyspark.sql import Column
from pyspark.sql import functions as F

from misa.operators.extremum_by import spark_rank

TOP_K_FUNCTIONS = ("max_by_k", "min_by_k")
State = list[list[Any]]  # [values, orderings, heap]


def top_k_partial(function: str, value: Column, ordering: Column, k: int) -> Column:
    """A group of rows' partial: Spark's own top ``k`` of the group, each as ``{v: value, o: ordering}``."""
    pair = F.struct(value.alias("v"), ordering.alias("o"))
    return (F.max_by if function == "max_by_k" else F.min_by)(pair, ordering, k)


def heap_of(function: str, pairs: list[dict[str, Any]] | None, k: int) -> State:
    """The heap of a batch's partial (its pairs inserted in order)."""
    return merge_heaps(function, [[], [], []], [[p["v"] for p in pairs or []], [p["o"] for p in pairs or []], []], k)


def merge_heaps(function: str, stored: State, batch: State, k: int) -> State:
    """``stored``'s heap taking ``batch``'s rows in its heap order (a partial's: in its order)."""
    values, orderings, heap = list(stored[0]), list(stored[1]), list(stored[2])
    worse = _worse(function)
    order = batch[2] or range(len(batch[0]))
    for slot in order:
        if batch[1][slot] is not None:
            _insert(batch[0][slot], batch[1][slot], k, values, orderings, heap, worse)
    return [values, orderings, heap]


def top_k_result(function: str, state: State) -> list[Any]:
    """The values by ordering, the best first (a stable sort: equal orderings in slot order, as Spark's)."""
    values, orderings, _ = state
    slots = sorted(range(len(values)), key=lambda s: spark_rank(orderings[s]), reverse=function == "max_by_k")
    return [values[s] for s in slots]


def _worse(function: str) -> Callable[[Any, Any], int]:
    """The heap's comparison: negative when ``a`` is worse than ``b`` (max_by: less; min_by: greater)."""

    def compare(a: Any, b: Any) -> int:
        x, y = spark_rank(a), spark_rank(b)
        sign = (x > y) - (x < y)
        return sign if function == "max_by_k" else -sign

    return compare


def _insert(value: Any, ordering: Any, k: int, values: list, orderings: list, heap: list, worse: Callable) -> None:
    """Spark's ``MaxMinByKHeap.insert``: into a free slot (sifted up), or over the root when strictly better."""
    if len(heap) < k:
        values.append(value)
        orderings.append(ordering)
        heap.append(len(values) - 1)
        _sift_up(heap, len(heap) - 1, orderings, worse)
    elif worse(ordering, orderings[heap[0]]) > 0:
        values[heap[0]], orderings[heap[0]] = value, ordering
        _sift_down(heap, orderings, worse)


def _sift_up(heap: list, position: int, orderings: list, worse: Callable) -> None:
    while position > 0:
        parent = (position - 1) // 2
        if worse(orderings[heap[position]], orderings[heap[parent]]) >= 0:
            return
        heap[position], heap[parent] = heap[parent], heap[position]
        position = parent


def _sift_down(heap: list, orderings: list, worse: Callable) -> None:
    position = 0
    while 2 * position + 1 < len(heap):
        left, right = 2 * position + 1, 2 * position + 2
        preferred = left
        if right < len(heap) and worse(orderings[heap[right]], orderings[heap[left]]) < 0:
            preferred = right
        if worse(orderings[heap[position]], orderings[heap[preferred]]) <= 0:
            return
        heap[position], heap[preferred] = heap[preferred], heap[position]
        position = preferred
