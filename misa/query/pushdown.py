"""The filters Spark's optimizer moves below ``withWatermark`` in the whole query, put into misa's source plan.

Spark's watermark is the latest event time among the rows that reach the ``withWatermark`` node as the *optimized*
plan runs. The optimizer pushes filters down through that node when they do not read the event time, among them
filters misa's part of the plan never sees: the ``isnotnull`` of an inner stream-stream join's keys and the
constraints it infers from one side for the other (``a.k > 2`` gives ``b.k > 2``), and a filter on group keys
written above an aggregation. misa runs only the plan below its stateful operation and follows its own query's
watermark (:mod:`misa.operators.watermark`), so without these filters a row Spark filters out moves misa's
watermark: windows close early, join state is evicted early, and rows Spark counts are dropped as late.
"""

from __future__ import annotations

from typing import Any

from pyspark import SparkContext
from pyspark.sql import SparkSession

from misa.exceptions import UnsupportedQueryError
from misa.query.plan import PlanNode, python_list, scala_list

# Nodes a deterministic filter passes through without changing which rows the plan above them gets.
TRANSPARENT = {"Project", "Filter", "Union", "SubqueryAlias", "EventTimeWatermark"}


def pushed_filters(spark: SparkSession, query: PlanNode) -> dict[int, list[Any]]:
    """The filters Spark's optimizer places below each of ``query``'s ``withWatermark`` nodes, by the node's event
    time (the optimizer runs once, on the analyzed plan: a streaming DataFrame has no ``optimizedPlan``)."""
    optimized = spark._jsparkSession.sessionState().optimizer().execute(query.jvm)  # type: ignore[attr-defined]
    pushed: dict[int, list[Any]] = {}
    _collect(optimized, pushed)
    return pushed


def with_pushed(node: PlanNode, pushed: dict[int, list[Any]]) -> PlanNode:
    """``node`` (a part of the query's analyzed plan) with the ``pushed`` filters below the same ``withWatermark``
    nodes (a copy already there is harmless)."""
    if not pushed:
        return node
    plan = _rebuild(node.jvm, pushed)
    return PlanNode(str(plan.getClass().getSimpleName()), [], [], plan)


def _collect(jnode: Any, pushed: dict[int, list[Any]]) -> None:
    """``pushed``: for each watermark node (by its event time's id), the conditions of the filters below it."""
    if str(jnode.getClass().getSimpleName()) == "EventTimeWatermark":
        conditions = pushed.setdefault(int(jnode.eventTime().exprId().id()), [])
        conditions += _filters_below(jnode.child())
    for child in python_list(jnode.children()):
        _collect(child, pushed)


def _filters_below(jnode: Any) -> list[Any]:
    found = [jnode.condition()] if str(jnode.getClass().getSimpleName()) == "Filter" else []
    for child in python_list(jnode.children()):
        found += _filters_below(child)
    return found


def _rebuild(jnode: Any, pushed: dict[int, list[Any]]) -> Any:
    children = [_rebuild(child, pushed) for child in python_list(jnode.children())]
    if str(jnode.getClass().getSimpleName()) == "EventTimeWatermark":
        child = children[0]
        for condition in pushed.get(int(jnode.eventTime().exprId().id()), []):
            child = _place(child, condition)
        children = [child]
    return jnode.withNewChildren(scala_list(children)) if children else jnode


def _place(jnode: Any, condition: Any) -> Any:
    """``jnode`` with ``condition`` filtering the rows of the lowest node that outputs every column it reads,
    going down only through nodes that pass a filter through (projections, filters, unions, inner joins)."""
    kind = str(jnode.getClass().getSimpleName())
    transparent = kind in TRANSPARENT or (kind == "Join" and str(jnode.joinType().toString()) == "Inner")
    if transparent:
        children = python_list(jnode.children())
        for index, child in enumerate(children):
            if condition.references().subsetOf(child.outputSet()):
                children[index] = _place(child, condition)
                return jnode.withNewChildren(scala_list(children))
    if not condition.references().subsetOf(jnode.outputSet()):
        raise UnsupportedQueryError(
            f"[MISA_UNSUPPORTED_QUERY] Spark's optimizer filters the rows below withWatermark by "
            f"{condition.sql()}, which misa cannot place in its own plan (below {kind}); write that filter "
            "before withWatermark"
        )
    jvm = SparkContext._jvm  # type: ignore[attr-defined]
    return jvm.org.apache.spark.sql.catalyst.plans.logical.Filter(condition, jnode)
