"""Aggregate states (AggStates): exact int64 values, Spark's overflow and NaN order, whatever the fold order."""

from __future__ import annotations

import math

import numpy as np
import pytest

from misa.state.codec import AggregateOverflowError, AggStates, Fold

BIG = 2**53 + 1  # the first integer a double cannot hold
LONG_MAX, LONG_MIN = 2**63 - 1, -(2**63)


def int_states(values: list[int], op: str, ansi: bool = False) -> tuple[AggStates, np.ndarray]:
    """One integer aggregate over ``values``: one state row per value."""
    aggs = AggStates((Fold("v", op, floating=False),), ansi)
    return aggs, np.array([[v, 1] for v in values], np.int64)


def float_states(values: list[float], op: str) -> tuple[AggStates, np.ndarray]:
    """One floating aggregate over ``values``: one state row per value."""
    aggs = AggStates((Fold("v", op, floating=True),))
    cells = np.array(values, np.float64).view(np.int64)
    return aggs, np.column_stack([cells, np.ones(len(values), np.int64)])


def fold_all(aggs: AggStates, states: np.ndarray) -> np.ndarray:
    """``states`` folded one row at a time, as batches merge them into the stored state."""
    acc = aggs.identity(1)
    for row in states:
        acc = aggs.merge(acc, row[None, :])
    return acc


@pytest.mark.parametrize("op,expected", [("sum", 2 * BIG + 1), ("min", 1), ("max", BIG)])
def test_integers_stay_exact_past_2_to_the_53(op, expected):
    aggs, states = int_states([BIG, 1, BIG], op)
    for folded in (aggs.reduce(states, np.array([0])), fold_all(aggs, states)):
        assert aggs.value(folded, 0).tolist() == [expected] and aggs.count(folded, 0).tolist() == [3]


def test_integer_sums_wrap_around_as_sparks_do_without_ansi():
    aggs, states = int_states([LONG_MAX, 1, LONG_MAX, 5], "sum")
    wrapped = (LONG_MAX + 1 + LONG_MAX + 5 + 2**63) % 2**64 - 2**63
    assert aggs.value(fold_all(aggs, states), 0).tolist() == [wrapped]
    assert aggs.value(aggs.reduce(states, np.array([0])), 0).tolist() == [wrapped]


@pytest.mark.parametrize("values", [[LONG_MAX, 1], [LONG_MIN, -1], [2**62, 2**62], [LONG_MIN, LONG_MIN]])
def test_integer_sums_past_the_long_range_raise_under_ansi(values):
    aggs, states = int_states(values, "sum", ansi=True)
    with pytest.raises(AggregateOverflowError, match=r"ARITHMETIC_OVERFLOW.*sum v.*spark.sql.ansi.enabled"):
        aggs.merge(states[:1], states[1:])
    with pytest.raises(AggregateOverflowError):
        aggs.reduce(states, np.array([0]))


def test_integer_sums_at_the_long_range_bounds_do_not_raise_under_ansi():
    aggs, states = int_states([LONG_MAX, -1, 1, LONG_MIN, LONG_MAX], "sum", ansi=True)
    assert aggs.value(aggs.reduce(states, np.array([0, 3])), 0).tolist() == [LONG_MAX, -1]


@pytest.mark.parametrize(
    "values,op,expected",
    [
        ([np.nan, 3.0, 1.0], "min", 1.0),  # NaN ranks above every double
        ([3.0, np.nan, 1.0], "min", 1.0),
        ([np.nan, np.nan], "min", np.nan),
        ([np.inf, np.nan], "min", np.inf),
        ([1.0, np.nan, 3.0], "max", np.nan),
        ([-np.inf, -np.inf], "max", -np.inf),
        ([np.nan, -np.inf], "max", np.nan),
    ],
)
def test_nan_is_ordered_as_spark_orders_it_in_every_split(values, op, expected):
    aggs, states = float_states(values, op)
    splits = [np.array([0]), *[np.array([0, k]) for k in range(1, len(values))]]
    for starts in splits:  # each split folded per part, then the parts merged
        parts = aggs.reduce(states, starts)
        got = aggs.value(fold_all(aggs, parts), 0)[0]
        assert got == expected or (math.isnan(got) and math.isnan(expected)), (starts, got)


def test_states_round_trip_and_absent_rows_are_identities():
    aggs = AggStates((Fold("s", "sum", False), Fold("lo", "min", True), Fold("hi", "max", False)))
    states = np.array([[BIG, 2, np.array(-0.5).view(np.int64), 1, LONG_MIN, 3]], np.int64)
    decoded = aggs.decode([aggs.encode(states)[0], None])
    assert decoded[0].tolist() == states[0].tolist()
    assert aggs.merge(decoded[1:], states).tolist() == states.tolist()  # an absent row folds to nothing
    assert [aggs.count(decoded, i).tolist()[1] for i in range(3)] == [0, 0, 0]
