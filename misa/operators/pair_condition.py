"""A join condition evaluated on pairs of rows in Arrow, with SQL's nulls: an outer or semi stream join's matches.

A condition is a tree of :class:`Field` (a column of the left or right row), :class:`Constant` and :class:`Call`
(a function of :data:`FUNCTIONS` on its arguments). :func:`holds` gives, per pair, whether it is true (a null is
not). Plain data, so an operator holding one pickles to worker processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class Field:
    """The ``index``-th field of the ``side``'s row (0 left, 1 right)."""

    side: int
    index: int


@dataclass(frozen=True)
class Constant:
    value: Any
    type: pa.DataType


@dataclass(frozen=True)
class Call:
    function: str
    args: tuple[Condition, ...]


Condition = Field | Constant | Call

FUNCTIONS: dict[str, Callable[..., Any]] = {
    "EqualTo": pc.equal,
    "LessThan": pc.less,
    "LessThanOrEqual": pc.less_equal,
    "GreaterThan": pc.greater,
    "GreaterThanOrEqual": pc.greater_equal,
    "And": pc.and_kleene,
    "Or": pc.or_kleene,
    "Not": pc.invert,
    "IsNull": pc.is_null,
    "IsNotNull": pc.is_valid,
    "Add": pc.add_checked,
    "Subtract": pc.subtract_checked,
    "Multiply": pc.multiply_checked,
    "UnaryMinus": pc.negate_checked,
    "EqualNullSafe": lambda a, b: pc.fill_null(pc.equal(a, b), pc.and_(pc.is_null(a), pc.is_null(b))),
}


def holds(condition: Condition, rows: tuple[pa.Table, pa.Table]) -> np.ndarray:
    """Per pair of aligned ``rows`` (each side's fields named ``f0, f1, ...``), whether ``condition`` is true."""
    value = _evaluate(condition, rows)
    if isinstance(value, pa.Scalar):
        return np.full(rows[0].num_rows, bool(value.as_py()))
    return pc.fill_null(value, False).to_numpy(zero_copy_only=False).astype(bool)


def _evaluate(condition: Condition, rows: tuple[pa.Table, pa.Table]) -> Any:
    if isinstance(condition, Field):
        return rows[condition.side][f"f{condition.index}"]
    if isinstance(condition, Constant):
        return pa.scalar(condition.value, condition.type)
    args = [_evaluate(arg, rows) for arg in condition.args]
    if condition.function == "Cast":
        return pc.cast(args[0], args[1].type)  # the second argument: a null of the type cast to
    return FUNCTIONS[condition.function](*args)
