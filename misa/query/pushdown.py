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

Spark optimizes each batch's plan anew, a source without new input replaced by an empty relation, and those filters
can differ by batch: a join's side filtered on a key decoded with ``from_json`` gives the other side that filter only
in the batches where the first side's scan is empty (the whole plan's constraint inference misses it). Spark's
watermark then counts rows by which streams had input in each batch, which misa's one source plan cannot follow: a
query that joins streams is planned once more for each set of its streams without input (up to
:data:`MAX_CHECKED_STREAMS` streams), and refused at start when a stream with input gets other filters there.
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
MAX_CHECKED_STREAMS = 4  # streams whose batches without input are checked (2**n - 2 optimizer runs)


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
        _check_batches(optimizer, self.plan.jvm, self._filters)

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
    """The ids of ``jnode``'s output attributes."""
    return {int(a.exprId().id()) for a in python_list(jnode.output())}


def _check_batches(optimizer: Any, plan: Any, filters: dict[str, list[Any]]) -> None:
    """Refuse ``plan`` when the filters Spark's optimizer places below a ``withWatermark`` node (``filters``, of the
    batches where every stream has input) differ in a batch where another stream has no new input.

    Spark optimizes each batch's plan again, a stream without new input replaced by an empty relation, and its
    constraint inference then finds filters it misses in the whole plan (a join's side filtered on a key decoded with
    ``from_json`` gives the other side that filter only while the first side's scan is empty): Spark's watermark would
    then count rows by which streams had input in each batch, and misa's source plan has one set of filters."""
    if not _joins_streams(plan):  # filters are inferred across a join's sides only
        return
    sources = _stream_sources(plan)
    if len(sources) < 2 or len(sources) > MAX_CHECKED_STREAMS:
        return
    every = {occurrence: _conjuncts(conditions) for occurrence, conditions in filters.items()}
    for count in range(1, len(sources)):
        for empty in itertools.combinations(sources, count):
            batch: dict[str, list[Any]] = {}
            _collect(optimizer.execute(_emptied(plan, list(empty))), batch, live_only=True)
            for occurrence, conditions in batch.items():
                if _conjuncts(conditions) != every.get(occurrence, set()):
                    raise _depends_on_input(
                        _event_time(plan, occurrence), every.get(occurrence, set()), _conjuncts(conditions), empty
                    )


def _described(source: Any) -> str:
    """A stream's relation as a user knows it: its source, and a Kafka source's topics."""
    text = str(source.toString())[:120]
    if str(source.getClass().getSimpleName()) == "StreamingRelationV2":
        options = source.extraOptions()
        for key in ("subscribe", "subscribePattern", "assign"):
            if options.containsKey(key):
                text += f" ({key} {str(options.get(key))[:120]})"
    return text


def _event_time(plan: Any, occurrence: str) -> str:
    """The event-time column of the ``withWatermark`` occurrence ``occurrence`` of ``plan``."""
    stack = [plan]
    while stack:
        node = stack.pop()
        if str(node.getClass().getSimpleName()) == "EventTimeWatermark" and str(node.nodeId()) == occurrence:
            return str(node.eventTime().name())
        stack.extend(python_list(node.children()))
    return occurrence


def _depends_on_input(
    event_time: str, every: set[str], batch: set[str], empty: tuple[Any, ...]
) -> UnsupportedQueryError:
    """The refusal of a query whose filters below the watermark on ``event_time`` are ``every`` in a batch with input
    from every stream, ``batch`` in one where the streams ``empty`` have none."""
    names = " and ".join(f"the stream {_described(source)}" for source in empty)
    added, dropped = sorted(batch - every), sorted(every - batch)
    change = " AND ".join(added) if added else "no " + " AND ".join(dropped)
    return UnsupportedQueryError(
        f"[MISA_UNSUPPORTED_QUERY] Spark's optimizer filters the rows reaching withWatermark on {event_time!r} by "
        f"{change} only in the batches where {names} has no new input (it infers the filter from another side of a "
        f"join then, and not when every stream has input), so Spark's watermark counts rows by which streams had "
        f"input in each batch, which misa cannot follow: write that filter on this stream yourself (before the join), "
        f"and Spark applies it in every batch"
    )


def _joins_streams(plan: Any) -> bool:
    """Whether ``plan`` has a join of two streams."""
    stack = [plan]
    while stack:
        node = stack.pop()
        if str(node.getClass().getSimpleName()) == "Join" and node.left().isStreaming() and node.right().isStreaming():
            return True
        stack.extend(python_list(node.children()))
    return False


def _stream_sources(plan: Any) -> list[Any]:
    """The plan's streaming sources, one per source Spark reads (a relation read in two places, one stream split into
    branches, is one source: Spark's batches give both places input or neither)."""
    found: list[Any] = []
    stack = [plan]
    while stack:
        node = stack.pop()
        children = python_list(node.children())
        if not children and node.isStreaming() and not any(node.equals(seen) for seen in found):
            found.append(node)
        stack.extend(children)
    return found


def _emptied(jnode: Any, empty: list[Any]) -> Any:
    """``jnode`` with each relation of ``empty`` replaced by an empty streaming relation, as Spark plans a batch in
    which that source has no new input."""
    children = python_list(jnode.children())
    if not children:
        if any(jnode.equals(source) for source in empty):
            jvm = SparkContext._jvm  # type: ignore[attr-defined]
            relation = jvm.org.apache.spark.sql.catalyst.plans.logical.LocalRelation
            return relation(jnode.output(), scala_list([]), True, jvm.scala.Option.empty())
        return jnode
    return jnode.withNewChildren(scala_list([_emptied(child, empty) for child in children]))


def _conjuncts(conditions: list[Any]) -> set[str]:
    """The conditions' conjuncts, as SQL."""
    found: set[str] = set()
    stack = list(conditions)
    while stack:
        condition = stack.pop()
        if str(condition.getClass().getSimpleName()) == "And":
            stack += [condition.left(), condition.right()]
        else:
            found.add(str(condition.sql()))
    return found


def _has_input(jnode: Any) -> bool:
    """Whether a leaf under ``jnode`` is not an empty streaming relation (a source without new input)."""
    children = python_list(jnode.children())
    if not children:
        empty = str(jnode.getClass().getSimpleName()) == "LocalRelation" and jnode.data().isEmpty()
        return not (empty and jnode.isStreaming())
    return any(_has_input(child) for child in children)


def _watermark(jnode: Any, node_id: Any, child: Any) -> Any:
    """The ``withWatermark`` node ``jnode`` with the id ``node_id`` over ``child``."""
    jvm = SparkContext._jvm  # type: ignore[attr-defined]
    make = jvm.org.apache.spark.sql.catalyst.plans.logical.EventTimeWatermark
    return make(node_id, jnode.eventTime(), jnode.delay(), child)


def _collect(jnode: Any, pushed: dict[str, list[Any]], live_only: bool = False) -> None:
    """``pushed``: for each occurrence of a watermark node (by its id), the conditions of the filters below it;
    ``live_only``: only the occurrences over a source with input."""
    if str(jnode.getClass().getSimpleName()) == "EventTimeWatermark" and (not live_only or _has_input(jnode)):
        conditions = pushed.setdefault(str(jnode.nodeId()), [])
        conditions += _filters_below(jnode.child())
    for child in python_list(jnode.children()):
        _collect(child, pushed, live_only)


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
