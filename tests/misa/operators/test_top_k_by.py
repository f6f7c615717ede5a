"""max_by(x, y, k) / min_by(x, y, k) as Spark's MaxMinByK keeps them across batches (misa.operators.top_k_by): a
stored heap takes a batch's rows only when strictly better than its worst, the result sorted with ties in slot order.

The expected values are Spark 4.3's, from a streaming query (complete output, one file per batch) over batches
``a:5 b:5 e:1``, ``c:5 d:5 f:9``, ``g:5``: ``max_by(x, y, 2)`` gave ``[f, b]``, ``min_by(x, y, 3)`` ``[e, a, b]``;
and from a batch query over one partition for the NaN, -0.0, null and short cases."""

from __future__ import annotations

import math

from misa.operators.top_k_by import heap_of, merge_heaps, top_k_result


def _pairs(*rows: tuple) -> list[dict]:
    return [{"v": v, "o": o} for v, o in rows]


def _run(function: str, k: int, *batches: list[dict]) -> list:
    state = [[], [], []]
    for batch in batches:
        state = merge_heaps(function, state, heap_of(function, batch, k), k)
    return top_k_result(function, state)


def test_ties_across_batches_keep_the_stored_rows_as_sparks_streaming_query():
    # each batch's partial as Spark's own max_by / min_by of its rows gives it (its top k, best first)
    top = [_pairs(("a", 5), ("b", 5)), _pairs(("f", 9), ("c", 5)), _pairs(("g", 5))]
    assert _run("max_by_k", 2, *top) == ["f", "b"]
    low = [_pairs(("e", 1), ("a", 5), ("b", 5)), _pairs(("c", 5), ("d", 5), ("f", 9)), _pairs(("g", 5))]
    assert _run("min_by_k", 3, *low) == ["e", "a", "b"]


def test_nan_is_the_greatest_ordering_minus_zero_equals_zero_and_null_orderings_are_skipped():
    rows = _pairs(("zero", 0.0), ("nan", math.nan), ("low", -1.0), ("none", None), ("minus", -0.0))
    assert _run("max_by_k", 2, rows) == ["nan", "zero"]  # -0.0 ties 0.0: the stored one stays
    assert _run("min_by_k", 4, rows) == ["low", "zero", "minus", "nan"]


def test_a_value_may_be_null_and_fewer_rows_than_k_give_them_all():
    assert _run("max_by_k", 5, _pairs((None, 3), ("x", 7))) == ["x", None]
    assert _run("max_by_k", 2, []) == []
