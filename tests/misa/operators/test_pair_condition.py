"""A join condition on pairs of rows in Arrow: SQL's nulls (a null condition is no match), time bounds."""

from __future__ import annotations

import pickle

import pyarrow as pa

from misa.operators.pair_condition import Call, Constant, Field, holds

TS = pa.timestamp("us", tz="UTC")


def sides(left: list, right: list, type_: pa.DataType = TS) -> tuple[pa.Table, pa.Table]:
    return pa.table({"f0": pa.array(left, type_)}), pa.table({"f0": pa.array(right, type_)})


def test_a_time_bound_with_an_interval_and_nulls():
    """``r.t BETWEEN l.t AND l.t + 60 s``: a null time matches nothing."""
    minute = Call("Add", (Field(0, 0), Constant(60_000_000, pa.duration("us"))))
    bound = Call(
        "And", (Call("GreaterThanOrEqual", (Field(1, 0), Field(0, 0))), Call("LessThanOrEqual", (Field(1, 0), minute)))
    )
    s = 1_000_000
    rows = sides([10 * s, 10 * s, None, 10 * s], [15 * s, 71 * s, 15 * s, None])
    assert holds(bound, rows).tolist() == [True, False, False, False]


def test_or_and_not_are_sqls():
    """NULL OR TRUE is true; NOT NULL is null (no match); a constant condition holds for every pair or none."""
    rows = sides([1, None], [2, 2], pa.int64())
    either = Call(
        "Or", (Call("LessThan", (Field(0, 0), Field(1, 0))), Call("EqualTo", (Field(1, 0), Constant(2, pa.int64()))))
    )
    assert holds(either, rows).tolist() == [True, True]
    assert holds(Call("Not", (Call("LessThan", (Field(0, 0), Field(1, 0))),)), rows).tolist() == [False, False]
    assert holds(Call("EqualNullSafe", (Field(0, 0), Constant(None, pa.int64()))), rows).tolist() == [False, True]
    assert holds(Constant(True, pa.bool_()), rows).tolist() == [True, True]


def test_a_condition_pickles():
    """Worker processes get the operator, its condition with it."""
    condition = Call("Cast", (Field(0, 0), Constant(None, pa.float64())))
    assert pickle.loads(pickle.dumps(condition)) == condition
