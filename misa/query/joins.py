"""A stream-stream join of Spark's analyzed plan as misa's :class:`~misa.operators.stream_join.StreamJoin` (an inner
join) or :class:`~misa.operators.outer_join.OuterStreamJoin` (left, right or full outer, left semi).

The condition's equalities of a left and a right expression are the join's keys; everything else in it (the
event-time bounds, other predicates) filters an inner join's joined rows, with the steps above the join, and is
evaluated by the operator on pairs of rows for the other types (:mod:`misa.query.join_condition`). Each side's
event time, Spark's state watermarks of the condition (:func:`misa.query.plan.state_offset_ms`) and the columns
whose nulls Spark's optimizer filters below ``withWatermark`` (on the sides an outer join does not preserve) are
read here.
"""

from __future__ import annotations

from dataclasses import replace
from functools import reduce

from pyspark.sql import Column

from misa.operators.outer_join import OuterStreamJoin
from misa.operators.stream_join import JoinSide, StreamJoin
from misa.query.group_keys import key_column
from misa.query.join_condition import pair_condition
from misa.query.plan import Attr, Expr, PlanNode, column_of, state_offset_ms
from misa.query.translation import (
    JoinInput,
    OutputColumn,
    Translation,
    refused,
    watermark_nodes,
    watermarks,
)

NULL_INTOLERANT = {"EqualTo", "LessThan", "LessThanOrEqual", "GreaterThan", "GreaterThanOrEqual", "Add", "Subtract"}
NULL_INTOLERANT |= {"Multiply", "UnaryMinus", "Cast", "TimeAdd", "TimestampAddInterval", "DatetimeSub", "Not"}
JOIN_TYPES = {"Inner": "inner", "LeftOuter": "left_outer", "RightOuter": "right_outer", "FullOuter": "full_outer"}
JOIN_TYPES |= {"LeftSemi": "left_semi"}
PRESERVED = {"left_outer": (0,), "right_outer": (1,), "full_outer": (0, 1)}  # the sides whose unmatched rows come out


def translate_join(node: PlanNode, watermark_policy: str) -> Translation:
    """A join of two streams: the equalities of the two sides' columns in its condition become the keys of
    :class:`StreamJoin`; the rest of the condition (the event-time bounds, other predicates) filters an inner
    join's output, and is the pairs' condition of an outer or semi join's :class:`OuterStreamJoin`."""
    join_type = JOIN_TYPES.get(node.fields["join_type"])
    if join_type is None:
        raise refused(
            node,
            f"it is a {node.fields['join_type']} join: misa runs inner, left outer, right outer, full outer and "
            "left semi stream-stream joins",
            "one of these (how='inner', 'left_outer', 'right_outer', 'full_outer' or 'left_semi')",
        )
    preserved = PRESERVED.get(join_type, ())
    left, right = node.children
    sides = ({a.expr_id for a in left.output}, {a.expr_id for a in right.output})
    keys: list[tuple[Expr, Expr]] = []
    rest: list[Expr] = []
    for conjunct in _conjuncts(node.fields["condition"]):
        pair = _equi_key(conjunct, sides)
        if pair is None:
            rest.append(conjunct)
        else:
            keys.append(pair)
    if not keys:
        raise refused(node, "its condition has no equality of a left and a right column", "a.k = b.k AND ...")
    key_columns = [[key_column(node, pair[index]) for pair in keys] for index in (0, 1)]  # refuses a map first
    if join_type != "inner":  # evaluated by the operator on pairs (refused first: the rest reads the condition)
        fields = {a.expr_id: (side, i) for side, n in enumerate(node.children) for i, a in enumerate(n.output)}
        condition = pair_condition(node, rest, fields)
    names = [[f"{p}{i}" for i in range(len(n.output))] for p, n in zip("lr", node.children)]
    renames = {a.expr_id: name for n, ns in zip(node.children, names) for a, name in zip(n.output, ns)}
    marked = [_event_time_of(node, side) for side in node.children]
    key_time = _key_time(node, keys)
    join_sides = []
    for index, event_time in enumerate(marked):
        offset = state_offset_ms(node, index) if event_time is not None and key_time is None else None
        join_sides.append(
            JoinSide(
                event_time=renames[event_time.expr_id] if event_time else None,
                delay_ms=event_time.watermark_delay_ms or 0 if event_time else 0,
                not_null=()
                if index in preserved
                else tuple(sorted(_not_null(keys, rest, sides[index], event_time, renames))),
                state_offset_ms=offset,
                strict_keys=() if index in preserved else _strict_keys(keys, index),
            )
        )
    one_watermark = len(set(watermark_nodes(node.children))) == 1
    shape = (len(keys), join_sides[0], join_sides[1], key_time, watermark_policy, one_watermark)
    if join_type != "inner":
        operator: StreamJoin = OuterStreamJoin(*shape, join_type=join_type, condition=condition)
        rest = []
    else:
        operator = StreamJoin(*shape)
    inputs = [JoinInput(side, names[index], key_columns[index]) for index, side in enumerate(node.children)]
    shown = names[:1] if join_type == "left_semi" else names  # a semi join outputs the left rows
    output = [OutputColumn(name, "column", name) for side in shown for name in side]
    above: list[tuple[str, list[str | Column]]] = []
    if rest:
        above.append(("where", [reduce(lambda a, b: a & b, [column_of(e.jvm) for e in rest])]))
    return Translation(node, operator, output, above=above, join_inputs=inputs)


def without_pruned_event_times(operator: StreamJoin, node: PlanNode, optimized: list[list[set[int]]]) -> StreamJoin:
    """``operator`` (the translation of the join ``node``) with no late row dropped on a side whose event time Spark's
    optimizer prunes below the join (nothing reads it: a count over the other side's time), as Spark's join judges a
    side's rows by the event-time column its input carries. ``optimized``: each join's inputs' attribute ids in the
    optimized plan; this join's are those that still output each side's key columns."""
    sides = ({a.expr_id for a in node.children[0].output}, {a.expr_id for a in node.children[1].output})
    pairs = [_equi_key(conjunct, sides) for conjunct in _conjuncts(node.fields["condition"])]
    keys = [set().union(*(_references(pair[index]) for pair in pairs if pair is not None)) for index in (0, 1)]
    inputs = [ids for ids in optimized if len(ids) == 2 and keys[0] <= ids[0] and keys[1] <= ids[1]]
    changed = []
    for index, (side, child) in enumerate(zip(operator.sides, node.children)):
        marked = _event_time_of(node, child)
        pruned = marked is not None and bool(inputs) and all(marked.expr_id not in ids[index] for ids in inputs)
        changed.append(replace(side, drops_late=False) if pruned and side.event_time is not None else side)
    return replace(operator, left=changed[0], right=changed[1])


def _conjuncts(condition: Expr | None) -> list[Expr]:
    if condition is None:
        return []
    if condition.kind == "And":
        return [c for child in condition.children for c in _conjuncts(child)]
    return [condition]


def _references(expr: Expr) -> set[int]:
    return {e.attr.expr_id for e in expr.walk() if e.attr is not None}


def _equi_key(conjunct: Expr, sides: tuple[set[int], set[int]]) -> tuple[Expr, Expr] | None:
    """(left expression, right expression) of an equality of the two sides, or None."""
    if conjunct.kind != "EqualTo":
        return None
    a, b = conjunct.children
    ra, rb = _references(a), _references(b)
    if not ra or not rb:
        return None
    if ra <= sides[0] and rb <= sides[1]:
        return a, b
    if ra <= sides[1] and rb <= sides[0]:
        return b, a
    return None


def _event_time_of(join: PlanNode, side: PlanNode) -> Attr | None:
    """The side's column its withWatermark marked, as Spark's join finds it (None: the side has no watermark)."""
    marked = [a for a in side.output if a.watermark_delay_ms is not None]
    if len(marked) > 1:
        names = ", ".join(a.name for a in marked)
        raise refused(join, f"a side of the join has two event-time columns ({names})", "one per side")
    if not marked and watermarks(side):
        raise refused(
            join,
            "a side of the join drops the column its withWatermark marked (Spark's watermark still moves with it)",
            "keep the event-time column in each side's select",
        )
    return marked[0] if marked else None


def _key_time(join: PlanNode, keys: list[tuple[Expr, Expr]]) -> int | None:
    """The position of the first join key that is a watermarked column (Spark then evicts state by key)."""
    for side in (0, 1):
        for index, pair in enumerate(keys):
            attr = pair[side].attr
            if attr is not None and attr.watermark_delay_ms is not None:
                if attr.dtype.typeName() != "timestamp":
                    raise refused(
                        join,
                        f"it joins on the watermarked {attr.name!r} of type {attr.dtype.simpleString()}",
                        "join on the event time itself (a timestamp), or on a key and an event-time interval",
                    )
                return index
    return None


def _not_null(
    keys: list[tuple[Expr, Expr]], rest: list[Expr], side: set[int], event_time: Attr | None, renames: dict[int, str]
) -> set[str]:
    """The side's columns Spark's optimizer filters nulls of below its withWatermark: those the condition's
    null-intolerant conjuncts read, but the event time (that filter stays above the watermark)."""
    found: set[int] = set()
    for conjunct in [e for pair in keys for e in pair] + rest:
        found |= _null_intolerant_references(conjunct)
    found &= side
    found -= {event_time.expr_id} if event_time else set()
    return {renames[i] for i in found}


def _null_intolerant_references(expr: Expr) -> set[int]:
    if expr.attr is not None:
        return {expr.attr.expr_id}
    if not _null_intolerant(expr):
        return set()
    return {i for child in expr.children for i in _null_intolerant_references(child)}


def _null_intolerant(expr: Expr) -> bool:
    """Whether the expression is null when an input is (Catalyst's ``nullIntolerant``; the known kinds without it)."""
    if expr.jvm is not None:
        return bool(expr.jvm.nullIntolerant())
    return expr.kind in NULL_INTOLERANT


def _strict_keys(keys: list[tuple[Expr, Expr]], side: int) -> tuple[int, ...]:
    """The keys whose nulls Spark filters on a side it infers not-null filters for: those null-intolerant down to
    the columns they read (a null key comes from a null column). Any other key (``concat(a.k, '')``) may be null in
    the rows Spark joins, and its null matches the other side's."""
    return tuple(i for i, pair in enumerate(keys) if _strict(pair[side]))


def _strict(expr: Expr) -> bool:
    if expr.attr is not None or expr.kind == "Literal":
        return True
    return bool(expr.children) and _null_intolerant(expr) and all(_strict(child) for child in expr.children)
