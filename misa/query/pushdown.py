"""The filters Spark's optimizer moves below ``withWatermark`` in the whole query, put into misa's source plan.

Spark's watermark is the latest event time among the rows that reach the ``withWatermark`` node as the *optimized*
plan runs. The optimizer pushes filters down through that node when they do not read the event time, among them
filters misa's part of the plan never sees: the ``isnotnull`` of an inner stream-stream join's keys and the
constraints it infers from one side for the other (``a.k > 2`` gives ``b.k > 2``), and a filter on group keys
written above an aggregation. misa runs only the plan below its stateful operation and follows its own query's
watermark (:mod:`misa.operators.watermark`), so without these filters a row Spark filters out moves misa's
watermark: windows close early, join state is evicted early, and rows Spark counts are dropped as late.

A filter belongs to one occurrence of a ``withWatermark`` node in the plan, not to the DataFrame that made it: one
stream split by filters into the sides of a self-join or the branches of a union is one ``withWatermark`` node (one
id, one event time) reached by several paths. misa gives each occurrence an id of its own before the optimizer runs
(:class:`Pushdown`), so each branch gets back only the filters Spark moved below its own occurrence, and gives the
source plan the node's own id back. Spark's watermark tracker keeps one watermark per node id, the latest of its
occurrences'; misa's operators group their inputs the same way (:attr:`misa.operators.watermark.InputsWatermark.nodes`,
by the id's upper 64 bits, which an occurrence's id keeps).
"""

from __future__ import annotations

import itertools
from typing import Any

from pyspark import SparkContext
from pyspark.sql import SparkSession

from misa.exceptions import UnsupportedQueryError
from misa.query.plan import PlanNode, plan_of, python_list, scala_list

# Nodes a deterministic filter passes through to the one child that outputs its columns without changing which rows
# the plan above them gets (a union's own columns are its first branch's: a filter on them stays above it).
TRANSPARENT = {"Project", "Filter", "Union", "SubqueryAlias", "EventTimeWatermark"}


class Pushdown:
    """The filters Spark's optimizer places below each occurrence of a ``withWatermark`` node in ``query``.

    :attr:`plan` is ``query`` with an id of its own for each occurrence (a stream read once and split into branches
    shares the node, and its id, between them): the node's upper 64 bits, then the occurrence's number. The
    optimizer runs once, on that analyzed plan (a streaming DataFrame has no ``optimizedPlan``)."""

    def __init__(self, spark: SparkSession, query: PlanNode):
        self._origins: dict[str, Any] = {}  # an occurrence's id: the node's own id
        self.plan = plan_of(self._distinct(query.jvm, itertools.count()))
        optimizer = spark._jsparkSession.sessionState().optimizer()  # type: ignore[attr-defined]
        self._filters: dict[str, list[Any]] = {}
        self.optimized = optimizer.execute(self.plan.jvm)
        _collect(self.optimized, self._filters)

    def outputs_of(self, kind: str) -> list[set[int]]:
        """The output attributes' ids of each ``kind`` node of the optimized plan (whose column pruning may drop an
        input column a node does not read, the event time below a deduplication among them)."""
        return [_ids(node) for node in self._nodes(kind)]

    def inputs_of(self, kind: str) -> list[list[set[int]]]:
        """Each ``kind`` node's children's output attributes' ids in the optimized plan (a join's two inputs: column
        pruning may drop a side's event time, which the join then does not judge its rows by)."""
        return [[_ids(child) for child in python_list(node.children())] for node in self._nodes(kind)]

    def _nodes(self, kind: str) -> list[Any]:
        found, stack = [], [self.optimized]
        while stack:
            node = stack.pop()
            if str(node.getClass().getSimpleName()) == kind:
                found.append(node)
            stack.extend(python_list(node.children()))
        return found

    def source(self, node: PlanNode) -> PlanNode:
        """``node`` (a part of :attr:`plan`) with the filters below the same occurrences (a copy already there is
        harmless) and the nodes' own ids back, so that Spark's tracker keeps the watermarks it keeps for the query."""
        plan = self._rebuild(node.jvm)
        return PlanNode(str(plan.getClass().getSimpleName()), [], [], plan)

    def _distinct(self, jnode: Any, occurrences: itertools.count) -> Any:
        children = [self._distinct(child, occurrences) for child in python_list(jnode.children())]
        if str(jnode.getClass().getSimpleName()) == "EventTimeWatermark":
            jvm = SparkContext._jvm  # type: ignore[attr-defined]
            occurrence = jvm.java.util.UUID(jnode.nodeId().getMostSignificantBits(), next(occurrences))
            self._origins[str(occurrence)] = jnode.nodeId()
            return _watermark(jnode, occurrence, children[0])
        return jnode.withNewChildren(scala_list(children)) if children else jnode

    def _rebuild(self, jnode: Any) -> Any:
        children = [self._rebuild(child) for child in python_list(jnode.children())]
        if str(jnode.getClass().getSimpleName()) == "EventTimeWatermark":
            child, occurrence = children[0], str(jnode.nodeId())
            for condition in self._filters.get(occurrence, []):
                child = _place(child, condition)
            return _watermark(jnode, self._origins.get(occurrence, jnode.nodeId()), child)
        return jnode.withNewChildren(scala_list(children)) if children else jnode


def _ids(jnode: Any) -> set[int]:
    return {int(a.exprId().id()) for a in python_list(jnode.output())}


def _watermark(jnode: Any, node_id: Any, child: Any) -> Any:
    """The ``withWatermark`` node ``jnode`` with the id ``node_id`` over ``child``."""
    jvm = SparkContext._jvm  # type: ignore[attr-defined]
    make = jvm.org.apache.spark.sql.catalyst.plans.logical.EventTimeWatermark
    return make(node_id, jnode.eventTime(), jnode.delay(), child)


def _collect(jnode: Any, pushed: dict[str, list[Any]]) -> None:
    """``pushed``: for each occurrence of a watermark node (by its id), the conditions of the filters below it."""
    if str(jnode.getClass().getSimpleName()) == "EventTimeWatermark":
        conditions = pushed.setdefault(str(jnode.nodeId()), [])
        conditions += _filters_below(jnode.child())
    for child in python_list(jnode.children()):
        _collect(child, pushed)


def _filters_below(jnode: Any) -> list[Any]:
    """The deterministic filters' conditions under ``jnode`` (placing a copy of one again changes no row)."""
    is_filter = str(jnode.getClass().getSimpleName()) == "Filter"
    found = [jnode.condition()] if is_filter and jnode.condition().deterministic() else []
    for child in python_list(jnode.children()):
        found += _filters_below(child)
    return found


def _place(jnode: Any, condition: Any) -> Any:
    """``jnode`` with ``condition`` filtering the rows of the lowest node that outputs every column it reads,
    going down only through nodes that pass a filter through (projections, filters, unions, inner joins)."""
    kind = str(jnode.getClass().getSimpleName())
    own = condition.references().subsetOf(jnode.outputSet())
    if _passes_filters(jnode) and not (kind == "Union" and own):
        children = python_list(jnode.children())
        for index, child in enumerate(children):
            if _reaches(child, condition):
                children[index] = _place(child, condition)
                return jnode.withNewChildren(scala_list(children))
    if not own:
        raise UnsupportedQueryError(
            f"[MISA_UNSUPPORTED_QUERY] Spark's optimizer filters the rows below withWatermark by "
            f"{condition.sql()}, which misa cannot place in its own plan (below {kind}); write that filter "
            "before withWatermark"
        )
    jvm = SparkContext._jvm  # type: ignore[attr-defined]
    return jvm.org.apache.spark.sql.catalyst.plans.logical.Filter(condition, jnode)


def _passes_filters(jnode: Any) -> bool:
    kind = str(jnode.getClass().getSimpleName())
    return kind in TRANSPARENT or (kind == "Join" and str(jnode.joinType().toString()) == "Inner")


def _reaches(jnode: Any, condition: Any) -> bool:
    """Whether ``jnode`` or a node under it through nodes that pass filters outputs every column ``condition``
    reads (a union's later branches have columns of their own, which the union does not output)."""
    if condition.references().subsetOf(jnode.outputSet()):
        return True
    return _passes_filters(jnode) and any(_reaches(child, condition) for child in python_list(jnode.children()))
