"""An outer or semi stream-stream join's non-equi condition (Spark's expressions) as a
:mod:`misa.operators.pair_condition` tree, or a refusal naming the part misa does not evaluate."""

from __future__ import annotations

from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_type

from misa.operators.pair_condition import FUNCTIONS, Call, Condition, Constant, Field
from misa.query.plan import Expr, PlanNode, expr_of
from misa.query.translation import refused

REPLACED = ("DatetimeSub",)  # Spark's RuntimeReplaceable forms whose replacement is evaluated
TIME_PLUS = ("TimestampAddInterval", "TimeAdd")  # a timestamp plus a day-time interval
TYPES = (T.NumericType, T.TimestampType, T.TimestampNTZType, T.DateType, T.DayTimeIntervalType, T.BooleanType)
TYPES += (T.StringType, T.NullType)


def pair_condition(join: PlanNode, conjuncts: list[Expr], fields: dict[int, tuple[int, int]]) -> Condition | None:
    """The conjunction of ``conjuncts`` (``fields``: an attribute's expression id -> its side and position)."""
    found: Condition | None = None
    for conjunct in conjuncts:
        sides = {fields[e.attr.expr_id][0] for e in conjunct.walk() if e.attr is not None}
        if sides != {0, 1}:
            raise refused(
                join,
                f"its condition's {conjunct.sql} reads one side only, which Spark tests on each row before an "
                "outer or semi join",
                "a filter of that side before the join (or the conjunct reading both sides)",
            )
        tree = _tree(join, conjunct, fields)
        found = tree if found is None else Call("And", (found, tree))
    return found


def _tree(join: PlanNode, expr: Expr, fields: dict[int, tuple[int, int]]) -> Condition:
    if expr.kind in REPLACED:
        return _tree(join, expr_of(expr.jvm.replacement()), fields)
    if expr.kind == "Between":  # its replacement shares the input in a With: evaluated as the two comparisons
        value, low, high = (
            _tree(join, expr_of(e), fields) for e in (expr.jvm.input(), expr.jvm.lower(), expr.jvm.upper())
        )
        return Call("And", (Call("GreaterThanOrEqual", (value, low)), Call("LessThanOrEqual", (value, high))))
    if expr.dtype is not None and not isinstance(expr.dtype, TYPES):
        raise _unknown(join, expr, f"of type {expr.dtype.simpleString()}")
    if expr.attr is not None:
        return Field(*fields[expr.attr.expr_id])
    if expr.kind == "Literal":
        return Constant(expr.value, _arrow(join, expr))
    args = tuple(_tree(join, child, fields) for child in expr.children)
    if expr.kind == "Cast":
        if expr.dtype == expr.children[0].dtype:
            return args[0]
        if not isinstance(expr.dtype, T.NumericType) or not isinstance(expr.children[0].dtype, T.NumericType):
            raise _unknown(join, expr, "a cast between types other than numbers")
        return Call("Cast", (args[0], Constant(None, _arrow(join, expr))))
    if expr.kind in TIME_PLUS and isinstance(expr.children[1].dtype, T.DayTimeIntervalType):
        return Call("Add", args[:2])
    if expr.kind in FUNCTIONS and not (expr.kind in ("Add", "Subtract") and _calendar(expr)):
        return Call(expr.kind, args)
    raise _unknown(join, expr, f"({expr.kind})")


def _calendar(expr: Expr) -> bool:
    return any(isinstance(child.dtype, T.CalendarIntervalType) for child in expr.children)


def _arrow(join: PlanNode, expr: Expr):
    assert expr.dtype is not None
    if isinstance(expr.dtype, T.NullType):
        return to_arrow_type(T.BooleanType())
    return to_arrow_type(expr.dtype, timezone="UTC")


def _unknown(join: PlanNode, expr: Expr, what: str):
    return refused(
        join,
        f"misa evaluates an outer or semi join's condition itself and does not evaluate {expr.sql} {what}",
        "comparisons, AND, OR, NOT, IS [NOT] NULL, +, -, * of numbers and a timestamp plus or minus an interval",
    )
